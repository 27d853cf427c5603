//! Java's quirks: package and import declarations, parameter types, @Test.

use tree_sitter::Node;

use super::{line_of, strip_generics, text, Import, ImportKind};

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
    let Some(list) = method.child_by_field_name("parameters") else { return (out, false) };
    let mut c = list.walk();
    for p in list.named_children(&mut c) {
        match p.kind() {
            "formal_parameter" => {
                if let Some(t) = p.child_by_field_name("type") {
                    let dims = p.child_by_field_name("dimensions").map(|d| text(d, src)).unwrap_or("");
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
                    && a.child_by_field_name("name").is_some_and(|n| {
                        let t = text(n, src);
                        t == "Test" || t.ends_with(".Test") || t == "ParameterizedTest"
                    })
            });
            hit
        }
    });
    found
}
