//! Python's quirks: import statements, docstrings and module names.

use tree_sitter::Node;

use super::{line_of, text, truncate, Import, ImportKind};

/// `pkg/sub/mod.py` -> `pkg.sub.mod`; `pkg/__init__.py` -> `pkg`.
pub(crate) fn module_name(rel: &str) -> String {
    let stem = rel.strip_suffix(".py").or_else(|| rel.strip_suffix(".pyi")).unwrap_or(rel);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

/// The docstring of a class or function: the first statement of its body, if a string.
pub(crate) fn doc(def: Node, src: &str) -> String {
    match def.child_by_field_name("body") {
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
            let Some(m) = node.child_by_field_name("module_name") else { return };
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
        let name = n.child_by_field_name("name").map(|x| text(x, src)).unwrap_or("");
        let alias = n.child_by_field_name("alias").map(|x| text(x, src)).unwrap_or("");
        (name.to_string(), alias.to_string())
    } else {
        (text(n, src).to_string(), String::new())
    }
}
