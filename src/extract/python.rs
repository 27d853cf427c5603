//! Python's quirks: import statements, docstrings and module names.

use tree_sitter::Node;

use super::{line_of, text, truncate, Field, Import, ImportKind, Kind, KindTable, Tags};

/// `pkg/sub/mod.py` -> `pkg.sub.mod`; `pkg/__init__.py` -> `pkg`.
pub(crate) fn module_name(rel: &str) -> String {
    let stem = rel.strip_suffix(".py").or_else(|| rel.strip_suffix(".pyi")).unwrap_or(rel);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

/// The docstring of a class or function: the first statement of its body, if a string.
pub(crate) fn doc(def: Node, src: &str) -> String {
    match def.field("body") {
        Some(body) => first_string(body, src),
        None => String::new(),
    }
}

pub(crate) fn module_doc(root: Node, src: &str) -> String {
    first_string(root, src)
}

fn first_string(block: Node, src: &str) -> String {
    let mut c = block.walk();
    let Some(first) = block.named_children(&mut c).find(|n| n.kind() != "comment") else {
        return String::new();
    };
    if first.kind() != "expression_statement" {
        return String::new();
    }
    let Some(s) = first.named_child(0) else { return String::new() };
    if s.kind() != "string" {
        return String::new();
    }
    let mut c2 = s.walk();
    let content: String =
        s.named_children(&mut c2).filter(|n| n.kind() == "string_content").map(|n| text(n, src)).collect();
    truncate(dedent(&content), 2000)
}

fn dedent(s: &str) -> String {
    let lines: Vec<&str> = s.trim().lines().map(str::trim).collect();
    lines.join("\n")
}

/// The bindings of one `import` / `from ... import` statement.
pub(crate) fn imports(node: Node, src: &str, out: &mut Vec<Import>) {
    let line = line_of(node);
    let mut c = node.walk();
    match node.kind() {
        "import_statement" => {
            for n in node.children_by_field_name("name", &mut c) {
                let (module, alias) = name_and_alias(n, src);
                out.push(Import {
                    line,
                    module,
                    name: String::new(),
                    alias,
                    kind: ImportKind::Module,
                    is_static: false,
                });
            }
        }
        "import_from_statement" => {
            let Some(m) = node.field("module_name") else { return };
            let module: String = text(m, src).chars().filter(|c| !c.is_whitespace()).collect();
            let mut any = false;
            for n in node.children_by_field_name("name", &mut c) {
                any = true;
                let (name, alias) = name_and_alias(n, src);
                out.push(Import {
                    line,
                    module: module.clone(),
                    name,
                    alias,
                    kind: ImportKind::Name,
                    is_static: false,
                });
            }
            let mut c2 = node.walk();
            if !any && node.named_children(&mut c2).any(|n| n.kind() == "wildcard_import") {
                out.push(Import {
                    line,
                    module,
                    name: "*".into(),
                    alias: String::new(),
                    kind: ImportKind::Star,
                    is_static: false,
                });
            }
        }
        _ => {}
    }
}

/// `a.b` or `a.b as c`: the dotted name and the alias (empty when none).
fn name_and_alias(n: Node, src: &str) -> (String, String) {
    if n.kind() == "aliased_import" {
        let name = n.field("name").map(|x| text(x, src)).unwrap_or("");
        let alias = n.field("alias").map(|x| text(x, src)).unwrap_or("");
        (name.to_string(), alias.to_string())
    } else {
        (text(n, src).to_string(), String::new())
    }
}

/// A name a scope binds, with what it is known to hold: `T:<type>` (an annotation),
/// `C:<callee>` (the result of calling `callee`, a name or dotted path as written),
/// `A:<path>` (another name or attribute: an alias such as `qn = self.quote_name`), `I:`
/// (an import inside a function: resolved as imports are), or empty (bound, nothing
/// known). A function's return annotation (and docstring
/// `:rtype:`) binds `->`; `self.x = ...` (or `cls.x = ...`) in a method binds `self.x`. The node is the
/// binding's position (its owner is the entity around it).
pub(crate) type RawBinding<'t> = (Node<'t>, String, String);

/// The kinds [`bindings`] matches on, by kind id: the other kinds are `""`.
/// The node kinds [`bindings`] matches on (with what [`visit`] matches for the query).
const MATCHED: [&str; 13] = [
    "class_definition",
    "call",
    "function_definition",
    "assignment",
    "return_statement",
    "augmented_assignment",
    "named_expression",
    "for_statement",
    "for_in_clause",
    "as_pattern",
    "except_clause",
    "import_statement",
    "import_from_statement",
];

/// One node of the walk: what `queries/python/tags.scm`'s patterns rooted at it match
/// (definitions: classes, functions, class-body fields; calls; import statements; bases),
/// each as the query's match would give it.
fn visit<'t>(t: &mut Tags<'t>, n: Node<'t>, kind: &str, src: &str) {
    match kind {
        "class_definition" => {
            t.def(n, n.field("name"), Kind::Class, src);
            // `superclasses: (argument_list [(identifier) (attribute) (call)] @base)`
            if let Some(sup) = n.field("superclasses").filter(|s| s.kind() == "argument_list") {
                let mut c = sup.walk();
                for b in sup.named_children(&mut c) {
                    if matches!(b.kind(), "identifier" | "attribute" | "call") {
                        t.base(n, b, src);
                    }
                }
            }
            // `body: (block (expression_statement (assignment left: (identifier) @name)))`
            if let Some(body) = n.field("body").filter(|b| b.kind() == "block") {
                let mut c = body.walk();
                let stmts: Vec<Node<'t>> =
                    body.named_children(&mut c).filter(|s| s.kind() == "expression_statement").collect();
                for st in stmts {
                    let mut c = st.walk();
                    for a in st.named_children(&mut c).filter(|a| a.kind() == "assignment") {
                        t.def(a, a.field("left"), Kind::Field, src);
                    }
                }
            }
        }
        "function_definition" => t.def(n, n.field("name"), Kind::Function, src),
        "call" => {
            let Some(args) = n.field("arguments").filter(|a| a.is_named()) else { return };
            let Some(f) = n.field("function") else { return };
            let (name, receiver) = match f.kind() {
                "identifier" => (f, None),
                "attribute" => {
                    let (Some(o), Some(a)) = (f.field("object"), f.field("attribute")) else {
                        return;
                    };
                    if !o.is_named() || a.kind() != "identifier" {
                        return;
                    }
                    (a, Some(o))
                }
                _ => return,
            };
            let recv = receiver.map(|r| super::receiver_text(r, src)).unwrap_or_default();
            t.calls.push((n, text(name, src).to_string(), recv, super::count_args(args, src), false, line_of(name)));
        }
        "import_statement" | "import_from_statement" => t.imports.push(n),
        _ => {}
    }
}

/// Every binding of a file: parameters, assignments (plain, annotated, augmented,
/// chained, walrus), `for` and comprehension targets, `with ... as`, `except ... as`,
/// imports inside functions, return annotations. One walk over the tree.
pub(crate) fn bindings<'t>(root: Node<'t>, src: &str, out: &mut Vec<RawBinding<'t>>, mut tags: Option<&mut Tags<'t>>) {
    // The `def`s around the node the walk is at, innermost last, with their depths.
    let mut defs: Vec<(usize, Node<'t>)> = Vec::new();
    // `cls.add_to_class("objects", manager)` in a method: (the method, the call), kept
    // until every class's setter methods are known.
    let mut setter_calls: Vec<SetterCall<'t>> = Vec::new();
    // (class node id, method name): methods that do `setattr(p0, p1, p2)` with their
    // first three parameters.
    let mut setters: std::collections::HashSet<(usize, String)> = std::collections::HashSet::new();
    // The walk meets every named node of the file, in document order, with one cursor
    // (going into named nodes only, as a walk over named children goes; what it finds is
    // put in order after it, so the order it meets nodes in does not matter): its kind is
    // matched by number (a table made once, Python's grammar being the only one this walk
    // sees), not by name (`Node::kind` measures and checks a C string per node).
    static KINDS: std::sync::OnceLock<KindTable> = std::sync::OnceLock::new();
    let kinds = KINDS.get_or_init(|| KindTable::of(root, &MATCHED));
    let mut cursor = root.walk();
    let mut depth = 0usize;
    loop {
        let n = cursor.node();
        if !n.is_named() {
            // Past an unnamed node (punctuation, a keyword): its next sibling, or up.
            if !next_node(&mut cursor, &mut depth) {
                break;
            }
            continue;
        }
        // The innermost `def` around `n`: one above it (a `def` met before at this depth
        // or deeper was a sibling's, or inside one).
        while defs.last().is_some_and(|&(d, _)| d >= depth) {
            defs.pop();
        }
        let def = defs.last().map(|&(_, d)| d);
        let in_def = def.is_some();
        let kind = kinds.name(n);
        if let Some(t) = tags.as_deref_mut() {
            visit(t, n, kind, src);
        }
        match kind {
            // `class Model(metaclass=ModelBase)`: the class's metaclass, as `@metaclass`.
            "class_definition" => {
                if let Some(sup) = n.field("superclasses") {
                    let mut c = sup.walk();
                    for a in sup.named_children(&mut c) {
                        let is_meta = a.kind() == "keyword_argument"
                            && a.field("name").is_some_and(|k| text(k, src) == "metaclass");
                        let v = a.field("value").map(|v| value_of(v, src)).unwrap_or_default();
                        if is_meta && v.starts_with("A:") {
                            out.push((a, "@metaclass".into(), v));
                        }
                    }
                }
            }
            "call" if in_def => {
                if let Some(d) = def {
                    set_attr_call(n, d, src, out, &mut setter_calls, &mut setters);
                }
            }
            "function_definition" => {
                if let Some(ps) = n.field("parameters") {
                    parameters(ps, src, out);
                }
                if let (Some(i), Some(b)) = (wraps_parameter(n, src), n.field("body")) {
                    out.push((b, "@wraps".into(), format!("P:{i}")));
                }
                if let Some(r) = n.field("return_type") {
                    out.push((r, "->".into(), annotation(r, src).map(|t| format!("T:{t}")).unwrap_or_default()));
                } else if let Some(t) = rtype(&doc(n, src)) {
                    if let Some(b) = n.field("body") {
                        out.push((b, "->".into(), format!("T:{t}")));
                    }
                }
            }
            "assignment" => {
                let ty = n.field("type").and_then(|t| annotation(t, src)).map(|t| format!("T:{t}"));
                let mut right = n.field("right");
                // `a = b = X()`: every target holds the last value.
                while let Some(r) = right.filter(|r| r.kind() == "assignment") {
                    right = r.field("right");
                }
                let value = ty.unwrap_or_else(|| right.map(|r| value_of(r, src)).unwrap_or_default());
                if let Some(l) = n.field("left") {
                    targets(l, src, &value, out);
                    // `x = factory(f, ...)`: the first arguments that are names, as
                    // `x#0`, `x#1` (what a factory's `@wraps(param)` wrapper stands for).
                    if let (true, Some(r)) =
                        (l.kind() == "identifier", right.filter(|r| value.starts_with("C:") && r.kind() == "call"))
                    {
                        for (i, a) in positional_paths(r, src) {
                            out.push((l, format!("{}#{i}", text(l, src)), format!("A:{a}")));
                        }
                    }
                }
            }
            // `return Cls(...)`, `return self.make()`: a return type when none is declared;
            // `return wrapper`, `return self._query` (a name or path; not `cls`, which is
            // the class, not an instance): the value it holds, or the function a name
            // defines (a factory's result).
            "return_statement" if in_def => {
                let v = n
                    .named_child(0)
                    .map(|r| value_of(r, src))
                    .filter(|v| v.starts_with("C:") || (v.starts_with("A:") && v != "A:cls"));
                if let Some(v) = v {
                    out.push((n, "->".into(), v));
                }
            }
            "augmented_assignment" => {
                if let Some(l) = n.field("left") {
                    targets(l, src, "", out);
                }
            }
            "named_expression" => {
                if let Some(l) = n.field("name") {
                    let v = n.field("value").map(|r| value_of(r, src)).unwrap_or_default();
                    targets(l, src, &v, out);
                }
            }
            "for_statement" | "for_in_clause" => {
                if let Some(l) = n.field("left") {
                    targets(l, src, "", out);
                }
            }
            "as_pattern" => {
                if let Some(a) = n.field("alias") {
                    // `with Cls(...) as x`: x is taken to be the instance (`__enter__`
                    // returning self, as sessions, files and locks do).
                    let in_with = n.parent().is_some_and(|p| p.kind() == "with_item");
                    let v = match n.named_child(0) {
                        Some(e) if in_with && e.kind() == "call" => value_of(e, src),
                        _ => String::new(),
                    };
                    targets(a, src, &v, out);
                }
            }
            "except_clause" => {
                if let Some(a) = n.field("alias") {
                    targets(a, src, "", out);
                }
            }
            "import_statement" | "import_from_statement" if in_def => {
                let mut imps = Vec::new();
                imports(n, src, &mut imps);
                for i in imps {
                    if let Some(name) = i.local_name() {
                        out.push((n, name.to_string(), "I:".into()));
                    }
                }
            }
            _ => {}
        }
        if kind == "function_definition" {
            defs.push((depth, n));
        }
        if cursor.goto_first_child() {
            depth += 1;
        } else if !next_node(&mut cursor, &mut depth) {
            break;
        }
    }
    for SetterCall { class, call, method, attr, value } in setter_calls {
        if setters.contains(&(class, method)) {
            out.push((call, format!("self.{attr}"), value));
        }
    }
}

/// The cursor to the next node in document order that is not inside the one it is at:
/// its next sibling, or the next sibling of the nearest ancestor that has one (`depth`
/// follows). False at the end of the tree.
fn next_node(cursor: &mut tree_sitter::TreeCursor, depth: &mut usize) -> bool {
    while !cursor.goto_next_sibling() {
        if !cursor.goto_parent() {
            return false;
        }
        *depth -= 1;
    }
    true
}

/// `self.x = y` (or `setattr(cls, "x", y)`) where the method binds the local `y` once, to
/// something known (`y = Manager()`): `self.x` holds that value itself. Other files see
/// `self.x` (under `x`) but not the method's locals, so the value is written where they look.
pub(crate) fn inline_attr_values(vars: &mut [super::Var]) {
    use std::collections::HashMap;
    let mut once: HashMap<(u32, &str), Option<&str>> = HashMap::new();
    for v in vars.iter() {
        once.entry((v.owner, v.name.as_str())).and_modify(|t| *t = None).or_insert(Some(v.ty.as_str()));
    }
    let mut inlined: Vec<(usize, String)> = Vec::new();
    for (i, v) in vars.iter().enumerate() {
        let Some(local) = v.ty.strip_prefix("A:") else { continue };
        if !v.name.starts_with("self.") || local.contains('.') || matches!(local, "self" | "cls") {
            continue;
        }
        if let Some(Some(t)) = once.get(&(v.owner, local)) {
            if t.starts_with("C:") || t.starts_with("T:") {
                inlined.push((i, t.to_string()));
            }
        }
    }
    for (i, t) in inlined {
        vars[i].ty = t;
    }
}

/// The class a `def` is a method of (directly in its body, decorated or not).
fn method_class(def: Node) -> Option<Node> {
    let mut up = def.parent()?;
    if up.kind() == "decorated_definition" {
        up = up.parent()?;
    }
    up.parent().filter(|c| up.kind() == "block" && c.kind() == "class_definition")
}

/// The names of a `def`'s first parameters (plain or annotated), up to the first other kind.
fn param_names(def: Node, src: &str) -> Vec<String> {
    let Some(ps) = def.field("parameters") else { return Vec::new() };
    let mut c = ps.walk();
    let mut out = Vec::new();
    for p in ps.named_children(&mut c) {
        let name = match p.kind() {
            "identifier" => Some(p),
            "typed_parameter" => {
                let mut c2 = p.walk();
                let n = p.named_children(&mut c2).find(|x| x.kind() == "identifier");
                n
            }
            _ => None,
        };
        match name {
            Some(n) => out.push(text(n, src).to_string()),
            None => break,
        }
    }
    out
}

/// `p.m("name", value)` in a method of the class whose id is `class`: binds `self.name` if
/// `m` turns out to be a setter of that class.
struct SetterCall<'t> {
    class: usize,
    call: Node<'t>,
    method: String,
    attr: String,
    value: String,
}

/// A call's arguments, comments left out.
fn call_args(call: Node) -> Option<Vec<Node>> {
    let args = call.field("arguments")?;
    let mut c = args.walk();
    Some(args.named_children(&mut c).filter(|a| a.kind() != "comment").collect())
}

/// Positional arguments from `from`: a string literal that is an identifier, then a value
/// (`"objects", manager`): the name and what the value is known to hold.
fn literal_and_value(list: &[Node], from: usize, src: &str) -> Option<(String, String)> {
    let (lit, value) = (list.get(from)?, list.get(from + 1)?);
    if lit.kind() != "string" || list.len() != from + 2 {
        return None;
    }
    let mut c2 = lit.walk();
    let parts: Vec<Node> = lit.named_children(&mut c2).collect();
    let content: Vec<&str> = parts.iter().filter(|p| p.kind() == "string_content").map(|p| text(*p, src)).collect();
    // Only a plain literal: no interpolation, no escapes.
    if parts.iter().any(|p| !matches!(p.kind(), "string_start" | "string_content" | "string_end")) {
        return None;
    }
    let name = content.concat();
    let ident = name.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    let v = value_of(*value, src);
    (ident && !v.is_empty()).then_some((name, v))
}

/// In a method whose first parameter is `p`: `setattr(p, "name", value)` binds `self.name`
/// (as `p.name = value` does); `p.m("name", value)` is kept to bind it too when `m` turns out
/// to be a setter of the same class. A method that does `setattr(p0, p1, p2)` with its own
/// first three parameters is a setter (Django's `ModelBase.add_to_class`).
fn set_attr_call<'t>(
    call: Node<'t>,
    def: Node<'t>,
    src: &str,
    out: &mut Vec<RawBinding<'t>>,
    setter_calls: &mut Vec<SetterCall<'t>>,
    setters: &mut std::collections::HashSet<(usize, String)>,
) {
    let Some(f) = call.field("function") else { return };
    match f.kind() {
        "identifier" if text(f, src) == "setattr" => {
            let Some(class) = method_class(def) else { return };
            let params = param_names(def, src);
            let Some(args) = call_args(call) else { return };
            let Some(target) = args.first().filter(|a| a.kind() == "identifier").map(|a| text(*a, src)) else {
                return;
            };
            if params.first().map(String::as_str) != Some(target) {
                return;
            }
            if let Some((attr, value)) = literal_and_value(&args, 1, src) {
                out.push((call, format!("self.{attr}"), value));
            } else if args.len() == 3
                && params.len() >= 3
                && args.iter().zip(&params).all(|(a, p)| a.kind() == "identifier" && text(*a, src) == p)
            {
                if let Some(name) = def.field("name") {
                    setters.insert((class.id(), text(name, src).to_string()));
                }
            }
        }
        "attribute" => {
            let obj = f.field("object");
            let Some(o) = obj.filter(|o| o.kind() == "identifier") else { return };
            // Most calls in a method are `self.m(...)` without a literal first: a look at
            // the first argument before anything is collected.
            let first_is_literal =
                call.field("arguments").and_then(|a| a.named_child(0)).is_some_and(|a| a.kind() == "string");
            if !first_is_literal || param_names(def, src).first().map(String::as_str) != Some(text(o, src)) {
                return;
            }
            let (Some(class), Some(m)) = (method_class(def), f.field("attribute")) else { return };
            let Some((attr, value)) = call_args(call).and_then(|a| literal_and_value(&a, 0, src)) else { return };
            setter_calls.push(SetterCall { class: class.id(), call, method: text(m, src).to_string(), attr, value });
        }
        _ => {}
    }
}

fn parameters<'t>(ps: Node<'t>, src: &str, out: &mut Vec<RawBinding<'t>>) {
    let mut c = ps.walk();
    for p in ps.named_children(&mut c) {
        let (name, ty) = match p.kind() {
            "identifier" => (Some(p), None),
            "typed_parameter" => {
                let mut c2 = p.walk();
                let n = p.named_children(&mut c2).find(|x| x.kind() != "type");
                (n, p.field("type"))
            }
            "default_parameter" => (p.field("name"), None),
            "typed_default_parameter" => (p.field("name"), p.field("type")),
            "list_splat_pattern" | "dictionary_splat_pattern" => (p.named_child(0), None),
            _ => (None, None),
        };
        let Some(mut name) = name else { continue };
        // `*args: T` and `**kw: T` hold a tuple and a dict, not a T.
        let splat = matches!(name.kind(), "list_splat_pattern" | "dictionary_splat_pattern");
        if splat {
            match name.named_child(0) {
                Some(n) => name = n,
                None => continue,
            }
        }
        if name.kind() != "identifier" {
            continue;
        }
        let ty = if splat || p.kind().ends_with("splat_pattern") { None } else { ty.and_then(|t| annotation(t, src)) };
        out.push((p, text(name, src).to_string(), ty.map(|t| format!("T:{t}")).unwrap_or_default()));
    }
}

/// The names a target binds: identifiers, in tuples and lists, `*rest`; `self.x`.
fn targets<'t>(t: Node<'t>, src: &str, value: &str, out: &mut Vec<RawBinding<'t>>) {
    match t.kind() {
        "identifier" => out.push((t, text(t, src).to_string(), value.to_string())),
        "attribute" => {
            let obj = t.field("object");
            let attr = t.field("attribute");
            if let (Some(o), Some(a)) = (obj, attr) {
                // `cls.x = ...` in a classmethod binds the same attribute.
                if o.kind() == "identifier" && matches!(text(o, src), "self" | "cls") {
                    out.push((t, format!("self.{}", text(a, src)), value.to_string()));
                }
            }
        }
        "pattern_list"
        | "tuple_pattern"
        | "list_pattern"
        | "list_splat_pattern"
        | "parenthesized_expression"
        | "as_pattern_target"
        | "expression_list"
        | "tuple"
        | "list" => {
            let single = matches!(t.kind(), "as_pattern_target" | "parenthesized_expression");
            let mut c = t.walk();
            for ch in t.named_children(&mut c) {
                targets(ch, src, if single { value } else { "" }, out);
            }
        }
        _ => {}
    }
}

/// The positional arguments among a call's first three that are names or dotted paths,
/// with their positions.
fn positional_paths(call: Node, src: &str) -> Vec<(usize, String)> {
    let Some(args) = call.field("arguments") else { return Vec::new() };
    let mut out = Vec::new();
    let mut c = args.walk();
    for (i, a) in args.named_children(&mut c).take_while(|a| a.kind() != "keyword_argument").take(3).enumerate() {
        if matches!(a.kind(), "list_splat" | "dictionary_splat" | "comment") {
            break;
        }
        if is_path(a) {
            out.push((i, compact(a, src)));
        }
    }
    out
}

/// For a `def` decorated with `@wraps(p)` / `@functools.wraps(p)` inside a function
/// whose parameter `p` is: that parameter's position (the wrapper stands for what the
/// enclosing factory was given there).
fn wraps_parameter(def: Node, src: &str) -> Option<usize> {
    let dd = def.parent().filter(|p| p.kind() == "decorated_definition")?;
    let mut c = dd.walk();
    let wrapped = dd.named_children(&mut c).filter(|d| d.kind() == "decorator").find_map(|d| {
        let call = d.named_child(0).filter(|x| x.kind() == "call")?;
        let f = call.field("function")?;
        if !matches!(compact(f, src).as_str(), "wraps" | "functools.wraps") {
            return None;
        }
        let first = call.field("arguments")?.named_child(0).filter(|a| a.kind() == "identifier")?;
        Some(text(first, src).to_string())
    })?;
    let mut up = dd.parent();
    while let Some(p) = up {
        if p.kind() == "function_definition" {
            let ps = p.field("parameters")?;
            let mut c2 = ps.walk();
            let names: Vec<&str> = ps
                .named_children(&mut c2)
                .map(|x| {
                    let name = match x.kind() {
                        "identifier" => Some(x),
                        "default_parameter" | "typed_default_parameter" => x.field("name"),
                        "typed_parameter" => x.named_child(0),
                        _ => None,
                    };
                    name.map(|n| text(n, src)).unwrap_or("")
                })
                .collect();
            // A method factory is called as `obj.deco(f)`: `self`/`cls` is not an argument.
            let skip = usize::from(matches!(names.first(), Some(&"self") | Some(&"cls")));
            return names.iter().skip(skip).position(|n| *n == wrapped);
        }
        up = p.parent();
    }
    None
}

/// What a right-hand side is known to hold: `C:<callee>` for a call of a name or dotted
/// path, `A:<path>` for a name or dotted path, else nothing.
fn value_of(r: Node, src: &str) -> String {
    match r.kind() {
        "call" => match r.field("function") {
            Some(f) if is_path(f) => format!("C:{}", compact(f, src)),
            _ => String::new(),
        },
        "identifier" | "attribute" if is_path(r) => format!("A:{}", compact(r, src)),
        "parenthesized_expression" => r.named_child(0).map(|x| value_of(x, src)).unwrap_or_default(),
        // `a or Cls()`: the fallback's value is the one known.
        "boolean_operator" => r.field("right").map(|x| value_of(x, src)).unwrap_or_default(),
        _ => String::new(),
    }
}

/// A name or a dotted path of names (`a`, `a.b.c`).
fn is_path(n: Node) -> bool {
    match n.kind() {
        "identifier" => true,
        "attribute" => n.field("object").is_some_and(is_path),
        _ => false,
    }
}

fn compact(n: Node, src: &str) -> String {
    text(n, src).chars().filter(|c| !c.is_whitespace()).collect()
}

/// The class an annotation names: `C`, `m.C`, `"C"`, `Optional[C]`, `C | None`; none for
/// anything else (`list[C]`, `Callable[...]`).
fn annotation(t: Node, src: &str) -> Option<String> {
    clean_type(&compact(t, src))
}

pub(crate) fn clean_type(t: &str) -> Option<String> {
    let mut t = t.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
    for wrap in ["typing.Optional[", "Optional["] {
        if let Some(inner) = t.strip_prefix(wrap).and_then(|x| x.strip_suffix(']')) {
            t = inner.to_string();
        }
    }
    let parts: Vec<&str> = t.split('|').map(str::trim).filter(|p| *p != "None" && !p.is_empty()).collect();
    if parts.len() != 1 {
        return None;
    }
    let t = parts[0].trim_matches(|c| c == '"' || c == '\'');
    let ok = !t.is_empty()
        && t.split('.').all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'))
        && !t.starts_with(|c: char| c.is_ascii_digit());
    ok.then(|| t.to_string())
}

/// The type a docstring's `:rtype:` line names.
fn rtype(doc: &str) -> Option<String> {
    let line = doc.lines().find_map(|l| l.trim().strip_prefix(":rtype:"))?;
    let t = line.trim().trim_start_matches(":class:").trim_matches('`').trim_start_matches('~');
    clean_type(t)
}
