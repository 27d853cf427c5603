//! Python: modules by dotted name, imports (absolute, relative, aliased, re-exported
//! through `__init__.py`), `self`/`cls`/`super()`, `Cls()` to `__init__`, `mod.f()`.

use super::{lexical, Binding, ERef, Hit, How, World};
use crate::extract::{Call, Import, ImportKind, Kind};
use crate::lang::Lang;

/// How many re-export steps an import may follow.
const MAX_HOPS: usize = 5;

/// Register a file under its dotted module name, and under the name it has below a
/// top-level source directory (`src/`, `lib/`). The first path in sorted order wins a tie.
pub(super) fn register_module(map: &mut rustc_hash::FxHashMap<String, u32>, path: &str, fi: u32) {
    let name = crate::extract::python_module_name(path);
    for root in ["src/", "lib/"] {
        if let Some(rest) = path.strip_prefix(root) {
            map.entry(crate::extract::python_module_name(rest)).or_insert(fi);
        }
    }
    map.entry(name).or_insert(fi);
}

fn callable(k: Kind) -> bool {
    matches!(k, Kind::Function | Kind::Method | Kind::Class | Kind::Interface | Kind::Enum)
}

fn definition(k: Kind) -> bool {
    matches!(k, Kind::Function | Kind::Class | Kind::Interface | Kind::Enum)
}

/// The package a relative import of `level` dots starts from.
fn relative_base(w: &World, fi: u32, level: usize) -> Option<String> {
    let path = &w.file(fi).path;
    let module = crate::extract::python_module_name(path);
    let mut parts: Vec<&str> = if module.is_empty() { Vec::new() } else { module.split('.').collect() };
    // The package of a module is its parent; an __init__.py is its own package.
    let is_init = path.ends_with("/__init__.py") || path == "__init__.py";
    let drop = if is_init { level - 1 } else { level };
    if drop > parts.len() {
        return None;
    }
    parts.truncate(parts.len() - drop);
    Some(parts.join("."))
}

/// The absolute module an import's `module` names (`..m` made absolute).
fn absolute_module(w: &World, fi: u32, module: &str) -> Option<String> {
    let level = module.chars().take_while(|&c| c == '.').count();
    if level == 0 {
        return Some(module.to_string());
    }
    let base = relative_base(w, fi, level)?;
    let rest = &module[level..];
    Some(match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (false, true) => base,
        (false, false) => format!("{base}.{rest}"),
    })
}

fn module_file(w: &World, name: &str) -> Option<u32> {
    w.py_modules.get(name).copied()
}

/// What `name` stands for at the top level of module file `fi` (a definition, an
/// import binding followed up to `hops` times, or a submodule).
fn export(w: &World, fi: u32, name: &str, hops: usize) -> Option<Binding> {
    if let Some(r) = lexical(w, (fi, 0), name, true, definition) {
        return Some(Binding::Entity(r, How::Import));
    }
    if hops > 0 {
        if let Some(b) = binding_from_imports(w, fi, name, hops - 1) {
            return Some(b);
        }
    }
    let module = crate::extract::python_module_name(&w.file(fi).path);
    let sub = if module.is_empty() { name.to_string() } else { format!("{module}.{name}") };
    if let Some(m) = module_file(w, &sub) {
        return Some(Binding::Module(m));
    }
    w.py_vars.get(&((fi, 0), name)).map(|v| Binding::Var((fi, 0), v[0]))
}

/// What an import binding named `name` in file `fi` stands for.
fn binding_from_imports(w: &World, fi: u32, name: &str, hops: usize) -> Option<Binding> {
    let f = w.file(fi);
    // The last import of a name wins, as at run time.
    for imp in f.imports.iter().rev() {
        if imp.local_name() != Some(name) {
            continue;
        }
        return import_binding(w, fi, imp, hops);
    }
    // Star imports: the first module that has the name.
    for imp in f.imports.iter().filter(|i| i.kind == ImportKind::Star) {
        let m = absolute_module(w, fi, &imp.module).and_then(|m| module_file(w, &m));
        if let Some(mf) = m {
            if mf != fi {
                if let Some(b) = export(w, mf, name, hops.saturating_sub(1)) {
                    return Some(b);
                }
            }
        }
    }
    None
}

/// The binding one import creates, resolved.
fn import_binding(w: &World, fi: u32, imp: &Import, hops: usize) -> Option<Binding> {
    let module = absolute_module(w, fi, &imp.module)?;
    match imp.kind {
        ImportKind::Module => {
            // `import a.b as c` binds c to a.b; `import a.b` binds a.
            let bound = if imp.alias.is_empty() { module.split('.').next().unwrap_or("").to_string() } else { module };
            module_file(w, &bound).map(Binding::Module)
        }
        ImportKind::Name => {
            if let Some(mf) = module_file(w, &module) {
                if mf == fi {
                    return None;
                }
                if let Some(b) = export(w, mf, &imp.name, hops) {
                    return Some(b);
                }
            }
            let sub = if module.is_empty() { imp.name.clone() } else { format!("{module}.{}", imp.name) };
            module_file(w, &sub).map(Binding::Module)
        }
        _ => None,
    }
}

/// The `imports.target` of one import row.
pub(super) fn import_target(w: &World, fi: u32, imp: &Import) -> Option<String> {
    let path = |f: u32| w.file(f).path.clone();
    match imp.kind {
        ImportKind::Module => {
            let m = absolute_module(w, fi, &imp.module)?;
            module_file(w, &m).map(path)
        }
        ImportKind::Star => {
            let m = absolute_module(w, fi, &imp.module)?;
            module_file(w, &m).map(path)
        }
        _ => match import_binding(w, fi, imp, MAX_HOPS)? {
            Binding::Entity(r, _) => Some(w.id(r).to_string()),
            Binding::Module(f) => Some(path(f)),
            Binding::Var(..) => None,
        },
    }
}

/// A name as seen from `scope` at `line`: from the inside out, each function scope's
/// definitions, then its other bindings (parameters, assignments, ...); at the top, the
/// module's definitions, imports and assignments. In `scope` itself only definitions
/// before `line` count (a later `def` does not exist yet); type bodies are skipped
/// unless the name is looked up from the body itself.
fn lookup_at(w: &World, scope: ERef, name: &str, line: u32) -> Option<Binding> {
    let before = |i: u32, found: Vec<ERef>| -> Option<ERef> {
        if i == scope.1 {
            found.into_iter().rfind(|&r| w.entity(r).start_line <= line)
        } else {
            found.last().copied()
        }
    };
    let mut at = Some(scope.1);
    while let Some(i) = at.filter(|&i| i != 0) {
        let r = (scope.0, i);
        let e = w.entity(r);
        if !e.kind.is_type() || i == scope.1 {
            if let Some(d) = before(i, w.child_named(r, name, definition)) {
                return Some(Binding::Entity(d, How::Local));
            }
            if let Some(v) = w.py_vars.get(&(r, name)) {
                // A function's own import: as the file's imports resolve it.
                if var_tys(w, r, name).contains(&"I:") {
                    return binding_from_imports(w, scope.0, name, MAX_HOPS).or(Some(Binding::Var(r, v[0])));
                }
                return Some(Binding::Var(r, v[0]));
            }
        }
        at = e.parent;
    }
    let m = (scope.0, 0);
    if let Some(d) = before(0, w.child_named(m, name, definition)) {
        return Some(Binding::Entity(d, How::Local));
    }
    if let Some(b) = binding_from_imports(w, scope.0, name, MAX_HOPS) {
        return Some(b);
    }
    w.py_vars.get(&(m, name)).map(|v| Binding::Var(m, v[0]))
}

/// A dotted name (`Base`, `models.Base`, `pkg.mod.Base`) as seen from `scope`.
pub(super) fn resolve_dotted(w: &World, scope: ERef, dotted: &str) -> Option<ERef> {
    match resolve_path(w, scope, dotted)? {
        Binding::Entity(r, _) => Some(r),
        Binding::Module(_) | Binding::Var(..) => None,
    }
}

/// Walk a dotted path: the first segment by scope, the rest as submodules, module
/// members or class members. `import a.b` binds `a`, so `a.b` is tried as a module too.
fn resolve_path(w: &World, scope: ERef, dotted: &str) -> Option<Binding> {
    resolve_path_at(w, scope, dotted, u32::MAX)
}

fn resolve_path_at(w: &World, scope: ERef, dotted: &str, line: u32) -> Option<Binding> {
    let segs: Vec<&str> = dotted.split('.').collect();
    if segs.iter().any(|s| s.is_empty() || !s.chars().all(|c| c.is_alphanumeric() || c == '_')) {
        return None;
    }
    let cur = lookup_at(w, scope, segs[0], line);
    if cur.is_none() || matches!(cur, Some(Binding::Module(_))) {
        // `import a.b.c` then `a.b.c.f()`: the longest imported module prefix.
        let f = w.file(scope.0);
        for n in (1..=segs.len()).rev() {
            let prefix = segs[..n].join(".");
            let imported = f.imports.iter().any(|i| {
                i.kind == ImportKind::Module
                    && i.alias.is_empty()
                    && (i.module == prefix || i.module.starts_with(&format!("{prefix}.")))
            });
            if imported {
                if let Some(mf) = module_file(w, &prefix) {
                    return walk(w, Binding::Module(mf), &segs[n..]);
                }
            }
        }
    }
    walk(w, cur?, &segs[1..])
}

fn walk(w: &World, mut cur: Binding, rest: &[&str]) -> Option<Binding> {
    for seg in rest {
        cur = match cur {
            Binding::Module(mf) => match export(w, mf, seg, MAX_HOPS)? {
                Binding::Entity(r, _) => Binding::Entity(r, How::Import),
                m => m,
            },
            Binding::Entity(r, how) => {
                if !w.entity(r).kind.is_type() {
                    return None;
                }
                let hit = w.member(r, seg, how, &|m| w.entity(m).kind.is_type()).into_iter().next()?;
                Binding::Entity(hit.target, hit.how)
            }
            Binding::Var(..) => return None,
        };
    }
    Some(cur)
}

/// `Cls()` gives the class and its `__init__`.
fn instantiate(w: &World, class: ERef, how: How) -> Vec<Hit> {
    let mut hits = vec![Hit { target: class, how }];
    let init = w.member(class, "__init__", how, &|m| w.entity(m).kind == Kind::Method);
    hits.extend(init.into_iter().take(1));
    hits
}

fn on_type(w: &World, ty: ERef, how: How, name: &str) -> Vec<Hit> {
    let hits = w.member(ty, name, how, &|m| callable(w.entity(m).kind));
    match hits.first() {
        Some(h) if w.entity(h.target).kind.is_type() => instantiate(w, h.target, h.how),
        _ => hits,
    }
}

/// Method names that builtin types (str, bytes, list, dict, set, tuple, numbers, files,
/// iterators) have: a call of one on a receiver of unknown type is never guessed at.
const BUILTIN_METHODS: &[&str] = &[
    "add",
    "append",
    "capitalize",
    "casefold",
    "center",
    "clear",
    "close",
    "copy",
    "count",
    "decode",
    "difference",
    "difference_update",
    "discard",
    "encode",
    "endswith",
    "expandtabs",
    "extend",
    "fileno",
    "find",
    "flush",
    "format",
    "format_map",
    "fromhex",
    "fromkeys",
    "get",
    "hex",
    "index",
    "insert",
    "intersection",
    "intersection_update",
    "isalnum",
    "isalpha",
    "isascii",
    "isdecimal",
    "isdigit",
    "isdisjoint",
    "isidentifier",
    "islower",
    "isnumeric",
    "isprintable",
    "isspace",
    "issubset",
    "issuperset",
    "istitle",
    "isupper",
    "items",
    "join",
    "keys",
    "ljust",
    "lower",
    "lstrip",
    "maketrans",
    "partition",
    "pop",
    "popitem",
    "read",
    "readline",
    "readlines",
    "remove",
    "removeprefix",
    "removesuffix",
    "replace",
    "reverse",
    "rfind",
    "rindex",
    "rjust",
    "rpartition",
    "rsplit",
    "rstrip",
    "seek",
    "send",
    "setdefault",
    "sort",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "swapcase",
    "symmetric_difference",
    "symmetric_difference_update",
    "tell",
    "throw",
    "title",
    "translate",
    "truncate",
    "union",
    "update",
    "upper",
    "values",
    "write",
    "writelines",
    "zfill",
    "bit_length",
    "conjugate",
    "is_integer",
    "to_bytes",
    "from_bytes",
    "as_integer_ratio",
    "__enter__",
    "__exit__",
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
    "__setitem__",
    "__contains__",
    "__eq__",
    "__hash__",
    "__str__",
    "__repr__",
    "__init__",
    "__new__",
    "__call__",
    "__getattr__",
    "__setattr__",
];

/// How deep type tracking follows bindings into bindings (`a = b`, `b = f()`, ...).
const MAX_TYPE_DEPTH: u32 = 12;

/// The bare-name fallback for Python: the candidates that may be guessed ([`guessable`]),
/// an override folded into the method it overrides (a candidate whose class inherits from
/// another candidate's class is left out); an edge only when one candidate is left (two or
/// more are at best one right and the rest wrong).
fn fallback(w: &World, fi: u32, name: &str, methods: bool) -> Vec<Hit> {
    let table = if methods { &w.methods_by_name } else { &w.free_by_name };
    let Some(all) = table.get(&(Lang::Python, name)) else { return Vec::new() };
    let cands: Vec<ERef> = all.iter().copied().filter(|&r| guessable(w, fi, r)).collect();
    if cands.is_empty() || cands.len() > 64 {
        return Vec::new();
    }
    let class_of = |r: ERef| w.entity(r).parent.map(|p| (r.0, p));
    let classes: Vec<Option<ERef>> = cands.iter().map(|&r| class_of(r)).collect();
    let roots: Vec<ERef> = cands
        .iter()
        .zip(&classes)
        .filter(|(_, c)| match c {
            Some(c) if methods => {
                let up = w.ancestors(*c);
                !classes.iter().flatten().any(|o| o != c && up.contains(o))
            }
            _ => true,
        })
        .map(|(&r, _)| r)
        .collect();
    if roots.len() != 1 {
        return Vec::new();
    }
    vec![Hit { target: roots[0], how: How::Name }]
}

/// A fallback target a call from file `fi` may be guessed to: not a test file's from
/// library code, and not nested in a function (nothing outside it can reach it).
fn guessable(w: &World, fi: u32, target: ERef) -> bool {
    let tf = w.file(target.0);
    if tf.is_test && !w.file(fi).is_test {
        return false;
    }
    let mut p = w.entity(target).parent;
    while let Some(i) = p {
        let e = &tf.entities[i as usize];
        if matches!(e.kind, Kind::Function | Kind::Method) {
            return false;
        }
        p = e.parent;
    }
    true
}

/// The bindings of a name in a scope (`Binding::Var`): every `ty` recorded for it.
fn var_tys<'a>(w: &World<'a>, scope: ERef, name: &str) -> Vec<&'a str> {
    let f = w.file(scope.0);
    w.py_vars
        .get(&(scope, name))
        .map(|v| v.iter().map(|&i| f.vars[i as usize].ty.as_str()).collect())
        .unwrap_or_default()
}

/// The classes a binding's recorded value is an instance of.
fn value_types(w: &World, scope: ERef, ty: &str, depth: u32) -> Vec<ERef> {
    if depth > MAX_TYPE_DEPTH {
        return Vec::new();
    }
    if let Some(t) = ty.strip_prefix("T:") {
        return match resolve_path(w, scope, t) {
            Some(Binding::Entity(r, _)) if w.entity(r).kind.is_type() => vec![r],
            // `:rtype: requests.Response` in requests' own `api.py`, where nothing binds
            // `requests`: a type named by its module's absolute name.
            None => qualified_type(w, t).into_iter().collect(),
            _ => Vec::new(),
        };
    }
    if let Some(callee) = ty.strip_prefix("C:") {
        return call_types(w, scope, callee, depth + 1);
    }
    if let Some(path) = ty.strip_prefix("A:") {
        return path_types(w, scope, path, u32::MAX, depth + 1);
    }
    Vec::new()
}

/// Every value a scope binds `name` to is made from an import that resolves outside the
/// project (`threading.Event()`, `x: socket.socket`, `e = urllib3.exceptions`).
fn holds_external(w: &World, scope: ERef, name: &str) -> bool {
    let f = w.file(scope.0);
    let tys = var_tys(w, scope, name);
    !tys.is_empty()
        && tys.iter().all(|t| {
            let path = t.strip_prefix("C:").or_else(|| t.strip_prefix("T:")).or_else(|| t.strip_prefix("A:"));
            let Some(head) = path.and_then(|p| p.split('.').next()).filter(|h| !h.is_empty()) else {
                return false;
            };
            let mut imps = f.imports.iter().filter(|i| i.local_name() == Some(head)).peekable();
            imps.peek().is_some() && imps.all(|i| import_target(w, scope.0, i).is_none())
        })
}

/// A class named by a dotted path that starts with a module of the project, taken as an
/// absolute module name (`requests.Response`, `django.http.HttpResponse`): the longest
/// such module, then its members.
fn qualified_type(w: &World, dotted: &str) -> Option<ERef> {
    let segs: Vec<&str> = dotted.split('.').collect();
    (1..segs.len()).rev().find_map(|n| {
        let mf = module_file(w, &segs[..n].join("."))?;
        match walk(w, Binding::Module(mf), &segs[n..])? {
            Binding::Entity(r, _) if w.entity(r).kind.is_type() => Some(r),
            _ => None,
        }
    })
}

/// A call of `callee` (a name or dotted path, as written) from `scope`, seeing every
/// definition of the scope (no line).
fn call_of(scope: ERef, callee: &str) -> Call {
    let (receiver, name) = match callee.rsplit_once('.') {
        Some((r, n)) => (r.to_string(), n.to_string()),
        None => (String::new(), callee.to_string()),
    };
    Call { owner: scope.1, line: u32::MAX, name, receiver, args: 0, new: false }
}

/// The classes the result of calling `callee` (a name or dotted path) is an instance of:
/// a class called, or a function whose return type is known.
fn call_types(w: &World, scope: ERef, callee: &str, depth: u32) -> Vec<ERef> {
    if depth > MAX_TYPE_DEPTH {
        return Vec::new();
    }
    let call = call_of(scope, callee);
    let mut out = Vec::new();
    // Guessed callees say nothing sure about the value.
    let hits: Vec<Hit> =
        resolve_call_d(w, scope.0, &call, depth + 1).into_iter().filter(|h| h.how != How::Name).collect();
    if hits.is_empty() && !call.receiver.is_empty() {
        // `self.client_class()`: an attribute that holds a class (`client_class = Client`).
        for c in path_types(w, scope, &call.receiver, u32::MAX, depth + 1) {
            out.extend(attr_classes(w, c, &call.name));
        }
    }
    for h in hits {
        let e = w.entity(h.target);
        if e.kind.is_type() {
            out.push(h.target);
        } else if e.name != "__init__" {
            for t in var_tys(w, h.target, "->") {
                out.extend(value_types(w, h.target, t, depth + 1));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The classes a class attribute names (`client_class = Client` in the class body), on
/// the nearest class of the ancestors that binds it.
fn attr_classes(w: &World, class: ERef, attr: &str) -> Vec<ERef> {
    for c in std::iter::once(class).chain(w.ancestors(class)) {
        let tys = var_tys(w, c, attr);
        if tys.is_empty() {
            continue;
        }
        return tys
            .iter()
            .filter_map(|t| t.strip_prefix("A:"))
            .filter_map(|p| match resolve_path(w, c, p) {
                Some(Binding::Entity(r, _)) if w.entity(r).kind.is_type() => Some(r),
                _ => None,
            })
            .collect();
    }
    Vec::new()
}

/// The classes the instance an attribute of a class holds is an instance of: the class
/// body's assignments, then `self.<attr> = ...` in its methods, then what a method of that
/// name returns (a property); on the nearest class of the ancestors that binds it.
fn attr_types(w: &World, class: ERef, attr: &str, depth: u32) -> Vec<ERef> {
    for c in std::iter::once(class).chain(w.ancestors(class)) {
        let mut out = Vec::new();
        let mut bound = false;
        for t in var_tys(w, c, attr) {
            bound = true;
            out.extend(value_types(w, c, t, depth + 1));
        }
        if let Some(bs) = w.py_self_attrs.get(&(c, attr)) {
            for &(m, vi) in bs {
                bound = true;
                out.extend(value_types(w, m, &w.file(m.0).vars[vi as usize].ty, depth + 1));
            }
        }
        if bound {
            out.sort();
            out.dedup();
            return out;
        }
        // `self.query.chain()` where `query` is a method read as an attribute: a
        // property, whose value is what it returns.
        let getters = w.child_named(c, attr, |k| k == Kind::Method);
        if let Some(&m) = getters.first() {
            for t in var_tys(w, m, "->") {
                out.extend(value_types(w, m, t, depth + 1));
            }
            out.sort();
            out.dedup();
            return out;
        }
    }
    // An attribute the class's metaclass gives the classes it makes: `setattr(cls,
    // "objects", manager)` or `cls.objects = ...` in the metaclass's methods.
    match metaclass(w, class) {
        Some(m) if m != class && depth < MAX_TYPE_DEPTH => attr_types(w, m, attr, depth + 1),
        _ => Vec::new(),
    }
}

/// The metaclass a class is made by: the nearest `metaclass=` of it and its ancestors
/// that names a class of the project.
fn metaclass(w: &World, class: ERef) -> Option<ERef> {
    std::iter::once(class).chain(w.ancestors(class)).find_map(|c| {
        var_tys(w, c, "@metaclass").iter().filter_map(|t| t.strip_prefix("A:")).find_map(|p| {
            match resolve_path(w, c, p) {
                Some(Binding::Entity(r, _)) if w.entity(r).kind.is_type() => Some(r),
                _ => None,
            }
        })
    })
}

/// The classes of the instance an expression as written holds: `self`, a bound name,
/// `self.x`, `x.y.z`, `mod.instance`, `f()`; empty when not known.
fn path_types(w: &World, scope: ERef, path: &str, line: u32, depth: u32) -> Vec<ERef> {
    if depth > MAX_TYPE_DEPTH {
        return Vec::new();
    }
    if let Some(callee) = path.strip_suffix("()") {
        return call_types(w, scope, callee, depth + 1);
    }
    // `Cls(args)`, `Cls().filter(a=1)` as written: the call of what stands before the
    // parenthesis the last one closes.
    if path.ends_with(')') {
        let mut level = 0i32;
        let mut open = None;
        for (i, c) in path.char_indices().rev() {
            level += match c {
                ')' => 1,
                '(' => -1,
                _ => 0,
            };
            if level == 0 {
                open = Some(i);
                break;
            }
        }
        return match open {
            Some(o) if o > 0 => call_types(w, scope, &path[..o], depth + 1),
            _ => Vec::new(),
        };
    }
    let segs: Vec<&str> = path.split('.').collect();
    if segs.iter().any(|s| s.is_empty() || !s.chars().all(|c| c.is_alphanumeric() || c == '_')) {
        return Vec::new();
    }
    // The longest prefix that names an instance, then attributes of it.
    let (mut cur, rest): (Vec<ERef>, &[&str]) =
        if (segs[0] == "self" || segs[0] == "cls") && !bound_here(w, scope, segs[0]) {
            (w.enclosing_type(scope).into_iter().collect(), &segs[1..])
        } else {
            let mut found = None;
            for n in (1..=segs.len()).rev() {
                match resolve_path_at(w, scope, &segs[..n].join("."), line) {
                    Some(Binding::Var(s, vi)) => {
                        let name = &w.file(s.0).vars[vi as usize].name;
                        let mut out = Vec::new();
                        for t in var_tys(w, s, name) {
                            out.extend(value_types(w, s, t, depth + 1));
                        }
                        found = Some((out, &segs[n..]));
                        break;
                    }
                    // `Employee.objects`: an attribute of a class itself (its body's
                    // bindings, or what its metaclass gives it).
                    Some(Binding::Entity(r, _)) if n < segs.len() && w.entity(r).kind.is_type() => {
                        found = Some((attr_types(w, r, segs[n], depth + 1), &segs[n + 1..]));
                        break;
                    }
                    _ => {}
                }
            }
            match found {
                Some(f) => f,
                None => return Vec::new(),
            }
        };
    for attr in rest {
        let mut next = Vec::new();
        for c in cur {
            next.extend(attr_types(w, c, attr, depth + 1));
        }
        next.sort();
        next.dedup();
        cur = next;
    }
    cur
}

/// `self` rebound by something other than a method's first parameter.
fn bound_here(w: &World, scope: ERef, name: &str) -> bool {
    let e = w.entity(scope);
    e.kind != Kind::Method && var_tys(w, scope, name).iter().any(|t| !t.is_empty())
}

/// `name` called on instances of `types`: the members found (own ones as `type`).
fn on_instances(w: &World, types: &[ERef], name: &str) -> Vec<Hit> {
    let mut out = Vec::new();
    for &t in types {
        out.extend(w.member(t, name, How::Type, &|m| callable(w.entity(m).kind)));
    }
    out.sort();
    out.dedup();
    out
}

/// A bound name called: an alias of something callable (`qn = self.quote_name`), or an
/// instance whose class has `__call__`.
fn call_var(w: &World, fi: u32, scope: ERef, name: &str, depth: u32) -> Vec<Hit> {
    let mut out = Vec::new();
    for ty in var_tys(w, scope, name) {
        if let Some(path) = ty.strip_prefix("A:") {
            let call = call_of(scope, path);
            if call.receiver.is_empty() && call.name == name {
                continue;
            }
            let hits = resolve_call_d(w, fi, &call, depth + 1);
            out.extend(
                hits.into_iter().filter(|h| h.how != How::Name).map(|h| Hit { target: h.target, how: How::Type }),
            );
        } else {
            let types = value_types(w, scope, ty, depth + 1);
            out.extend(on_instances(w, &types, "__call__"));
            if let Some(callee) = ty.strip_prefix("C:") {
                // `gettext_lazy = lazy(gettext, str)`: a factory that returns a function it
                // defines (`return __wrapper__`): calling the name calls that function.
                out.extend(returned_functions(w, scope, callee, name, depth + 1));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The functions `var = callee(...)` holds when `callee` returns one by name (`return
/// __wrapper__` naming a `def` the factory or its module defines), resolved without
/// guesses. A wrapper made with `@wraps(param)` stands for the function the factory was
/// given for that parameter (`var#i`, when it was a name), as `functools.wraps` makes it
/// look.
fn returned_functions(w: &World, scope: ERef, callee: &str, var: &str, depth: u32) -> Vec<Hit> {
    if depth > MAX_TYPE_DEPTH {
        return Vec::new();
    }
    let call = call_of(scope, callee);
    let mut out = Vec::new();
    for h in resolve_call_d(w, scope.0, &call, depth + 1) {
        if h.how == How::Name || w.entity(h.target).kind.is_type() {
            continue;
        }
        for t in var_tys(w, h.target, "->") {
            let Some(n) = t.strip_prefix("A:").filter(|n| !n.contains('.')) else { continue };
            let Some(Binding::Entity(r, _)) = lookup_at(w, h.target, n, u32::MAX) else { continue };
            if !matches!(w.entity(r).kind, Kind::Function | Kind::Method) {
                continue;
            }
            let wrapped = var_tys(w, r, "@wraps").into_iter().find_map(|t| t.strip_prefix("P:")?.parse::<usize>().ok());
            match wrapped {
                Some(i) => {
                    let given = var_tys(w, scope, &format!("{var}#{i}"));
                    let target = given.iter().filter_map(|t| t.strip_prefix("A:")).find_map(|p| {
                        match resolve_path(w, scope, p) {
                            Some(Binding::Entity(e, _)) if callable(w.entity(e).kind) => Some(e),
                            _ => None,
                        }
                    });
                    if let Some(e) = target {
                        out.push(Hit { target: e, how: How::Type });
                    }
                }
                None => out.push(Hit { target: r, how: How::Type }),
            }
        }
    }
    out
}

pub(super) fn resolve_call(w: &World, fi: u32, call: &Call) -> Vec<Hit> {
    resolve_call_d(w, fi, call, 0)
}

fn resolve_call_d(w: &World, fi: u32, call: &Call, depth: u32) -> Vec<Hit> {
    if depth > MAX_TYPE_DEPTH {
        return Vec::new();
    }
    let owner = (fi, call.owner);
    let name = call.name.as_str();
    // A method name builtin types also have is not guessed on an unknown receiver.
    let methods_fallback = || {
        if BUILTIN_METHODS.contains(&name) {
            Vec::new()
        } else {
            fallback(w, fi, name, true)
        }
    };
    match call.receiver.as_str() {
        "" => {
            // `cls()` in a method: the class.
            if name == "cls" {
                if let (Some(ty), Some(Binding::Var(s, _))) =
                    (w.enclosing_type(owner), lookup_at(w, owner, name, call.line))
                {
                    if w.entity(s).kind == Kind::Method {
                        return instantiate(w, ty, How::Type);
                    }
                }
            }
            match lookup_at(w, owner, name, call.line) {
                Some(Binding::Entity(r, how)) => {
                    if w.entity(r).kind.is_type() {
                        instantiate(w, r, how)
                    } else {
                        vec![Hit { target: r, how }]
                    }
                }
                Some(Binding::Module(_)) => Vec::new(),
                // The binding's own name: an import may alias it (`gettext_lazy as _`).
                Some(Binding::Var(s, vi)) => call_var(w, s.0, s, &w.file(s.0).vars[vi as usize].name, depth),
                None => {
                    // An import that resolves outside the repository is not guessed at, nor
                    // a builtin.
                    if crate::lang::PYTHON_BUILTINS.contains(&name)
                        || w.file(fi).imports.iter().any(|i| i.local_name() == Some(name))
                    {
                        return Vec::new();
                    }
                    fallback(w, fi, name, false)
                }
            }
        }
        "self" | "cls" => match w.enclosing_type(owner) {
            Some(ty) => {
                let mut hits = on_type(w, ty, How::SelfRef, name);
                if hits.is_empty() {
                    // `self.model_class()` where the class body binds `model_class = Cls`.
                    for c in attr_classes(w, ty, name) {
                        hits.extend(instantiate(w, c, How::Type));
                    }
                }
                if hits.is_empty() {
                    methods_fallback()
                } else {
                    hits
                }
            }
            None => methods_fallback(),
        },
        // `super()`, `super(Cls, self)`; not `super().get_queryset()` (a call on what it returns).
        r if r == "super()" || (r.starts_with("super(") && r.ends_with(')') && !r.contains(").")) => {
            match w.enclosing_type(owner) {
                Some(ty) => w.inherited_member(ty, name, &|m| callable(w.entity(m).kind)),
                None => Vec::new(),
            }
        }
        recv => {
            let types = path_types(w, owner, recv, call.line, depth + 1);
            if !types.is_empty() {
                // The receiver's class is known: its member or nothing.
                return on_instances(w, &types, name);
            }
            match resolve_path_at(w, owner, recv, call.line) {
                Some(Binding::Module(mf)) => match export(w, mf, name, MAX_HOPS) {
                    Some(Binding::Entity(r, _)) => {
                        if w.entity(r).kind.is_type() {
                            instantiate(w, r, How::Import)
                        } else {
                            vec![Hit { target: r, how: How::Import }]
                        }
                    }
                    // `mod.instance()`: its class's `__call__`, or what an alias names.
                    Some(Binding::Var(s, vi)) => call_var(w, s.0, s, &w.file(s.0).vars[vi as usize].name, depth),
                    _ => Vec::new(),
                },
                Some(Binding::Entity(r, how)) if w.entity(r).kind.is_type() => {
                    let hits = on_type(w, r, how, name);
                    if hits.is_empty() {
                        methods_fallback()
                    } else {
                        hits
                    }
                }
                // `done = threading.Event()` then `done.set()`: what the name holds comes
                // from outside the project, so no method of the project is guessed.
                Some(Binding::Var(s, vi)) if holds_external(w, s, &w.file(s.0).vars[vi as usize].name) => Vec::new(),
                _ => {
                    // A receiver bound to an external import (`os.path.join`) is not guessed at.
                    let first = recv.split('.').next().unwrap_or("");
                    if w.file(fi).imports.iter().any(|i| i.local_name() == Some(first)) {
                        return Vec::new();
                    }
                    methods_fallback()
                }
            }
        }
    }
}
