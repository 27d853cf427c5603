//! TypeScript/JavaScript: relative module specifiers, named/default/namespace imports,
//! re-export chains (`export * from`, `export {a as b} from`), `this`/`super`, `new C()`.

use super::{lexical, Binding, ERef, Hit, How, World};
use crate::extract::{Call, Import, ImportKind, Kind};
use crate::lang::Lang;

const MAX_HOPS: usize = 5;
const EXTENSIONS: [&str; 7] = ["ts", "tsx", "d.ts", "js", "jsx", "mjs", "cjs"];

fn definition(k: Kind) -> bool {
    matches!(k, Kind::Function | Kind::Class | Kind::Interface | Kind::Enum)
}

/// Normalize `a/./b/../c` to `a/c`; `None` when it climbs above the root.
fn normalize(path: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            s => out.push(s),
        }
    }
    Some(out.join("/"))
}

/// The file a specifier names, seen from file `fi`. Bare specifiers are external.
pub(super) fn resolve_specifier(w: &World, fi: u32, spec: &str) -> Option<u32> {
    if !spec.starts_with("./") && !spec.starts_with("../") && spec != "." && spec != ".." {
        return None;
    }
    let from = &w.file(fi).path;
    let dir = from.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let joined = normalize(&format!("{dir}/{spec}"))?;
    let mut candidates = vec![joined.clone()];
    candidates.extend(EXTENSIONS.iter().map(|e| format!("{joined}.{e}")));
    for js in [".js", ".jsx", ".mjs", ".cjs"] {
        if let Some(stem) = joined.strip_suffix(js) {
            candidates.push(format!("{stem}.ts"));
            candidates.push(format!("{stem}.tsx"));
        }
    }
    candidates.extend(EXTENSIONS.iter().map(|e| format!("{joined}/index.{e}")));
    candidates.iter().find_map(|c| w.file_by_path(c).filter(|&f| w.file(f).lang == Lang::TypeScript))
}

/// What module file `fi` exports under `name` (`default` for its default export),
/// following re-exports up to `hops` times.
fn export(w: &World, fi: u32, name: &str, hops: usize) -> Option<Binding> {
    let f = w.file(fi);
    let local = if name == "default" {
        if f.default_export.is_empty() {
            return None;
        }
        f.default_export.as_str()
    } else {
        name
    };
    if let Some(r) = lexical(w, (fi, 0), local, true, definition) {
        return Some(Binding::Entity(r, How::Import));
    }
    if hops == 0 {
        return None;
    }
    // `export {a as b} from './x'`, or a name imported and exported again.
    for imp in &f.imports {
        let binds = match imp.kind {
            ImportKind::ReExport | ImportKind::Name | ImportKind::Default | ImportKind::Namespace => {
                imp.local_name() == Some(local) || (imp.kind == ImportKind::Namespace && imp.alias == local)
            }
            _ => false,
        };
        if binds {
            if let Some(b) = import_binding(w, fi, imp, hops - 1) {
                return Some(b);
            }
        }
    }
    // `export * from './x'`.
    for imp in f.imports.iter().filter(|i| i.kind == ImportKind::Star) {
        if let Some(mf) = resolve_specifier(w, fi, &imp.module) {
            if mf != fi {
                if let Some(b) = export(w, mf, name, hops - 1) {
                    return Some(b);
                }
            }
        }
    }
    None
}

fn import_binding(w: &World, fi: u32, imp: &Import, hops: usize) -> Option<Binding> {
    let mf = resolve_specifier(w, fi, &imp.module)?;
    match imp.kind {
        ImportKind::Namespace | ImportKind::Star | ImportKind::Module => Some(Binding::Module(mf)),
        ImportKind::Default => export(w, mf, "default", hops),
        ImportKind::Name | ImportKind::ReExport => export(w, mf, &imp.name, hops),
    }
}

pub(super) fn import_target(w: &World, fi: u32, imp: &Import) -> Option<String> {
    match import_binding(w, fi, imp, MAX_HOPS)? {
        Binding::Entity(r, _) => Some(w.id(r).to_string()),
        Binding::Module(f) => Some(w.file(f).path.clone()),
        Binding::Var(..) => None,
    }
}

fn lookup(w: &World, scope: ERef, name: &str) -> Option<Binding> {
    if let Some(r) = lexical(w, scope, name, true, definition) {
        return Some(Binding::Entity(r, How::Local));
    }
    let f = w.file(scope.0);
    for imp in &f.imports {
        let local = match imp.kind {
            ImportKind::Namespace => Some(imp.alias.as_str()),
            ImportKind::Default => Some(imp.alias.as_str()),
            ImportKind::Name => imp.local_name(),
            _ => None,
        };
        if local == Some(name) {
            return match import_binding(w, scope.0, imp, MAX_HOPS)? {
                Binding::Entity(r, _) => Some(Binding::Entity(r, How::Import)),
                m => Some(m),
            };
        }
    }
    None
}

fn is_imported(w: &World, fi: u32, name: &str) -> bool {
    w.file(fi).imports.iter().any(|i| match i.kind {
        ImportKind::Namespace | ImportKind::Default => i.alias == name,
        ImportKind::Name => i.local_name() == Some(name),
        _ => false,
    })
}

/// `Base` or `ns.Base` as seen from `scope`.
pub(super) fn resolve_dotted(w: &World, scope: ERef, dotted: &str) -> Option<ERef> {
    let (first, rest) = match dotted.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (dotted, None),
    };
    match (lookup(w, scope, first)?, rest) {
        (Binding::Entity(r, _), None) => Some(r),
        (Binding::Module(mf), Some(n)) if !n.contains('.') => match export(w, mf, n, MAX_HOPS)? {
            Binding::Entity(r, _) => Some(r),
            Binding::Module(_) | Binding::Var(..) => None,
        },
        _ => None,
    }
}

/// `new C()` gives the class and its constructor, declared or inherited.
fn instantiate(w: &World, class: ERef, how: How) -> Vec<Hit> {
    let mut hits = vec![Hit { target: class, how }];
    let ctor = w.member(class, "constructor", how, &|m| w.entity(m).kind == Kind::Method);
    hits.extend(ctor.into_iter().take(1));
    hits
}

fn callable(k: Kind) -> bool {
    matches!(k, Kind::Function | Kind::Method)
}

pub(super) fn resolve_call(w: &World, fi: u32, call: &Call) -> Vec<Hit> {
    let owner = (fi, call.owner);
    let name = call.name.as_str();
    if call.new {
        return match lookup(w, owner, name) {
            Some(Binding::Entity(r, how)) if w.entity(r).kind.is_type() => instantiate(w, r, how),
            Some(_) => Vec::new(),
            None if is_imported(w, fi, name) => Vec::new(),
            None => w
                .fallback(Lang::TypeScript, name, false, &|r| w.entity(r).kind == Kind::Class)
                .into_iter()
                .flat_map(|h| instantiate(w, h.target, How::Name))
                .collect(),
        };
    }
    let methods_fallback = || w.fallback(Lang::TypeScript, name, true, &|_| true);
    match call.receiver.as_str() {
        "" => match lookup(w, owner, name) {
            Some(Binding::Entity(r, how)) => vec![Hit { target: r, how }],
            Some(Binding::Module(_) | Binding::Var(..)) => Vec::new(),
            None if is_imported(w, fi, name) => Vec::new(),
            None => w.fallback(Lang::TypeScript, name, false, &|r| callable(w.entity(r).kind)),
        },
        "this" => match w.enclosing_type(owner) {
            Some(ty) => {
                let hits = w.member(ty, name, How::SelfRef, &|m| callable(w.entity(m).kind));
                if hits.is_empty() {
                    methods_fallback()
                } else {
                    hits
                }
            }
            None => methods_fallback(),
        },
        "super" => match w.enclosing_type(owner) {
            Some(ty) => w.inherited_member(ty, name, &|m| callable(w.entity(m).kind)),
            None => Vec::new(),
        },
        recv if recv.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$') => match lookup(w, owner, recv) {
            Some(Binding::Module(mf)) => match export(w, mf, name, MAX_HOPS) {
                Some(Binding::Entity(r, _)) => vec![Hit { target: r, how: How::Import }],
                _ => Vec::new(),
            },
            Some(Binding::Entity(r, how)) if w.entity(r).kind.is_type() => {
                let hits = w.member(r, name, how, &|m| callable(w.entity(m).kind));
                if hits.is_empty() {
                    methods_fallback()
                } else {
                    hits
                }
            }
            _ if is_imported(w, fi, recv) => Vec::new(),
            _ => methods_fallback(),
        },
        _ => methods_fallback(),
    }
}
