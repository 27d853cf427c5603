//! Python: modules by dotted name, imports (absolute, relative, aliased, re-exported
//! through `__init__.py`), `self`/`cls`/`super()`, `Cls()` to `__init__`, `mod.f()`.

use std::collections::HashMap;

use super::{lexical, Binding, ERef, Hit, How, World};
use crate::extract::{Call, Import, ImportKind, Kind};
use crate::lang::Lang;

/// How many re-export steps an import may follow.
const MAX_HOPS: usize = 5;

/// Register a file under its dotted module name, and under the name it has below a
/// top-level source directory (`src/`, `lib/`). The first path in sorted order wins a tie.
pub(super) fn register_module(map: &mut HashMap<String, u32>, path: &str, fi: u32) {
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
    module_file(w, &sub).map(Binding::Module)
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
        },
    }
}

/// A name as seen from `scope`: lexical definitions, then import bindings.
fn lookup(w: &World, scope: ERef, name: &str) -> Option<Binding> {
    if let Some(r) = lexical(w, scope, name, true, definition) {
        return Some(Binding::Entity(r, How::Local));
    }
    binding_from_imports(w, scope.0, name, MAX_HOPS)
}

/// A dotted name (`Base`, `models.Base`, `pkg.mod.Base`) as seen from `scope`.
pub(super) fn resolve_dotted(w: &World, scope: ERef, dotted: &str) -> Option<ERef> {
    match resolve_path(w, scope, dotted)? {
        Binding::Entity(r, _) => Some(r),
        Binding::Module(_) => None,
    }
}

/// Walk a dotted path: the first segment by scope, the rest as submodules, module
/// members or class members. `import a.b` binds `a`, so `a.b` is tried as a module too.
fn resolve_path(w: &World, scope: ERef, dotted: &str) -> Option<Binding> {
    let segs: Vec<&str> = dotted.split('.').collect();
    if segs.iter().any(|s| s.is_empty() || !s.chars().all(|c| c.is_alphanumeric() || c == '_')) {
        return None;
    }
    let cur = lookup(w, scope, segs[0]);
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

pub(super) fn resolve_call(w: &World, fi: u32, call: &Call) -> Vec<Hit> {
    let owner = (fi, call.owner);
    let name = call.name.as_str();
    let methods_fallback = || w.fallback(Lang::Python, name, true, &|_| true);
    match call.receiver.as_str() {
        "" => match lookup(w, owner, name) {
            Some(Binding::Entity(r, how)) => {
                if w.entity(r).kind.is_type() {
                    instantiate(w, r, how)
                } else {
                    vec![Hit { target: r, how }]
                }
            }
            Some(Binding::Module(_)) => Vec::new(),
            None => {
                // An import that resolves outside the repository is not guessed at.
                if w.file(fi).imports.iter().any(|i| i.local_name() == Some(name)) {
                    return Vec::new();
                }
                w.fallback(Lang::Python, name, false, &|_| true)
            }
        },
        "self" | "cls" => match w.enclosing_type(owner) {
            Some(ty) => {
                let hits = on_type(w, ty, How::SelfRef, name);
                if hits.is_empty() {
                    methods_fallback()
                } else {
                    hits
                }
            }
            None => methods_fallback(),
        },
        r if r == "super()" || r.starts_with("super(") => match w.enclosing_type(owner) {
            Some(ty) => w.inherited_member(ty, name, &|m| callable(w.entity(m).kind)),
            None => Vec::new(),
        },
        recv => match resolve_path(w, owner, recv) {
            Some(Binding::Module(mf)) => match export(w, mf, name, MAX_HOPS) {
                Some(Binding::Entity(r, _)) => {
                    if w.entity(r).kind.is_type() {
                        instantiate(w, r, How::Import)
                    } else {
                        vec![Hit { target: r, how: How::Import }]
                    }
                }
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
            _ => {
                // A receiver bound to an external import (`os.path.join`) is not guessed at.
                let first = recv.split('.').next().unwrap_or("");
                if w.file(fi).imports.iter().any(|i| i.local_name() == Some(first)) {
                    return Vec::new();
                }
                methods_fallback()
            }
        },
    }
}
