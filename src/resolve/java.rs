//! Java: types by package and import (single-type, on-demand, static), implicit and
//! explicit `this`, `super`, static calls, typed receivers, constructors and overloads
//! told apart by arity.

use super::{ERef, Hit, How, World};
use crate::extract::{Call, FileFacts, Import, ImportKind, Kind};
use crate::lang::Lang;

/// Register every type of a file under its fully qualified name (`a.b.Outer.Inner`).
pub(super) fn register_types(map: &mut rustc_hash::FxHashMap<String, ERef>, f: &FileFacts, fi: u32) {
    for (ei, e) in f.entities.iter().enumerate() {
        if !e.kind.is_type() {
            continue;
        }
        let chain = e.id.split_once(':').map(|x| x.1).unwrap_or("");
        let chain = chain.split('#').next().unwrap_or(chain);
        let fq = if f.package.is_empty() { chain.to_string() } else { format!("{}.{chain}", f.package) };
        map.entry(fq).or_insert((fi, ei as u32));
    }
}

/// A method's arity accepts `args` arguments.
fn arity_ok(w: &World, m: ERef, args: u32) -> bool {
    let e = w.entity(m);
    let n = e.params.len() as u32;
    if e.varargs {
        args + 1 >= n
    } else {
        args == n
    }
}

/// How a type found in file `ty_file` is reached from file `from`.
fn type_how(from: u32, ty: ERef) -> How {
    if ty.0 == from {
        How::Local
    } else {
        How::Import
    }
}

/// A type name (`Foo`, `Outer.Inner`, `a.b.Foo`) as seen from `scope`.
pub(super) fn resolve_type(w: &World, scope: ERef, name: &str) -> Option<Hit> {
    let name = name.trim_end_matches("[]").trim_end_matches("...");
    let (first, rest) = match name.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (name, None),
    };
    if let Some(t) = simple_type(w, scope, first) {
        return match rest {
            None => Some(t),
            Some(rest) => {
                let mut cur = t.target;
                for seg in rest.split('.') {
                    cur = *w.child_named(cur, seg, Kind::is_type).first()?;
                }
                Some(Hit { target: cur, how: t.how })
            }
        };
    }
    // A fully qualified name.
    let r = *w.java_types.get(name)?;
    Some(Hit { target: r, how: type_how(scope.0, r) })
}

fn simple_type(w: &World, scope: ERef, name: &str) -> Option<Hit> {
    let fi = scope.0;
    let f = w.file(fi);
    // Enclosing types and their nested types, inside out, then the file's top level.
    let mut at = Some(scope.1);
    while let Some(i) = at {
        let r = (fi, i);
        let e = w.entity(r);
        if e.kind.is_type() && e.name == name {
            return Some(Hit { target: r, how: How::Local });
        }
        if let Some(&c) = w.child_named(r, name, Kind::is_type).first() {
            return Some(Hit { target: c, how: How::Local });
        }
        // Nested types inherited from a base.
        if e.kind.is_type() {
            for a in w.ancestors(r) {
                if let Some(&c) = w.child_named(a, name, Kind::is_type).first() {
                    return Some(Hit { target: c, how: How::Inherited });
                }
            }
        }
        at = e.parent;
    }
    let import = |fq: String| w.java_types.get(&fq).map(|&r| Hit { target: r, how: type_how(fi, r) });
    for imp in f.imports.iter().filter(|i| !i.is_static && i.kind == ImportKind::Name && i.name == name) {
        if let Some(h) = import(format!("{}.{}", imp.module, imp.name)) {
            return Some(h);
        }
    }
    let pkg = if f.package.is_empty() { name.to_string() } else { format!("{}.{name}", f.package) };
    if let Some(h) = import(pkg) {
        return Some(h);
    }
    for imp in f.imports.iter().filter(|i| !i.is_static && i.kind == ImportKind::Star) {
        if let Some(h) = import(format!("{}.{name}", imp.module)) {
            return Some(h);
        }
    }
    None
}

pub(super) fn import_target(w: &World, _fi: u32, imp: &Import) -> Option<String> {
    match (imp.kind, imp.is_static) {
        (ImportKind::Name, false) => {
            w.java_types.get(&format!("{}.{}", imp.module, imp.name)).map(|&r| w.id(r).to_string())
        }
        (ImportKind::Name, true) => {
            let ty = *w.java_types.get(&imp.module)?;
            let member = w.child_named(ty, &imp.name, |_| true).into_iter().next().unwrap_or(ty);
            Some(w.id(member).to_string())
        }
        (ImportKind::Star, true) => w.java_types.get(&imp.module).map(|&r| w.id(r).to_string()),
        _ => None,
    }
}

/// Methods named `name` of arity `args` on a type, or inherited.
fn methods_on(w: &World, ty: ERef, name: &str, args: u32, own: How) -> Vec<Hit> {
    w.member(ty, name, own, &|m| w.entity(m).kind == Kind::Method && arity_ok(w, m, args))
}

/// The declared type of a variable visible from `owner`: locals and parameters of the
/// enclosing methods, then fields of the enclosing types and their bases.
fn var_type(w: &World, owner: ERef, var: &str) -> Option<Hit> {
    let f = w.file(owner.0);
    let mut at = Some(owner.1);
    while let Some(i) = at {
        if let Some(v) = f.vars.iter().find(|v| v.owner == i && v.name == var) {
            return resolve_type(w, (owner.0, i), &v.ty);
        }
        let e = w.entity((owner.0, i));
        if e.kind.is_type() {
            for a in w.ancestors((owner.0, i)) {
                let af = w.file(a.0);
                if let Some(v) = af.vars.iter().find(|v| v.owner == a.1 && v.name == var) {
                    return resolve_type(w, a, &v.ty);
                }
            }
        }
        at = e.parent;
    }
    None
}

fn field_type(w: &World, ty: ERef, var: &str) -> Option<Hit> {
    let f = w.file(ty.0);
    if let Some(v) = f.vars.iter().find(|v| v.owner == ty.1 && v.name == var) {
        return resolve_type(w, ty, &v.ty);
    }
    for a in w.ancestors(ty) {
        let af = w.file(a.0);
        if let Some(v) = af.vars.iter().find(|v| v.owner == a.1 && v.name == var) {
            return resolve_type(w, a, &v.ty);
        }
    }
    None
}

/// A call on a type reached some way (`how`): its own methods take that how, inherited
/// ones `inherited`.
fn on_type(w: &World, t: Hit, name: &str, args: u32) -> Vec<Hit> {
    methods_on(w, t.target, name, args, t.how)
}

pub(super) fn resolve_call(w: &World, fi: u32, call: &Call) -> Vec<Hit> {
    let owner = (fi, call.owner);
    let name = call.name.as_str();
    let args = call.args;
    let fallback =
        || w.fallback(Lang::Java, name, true, &|m| arity_ok(w, m, args) && w.entity(m).name == w.entity(m).name);
    if call.new {
        let Some(t) = resolve_type(w, owner, name) else { return Vec::new() };
        let ty_name = &w.entity(t.target).name;
        let ctors = w.child_named(t.target, ty_name, |k| k == Kind::Method);
        if ctors.is_empty() {
            return vec![t];
        }
        let fit: Vec<Hit> =
            ctors.into_iter().filter(|&c| arity_ok(w, c, args)).map(|target| Hit { target, how: t.how }).collect();
        return if fit.is_empty() { vec![t] } else { fit };
    }
    let recv = call.receiver.as_str();
    match recv {
        "" | "this" => {
            let Some(ty) = w.enclosing_type(owner) else { return Vec::new() };
            let hits = methods_on(w, ty, name, args, How::SelfRef);
            if !hits.is_empty() {
                return hits;
            }
            if recv.is_empty() {
                // Outer classes, then static imports.
                let mut outer = w.entity(ty).parent.and_then(|p| w.enclosing_type((fi, p)));
                while let Some(o) = outer {
                    let hits = methods_on(w, o, name, args, How::Local);
                    if !hits.is_empty() {
                        return hits;
                    }
                    outer = w.entity(o).parent.and_then(|p| w.enclosing_type((fi, p)));
                }
                for imp in w.file(fi).imports.iter().filter(|i| i.is_static) {
                    if imp.kind == ImportKind::Name && imp.name != name {
                        continue;
                    }
                    if let Some(&t) = w.java_types.get(&imp.module) {
                        let hits = methods_on(w, t, name, args, How::Import);
                        if !hits.is_empty() {
                            return hits;
                        }
                    }
                }
            }
            Vec::new()
        }
        "super" => match w.enclosing_type(owner) {
            Some(ty) => w.inherited_member(ty, name, &|m| w.entity(m).kind == Kind::Method && arity_ok(w, m, args)),
            None => Vec::new(),
        },
        r => {
            let target = if let Some(field) = r.strip_prefix("this.") {
                w.enclosing_type(owner).and_then(|ty| field_type(w, ty, field))
            } else if r.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                var_type(w, owner, r).or_else(|| resolve_type(w, owner, r))
            } else if r.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == '.') {
                resolve_type(w, owner, r)
            } else {
                None
            };
            match target {
                Some(t) => on_type(w, t, name, args),
                None if is_known_external(w, owner, r) => Vec::new(),
                None => fallback(),
            }
        }
    }
}

/// A receiver whose declared type is known but outside the repository
/// (`List<String> xs; xs.add(..)`, `System.out.println`): no guess.
fn is_known_external(w: &World, owner: ERef, recv: &str) -> bool {
    let f = w.file(owner.0);
    let first = recv.trim_start_matches("this.").split('.').next().unwrap_or("");
    if f.vars.iter().any(|v| v.name == first) {
        return true;
    }
    let starts_upper = first.chars().next().is_some_and(|c| c.is_uppercase());
    starts_upper && f.imports.iter().any(|i| i.name == first) || first == "System"
}
