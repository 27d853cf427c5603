//! TypeScript/JavaScript's quirks: import and re-export statements, module names.

use tree_sitter::Node;

use super::{line_of, text, Field, Import, ImportKind};

/// `src/a/b.ts` -> `src/a/b`; `src/a/index.ts` keeps its name (`src/a/index`).
pub(crate) fn module_name(rel: &str) -> String {
    match rel.rfind('.') {
        Some(i) if !rel[i..].contains('/') => rel[..i].to_string(),
        _ => rel.to_string(),
    }
}

fn string_value(n: Node, src: &str) -> String {
    let t = text(n, src);
    t.trim_matches(|c| c == '"' || c == '\'' || c == '`').to_string()
}

fn push(out: &mut Vec<Import>, line: u32, module: &str, name: &str, alias: &str, kind: ImportKind) {
    let alias = if alias == name { "" } else { alias };
    out.push(Import {
        line,
        module: module.to_string(),
        name: name.to_string(),
        alias: alias.to_string(),
        kind,
        is_static: false,
    });
}

/// The bindings of an `import` statement or an `export ... from` re-export.
pub(crate) fn imports(node: Node, src: &str, out: &mut Vec<Import>) {
    let line = line_of(node);
    let Some(source) = node.field("source") else { return };
    let module = string_value(source, src);
    let mut c = node.walk();
    match node.kind() {
        "import_statement" => {
            let mut any = false;
            for clause in node.named_children(&mut c).filter(|n| n.kind() == "import_clause") {
                let mut c2 = clause.walk();
                for part in clause.named_children(&mut c2) {
                    any = true;
                    match part.kind() {
                        "identifier" => push(out, line, &module, "default", text(part, src), ImportKind::Default),
                        "namespace_import" => {
                            let ns = part.named_child(0).map(|n| text(n, src)).unwrap_or("");
                            push(out, line, &module, "*", ns, ImportKind::Namespace);
                        }
                        "named_imports" => {
                            let mut c3 = part.walk();
                            for spec in part.named_children(&mut c3).filter(|n| n.kind() == "import_specifier") {
                                let name = spec.field("name").map(|n| string_value(n, src)).unwrap_or_default();
                                let alias = spec.field("alias").map(|n| text(n, src)).unwrap_or("");
                                push(out, line, &module, &name, alias, ImportKind::Name);
                            }
                        }
                        _ => {}
                    }
                }
            }
            if !any {
                // `import './polyfill'`: loaded for its effects, binds nothing.
                push(out, line, &module, "", "", ImportKind::Module);
            }
        }
        "export_statement" => {
            let mut any = false;
            for part in node.named_children(&mut c) {
                match part.kind() {
                    "export_clause" => {
                        any = true;
                        let mut c2 = part.walk();
                        for spec in part.named_children(&mut c2).filter(|n| n.kind() == "export_specifier") {
                            let name = spec.field("name").map(|n| string_value(n, src)).unwrap_or_default();
                            let alias = spec.field("alias").map(|n| string_value(n, src)).unwrap_or_default();
                            push(out, line, &module, &name, &alias, ImportKind::ReExport);
                        }
                    }
                    "namespace_export" => {
                        any = true;
                        let ns = part.named_child(0).map(|n| string_value(n, src)).unwrap_or_default();
                        push(out, line, &module, "*", &ns, ImportKind::Namespace);
                    }
                    _ => {}
                }
            }
            if !any {
                push(out, line, &module, "*", "", ImportKind::Star);
            }
        }
        _ => {}
    }
}
