//! The canned graph queries: callers, callees, call chains, class structure, imports,
//! finding entities. Typed results, so the CLI, the MCP server and the agent tools share
//! one implementation. Every transitive query is depth-bounded.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use cozo::{DataValue, NamedRows};
use serde::Serialize;
use thiserror::Error;

use crate::store::{Store, StoreError};

mod lookup;
pub use lookup::{
    callees_on_line, entities_at, entities_named, file_of_type, files, import_counts, test_function_counts,
    tests_reaching_file, top_level_definitions, FileInfo,
};

#[derive(Debug, Error)]
pub enum GraphError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Nothing by that name: the nearest names are given.
    #[error("no entity '{name}'{}", nearest_text(.nearest))]
    NotFound { name: String, nearest: Vec<String> },
    /// Several entities carry the name: give an id.
    #[error("'{name}' is ambiguous: {}", .candidates.join(", "))]
    Ambiguous { name: String, candidates: Vec<String> },
}

fn nearest_text(n: &[String]) -> String {
    if n.is_empty() {
        String::new()
    } else {
        format!("; nearest: {}", n.join(", "))
    }
}

impl GraphError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            GraphError::Store(e) => e.hint(),
            GraphError::NotFound { .. } => Some("`reproagent graph find NAME` lists entities by name"),
            GraphError::Ambiguous { .. } => Some("give the entity id (path:Qualified.name) instead of the name"),
        }
    }
}

/// An entity as the queries report it.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct EntityInfo {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub qname: String,
    pub file: String,
    pub start_line: i64,
    pub end_line: i64,
    pub signature: String,
}

/// One call edge met by a walk, with the depth at which it was met.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Edge {
    pub caller: String,
    pub callee: String,
    pub line: i64,
    pub how: String,
    pub confidence: f64,
    pub depth: i64,
}

fn str_of(v: &DataValue) -> String {
    match v {
        DataValue::Str(s) => s.to_string(),
        DataValue::Null => String::new(),
        other => format!("{other:?}"),
    }
}

fn int_of(v: &DataValue) -> i64 {
    v.get_int().unwrap_or(0)
}

fn float_of(v: &DataValue) -> f64 {
    v.get_float().unwrap_or(0.0)
}

fn params(pairs: &[(&str, DataValue)]) -> BTreeMap<String, DataValue> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

const ENTITY_COLS: &str = "id, kind, name, qname, file, start_line, end_line, signature";

fn entities(rows: &NamedRows) -> Vec<EntityInfo> {
    rows.rows
        .iter()
        .map(|r| EntityInfo {
            id: str_of(&r[0]),
            kind: str_of(&r[1]),
            name: str_of(&r[2]),
            qname: str_of(&r[3]),
            file: str_of(&r[4]),
            start_line: int_of(&r[5]),
            end_line: int_of(&r[6]),
            signature: str_of(&r[7]),
        })
        .collect()
}

/// The entity with this id, if any.
pub fn entity(store: &Store, id: &str) -> Result<Option<EntityInfo>, GraphError> {
    let r = store.query(
        // The key bound before the atom: a primary-key lookup (after it, Cozo scans).
        &format!("?[{ENTITY_COLS}] := id = $id, *entity{{{ENTITY_COLS}}}"),
        params(&[("id", DataValue::from(id))]),
    )?;
    Ok(entities(&r).into_iter().next())
}

/// The entities of `ids` in one query (each a key lookup), in the order of `ids`; ids
/// with no entity are left out.
pub fn entities_by_id(store: &Store, ids: &[String]) -> Result<Vec<EntityInfo>, GraphError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = DataValue::List(ids.iter().map(|i| DataValue::from(i.as_str())).collect());
    let r =
        store.query(&format!("?[{ENTITY_COLS}] := id in $ids, *entity{{{ENTITY_COLS}}}"), params(&[("ids", list)]))?;
    let mut by_id: std::collections::HashMap<String, EntityInfo> =
        entities(&r).into_iter().map(|e| (e.id.clone(), e)).collect();
    Ok(ids.iter().filter_map(|i| by_id.remove(i)).collect())
}

/// Entities matching `query`: an exact id, then exact names, then qualified names ending
/// in it, then names containing it (case-insensitive). At most `limit`, ranked so.
pub fn find(store: &Store, query: &str, kind: Option<&str>, limit: usize) -> Result<Vec<EntityInfo>, GraphError> {
    let q = DataValue::from(query);
    let lower = DataValue::from(query.to_lowercase().as_str());
    let dotted = DataValue::from(format!(".{query}").as_str());
    // A qualified-name suffix scans every entity; for a plain name it finds only what
    // the name index does (`Foo.bar` ends with `.bar` exactly when its name is `bar`).
    let suffix = if query.contains('.') {
        format!("hit[{ENTITY_COLS}, rank] := *entity{{{ENTITY_COLS}}}, ends_with(qname, $dotted), rank = 2")
    } else {
        String::new()
    };
    let script = format!(
        "hit[{ENTITY_COLS}, rank] := id = $q, *entity{{{ENTITY_COLS}}}, rank = 0
         hit[{ENTITY_COLS}, rank] := *entity:by_name{{name: $q, id}}, *entity{{{ENTITY_COLS}}}, rank = 1
         {suffix}
         hit[{ENTITY_COLS}, rank] := *entity{{{ENTITY_COLS}}}, str_includes(lowercase(name), $lower), rank = 3
         best[id, min(rank)] := hit[id, _, _, _, _, _, _, _, rank]
         ?[{ENTITY_COLS}, rank] := best[id, rank], hit[{ENTITY_COLS}, rank]
         :order rank, id"
    );
    let r = store.query(&script, params(&[("q", q), ("lower", lower), ("dotted", dotted)]))?;
    let mut out: Vec<EntityInfo> = entities(&r);
    if let Some(k) = kind {
        out.retain(|e| e.kind == k);
    }
    let mut seen = BTreeSet::new();
    out.retain(|e| seen.insert(e.id.clone()));
    out.truncate(limit);
    Ok(out)
}

/// Every entity's id, kind, name and qualified name, in id order: what `find` and
/// `nearest` scan, held in memory so that a session scans it without the store (the
/// tools keep one per `graph.db`). Same answers as [`find`] and [`nearest`].
pub struct NameTable {
    /// (id, kind, name, qname, lowercase name)
    rows: Vec<(String, String, String, String, String)>,
}

impl NameTable {
    pub fn load(store: &Store) -> Result<NameTable, GraphError> {
        let r = store.query("?[id, kind, name, qname] := *entity{id, kind, name, qname} :order id", BTreeMap::new())?;
        let rows = r
            .rows
            .iter()
            .map(|x| {
                let name = str_of(&x[2]);
                let lower = name.to_lowercase();
                (str_of(&x[0]), str_of(&x[1]), name, str_of(&x[3]), lower)
            })
            .collect();
        Ok(NameTable { rows })
    }

    /// The ids [`find`] gives, in its order: an exact id, exact names, qualified names
    /// ending in `.query`, names containing it (case-insensitive).
    pub fn find_ids(&self, query: &str, kind: Option<&str>, limit: usize) -> Vec<String> {
        let lower = query.to_lowercase();
        let dotted = format!(".{query}");
        let mut hits: Vec<(u8, &str)> = self
            .rows
            .iter()
            .filter(|(_, k, ..)| kind.is_none_or(|want| k == want))
            .filter_map(|(id, _, name, qname, lname)| {
                let rank = if id == query {
                    0
                } else if name == query {
                    1
                } else if query.contains('.') && qname.ends_with(&dotted) {
                    2
                } else if lname.contains(&lower) {
                    3
                } else {
                    return None;
                };
                Some((rank, id.as_str()))
            })
            .collect();
        hits.sort();
        hits.into_iter().take(limit).map(|(_, id)| id.to_string()).collect()
    }

    /// The ids [`nearest`] gives.
    pub fn nearest(&self, query: &str, limit: usize) -> Vec<String> {
        let q = query.rsplit([':', '.']).next().unwrap_or(query).to_lowercase();
        let mut scored: Vec<(usize, &str)> = self
            .rows
            .iter()
            .map(|(id, _, _, _, lname)| (levenshtein(&q, lname), id.as_str()))
            .filter(|(d, _)| *d <= q.len().max(3) / 2 + 1)
            .collect();
        scored.sort();
        scored.into_iter().take(limit).map(|(_, id)| id.to_string()).collect()
    }
}

/// Names that look like `query`, for a "did you mean": by edit distance over names.
pub fn nearest(store: &Store, query: &str, limit: usize) -> Result<Vec<String>, GraphError> {
    let r = store.query("?[id, name] := *entity{id, name}", BTreeMap::new())?;
    let q = query.rsplit([':', '.']).next().unwrap_or(query).to_lowercase();
    let mut scored: Vec<(usize, String)> = r
        .rows
        .iter()
        .map(|row| {
            let name = str_of(&row[1]).to_lowercase();
            (levenshtein(&q, &name), str_of(&row[0]))
        })
        .filter(|(d, _)| *d <= q.len().max(3) / 2 + 1)
        .collect();
    scored.sort();
    Ok(scored.into_iter().take(limit).map(|(_, id)| id).collect())
}

/// Edit distance between two strings, by characters.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j + 1] + 1).min(cur[j] + 1).min(prev[j] + usize::from(ca != *cb));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The entity a dotted import path names (`django.utils.html.json_script`,
/// `pkg.models.Order.total`, `pkg.models`): the longest module prefix that is a file of
/// the index, then the rest as the qualified name in it. Indexed lookups only.
pub fn dotted_entity(store: &Store, name: &str) -> Result<Option<String>, GraphError> {
    if name.contains([':', '/']) || !name.contains('.') {
        return Ok(None);
    }
    let parts: Vec<&str> = name.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Ok(None);
    }
    for k in (1..=parts.len()).rev() {
        let module = parts[..k].join("/");
        let rest = parts[k..].join(".");
        for root in ["", "src/", "lib/"] {
            for file in [
                format!("{root}{module}.py"),
                format!("{root}{module}/__init__.py"),
                format!("{root}{module}.ts"),
                format!("{root}{module}/index.ts"),
                format!("{root}{module}.js"),
            ] {
                let id = if rest.is_empty() { file.clone() } else { format!("{file}:{rest}") };
                if entity(store, &id)?.is_some() {
                    return Ok(Some(id));
                }
            }
        }
    }
    Ok(None)
}

/// Turn what a user typed (an id, a name, a qualified name, a dotted import path) into
/// one entity id.
pub fn resolve_entity(store: &Store, name: &str) -> Result<String, GraphError> {
    if entity(store, name)?.is_some() {
        return Ok(name.to_string());
    }
    if let Some(id) = dotted_entity(store, name)? {
        return Ok(id);
    }
    let hits = find(store, name, None, 50)?;
    let exact: Vec<&EntityInfo> =
        hits.iter().filter(|e| e.name == name || e.qname == name || e.qname.ends_with(&format!(".{name}"))).collect();
    match exact.len() {
        1 => Ok(exact[0].id.clone()),
        0 => Err(GraphError::NotFound { name: name.to_string(), nearest: nearest(store, name, 5)? }),
        _ => Err(GraphError::Ambiguous {
            name: name.to_string(),
            candidates: exact.iter().take(10).map(|e| e.id.clone()).collect(),
        }),
    }
}

/// The most edges one walk collects: a dense call graph (300 functions each calling all
/// the others) has 90,000 edges one call away.
pub const MAX_WALK_EDGES: usize = 5_000;
/// The most partial chains `paths` explores.
pub const MAX_CHAIN_STEPS: usize = 100_000;
/// The longest a walk or a chain search runs.
pub const WALK_TIME: Duration = Duration::from_secs(10);

/// The edges of a walk, and what was cut when a bound stopped it.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    pub edges: Vec<Edge>,
    pub truncated: Option<String>,
}

/// The call sites that got no edge and bear the name `id` is called by (a class's or
/// its `__init__`'s: the class's name): the name and how many. Some of them may call `id`.
pub fn unattributed(store: &Store, id: &str) -> Result<Option<(String, usize)>, GraphError> {
    let Some(e) = entity(store, id)? else { return Ok(None) };
    let mut name = e.name.clone();
    if e.kind == "method" && (name == "__init__" || name == "constructor") {
        if let Some(class) = store
            .query("?[p] := *contains:by_child{child: $id, parent: p}", params(&[("id", DataValue::from(id))]))?
            .rows
            .first()
        {
            if let Some(c) = entity(store, &str_of(&class[0]))? {
                name = c.name;
            }
        }
    }
    let r = store.query(
        "?[caller, line, receiver] := *unresolved{name: $n, caller, line, receiver}",
        params(&[("n", DataValue::from(name.as_str()))]),
    )?;
    Ok(Some((name, r.rows.len())))
}

/// The note `callers` adds when call sites of the name got no edge.
pub fn unattributed_note(store: &Store, id: &str) -> Result<Option<String>, GraphError> {
    Ok(match unattributed(store, id)? {
        Some((name, n)) if n > 0 => Some(format!(
            "{n} more call {} of `{name}` {} not attributed to any entity (receiver type unknown); some may call this one: `reproagent query '?[caller, line, receiver] := *unresolved{{name: \"{name}\", caller, line, receiver}}'`",
            if n == 1 { "site" } else { "sites" },
            if n == 1 { "was" } else { "were" },
        )),
        _ => None,
    })
}

/// Who calls `id`, transitively up to `depth` edges, with edges of at least `min_conf`.
pub fn callers(store: &Store, id: &str, depth: usize, min_conf: f64) -> Result<Vec<Edge>, GraphError> {
    Ok(walk(store, id, depth, min_conf, true)?.edges)
}

/// What `id` calls, transitively up to `depth` edges.
pub fn callees(store: &Store, id: &str, depth: usize, min_conf: f64) -> Result<Vec<Edge>, GraphError> {
    Ok(walk(store, id, depth, min_conf, false)?.edges)
}

/// A breadth-first walk, one query per level from the entities first reached at the level
/// before: an edge's depth is its near end's distance plus one. Bounded by
/// [`MAX_WALK_EDGES`] and [`WALK_TIME`]: the nearest edges are kept, in order, and
/// `truncated` says where the walk stopped.
pub fn walk(store: &Store, id: &str, depth: usize, min_conf: f64, up: bool) -> Result<Walk, GraphError> {
    walk_within(store, id, depth, min_conf, up, MAX_WALK_EDGES, WALK_TIME)
}

pub fn walk_within(
    store: &Store,
    id: &str,
    depth: usize,
    min_conf: f64,
    up: bool,
    max_edges: usize,
    time: Duration,
) -> Result<Walk, GraphError> {
    // `calls` is keyed by caller; `calls:by_callee` serves the upward walk.
    let script = if up {
        "?[caller, callee, line, how, c] := callee in $ids, *calls:by_callee{callee, caller, line},
             *calls{caller, callee, line, how, confidence: c}, c >= $min"
    } else {
        "?[caller, callee, line, how, c] := caller in $ids, *calls{caller, callee, line, how, confidence: c}, c >= $min"
    };
    let started = Instant::now();
    let depth = depth.max(1);
    let mut seen: BTreeSet<String> = BTreeSet::from([id.to_string()]);
    let mut frontier: Vec<String> = vec![id.to_string()];
    let mut out = Walk::default();
    for level in 1..=depth {
        if frontier.is_empty() {
            break;
        }
        let left = time.saturating_sub(started.elapsed());
        let stop = |out: &mut Walk, why: String| {
            out.truncated = Some(format!(
                "{why}: the {} nearest edges are shown; ask for a smaller depth or a higher min_confidence",
                out.edges.len()
            ));
        };
        if left.is_zero() {
            stop(&mut out, format!("stopped at depth {level} of {depth} after {} s", time.as_secs()));
            break;
        }
        if crate::cancel::requested() {
            stop(&mut out, format!("cancelled at depth {level} of {depth}"));
            break;
        }
        let ids = DataValue::List(frontier.iter().map(|i| DataValue::from(i.as_str())).collect());
        let bounds = crate::store::bounded::QueryBounds { timeout: left, ..Default::default() };
        let r = match store.query_bounded(script, params(&[("ids", ids), ("min", DataValue::from(min_conf))]), &bounds)
        {
            Ok(r) => r,
            Err(e) if started.elapsed() >= time => {
                let _ = e;
                stop(&mut out, format!("stopped at depth {level} of {depth} after {} s", time.as_secs()));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let mut edges: Vec<Edge> = r
            .rows
            .iter()
            .map(|row| Edge {
                caller: str_of(&row[0]),
                callee: str_of(&row[1]),
                line: int_of(&row[2]),
                how: str_of(&row[3]),
                confidence: float_of(&row[4]),
                depth: level as i64,
            })
            .collect();
        edges.sort_by(|a, b| (&a.caller, &a.callee, a.line).cmp(&(&b.caller, &b.callee, b.line)));
        let room = max_edges.saturating_sub(out.edges.len());
        let cut = edges.len() > room;
        edges.truncate(room);
        let mut next = Vec::new();
        for e in &edges {
            let far = if up { &e.caller } else { &e.callee };
            if seen.insert(far.clone()) {
                next.push(far.clone());
            }
        }
        out.edges.extend(edges);
        if cut {
            stop(&mut out, format!("stopped at {max_edges} edges, at depth {level} of {depth}"));
            break;
        }
        frontier = next;
    }
    Ok(out)
}

/// Call chains from `from` to `to` of at most `max_depth` edges, shortest first, at most
/// `limit` of them. Each chain is the list of edges along it.
pub fn paths(
    store: &Store,
    from: &str,
    to: &str,
    max_depth: usize,
    min_conf: f64,
    limit: usize,
) -> Result<Vec<Vec<Edge>>, GraphError> {
    Ok(paths_bounded(store, from, to, max_depth, min_conf, limit)?.0)
}

/// [`paths`], and what was cut when a bound stopped the search: the walk's bounds, then
/// [`MAX_CHAIN_STEPS`] partial chains and [`WALK_TIME`] in all.
pub fn paths_bounded(
    store: &Store,
    from: &str,
    to: &str,
    max_depth: usize,
    min_conf: f64,
    limit: usize,
) -> Result<(Vec<Vec<Edge>>, Option<String>), GraphError> {
    let started = Instant::now();
    let forward = walk(store, from, max_depth, min_conf, false)?;
    let mut truncated = forward.truncated.map(|t| format!("the walk from {from} {t}"));
    let mut out_edges: HashMap<&str, Vec<&Edge>> = HashMap::new();
    for e in &forward.edges {
        out_edges.entry(e.caller.as_str()).or_default().push(e);
    }
    // Breadth first over simple paths: shortest chains come out first. A chain is kept as
    // its last edge and the index of the chain it extends, so a step costs one entry.
    let mut found = Vec::new();
    let mut steps: Vec<(&Edge, usize, usize)> = Vec::new(); // (edge, parent step or MAX, length)
    let mut queue: VecDeque<usize> = VecDeque::new();
    for e in out_edges.get(from).cloned().unwrap_or_default() {
        steps.push((e, usize::MAX, 1));
        queue.push_back(steps.len() - 1);
    }
    let chain_of = |steps: &Vec<(&Edge, usize, usize)>, mut i: usize| -> Vec<Edge> {
        let mut v = Vec::new();
        while i != usize::MAX {
            v.push(steps[i].0.clone());
            i = steps[i].1;
        }
        v.reverse();
        v
    };
    while let Some(si) = queue.pop_front() {
        let (last, _, len) = steps[si];
        if last.callee == to {
            found.push(
                chain_of(&steps, si).into_iter().enumerate().map(|(i, e)| Edge { depth: i as i64 + 1, ..e }).collect(),
            );
            if found.len() >= limit {
                break;
            }
            continue;
        }
        if len >= max_depth {
            continue;
        }
        for &next in out_edges.get(last.callee.as_str()).map(|v| v.as_slice()).unwrap_or(&[]) {
            if next.callee == from {
                continue;
            }
            // Simple paths only: the next callee is not on the chain already.
            let mut i = si;
            let mut on_chain = false;
            while i != usize::MAX {
                if steps[i].0.caller == next.callee {
                    on_chain = true;
                    break;
                }
                i = steps[i].1;
            }
            if on_chain {
                continue;
            }
            if crate::cancel::requested() {
                truncated.get_or_insert_with(|| format!("cancelled after {} partial chains", steps.len()));
                break;
            }
            if steps.len() >= MAX_CHAIN_STEPS || started.elapsed() > WALK_TIME {
                truncated.get_or_insert_with(|| {
                    format!("stopped after {} partial chains: longer chains were not all tried; ask for a smaller max_depth or a higher min_confidence", steps.len())
                });
                break;
            }
            steps.push((next, si, len + 1));
            queue.push_back(steps.len() - 1);
        }
    }
    Ok((found, truncated))
}

/// A type with its bases (transitively), subclasses, methods, fields and overrides.
#[derive(Debug, Clone, Serialize)]
pub struct ClassInfo {
    pub class: EntityInfo,
    /// (base as written, resolved id or empty), direct bases.
    pub bases: Vec<(String, String)>,
    /// Resolved ancestors, nearest first.
    pub ancestors: Vec<String>,
    pub subclasses: Vec<String>,
    pub methods: Vec<EntityInfo>,
    pub fields: Vec<EntityInfo>,
    /// (method here, the ancestor method it overrides).
    pub overrides: Vec<(String, String)>,
}

pub fn class(store: &Store, id: &str) -> Result<ClassInfo, GraphError> {
    let Some(class) = entity(store, id)? else {
        return Err(GraphError::NotFound { name: id.to_string(), nearest: nearest(store, id, 5)? });
    };
    let p = || params(&[("id", DataValue::from(id))]);
    let bases = store.query("?[base_name, base] := *inherits{child: $id, base_name, base}", p())?;
    let bases: Vec<(String, String)> = bases.rows.iter().map(|r| (str_of(&r[0]), str_of(&r[1]))).collect();
    let anc = store.query(
        "up[b, d] := *inherits{child: $id, base: b}, !is_null(b), d = 1
         up[b, d] := up[c, d0], d0 < 32, *inherits{child: c, base: b}, !is_null(b), d = d0 + 1
         ?[b, min(d)] := up[b, d]",
        p(),
    )?;
    let mut anc: Vec<(i64, String)> = anc.rows.iter().map(|r| (int_of(&r[1]), str_of(&r[0]))).collect();
    anc.sort();
    let ancestors: Vec<String> = anc.into_iter().map(|(_, b)| b).collect();
    let subs = store.query("?[child] := *inherits:by_base{base: $id, child}", p())?;
    let subclasses: Vec<String> = subs.rows.iter().map(|r| str_of(&r[0])).collect();
    let members = store.query(
        &format!("?[{ENTITY_COLS}] := *contains{{parent: $id, child: id}}, *entity{{{ENTITY_COLS}}} :order start_line"),
        p(),
    )?;
    let members = entities(&members);
    let (methods, fields): (Vec<EntityInfo>, Vec<EntityInfo>) = members.into_iter().partition(|m| m.kind != "field");
    let fields: Vec<EntityInfo> = fields.into_iter().filter(|f| f.kind == "field").collect();
    let mut overrides = Vec::new();
    // The ancestors' methods in one query, then taken nearest ancestor first.
    let mut by_ancestor: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    if !ancestors.is_empty() {
        let list = DataValue::List(ancestors.iter().map(|a| DataValue::from(a.as_str())).collect());
        let r = store.query(
            "?[a, id, name] := a in $ancs, *contains{parent: a, child: id}, *entity{id, name, kind: 'method'}",
            params(&[("ancs", list)]),
        )?;
        for row in &r.rows {
            by_ancestor.entry(str_of(&row[0])).or_default().push((str_of(&row[1]), str_of(&row[2])));
        }
    }
    for a in &ancestors {
        for (aid, aname) in by_ancestor.get(a).map(Vec::as_slice).unwrap_or_default() {
            let (aid, aname) = (aid.clone(), aname.clone());
            for m in methods.iter().filter(|m| m.name == aname && m.kind == "method") {
                if !overrides.iter().any(|(x, _): &(String, String)| *x == m.id) {
                    overrides.push((m.id.clone(), aid.clone()));
                }
            }
        }
    }
    Ok(ClassInfo { class, bases, ancestors, subclasses, methods, fields, overrides })
}

/// What a file imports and who imports it (or anything defined in it).
#[derive(Debug, Clone, Serialize)]
pub struct ImportsInfo {
    pub file: String,
    pub imports: Vec<ImportRow>,
    pub imported_by: Vec<ImportRow>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ImportRow {
    pub file: String,
    pub line: i64,
    pub module: String,
    pub name: String,
    pub alias: String,
    pub target: String,
}

fn import_rows(r: &NamedRows) -> Vec<ImportRow> {
    r.rows
        .iter()
        .map(|x| ImportRow {
            file: str_of(&x[0]),
            line: int_of(&x[1]),
            module: str_of(&x[2]),
            name: str_of(&x[3]),
            alias: str_of(&x[4]),
            target: str_of(&x[5]),
        })
        .collect()
}

pub fn imports(store: &Store, file: &str) -> Result<ImportsInfo, GraphError> {
    let known = store.query("?[p] := p = $f, *file{path: p}", params(&[("f", DataValue::from(file))]))?;
    if known.rows.is_empty() {
        let all = store.query("?[p] := *file{path: p}", BTreeMap::new())?;
        let base = file.rsplit('/').next().unwrap_or(file);
        let nearest = all.rows.iter().map(|r| str_of(&r[0])).filter(|p| p.ends_with(base)).take(5).collect();
        return Err(GraphError::NotFound { name: file.to_string(), nearest });
    }
    let p = || params(&[("f", DataValue::from(file))]);
    let out = store.query(
        "?[file, line, module, name, alias, target] := file = $f, *imports{file, line, module, name, alias, target} :order line",
        p(),
    )?;
    let inb = store.query(
        "?[file, line, module, name, alias, target] := *imports:by_target{target: $f, file, line}, target = $f,
             *imports{file, line, module, name, alias, target}
         ?[file, line, module, name, alias, target] := *entity:by_file{file: $f, id: target},
             *imports:by_target{target, file, line}, *imports{file, line, module, name, alias, target}
         :order file, line",
        p(),
    )?;
    Ok(ImportsInfo { file: file.to_string(), imports: import_rows(&out), imported_by: import_rows(&inb) })
}

/// Tests that reach an entity (`test_of`, walked back from it), sorted.
pub fn tests_for(store: &Store, id: &str) -> Result<Vec<String>, GraphError> {
    Ok(store.tests_reaching(&[id])?.into_iter().map(|(test, _)| test).collect())
}
