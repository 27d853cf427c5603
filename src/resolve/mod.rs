//! Name resolution: from every file's facts to the graph's relations.
//!
//! Resolution is a pure function of the facts of all files, sorted by path: the same
//! facts give the same rows, whatever the thread count or the order files were parsed
//! in. Every `calls` edge says how it was found ([`How`]); the rules are the contract of
//! ARCHITECTURE.md ("Name resolution"), one file per language.

pub(crate) mod affected;
mod java;
mod python;
mod typescript;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::extract::{FileFacts, Kind};
use crate::lang::Lang;

/// How a call edge was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum How {
    Local,
    Import,
    SelfRef,
    Inherited,
    /// Through a tracked type: a receiver whose class is known (`x = Cls()`, `self.x =
    /// Cls()`, annotations, return types), an alias of a bound method, `__call__`.
    Type,
    Name,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Local => "local",
            How::Import => "import",
            How::SelfRef => "self",
            How::Inherited => "inherited",
            How::Type => "type",
            How::Name => "name",
        }
    }

    fn confidence(self) -> f64 {
        match self {
            How::Local => 1.0,
            How::Import => 0.95,
            How::SelfRef => 0.9,
            How::Inherited => 0.8,
            How::Type => 0.85,
            How::Name => 0.3,
        }
    }
}

/// At most this many candidates make a bare-name fallback edge; more give none.
pub const MAX_NAME_CANDIDATES: usize = 3;
/// `test_of` follows at most this many call edges from a test.
pub const TEST_REACH_DEPTH: usize = 3;
/// `test_of` follows only edges at least this sure.
pub const TEST_REACH_CONFIDENCE: f64 = 0.5;

/// An entity: (file index, entity index in the file).
pub type ERef = (u32, u32);

pub use crate::store::rows::{EntityRow, ImportKey, Rows, Text};

/// The totals the summary reports, kept in the index so that an incremental run can
/// update them from the rows it changes instead of counting everything again.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub entities: i64,
    pub edges: i64,
    pub by_how: BTreeMap<String, i64>,
}

impl Counts {
    pub fn of(rows: &Rows) -> Counts {
        let mut by_how = BTreeMap::new();
        for (how, _) in rows.calls.values() {
            *by_how.entry(how.to_string()).or_insert(0) += 1;
        }
        Counts { entities: rows.entity.len() as i64, edges: rows.calls.len() as i64, by_how }
    }

    /// Add (`sign` 1) or take away (`sign` -1) another count.
    pub fn add(&mut self, other: &Counts, sign: i64) {
        self.entities += sign * other.entities;
        self.edges += sign * other.edges;
        for (k, v) in &other.by_how {
            *self.by_how.entry(k.clone()).or_insert(0) += sign * v;
        }
        self.by_how.retain(|_, v| *v != 0);
    }
}

/// Everything resolution looks things up in, built once from all files.
pub struct World<'a> {
    pub files: Vec<&'a FileFacts>,
    /// (parent, name) => its children of that name, in source order: a lookup by name
    /// does not scan the siblings (a file with 100k entities made that quadratic).
    child_index: FxHashMap<(ERef, &'a str), Vec<u32>>,
    by_path: FxHashMap<&'a str, u32>,
    /// Python module name => file.
    py_modules: FxHashMap<String, u32>,
    /// Java fully qualified type name => entity.
    java_types: FxHashMap<String, ERef>,
    /// (lang, name) => functions and classes (not methods), for the fallback.
    free_by_name: FxHashMap<(Lang, &'a str), Vec<ERef>>,
    /// (lang, name) => methods, for the fallback.
    methods_by_name: FxHashMap<(Lang, &'a str), Vec<ERef>>,
    /// Resolved bases of each type entity, in declaration order.
    bases: FxHashMap<ERef, Vec<Option<ERef>>>,
    /// Python: (scope, name) => the scope's bindings of the name (indices into the file's
    /// `vars`).
    pub(crate) py_vars: FxHashMap<(ERef, &'a str), Vec<u32>>,
    /// Python: (class, attribute) => the `self.<attribute>` bindings of its methods, as
    /// (method, index into the file's `vars`).
    pub(crate) py_self_attrs: FxHashMap<(ERef, &'a str), Vec<(ERef, u32)>>,
}

/// A resolved call target, with how it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Hit {
    pub target: ERef,
    pub how: How,
}

/// What a name in scope stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Binding {
    Entity(ERef, How),
    Module(u32),
    /// Python: a name a scope binds by assignment, parameter, loop or `with` target (the
    /// scope and the index of its first binding in the file's `vars`).
    Var(ERef, u32),
}

impl<'a> World<'a> {
    /// Build the lookup tables. `files` must be sorted by path.
    pub fn new(files: &'a [FileFacts]) -> World<'a> {
        World::of(files.iter().collect())
    }

    /// The same over borrowed facts (sorted by path): an incremental run's old world is
    /// mostly the new one's unchanged files.
    pub fn of(files: Vec<&'a FileFacts>) -> World<'a> {
        let list = &files;
        let entities: usize = list.iter().map(|f| f.entities.len()).sum();
        let vars: usize = list.iter().filter(|f| f.lang == Lang::Python).map(|f| f.vars.len()).sum();
        // Three independent groups of tables, built at once (each a pass over the files).
        let names = || {
            let mut by_path = FxHashMap::with_capacity_and_hasher(list.len(), Default::default());
            let mut child_index: FxHashMap<(ERef, &str), Vec<u32>> =
                FxHashMap::with_capacity_and_hasher(entities, Default::default());
            for (fi, &f) in list.iter().enumerate() {
                let fi = fi as u32;
                by_path.insert(f.path.as_str(), fi);
                for (ei, e) in f.entities.iter().enumerate() {
                    if let Some(p) = e.parent {
                        child_index.entry(((fi, p), e.name.as_str())).or_default().push(ei as u32);
                    }
                }
            }
            (by_path, child_index)
        };
        let globals = || {
            let mut free_by_name: FxHashMap<(Lang, &str), Vec<ERef>> = FxHashMap::default();
            let mut methods_by_name: FxHashMap<(Lang, &str), Vec<ERef>> = FxHashMap::default();
            let mut py_modules = FxHashMap::default();
            let mut java_types = FxHashMap::default();
            for (fi, &f) in list.iter().enumerate() {
                let fi = fi as u32;
                for (ei, e) in f.entities.iter().enumerate() {
                    let key = (f.lang, e.name.as_str());
                    match e.kind {
                        Kind::Function | Kind::Class | Kind::Interface | Kind::Enum => {
                            free_by_name.entry(key).or_default().push((fi, ei as u32))
                        }
                        Kind::Method => methods_by_name.entry(key).or_default().push((fi, ei as u32)),
                        _ => {}
                    }
                }
                match f.lang {
                    Lang::Python => python::register_module(&mut py_modules, &f.path, fi),
                    Lang::Java => java::register_types(&mut java_types, f, fi),
                    Lang::TypeScript => {}
                }
            }
            (free_by_name, methods_by_name, py_modules, java_types)
        };
        let bindings = || {
            let mut py_vars: FxHashMap<(ERef, &str), Vec<u32>> =
                FxHashMap::with_capacity_and_hasher(vars, Default::default());
            let mut py_self_attrs: FxHashMap<(ERef, &str), Vec<(ERef, u32)>> = FxHashMap::default();
            for (fi, &f) in list.iter().enumerate().filter(|(_, f)| f.lang == Lang::Python) {
                let fi = fi as u32;
                for (vi, v) in f.vars.iter().enumerate() {
                    py_vars.entry(((fi, v.owner), v.name.as_str())).or_default().push(vi as u32);
                    let owner = &f.entities[v.owner as usize];
                    if let (Some(attr), Kind::Method, Some(p)) =
                        (v.name.strip_prefix("self."), owner.kind, owner.parent)
                    {
                        py_self_attrs.entry(((fi, p), attr)).or_default().push(((fi, v.owner), vi as u32));
                    }
                }
            }
            (py_vars, py_self_attrs)
        };
        let (
            (by_path, child_index),
            ((free_by_name, methods_by_name, py_modules, java_types), (py_vars, py_self_attrs)),
        ) = rayon::join(names, || rayon::join(globals, bindings));
        let list = files.clone();
        let mut w = World {
            files,
            child_index,
            by_path,
            py_modules,
            java_types,
            free_by_name,
            methods_by_name,
            bases: FxHashMap::default(),
            py_vars,
            py_self_attrs,
        };
        // Bases need every type known first.
        use rayon::prelude::*;
        let wr = &w;
        let bases: FxHashMap<ERef, Vec<Option<ERef>>> = list
            .par_iter()
            .enumerate()
            .flat_map_iter(|(fi, f)| {
                f.entities.iter().enumerate().filter(|(_, e)| e.kind.is_type() && !e.bases.is_empty()).map(
                    move |(ei, e)| {
                        let r = (fi as u32, ei as u32);
                        (r, e.bases.iter().map(|b| wr.resolve_base(r, b)).collect::<Vec<_>>())
                    },
                )
            })
            .collect::<Vec<_>>()
            .into_iter()
            .collect();
        w.bases = bases;
        w
    }

    pub(crate) fn file(&self, fi: u32) -> &'a FileFacts {
        self.files[fi as usize]
    }

    pub(crate) fn entity(&self, r: ERef) -> &'a crate::extract::Entity {
        &self.files[r.0 as usize].entities[r.1 as usize]
    }

    pub(crate) fn id(&self, r: ERef) -> &'a str {
        &self.entity(r).id
    }

    pub(crate) fn file_by_path(&self, p: &str) -> Option<u32> {
        self.by_path.get(p).copied()
    }

    /// Children of `r` named `name` whose kind passes `keep`, in source order.
    pub(crate) fn child_named(&self, r: ERef, name: &str, keep: impl Fn(Kind) -> bool) -> Vec<ERef> {
        let Some(found) = self.child_index.get(&(r, name)) else { return Vec::new() };
        found.iter().filter(|&&c| keep(self.files[r.0 as usize].entities[c as usize].kind)).map(|&c| (r.0, c)).collect()
    }

    /// The nearest enclosing type (class, interface, enum) of an entity, itself included.
    pub(crate) fn enclosing_type(&self, mut r: ERef) -> Option<ERef> {
        loop {
            let e = self.entity(r);
            if e.kind.is_type() {
                return Some(r);
            }
            r = (r.0, e.parent?);
        }
    }

    /// The resolved bases of a type, depth first, left to right, each once.
    pub(crate) fn ancestors(&self, r: ERef) -> Vec<ERef> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        seen.insert(r);
        self.ancestors_into(r, &mut out, &mut seen, 0);
        out
    }

    fn ancestors_into(&self, r: ERef, out: &mut Vec<ERef>, seen: &mut BTreeSet<ERef>, depth: usize) {
        if depth > 32 {
            return;
        }
        if let Some(bs) = self.bases.get(&r) {
            for b in bs.iter().flatten() {
                if seen.insert(*b) {
                    out.push(*b);
                    self.ancestors_into(*b, out, seen, depth + 1);
                }
            }
        }
    }

    /// `name` on a type: on the type itself (`own`), else on its ancestors (`inherited`).
    pub(crate) fn member(&self, ty: ERef, name: &str, own: How, keep: &dyn Fn(ERef) -> bool) -> Vec<Hit> {
        let direct: Vec<ERef> = self.child_named(ty, name, |_| true).into_iter().filter(|&m| keep(m)).collect();
        if !direct.is_empty() {
            return direct.into_iter().map(|target| Hit { target, how: own }).collect();
        }
        self.inherited_member(ty, name, keep)
    }

    /// `name` on the ancestors of a type only (`super.m()`): the nearest that has it.
    pub(crate) fn inherited_member(&self, ty: ERef, name: &str, keep: &dyn Fn(ERef) -> bool) -> Vec<Hit> {
        for a in self.ancestors(ty) {
            let found: Vec<ERef> = self.child_named(a, name, |_| true).into_iter().filter(|&m| keep(m)).collect();
            if !found.is_empty() {
                return found.into_iter().map(|target| Hit { target, how: How::Inherited }).collect();
            }
        }
        Vec::new()
    }

    /// The bare-name fallback: every candidate, when there are at most
    /// [`MAX_NAME_CANDIDATES`].
    pub(crate) fn fallback(&self, lang: Lang, name: &str, methods: bool, keep: &dyn Fn(ERef) -> bool) -> Vec<Hit> {
        let table = if methods { &self.methods_by_name } else { &self.free_by_name };
        let Some(all) = table.get(&(lang, name)) else { return Vec::new() };
        let cands: Vec<ERef> = all.iter().copied().filter(|&r| keep(r)).collect();
        if cands.is_empty() || cands.len() > MAX_NAME_CANDIDATES {
            return Vec::new();
        }
        cands.into_iter().map(|target| Hit { target, how: How::Name }).collect()
    }

    fn resolve_base(&self, ty: ERef, base: &str) -> Option<ERef> {
        let f = self.file(ty.0);
        // Bases are looked up in the scope that contains the type.
        let scope = (ty.0, self.entity(ty).parent.unwrap_or(0));
        let found = match f.lang {
            Lang::Python => python::resolve_dotted(self, scope, base).or_else(|| {
                // `class Manager(BaseManager.from_queryset(QuerySet))`: a class's own
                // factory method called on it makes a subclass of it.
                let (callee, _) = base.strip_suffix(')')?.split_once('(')?;
                let (class, method) = callee.rsplit_once('.')?;
                let c = python::resolve_dotted(self, scope, class)?;
                let factory = self.entity(c).kind.is_type()
                    && !self.child_named(c, method, |k| k == crate::extract::Kind::Method).is_empty();
                factory.then_some(c)
            }),
            Lang::TypeScript => typescript::resolve_dotted(self, scope, base),
            Lang::Java => java::resolve_type(self, scope, base).map(|h| h.target),
        }?;
        if self.entity(found).kind.is_type() && found != ty {
            Some(found)
        } else {
            None
        }
    }
}

/// Resolve every file's facts into rows. `files` must be sorted by path.
pub fn resolve(files: &[FileFacts]) -> Rows<'_> {
    resolve_world(&World::new(files))
}

/// Every file of a world into rows.
pub fn resolve_world<'a>(world: &World<'a>) -> Rows<'a> {
    let all: Vec<u32> = (0..world.files.len() as u32).collect();
    resolve_files(world, &all)
}

/// The rows of some files: the file, its
/// entities, and the edges and sites whose caller, child or file it holds. Their text is
/// borrowed from the world's facts.
pub fn resolve_files<'a>(world: &World<'a>, which: &[u32]) -> Rows<'a> {
    use rayon::prelude::*;
    // What costs is finding each call's and each import's targets: found in parallel, a
    // file at a time, into compact lists. The rows are then pushed on this thread in file
    // order (rows pushed on several threads and joined were held twice in glibc's arenas
    // of two threads: 16% more peak memory on Django).
    let found: Vec<Found> = which.par_iter().map(|&fi| Found::of(world, fi)).collect();
    let mut p = Pushed::default();
    for (&fi, found) in which.iter().zip(found) {
        p.file(world, fi, found);
    }
    // Each relation's rows are pushed as they come and made into their ordered map or set
    // once, at the end: one sort and a bulk build cost far less than a B-tree descent per
    // row (524k set and 284k map inserts on Guava). The maps keep the last row pushed
    // under a key, as inserting one by one did; `calls` keeps the surest edge (the first
    // of equals), as below. The eight relations are made at once.
    let ((file, entity), (imports, inherits)) = rayon::join(
        || rayon::join(|| map_of(p.file, last), || map_of(p.entity, last)),
        || rayon::join(|| map_of(p.imports, last), || map_of(p.inherits, last)),
    );
    let ((contains, call_site), (unresolved, calls)) = rayon::join(
        || rayon::join(|| set_of(p.contains), || set_of(p.call_site)),
        || {
            rayon::join(
                || set_of(p.unresolved),
                // An edge found twice (two calls of one callee on a line, or two ways) keeps the
                // surest, the first of equals.
                || map_of(p.calls, |new: &(Text<'a>, f64), old: &(Text<'a>, f64)| new.1 > old.1),
            )
        },
    );
    Rows { file, entity, contains, calls, call_site, unresolved, imports, inherits }
}

/// A `file` row as pushed: path, then (lang, hash, lines, is_test, syntax_errors).
type FileRow<'a> = (Text<'a>, (Text<'a>, Text<'a>, i64, bool, i64));
/// A `calls` row as pushed: (caller, callee, line), then (how, confidence).
type CallRow<'a> = ((Text<'a>, Text<'a>, i64), (Text<'a>, f64));

/// The rows of some files, each relation's in the order they were pushed.
#[derive(Default)]
struct Pushed<'a> {
    file: Vec<FileRow<'a>>,
    entity: Vec<(Text<'a>, EntityRow<'a>)>,
    contains: Vec<(Text<'a>, Text<'a>)>,
    inherits: Vec<((Text<'a>, Text<'a>), Option<Text<'a>>)>,
    imports: Vec<(ImportKey<'a>, (Text<'a>, Option<Text<'a>>))>,
    call_site: Vec<(Text<'a>, i64, Text<'a>, Text<'a>)>,
    unresolved: Vec<(Text<'a>, Text<'a>, i64, Text<'a>)>,
    calls: Vec<CallRow<'a>>,
}

impl<'a> Pushed<'a> {
    /// One file's rows: the file, its entities, and the edges and sites whose caller,
    /// child or file it holds.
    fn file(&mut self, world: &World<'a>, fi: u32, found: Found) {
        let b = |s: &'a str| -> Text<'a> { Cow::Borrowed(s) };
        let f: &'a FileFacts = world.files[fi as usize];
        self.file.push((b(&f.path), (b(f.lang.name()), b(&f.hash), f.lines as i64, f.is_test, f.syntax_errors as i64)));
        for (ei, e) in f.entities.iter().enumerate() {
            self.entity.push((
                b(&e.id),
                EntityRow {
                    kind: b(e.kind.as_str()),
                    name: b(&e.name),
                    qname: b(&e.qname),
                    file: b(&f.path),
                    start_line: e.start_line as i64,
                    end_line: e.end_line as i64,
                    signature: b(&e.signature),
                    doc: b(&e.doc),
                    is_test: e.is_test,
                },
            ));
            if let Some(p) = e.parent {
                self.contains.push((b(&f.entities[p as usize].id), b(&e.id)));
            }
            if let Some(bs) = world.bases.get(&(fi, ei as u32)) {
                for (name, base) in e.bases.iter().zip(bs) {
                    self.inherits.push(((b(&e.id), b(name)), base.map(|x| b(world.id(x)))));
                }
            }
        }
        for (imp, target) in f.imports.iter().zip(found.imports) {
            self.imports.push((
                (b(&f.path), imp.line as i64, b(&imp.module), b(&imp.name)),
                (b(&imp.alias), target.map(Cow::Owned)),
            ));
        }
        let mut at = 0;
        for (call, &count) in f.calls.iter().zip(&found.counts) {
            let caller = b(&f.entities[call.owner as usize].id);
            self.call_site.push((caller.clone(), call.line as i64, b(&call.name), b(&call.receiver)));
            let hits = &found.hits[at..at + count as usize];
            at += count as usize;
            if hits.is_empty() {
                self.unresolved.push((b(&call.name), caller.clone(), call.line as i64, b(&call.receiver)));
            }
            let n = hits.iter().filter(|h| h.how == How::Name).count().max(1);
            for h in hits {
                let mut conf = h.how.confidence();
                if h.how == How::Name {
                    conf = ((conf / n as f64) * 1000.0).round() / 1000.0;
                }
                self.calls.push(((caller.clone(), b(world.id(h.target)), call.line as i64), (b(h.how.as_str()), conf)));
            }
        }
    }
}

/// A file's import targets and each call's hits, in order: `counts[i]` hits of call `i`
/// one after another in `hits`.
struct Found {
    imports: Vec<Option<String>>,
    hits: Vec<Hit>,
    counts: Vec<u32>,
}

impl Found {
    fn of(world: &World, fi: u32) -> Found {
        let f = world.files[fi as usize];
        let imports = f
            .imports
            .iter()
            .map(|imp| match f.lang {
                Lang::Python => python::import_target(world, fi, imp),
                Lang::TypeScript => typescript::import_target(world, fi, imp),
                Lang::Java => java::import_target(world, fi, imp),
            })
            .collect();
        let (mut hits, mut counts) = (Vec::new(), Vec::with_capacity(f.calls.len()));
        for call in &f.calls {
            let found = match f.lang {
                Lang::Python => python::resolve_call(world, fi, call),
                Lang::TypeScript => typescript::resolve_call(world, fi, call),
                Lang::Java => java::resolve_call(world, fi, call),
            };
            counts.push(found.len() as u32);
            hits.extend(found);
        }
        Found { imports, hits, counts }
    }
}

/// Rows made into a set: sorted (equal rows are the same row, so the order among them
/// does not matter) and deduplicated, then built bottom up from the one sorted run.
fn set_of<T: Ord>(mut rows: Vec<T>) -> BTreeSet<T> {
    rows.sort_unstable();
    rows.dedup();
    rows.into_iter().collect()
}

/// For [`map_of`]: the last row pushed under a key is the one kept.
fn last<V>(_: &V, _: &V) -> bool {
    true
}

/// Rows pushed in order, made into a map as inserting them one by one would, where a row
/// whose key is there already takes its place when `replaces(new, old)`. The sort is
/// stable, so rows under one key are met in push order.
fn map_of<K: Ord, V>(mut rows: Vec<(K, V)>, replaces: impl Fn(&V, &V) -> bool) -> BTreeMap<K, V> {
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    // In place: `dedup_by` hands each row with the one kept before it.
    rows.dedup_by(|row, kept| {
        if row.0 != kept.0 {
            return false;
        }
        if replaces(&row.1, &kept.1) {
            std::mem::swap(&mut row.1, &mut kept.1);
        }
        true
    });
    // Sorted and unique: the map's own sort finds one run, and it is built bottom up.
    rows.into_iter().collect()
}

/// Tests and what they reach: at most [`TEST_REACH_DEPTH`] edges of confidence at least
/// [`TEST_REACH_CONFIDENCE`], walked forward from every test. The index does not store
/// these pairs (`Store::tests_reaching` walks back from the targets asked about); lib tests
/// hold that walk to this one.
#[cfg(test)]
pub(crate) fn test_of<'a>(files: &[&'a FileFacts], rows: &Rows<'a>) -> BTreeSet<(Text<'a>, Text<'a>)> {
    let mut out_edges: std::collections::HashMap<&str, Vec<&Text<'a>>> = std::collections::HashMap::new();
    for ((caller, callee, _), (_, conf)) in &rows.calls {
        if *conf >= TEST_REACH_CONFIDENCE {
            out_edges.entry(caller.as_ref()).or_default().push(callee);
        }
    }
    let mut out = BTreeSet::new();
    for f in files {
        for e in f.entities.iter().filter(|e| e.is_test) {
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            let mut queue = std::collections::VecDeque::from([(e.id.as_str(), 0usize)]);
            seen.insert(e.id.as_str());
            while let Some((at, d)) = queue.pop_front() {
                if d == TEST_REACH_DEPTH {
                    continue;
                }
                for &next in out_edges.get(at).map(|v| v.as_slice()).unwrap_or(&[]) {
                    if seen.insert(next.as_ref()) {
                        out.insert((Cow::Borrowed(e.id.as_str()), next.clone()));
                        queue.push_back((next.as_ref(), d + 1));
                    }
                }
            }
        }
    }
    out
}

/// Entities visible by lexical scope from `owner`: the enclosing function scopes from the
/// inside out, then the module's top level. Type bodies are skipped when `skip_types`
/// (Python, TS: methods are not in scope by bare name).
pub(crate) fn lexical(
    w: &World,
    owner: ERef,
    name: &str,
    skip_types: bool,
    keep: impl Fn(Kind) -> bool,
) -> Option<ERef> {
    let mut at = Some(owner.1);
    while let Some(i) = at {
        let r = (owner.0, i);
        let e = w.entity(r);
        if !(skip_types && e.kind.is_type()) {
            let found = w.child_named(r, name, &keep);
            // Python rebinds: the last definition wins. Elsewhere there is one.
            if let Some(last) = found.last() {
                return Some(*last);
            }
        }
        at = e.parent;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `map_of` keeps what inserting the rows one by one kept: the last under a key, or,
    /// for `calls`, the surest and the first of equals.
    #[test]
    fn rows_made_into_a_map_keep_what_inserting_one_by_one_kept() {
        let rows = vec![("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5), ("b", 6)];
        let mut inserted = BTreeMap::new();
        for &(k, v) in &rows {
            inserted.insert(k, v);
        }
        assert_eq!(map_of(rows.clone(), last), inserted);
        assert_eq!(map_of(rows, last), BTreeMap::from([("a", 5), ("b", 6), ("c", 4)]));

        let edges = vec![("f", ("name", 0.5)), ("f", ("self", 0.9)), ("g", ("name", 0.3)), ("f", ("import", 0.9))];
        let mut surest: BTreeMap<&str, (&str, f64)> = BTreeMap::new();
        for &(k, v) in &edges {
            if surest.get(k).is_none_or(|old| v.1 > old.1) {
                surest.insert(k, v);
            }
        }
        let made = map_of(edges, |new: &(&str, f64), old: &(&str, f64)| new.1 > old.1);
        assert_eq!(made, surest);
        assert_eq!(made["f"], ("self", 0.9));
        assert!(map_of(Vec::<(u8, u8)>::new(), last).is_empty());
    }
}
