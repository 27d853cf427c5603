//! Java's quirks: package and import declarations, parameter types, @Test.

use tree_sitter::Node;

use super::{line_of, strip_generics, text, Field, Import, ImportKind, Kind, KindTable, Tags};

pub(crate) fn package_name(node: Node, src: &str) -> String {
    let t = text(node, src);
    let t = t.trim().trim_start_matches("package").trim_end_matches(';');
    t.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `import a.b.C;`, `import a.b.*;`, `import static a.b.C.m;`, `import static a.b.C.*;`.
pub(crate) fn imports(node: Node, src: &str, out: &mut Vec<Import>) {
    let mut t: String = text(node, src).chars().filter(|c| !c.is_whitespace()).collect();
    t = t.trim_start_matches("import").trim_end_matches(';').to_string();
    let is_static = t.starts_with("static");
    if is_static {
        t = t["static".len()..].to_string();
    }
    let (module, name, kind) = match t.strip_suffix(".*") {
        Some(m) => (m.to_string(), "*".to_string(), ImportKind::Star),
        None => match t.rsplit_once('.') {
            Some((m, n)) => (m.to_string(), n.to_string(), ImportKind::Name),
            None => (String::new(), t.clone(), ImportKind::Name),
        },
    };
    out.push(Import { line: line_of(node), module, name, alias: String::new(), kind, is_static });
}

/// Parameter types as written (generic arguments removed) and whether the last is varargs.
pub(crate) fn params(method: Node, src: &str) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut varargs = false;
    let Some(list) = method.field("parameters") else { return (out, false) };
    let mut c = list.walk();
    for p in list.named_children(&mut c) {
        match p.kind() {
            "formal_parameter" => {
                if let Some(t) = p.field("type") {
                    let dims = p.field("dimensions").map(|d| text(d, src)).unwrap_or("");
                    out.push(format!("{}{}", strip_generics(text(t, src)), strip_generics(dims)));
                }
            }
            "spread_parameter" => {
                let mut c2 = p.walk();
                let ty =
                    p.named_children(&mut c2).find(|n| n.kind() != "modifiers" && n.kind() != "variable_declarator");
                if let Some(t) = ty {
                    out.push(format!("{}...", strip_generics(text(t, src))));
                    varargs = true;
                }
            }
            _ => {}
        }
    }
    (out, varargs)
}

/// Does a method carry `@Test` (JUnit 4 or 5)?
pub(crate) fn has_test_annotation(method: Node, src: &str) -> bool {
    let mut c = method.walk();
    let found = method.named_children(&mut c).any(|m| {
        m.kind() == "modifiers" && {
            let mut c2 = m.walk();
            let hit = m.named_children(&mut c2).any(|a| {
                matches!(a.kind(), "marker_annotation" | "annotation")
                    && a.field("name").is_some_and(|n| {
                        let t = text(n, src);
                        t == "Test" || t.ends_with(".Test") || t == "ParameterizedTest"
                    })
            });
            hit
        }
    });
    found
}

/// The node kinds [`tags`] matches on.
const MATCHED: [&str; 19] = [
    "class_declaration",
    "record_declaration",
    "interface_declaration",
    "enum_declaration",
    "annotation_type_declaration",
    "method_declaration",
    "constructor_declaration",
    "compact_constructor_declaration",
    "field_declaration",
    "constant_declaration",
    "method_invocation",
    "object_creation_expression",
    "import_declaration",
    "package_declaration",
    "formal_parameter",
    "spread_parameter",
    "local_variable_declaration",
    "enhanced_for_statement",
    "catch_formal_parameter",
];

/// What `queries/java/tags.scm` matches in a file, found by one walk over the tree (the
/// query engine tried every pattern at every node: 12% of a full build of Guava). The walk
/// is one cursor moving depth first (each step constant time; a stack refilled from each
/// node's named children was half of this function's time), visiting the named nodes and
/// their children; the order does not matter, `Tags` sorts what it keeps by position.
pub(crate) fn tags<'t>(root: Node<'t>, src: &str, t: &mut Tags<'t>) {
    // Made once: Java's grammar is the only one this walk sees.
    static KINDS: std::sync::OnceLock<KindTable> = std::sync::OnceLock::new();
    let kinds = KINDS.get_or_init(|| KindTable::of(root, &MATCHED));
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        // Into named nodes only, as a walk over named children goes.
        if n.is_named() {
            visit(t, n, kinds.name(n), src);
            if cursor.goto_first_child() {
                continue;
            }
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

/// The children of `n` under `field` (a field may hold several: `int a, b;`).
fn field_children<'t>(n: Node<'t>, field: &str) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.children_by_field_name(field, &mut c).collect()
}

/// `(variable_declarator name: (identifier) @name)`: the name's node.
fn declarator_name(d: Node) -> Option<Node> {
    if d.kind() != "variable_declarator" {
        return None;
    }
    d.field("name").filter(|n| n.kind() == "identifier")
}

/// Every named child of `n` of kind `kind`.
fn named_of_kind<'t>(n: Node<'t>, kind: &str) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.named_children(&mut c).filter(|x| x.kind() == kind).collect()
}

fn named<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// The bases under `(super_interfaces (type_list (_) @base))` or `(extends_interfaces ...)`.
fn listed_bases<'t>(t: &mut Tags<'t>, owner: Node<'t>, list_holder: Node<'t>, src: &str) {
    for tl in named_of_kind(list_holder, "type_list") {
        for b in named(tl) {
            t.base(owner, b, src);
        }
    }
}

fn visit<'t>(t: &mut Tags<'t>, n: Node<'t>, kind: &str, src: &str) {
    let name = || n.field("name");
    match kind {
        "class_declaration"
        | "record_declaration"
        | "interface_declaration"
        | "enum_declaration"
        | "annotation_type_declaration" => {
            let k = match kind {
                "class_declaration" | "record_declaration" => Kind::Class,
                "enum_declaration" => Kind::Enum,
                _ => Kind::Interface,
            };
            t.def(n, name(), k, src);
            if kind == "class_declaration" {
                if let Some(sup) = n.field("superclass").filter(|s| s.kind() == "superclass") {
                    for b in named(sup) {
                        t.base(n, b, src);
                    }
                }
            }
            if matches!(kind, "class_declaration" | "enum_declaration" | "record_declaration") {
                if let Some(si) = n.field("interfaces").filter(|s| s.kind() == "super_interfaces") {
                    listed_bases(t, n, si, src);
                }
            }
            if kind == "interface_declaration" {
                for ei in named_of_kind(n, "extends_interfaces") {
                    listed_bases(t, n, ei, src);
                }
            }
        }
        "method_declaration" | "constructor_declaration" | "compact_constructor_declaration" => {
            t.def(n, name(), Kind::Method, src)
        }
        "field_declaration" | "constant_declaration" => {
            let ty = n.field("type");
            for d in field_children(n, "declarator") {
                if let Some(nm) = declarator_name(d) {
                    t.def(d, Some(nm), Kind::Field, src);
                    if let (Some(ty), "field_declaration") = (ty, kind) {
                        t.vars.push((ty, nm));
                    }
                }
            }
        }
        "method_invocation" => {
            let Some(nm) = name().filter(|x| x.kind() == "identifier") else { return };
            let Some(args) = n.field("arguments").filter(|a| a.kind() == "argument_list") else {
                return;
            };
            let recv = n.field("object").map(|r| super::receiver_text(r, src)).unwrap_or_default();
            t.calls.push((n, text(nm, src).to_string(), recv, super::count_args(args, src), false, line_of(nm)));
        }
        "object_creation_expression" => {
            let Some(ty) = n.field("type").filter(|x| x.is_named()) else { return };
            let Some(args) = n.field("arguments").filter(|a| a.kind() == "argument_list") else {
                return;
            };
            t.calls.push((
                n,
                strip_generics(text(ty, src)),
                String::new(),
                super::count_args(args, src),
                true,
                line_of(n),
            ));
        }
        "import_declaration" => t.imports.push(n),
        // The last one in the file, as the query's matches come in order.
        "package_declaration" if t.package.is_none_or(|p| p.start_byte() < n.start_byte()) => t.package = Some(n),
        "formal_parameter" | "enhanced_for_statement" => {
            if let (Some(ty), Some(nm)) =
                (n.field("type").filter(|x| x.is_named()), name().filter(|x| x.kind() == "identifier"))
            {
                t.vars.push((ty, nm));
            }
        }
        "local_variable_declaration" => {
            if let Some(ty) = n.field("type").filter(|x| x.is_named()) {
                for d in field_children(n, "declarator") {
                    if let Some(nm) = declarator_name(d) {
                        t.vars.push((ty, nm));
                    }
                }
            }
        }
        // `(spread_parameter (_) @var.type (variable_declarator ...))`: any named child
        // before the declarator is taken as its type (the query's pattern does so too).
        "spread_parameter" => {
            let kids = named(n);
            for (i, d) in kids.iter().enumerate() {
                if let Some(nm) = declarator_name(*d) {
                    for ty in &kids[..i] {
                        t.vars.push((*ty, nm));
                    }
                }
            }
        }
        "catch_formal_parameter" => {
            if let Some(nm) = name().filter(|x| x.kind() == "identifier") {
                for ct in named_of_kind(n, "catch_type") {
                    for ty in named(ct) {
                        t.vars.push((ty, nm));
                    }
                }
            }
        }
        _ => {}
    }
}
