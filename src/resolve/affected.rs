//! Which files an incremental run must resolve again.
//!
//! Resolution looks things up in other files by name only: a call's name and receiver,
//! an import's module and names, a base, a variable's or parameter's type. What it finds
//! there are definitions: entities (by id, kind, parent, parameters, bases, in source
//! order), module-level variables, imports (re-exports) and the default export, and the
//! file's existence under its path. Line numbers of other files are never consulted, and
//! rows refer to other files' entities by id, which holds no line.
//!
//! So when a changed file's *definitions* of a name differ before and after, that name
//! is changed; a file is affected when it changed itself or uses a changed name. A file
//! added or removed changes every name it defines and its module's name. Inheritance
//! reaches further than names: the types that inherit, before or after, from a type of a
//! file whose definitions changed are affected (their files, and their names).
//!
//! Python bindings (`extract::Var`) other files can see are definitions too: module-level
//! and class-body assignments, `self.x = ...` (under `x`) and return types (under the
//! function's name: annotations, and what `return` statements return), a factory's
//! `@wraps(p)` wrapper (under the outermost function's name) and `x#0` (the arguments
//! `x = f(a)` was made with, under `x`); a function's other local bindings are not.
//!
//! An edit inside a function body that changes no such binding changes no definition: only
//! the edited file is resolved again. A class's `metaclass=M` (`@metaclass`) is part of
//! the type as other files see it: the types that inherit from it are affected when it
//! changes. The test "incremental equals full" checks the rule on every relation.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::World;
use crate::extract::FileFacts;

/// Identifier-like pieces of a string (`os.path` -> `os`, `path`; `./utils/x` -> `utils`, `x`).
fn pieces(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$')).filter(|p| !p.is_empty())
}

/// The name a module is imported by: its file stem, or its directory for a package
/// file (`__init__.py`, `index.ts`).
fn module_name(path: &str) -> &str {
    let mut parts = path.rsplit('/');
    let file = parts.next().unwrap_or(path);
    let stem = file.split('.').next().unwrap_or(file);
    if stem == "__init__" || stem == "index" {
        parts.next().unwrap_or(stem)
    } else {
        stem
    }
}

/// The names a file's resolution can look up.
fn uses(f: &FileFacts) -> HashSet<&str> {
    let mut out = HashSet::new();
    for c in &f.calls {
        out.insert(c.name.as_str());
        out.extend(pieces(&c.receiver));
    }
    for i in &f.imports {
        out.extend(pieces(&i.module));
        out.extend(pieces(&i.name));
        out.extend(pieces(&i.alias));
    }
    for e in &f.entities {
        for b in e.bases.iter().chain(&e.params) {
            out.extend(pieces(b));
        }
    }
    for v in &f.vars {
        out.extend(pieces(&v.ty));
    }
    out.extend(pieces(&f.package));
    out
}

/// The name under which other files can see a variable binding, if they can: Java's
/// declared types by name; Python's module-level and class-body bindings by name,
/// `self.x` by `x`, a return type (`->`) by its function's name. A Python function's
/// local bindings only matter to its own file.
fn visible_name<'a>(f: &'a FileFacts, v: &'a crate::extract::Var) -> Option<&'a str> {
    if f.lang != crate::lang::Lang::Python {
        return Some(v.name.as_str());
    }
    let owner = f.entities.get(v.owner as usize)?;
    if v.name == "->" {
        return Some(owner.name.as_str());
    }
    // A factory's wrapper (`@wraps(p)`): seen by the outermost function around it.
    if v.name == "@wraps" {
        let mut top = owner;
        while let Some(p) = top.parent.filter(|&p| p != 0) {
            top = f.entities.get(p as usize)?;
        }
        return Some(top.name.as_str());
    }
    // `x#0`, the arguments `x = f(a, ...)` was made with: seen as `x`.
    if let Some((name, _)) = v.name.split_once('#') {
        return (v.owner == 0 || owner.kind.is_type()).then_some(name);
    }
    if let Some(attr) = v.name.strip_prefix("self.") {
        return Some(attr);
    }
    (v.owner == 0 || owner.kind.is_type()).then_some(v.name.as_str())
}

/// A definition as other files' resolution sees it (no lines).
type DefSig<'a> = (&'a str, &'a str, Option<&'a str>, &'a [String], bool, &'a [String]);

/// Per name, what a file defines under it, in source order; and everything else other
/// files can see of it.
fn definitions(f: &FileFacts) -> BTreeMap<&str, Vec<DefSig<'_>>> {
    let mut out: BTreeMap<&str, Vec<DefSig>> = BTreeMap::new();
    for e in &f.entities {
        let parent = e.parent.map(|p| f.entities[p as usize].id.as_str());
        out.entry(e.name.as_str()).or_default().push((
            e.id.as_str(),
            e.kind.as_str(),
            parent,
            &e.params,
            e.varargs,
            &e.bases,
        ));
    }
    out
}

/// A type as other files see it: its definition, its members', and its metaclass as written.
type TypeSig<'a> = (DefSig<'a>, Vec<DefSig<'a>>, Vec<&'a str>);

/// Per type of a file: its own definition and its members', as other files see them.
fn types(f: &FileFacts) -> BTreeMap<&str, TypeSig<'_>> {
    let sig = |i: usize| -> DefSig<'_> {
        let e = &f.entities[i];
        let parent = e.parent.map(|p| f.entities[p as usize].id.as_str());
        (e.id.as_str(), e.kind.as_str(), parent, &e.params, e.varargs, &e.bases)
    };
    let mut out: BTreeMap<&str, TypeSig> = BTreeMap::new();
    for (i, e) in f.entities.iter().enumerate() {
        if e.kind.is_type() {
            out.insert(e.id.as_str(), (sig(i), Vec::new(), Vec::new()));
        }
    }
    // `metaclass=M`: what the types that inherit get from it changes with it.
    for v in f.vars.iter().filter(|v| v.name == "@metaclass") {
        if let Some(t) = out.get_mut(f.entities[v.owner as usize].id.as_str()) {
            t.2.push(v.ty.as_str());
        }
    }
    for (i, e) in f.entities.iter().enumerate() {
        if let Some(p) = e.parent {
            if let Some(t) = out.get_mut(f.entities[p as usize].id.as_str()) {
                t.1.push(sig(i));
            }
        }
    }
    out
}

/// The types of two versions of a file whose definition or members differ (all of them
/// when the file was added or removed, or moved to another package).
fn redefined_types<'a>(old: Option<&'a FileFacts>, new: Option<&'a FileFacts>, out: &mut HashSet<&'a str>) {
    match (old, new) {
        (Some(o), Some(n)) if o.package == n.package && o.lang == n.lang => {
            let (to, tn) = (types(o), types(n));
            for (id, t) in &to {
                if tn.get(id) != Some(t) {
                    out.insert(id);
                }
            }
            for id in tn.keys() {
                if !to.contains_key(id) {
                    out.insert(id);
                }
            }
        }
        _ => {
            for f in old.into_iter().chain(new) {
                out.extend(f.entities.iter().filter(|e| e.kind.is_type()).map(|e| e.id.as_str()));
            }
        }
    }
}

/// The names whose definitions differ between two versions of a file (either may be
/// absent: added or removed).
fn changed_names<'a>(old: Option<&'a FileFacts>, new: Option<&'a FileFacts>, names: &mut HashSet<&'a str>) {
    let (Some(o), Some(n)) = (old, new) else {
        // Added or removed: everything it defines, and its module.
        for f in old.into_iter().chain(new) {
            names.insert(module_name(&f.path));
            for e in &f.entities {
                names.insert(e.name.as_str());
            }
            for v in &f.vars {
                names.extend(visible_name(f, v));
            }
            for i in &f.imports {
                names.extend(pieces(&i.name));
                names.extend(pieces(&i.alias));
            }
            names.extend(pieces(&f.default_export));
        }
        return;
    };
    if o.package != n.package || o.lang != n.lang {
        // Every qualified name of the file moves.
        names.insert(module_name(&n.path));
        names.extend(pieces(&o.package));
        names.extend(pieces(&n.package));
        for e in o.entities.iter().chain(&n.entities) {
            names.insert(e.name.as_str());
        }
    }
    let (d_old, d_new) = (definitions(o), definitions(n));
    for (name, sig) in &d_old {
        if d_new.get(name) != Some(sig) {
            names.insert(name);
        }
    }
    for name in d_new.keys() {
        if !d_old.contains_key(name) {
            names.insert(name);
        }
    }
    let vars = |f: &'a FileFacts| -> BTreeSet<(&'a str, &'a str, &'a str, &'a str)> {
        f.vars
            .iter()
            .filter_map(|v| {
                Some((visible_name(f, v)?, v.name.as_str(), v.ty.as_str(), f.entities[v.owner as usize].id.as_str()))
            })
            .collect()
    };
    for (name, _, _, _) in vars(o).symmetric_difference(&vars(n)) {
        names.insert(name);
    }
    let imports = |f: &'a FileFacts| -> BTreeSet<(&'a str, &'a str, &'a str, bool, String)> {
        f.imports
            .iter()
            .map(|i| (i.module.as_str(), i.name.as_str(), i.alias.as_str(), i.is_static, format!("{:?}", i.kind)))
            .collect()
    };
    for (module, name, alias, _, _) in imports(o).symmetric_difference(&imports(n)) {
        names.extend(pieces(name));
        names.extend(pieces(alias));
        names.extend(pieces(module).last());
    }
    if o.default_export != n.default_export {
        names.extend(pieces(&o.default_export));
        names.extend(pieces(&n.default_export));
    }
}

/// A type of the old tree that inherits, directly or not, from a redefined type: its
/// file's path, its id and its name.
pub struct Inheriting {
    pub path: String,
    pub id: String,
    pub name: String,
}

/// The files to resolve again: the paths of the old tree's, and indices into the new
/// world's files. `old_changed` are the old versions of the changed and removed files
/// (the old tree's other files are the new world's unchanged ones); `changed` are the
/// paths added, changed or removed. `old_inheriting` gives, for the ids of the redefined
/// types, the old tree's types that inherit from them (the stored `inherits` rows
/// walked back): the old tree is never resolved again.
pub fn affected<'a, E>(
    old_changed: &[&'a FileFacts],
    new: &World<'a>,
    changed: &BTreeSet<&str>,
    old_inheriting: impl FnOnce(&[&str]) -> Result<Vec<Inheriting>, E>,
) -> Result<(BTreeSet<String>, Vec<u32>), E> {
    let old_by_path: HashMap<&str, &FileFacts> = old_changed.iter().map(|f| (f.path.as_str(), *f)).collect();
    let mut names: HashSet<&str> = HashSet::new();
    let mut redefined: HashSet<&str> = HashSet::new();
    for path in changed {
        let o = old_by_path.get(path).copied();
        let n = new.file_by_path(path).map(|i| new.file(i));
        changed_names(o, n, &mut names);
        redefined_types(o, n, &mut redefined);
    }
    // Types inheriting, in either tree, from a redefined type: their members and bases
    // are looked up through it.
    let mut inheriting: BTreeSet<String> = BTreeSet::new();
    let old_types: Vec<Inheriting>;
    if !redefined.is_empty() {
        let mut ids: Vec<&str> = redefined.iter().copied().collect();
        ids.sort_unstable();
        old_types = old_inheriting(&ids)?;
        let mut inheriting_types: HashSet<&str> = HashSet::new();
        for t in &old_types {
            inheriting.insert(t.path.clone());
            names.insert(t.name.as_str());
            inheriting_types.insert(t.id.as_str());
        }
        for &ty in new.bases.keys() {
            if new.ancestors(ty).iter().any(|&a| redefined.contains(new.entity(a).id.as_str())) {
                inheriting.insert(new.file(ty.0).path.clone());
                names.insert(new.entity(ty).name.as_str());
                inheriting_types.insert(new.entity(ty).id.as_str());
            }
        }
        // Python's fallback folds an override into the method it overrides: which
        // candidates fold depends on the bases, so the member names of those types change.
        for f in new.files.iter().chain(old_changed) {
            for e in &f.entities {
                let Some(p) = e.parent else { continue };
                let pid = f.entities[p as usize].id.as_str();
                if redefined.contains(pid) || inheriting_types.contains(pid) {
                    names.insert(e.name.as_str());
                }
            }
        }
    }
    // A file that uses a changed name is affected; so are the names it passes on from a
    // changed one (`from c import y as x`, `x = c.y`): to a fixpoint. The old tree's
    // unchanged files are the new world's: only the old versions of the changed files
    // are looked at besides (and they are affected anyway).
    let files: Vec<&FileFacts> = new.files.iter().copied().chain(old_changed.iter().copied()).collect();
    let mut picked: Vec<bool> =
        files.iter().map(|f| changed.contains(f.path.as_str()) || inheriting.contains(&f.path)).collect();
    if !names.is_empty() {
        let used: Vec<HashSet<&str>> = files.iter().map(|f| uses(f)).collect();
        loop {
            let before = names.len();
            for (fi, f) in files.iter().enumerate() {
                if !picked[fi] {
                    if !used[fi].iter().any(|n| names.contains(n)) {
                        continue;
                    }
                    picked[fi] = true;
                }
                let mut passed: Vec<&str> = Vec::new();
                for i in &f.imports {
                    let whole = i.name.is_empty() || i.name == "*";
                    let binds_changed = pieces(&i.name).any(|p| names.contains(p))
                        || (whole && pieces(&i.module).last().is_some_and(|m| names.contains(m)));
                    if binds_changed {
                        passed.extend(pieces(&i.name));
                        passed.extend(pieces(&i.alias));
                    }
                }
                for v in &f.vars {
                    if pieces(&v.ty).any(|p| names.contains(p)) {
                        passed.extend(visible_name(f, v));
                    }
                }
                names.extend(passed);
            }
            if names.len() == before {
                break;
            }
        }
    }
    let n_new = new.files.len();
    let an: Vec<u32> = (0..n_new).filter(|&i| picked[i]).map(|i| i as u32).collect();
    // The old tree's affected files: its unchanged ones picked (as in the new world) and
    // the old versions of the changed ones.
    let mut ao: BTreeSet<String> = an
        .iter()
        .map(|&i| new.files[i as usize])
        .filter(|f| !changed.contains(f.path.as_str()))
        .map(|f| f.path.clone())
        .collect();
    ao.extend(old_changed.iter().map(|f| f.path.clone()));
    Ok((ao, an))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert_eq!(module_name("django/db/models/query.py"), "query");
        assert_eq!(module_name("pkg/__init__.py"), "pkg");
        assert_eq!(module_name("src/util/index.ts"), "util");
        assert_eq!(module_name("Main.java"), "Main");
    }
}
