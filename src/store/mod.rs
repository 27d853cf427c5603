//! The store: the only module that writes Datalog or opens the database.
//!
//! The graph is Cozo over our own storage engine (`engine`): one immutable file of
//! sorted, prefix-compressed, LZ4-compressed blocks (`table`). A full build encodes every
//! relation's and index's pairs itself (`encode`, checked against Cozo on probe rows), one
//! at a time, streams them into a new file beside the live one, then renames the file into
//! place: a run killed half-way leaves the previous index untouched. An incremental run
//! writes only the rows that changed, as one transaction, whose commit writes a new file
//! the same way. The index format version is stored in the database; an index of
//! another version is rebuilt by `index` and refused by every reader, never misread.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use cozo::{DataValue, Db, MemStorage, NamedRows, ScriptMutability, Storage, StoreTx};
use thiserror::Error;

pub mod bounded;
pub(crate) mod encode;
pub mod engine;
pub mod rows;
pub mod table;
pub(crate) mod text;

use engine::GraphStorage;
use table::{TableError, TableWriter};

use crate::extract::FileFacts;
use rows::Rows;

/// Bump when the stored relations, their meaning, the resolver's output or the keyword
/// index's schema change. 2: the keyword index. 4: bounded ids, facts say when truncated.
/// 6: a return by name binds `->` (factories' returned functions, `return self`).
/// 7: our own table engine instead of Cozo's SQLite engine (same relations and rows).
/// 8: commits write a delta beside the base (a reader of 7 would not see it); the facts
/// encoded with variable-length integers. 9: `test_of` is no longer stored (walked back
/// from its targets when asked: `Store::tests_reaching`, the `test_of` rule of ad-hoc
/// queries); `entity` says which entities are tests (`is_test`). 10: no `call_site:by_name`
/// (no lookup of ours used it; Django's largest index).
pub const FORMAT_VERSION: u32 = 10;

#[derive(Debug, Error)]
pub enum StoreError {
    /// No index yet: run `reproagent index`.
    #[error("no index at {0}")]
    Missing(PathBuf),
    /// Written by another version of reproagent: `reproagent index` rebuilds it.
    #[error("index at {path} has format version {found}, this reproagent reads version {FORMAT_VERSION}")]
    Version { path: PathBuf, found: String },
    /// Not a database we can read: `reproagent index` rebuilds it.
    #[error("{0} is not a reproagent index")]
    Foreign(PathBuf),
    /// The file is damaged (truncated, or the engine failed reading it): `reproagent
    /// index` rebuilds it.
    #[error("index at {path} is damaged: {why}")]
    Damaged { path: PathBuf, why: String },
    /// An error from Cozo (a query error carries its position in the message).
    #[error("{0}")]
    Db(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// What the user can do about it.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            StoreError::Missing(_) => Some("run `reproagent index` in the repository first"),
            StoreError::Version { .. } | StoreError::Foreign(_) | StoreError::Damaged { .. } => {
                Some("run `reproagent index` to rebuild it")
            }
            _ => None,
        }
    }
}

fn db_err(e: cozo::Error) -> StoreError {
    StoreError::Db(format_cozo_error(&e))
}

/// Cozo errors are miette diagnostics: keep the message, its code and help, on one line.
pub fn format_cozo_error(e: &cozo::Error) -> String {
    let mut msg = e.to_string();
    if let Some(code) = e.code() {
        msg = format!("{msg} [{code}]");
    }
    if let Some(help) = e.help() {
        msg = format!("{msg}; {help}");
    }
    msg
}

/// A query error with the position of its first labelled span: `line 2, column 7: ...`.
pub fn format_query_error(e: &cozo::Error, script: &str) -> String {
    use miette::Diagnostic;
    let msg = format_cozo_error(e);
    let diag: &dyn Diagnostic = e.as_ref();
    let first = diag.labels().and_then(|mut l| l.next());
    let Some(label) = first else { return msg };
    let offset = label.offset().min(script.len());
    let before = &script[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    let what = label.label().map(|l| format!(" ({l})")).unwrap_or_default();
    format!("line {line}, column {col}: {msg}{what}")
}

/// The stored relations: name, key columns, value columns (with types).
pub const RELATIONS: &[(&str, &str, &str)] = &[
    ("file", "path: String", "lang: String, hash: String, lines: Int, is_test: Bool, syntax_errors: Int"),
    (
        "entity",
        "id: String",
        "kind: String, name: String, qname: String, file: String, start_line: Int, end_line: Int, signature: String, doc: String, is_test: Bool",
    ),
    ("contains", "parent: String, child: String", ""),
    ("calls", "caller: String, callee: String, line: Int", "how: String, confidence: Float"),
    ("call_site", "caller: String, line: Int, name: String, receiver: String", ""),
    ("unresolved", "name: String, caller: String, line: Int, receiver: String", ""),
    ("imports", "file: String, line: Int, module: String, name: String", "alias: String, target: String?"),
    ("inherits", "child: String, base_name: String", "base: String?"),
];

/// A relation the index derives when asked instead of storing: its name, its columns, and
/// the Datalog rules that define it.
pub type Rule = (&'static str, &'static str, fn() -> String);

/// The derived relations: rules that every ad-hoc query (`reproagent query`) may use,
/// written with square brackets: `test_of[test, target]`.
pub const RULES: &[Rule] = &[("test_of", "test: String, target: String", test_of_rule)];

/// The `test_of` rule: a test and an entity it reaches through 1 to
/// [`crate::resolve::TEST_REACH_DEPTH`] call edges at least
/// [`crate::resolve::TEST_REACH_CONFIDENCE`] sure (the pairs `Store::tests_reaching` gives).
pub fn test_of_rule() -> String {
    let (depth, min) = (crate::resolve::TEST_REACH_DEPTH, crate::resolve::TEST_REACH_CONFIDENCE);
    format!(
        "test_of[test, target] := test_of_reach[test, target, d], test != target\n\
         test_of_reach[test, target, d] := *entity{{id: test, is_test: true}}, *calls{{caller: test, callee: target, confidence}}, confidence >= {min:?}, d = 1\n\
         test_of_reach[test, target, d] := test_of_reach[test, mid, d0], d0 < {depth}, *calls{{caller: mid, callee: target, confidence}}, confidence >= {min:?}, d = d0 + 1\n"
    )
}

/// A user's script with the [`RULES`] it uses and does not define itself appended (after
/// its last line, so an error's line and column are still the script's own); a script
/// that names `*test_of` as a stored relation is refused with what to write instead.
pub fn with_rules(script: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    // `name` then `tail`, not the end of a longer name nor a stored relation (`*name`). No
    // parsing: a mention inside a string or a comment only costs an unused rule.
    let uses = |name: &str, tail: &str| {
        let pat = format!("{name}{tail}");
        script
            .match_indices(&pat)
            .any(|(i, _)| !script[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '*'))
    };
    let stored = |name: &str| {
        script
            .match_indices(&format!("*{name}"))
            .any(|(i, _)| !script[i + 1 + name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    };
    let mut out = std::borrow::Cow::Borrowed(script);
    for (name, cols, define) in RULES {
        if stored(name) {
            let cols: Vec<&str> = cols.split(", ").map(|c| c.split(':').next().unwrap_or(c)).collect();
            return Err(format!(
                "`*{name}` is not a stored relation (index format {FORMAT_VERSION} derives it when asked): write the rule `{name}[{}]` instead",
                cols.join(", ")
            ));
        }
        let defined = script.lines().any(|l| l.trim_start().starts_with(&format!("{name}[")) && l.contains(":="));
        if uses(name, "[") && !defined {
            out = std::borrow::Cow::Owned(format!("{out}\n{}", define()));
        }
    }
    Ok(out)
}

/// Internal relations: what the index needs to update itself.
const INTERNAL: &[(&str, &str, &str)] =
    &[("index_meta", "key: String", "value: String"), ("index_facts", "path: String", "data: Bytes")];

/// Indices, named for the lookups the tools make (a lookup that binds a non-prefix of a
/// relation's key is a full scan).
pub const INDICES: &[(&str, &str)] = &[
    ("entity:by_file", "file, id"),
    ("entity:by_name", "name, id"),
    ("contains:by_child", "child, parent"),
    ("calls:by_callee", "callee, caller, line"),
    ("imports:by_target", "target, file, line"),
    ("inherits:by_base", "base, child"),
];

/// Paths of the index files under a repository root.
pub fn db_path(root: &Path) -> PathBuf {
    state_dir(root).join("graph.db")
}

/// reproagent's state under a repository root: the index, runs, bench records.
pub fn state_dir(root: &Path) -> PathBuf {
    root.join(".reproagent")
}

/// What `.reproagent/.gitignore` holds: everything in the directory (itself included)
/// is ignored, so git never shows it and the user's `.gitignore` is left alone.
pub const STATE_GITIGNORE: &str = "# Written by reproagent: its state is never part of the repository.\n*\n";

/// Create `root/.reproagent/` when it is missing and give it its `.gitignore`; an
/// existing directory without one gets it (an existing one is left as the user has it).
pub fn ensure_state_dir(root: &Path) -> std::io::Result<PathBuf> {
    let dir = state_dir(root);
    std::fs::create_dir_all(&dir)?;
    let ignore = dir.join(".gitignore");
    if std::fs::symlink_metadata(&ignore).is_err() {
        // Written aside and renamed, so a killed run never leaves a half-written file.
        let tmp = dir.join(format!(".gitignore.tmp-{}", std::process::id()));
        std::fs::write(&tmp, STATE_GITIGNORE)?;
        std::fs::rename(&tmp, &ignore)?;
    }
    Ok(dir)
}

/// Remove what killed runs left in the state dir `dir`: `graph.db.tmp-PID` and `graph.db.delta.tmp-PID` files and
/// `search.tmp-PID`/`search.old-PID` directories whose process is gone. The live index
/// was never touched by them. A live process's temp files are its own (the index lock
/// makes another's rare; this process's may be being written by its other store writer
/// right now). Returns how many were removed.
pub fn remove_dead_temps(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = ["graph.db.tmp-", "graph.db.delta.tmp-", "search.tmp-", "search.old-"]
            .iter()
            .find_map(|p| name.strip_prefix(p));
        // `graph.db.tmp-PID-journal`, SQLite's, goes with its file.
        let Some(pid) = pid.and_then(|p| p.split(|c: char| !c.is_ascii_digit()).next()) else { continue };
        let live =
            pid.parse::<u32>().is_ok_and(|p| p == std::process::id() || Path::new(&format!("/proc/{p}")).exists());
        if live {
            continue;
        }
        let p = e.path();
        let removed = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        n += usize::from(removed.is_ok());
    }
    n
}

/// An open index.
pub struct Store {
    db: Db<GraphStorage>,
    storage: GraphStorage,
    path: PathBuf,
}

/// Where relations' pairs begin: Cozo's own catalog (relation 0) comes before.
const DATA_START: [u8; 8] = 1u64.to_be_bytes();
/// Past every pair: no key starts with relation number 2^64-1.
const DATA_END: [u8; 9] = [0xff; 9];

/// Was this file written by reproagent 6 or older, on Cozo's SQLite engine?
fn is_old_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == b"SQLite format 3\0"
}

fn table_error(path: &Path, e: TableError) -> StoreError {
    match e {
        TableError::Foreign => StoreError::Foreign(path.to_path_buf()),
        TableError::Damaged(why) => StoreError::Damaged { path: path.to_path_buf(), why },
        TableError::Io(e) => StoreError::Io(e),
    }
}

/// A Cozo error while reading: the engine's "is damaged" errors become `Damaged`.
fn read_err(path: &Path, e: cozo::Error) -> StoreError {
    damage(path, &e).unwrap_or_else(|| StoreError::Db(format_cozo_error(&e)))
}

fn damage(path: &Path, e: &cozo::Error) -> Option<StoreError> {
    let msg = format_cozo_error(e);
    let (_, why) = msg.split_once(" is damaged: ")?;
    Some(StoreError::Damaged { path: path.to_path_buf(), why: crate::extract::truncate(why.to_string(), 200) })
}

/// A read row's values as [`Rows`] holds them: owned text, an integer, optional text.
fn st(v: &DataValue) -> rows::Text<'static> {
    v.get_str().unwrap_or_default().to_string().into()
}

fn int(v: &DataValue) -> i64 {
    v.get_int().unwrap_or_default()
}

fn ost(v: &DataValue) -> Option<rows::Text<'static>> {
    v.get_str().map(|s| rows::Text::Owned(s.to_string()))
}

/// Run `f`, turning a panic inside the engine (a damaged file it reads) into `Damaged`.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the database engine failed reading it".into());
            Err(StoreError::Damaged { path: path.to_path_buf(), why: crate::extract::truncate(why, 200) })
        }
    }
}

/// Open an existing index for reading and checking. It must exist, be whole and have
/// our format.
pub fn open(path: &Path) -> Result<Store, StoreError> {
    if !path.exists() {
        return Err(StoreError::Missing(path.to_path_buf()));
    }
    if is_old_sqlite(path) {
        return Err(StoreError::Version { path: path.to_path_buf(), found: "6 or older (Cozo on SQLite)".into() });
    }
    let storage = GraphStorage::open(path).map_err(|e| table_error(path, e))?;
    guarded(path, || {
        let db = Db::new(storage.clone()).map_err(|e| read_err(path, e))?;
        db.initialize().map_err(|e| read_err(path, e))?;
        let store = Store { db, storage, path: path.to_path_buf() };
        let version = match store.meta("format_version") {
            Ok(v) => v,
            Err(e @ StoreError::Damaged { .. }) => return Err(e),
            Err(_) => return Err(StoreError::Foreign(path.to_path_buf())),
        };
        match version {
            Some(v) if v == FORMAT_VERSION.to_string() => {
                // Written by another build: its rows may come from other rules. Same format, so
                // readers may read it; `index` rebuilds it (see `written_by_this_build`).
                Ok(store)
            }
            Some(v) => Err(StoreError::Version { path: path.to_path_buf(), found: v }),
            None => Err(StoreError::Foreign(path.to_path_buf())),
        }
    })
}

/// Every relation followed by its indices: Cozo numbers relations (and indices, which
/// are relations) in the order they are made and prefixes their keys with that number,
/// so a relation's pairs and its indices' come after every earlier relation's, which is
/// what lets `write_full` stream one relation at a time into the sorted file.
fn schema_script() -> String {
    let mut s = String::new();
    for (name, keys, vals) in RELATIONS.iter().chain(INTERNAL) {
        if vals.is_empty() {
            s.push_str(&format!("{{:create {name} {{{keys}}}}}\n"));
        } else {
            s.push_str(&format!("{{:create {name} {{{keys} => {vals}}}}}\n"));
        }
        for (index, cols) in INDICES.iter().filter(|(i, _)| i.split(':').next() == Some(name)) {
            s.push_str(&format!("{{::index create {index} {{{cols}}}}}\n"));
        }
    }
    s
}

fn s(v: &str) -> DataValue {
    DataValue::from(v)
}

fn named(headers: &[&str], rows: Vec<Vec<DataValue>>) -> NamedRows {
    NamedRows::new(headers.iter().map(|h| h.to_string()).collect(), rows)
}

/// Rows of every relation as Cozo tuples, keyed by relation name.
fn to_tuples(
    rows: &Rows,
    facts: encode::Facts,
    meta: &[(String, String)],
) -> BTreeMap<&'static str, Vec<Vec<DataValue>>> {
    RELATIONS.iter().chain(INTERNAL).map(|(rel, _, _)| (*rel, tuples_of(rel, rows, facts, meta))).collect()
}

/// The rows of one relation as Cozo tuples (their columns as the full build encodes them:
/// `encode::each_row`).
fn tuples_of(rel: &str, rows: &Rows, facts: encode::Facts, meta: &[(String, String)]) -> Vec<Vec<DataValue>> {
    let mut out = Vec::new();
    // `each_row` fails only for a name it does not know; every name in `RELATIONS` and
    // `INTERNAL` is one (a full build, which writes through it, would stop otherwise).
    let _ = encode::each_row(rel, rows, facts, meta, &mut |row| {
        out.push(row.iter().map(|c| c.to_value()).collect());
        Ok(())
    });
    out
}

fn headers(rel: &str) -> Vec<&'static str> {
    let (_, keys, vals) = RELATIONS.iter().chain(INTERNAL).find(|(n, _, _)| *n == rel).copied().unwrap_or(("", "", ""));
    keys.split(',')
        .chain(vals.split(','))
        .filter_map(|c| c.split(':').next().map(str::trim).filter(|c| !c.is_empty()))
        .collect()
}

fn key_len(rel: &str) -> usize {
    RELATIONS.iter().chain(INTERNAL).find(|(n, _, _)| *n == rel).map(|(_, k, _)| k.split(',').count()).unwrap_or(0)
}

/// The facts of each file, serialized for the next incremental run (bincode: decoding
/// every file's facts is most of an incremental run's fixed cost, and JSON was 5x slower).
pub fn encode_facts(facts: &[&FileFacts]) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    use rayon::prelude::*;
    facts
        .par_iter()
        .map(|f| {
            let mut out = Vec::new();
            facts_into(&mut out, f).map(|_| (f.path.clone(), out))
        })
        .collect()
}

/// One file's facts, encoded as [`encode_facts`] does, appended to `out`.
fn facts_into(out: &mut Vec<u8>, facts: &FileFacts) -> Result<(), StoreError> {
    use bincode::Options;
    facts_codec().serialize_into(out, facts).map_err(|e| StoreError::Db(format!("encoding a file's facts: {e}")))
}

/// The facts' encoding: bincode with variable-length integers (a string's length in one
/// byte, not eight: the blob is smaller to decompress and decode).
fn facts_codec() -> impl bincode::Options + Copy {
    bincode::DefaultOptions::new()
}

/// A digest of every indexed file's path and content hash: the graph and the keyword
/// index both record it, so either can tell whether the other matches it.
pub fn tree_digest<'a>(facts: impl IntoIterator<Item = &'a FileFacts>) -> String {
    let mut h = blake3::Hasher::new();
    for f in facts {
        h.update(f.path.as_bytes());
        h.update(b"\0");
        h.update(f.hash.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex()[..32].to_string()
}

/// The index's own facts, sorted by key (a full build writes them in key order).
fn meta_rows(root: &Path, digest: &str, counts: &crate::resolve::Counts) -> Vec<(String, String)> {
    let mut meta: Vec<(String, String)> = vec![
        ("counts".into(), serde_json::to_string(counts).unwrap_or_default()),
        ("tree_digest".into(), digest.to_string()),
        ("format_version".into(), FORMAT_VERSION.to_string()),
        ("reproagent_version".into(), env!("CARGO_PKG_VERSION").into()),
        ("root".into(), root.display().to_string()),
    ];
    meta.sort();
    meta
}

/// Write a whole new index at `path`, atomically replacing any previous one.
///
/// The pairs are encoded straight from the rows (no Cozo builds them first): a relation's
/// own run streams from its rows to the file, an index's keys are sorted in one buffer,
/// each file's facts are encoded as they are written, and each relation's rows are freed
/// once its runs are written. `facts` must be sorted by path (as resolution needs them).
pub fn write_full(
    path: &Path,
    root: &Path,
    rows: Rows,
    facts: &[&FileFacts],
    digest: &str,
    counts: &crate::resolve::Counts,
) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    remove_dead_temps(dir);
    engine::replace_with(path, |tmp| {
        write_table(tmp, root, rows, encode::Facts::Parsed(facts), digest, counts)?;
        // The old base's delta goes before the new base takes its place: a rebuilt base
        // that happens to equal the old one must not get the old changes laid over it.
        match std::fs::remove_file(engine::delta_path(path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    })
}

fn write_table(
    tmp: &Path,
    root: &Path,
    mut rows: Rows,
    facts: encode::Facts,
    digest: &str,
    counts: &crate::resolve::Counts,
) -> Result<(), StoreError> {
    let werr = |e: TableError| table_error(tmp, e);
    let (catalog, layouts) = layouts()?;
    let mut w = TableWriter::create(tmp).map_err(werr)?;
    for (k, v) in &catalog {
        w.add(k, v).map_err(werr)?;
    }
    let meta = meta_rows(root, digest, counts);
    // Every relation and every index is a run of keys of its own number: written in the
    // order of the numbers, each run sorted, the file is sorted.
    let mut units: Vec<(u64, &encode::Layout)> = Vec::new();
    for l in &layouts {
        units.push((l.id, l));
        units.extend(l.indices.iter().map(|(id, _)| (*id, l)));
    }
    units.sort_by_key(|(id, _)| *id);
    // Two stages at once: this thread encodes the rows into pairs, in batches; a second
    // thread adds them to the table (prefixes, LZ4, CRCs, the file). A few batches are in
    // flight at most, their buffers handed back to be filled again.
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Batch>(2);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Batch>();
    std::thread::scope(|s| {
        let writer = s.spawn(move || -> Result<TableWriter, StoreError> {
            for mut batch in full_rx {
                for (k, v) in batch.pairs() {
                    // The writer refusing a pair (out of order, or twice) is a bug in what
                    // is written, not damage to an index: said as such, with the relation.
                    w.add(k, v).map_err(|e| match e {
                        TableError::Damaged(why) => StoreError::Db(format!("writing relation {}: {why}", batch.rel)),
                        other => werr(other),
                    })?;
                }
                batch.bytes.clear();
                batch.ends.clear();
                // The encoder may be gone (it stopped on an error): the buffer is dropped.
                let _ = empty_tx.send(batch);
            }
            Ok(w)
        });
        // A closed channel: the writer stopped, and says why when joined.
        let stopped = |_| StoreError::Db("the graph's table writer stopped".into());
        // A batch holds one unit's pairs (a refusal names the relation); its buffers are
        // one handed back when there is one.
        let fresh = |rel| Batch { rel, ..empty_rx.try_recv().unwrap_or_default() };
        let encoded = || -> Result<(), StoreError> {
            for (id, l) in units {
                let mut batch = fresh(l.name);
                encode::write_unit(l, id, &mut |f| encode::each_row(l.name, &rows, facts, &meta, f), &mut |k, v| {
                    batch.push(k, v);
                    if batch.bytes.len() >= Batch::BYTES {
                        full_tx.send(std::mem::replace(&mut batch, fresh(l.name))).map_err(stopped)?;
                    }
                    Ok(())
                })?;
                if !batch.ends.is_empty() {
                    full_tx.send(batch).map_err(stopped)?;
                }
                // A relation's rows go once its last run is written (its runs are numbered
                // together: each index right after its relation).
                if l.indices.iter().map(|(i, _)| *i).chain([l.id]).max() == Some(id) {
                    rows.clear_relation(l.name);
                }
            }
            Ok(())
        };
        let encoded = encoded();
        drop(full_tx);
        let written = writer.join().map_err(|_| StoreError::Db("the graph's table writer panicked".into()))?;
        // The writer's own error says more than the encoder's closed channel.
        let w = written?;
        encoded?;
        w.finish().map_err(werr)?;
        Ok(())
    })
}

/// Encoded pairs on their way to the table writer: keys and values laid end to end in
/// one buffer, with where each pair's key and value end.
#[derive(Default)]
struct Batch {
    rel: &'static str,
    bytes: Vec<u8>,
    ends: Vec<(usize, usize)>,
}

impl Batch {
    /// About what a batch holds before it is handed over.
    const BYTES: usize = 1 << 18;

    fn push(&mut self, k: &[u8], v: &[u8]) {
        self.bytes.extend_from_slice(k);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(v);
        self.ends.push((key_end, self.bytes.len()));
    }

    fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(k, v)| {
            let pair = (&self.bytes[start..k], &self.bytes[k..v]);
            start = v;
            pair
        })
    }
}

/// Cozo's catalog for the schema (the pairs below `DATA_START`) and every relation's
/// layout: its number and its indices' numbers and columns, learned from an in-memory
/// Cozo given the schema and probe rows of each relation, and checked against it.
fn layouts() -> Result<(Vec<table::Pair>, Vec<encode::Layout>), StoreError> {
    let bug =
        |why: String| StoreError::Db(format!("{why} (a store bug: Cozo's encoding is not what reproagent writes)"));
    let storage = MemStorage::default();
    let db = Db::new(storage.clone()).map_err(db_err)?;
    db.initialize().map_err(db_err)?;
    db.run_script(&schema_script(), BTreeMap::new(), ScriptMutability::Mutable).map_err(db_err)?;
    let scan = |lower: &[u8], upper: &[u8]| -> Result<Vec<table::Pair>, StoreError> {
        let tx = storage.transact(false).map_err(db_err)?;
        let pairs = tx.range_scan(lower, upper).collect::<Result<Vec<_>, _>>().map_err(db_err);
        pairs
    };
    let catalog = scan(&[], &DATA_START)?;
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut out = Vec::new();
    for (rel, keys, vals) in RELATIONS.iter().chain(INTERNAL) {
        let cols: Vec<(&str, &str)> = keys
            .split(',')
            .chain(vals.split(','))
            .filter_map(|c| c.split_once(':').map(|(n, t)| (n.trim(), t.trim())))
            .collect();
        let nkeys = key_len(rel);
        let pos = |name: &str| cols.iter().position(|(n, _)| *n == name);
        let types: Vec<&str> = cols.iter().map(|(_, t)| *t).collect();
        let probes = encode::probe_rows(&types);
        let mut data = BTreeMap::new();
        data.insert(rel.to_string(), named(&headers(rel), probes.to_vec()));
        db.import_relations(data).map_err(db_err)?;
        let groups: BTreeMap<u64, Vec<table::Pair>> =
            encode::by_id(scan(&DATA_START, &DATA_END)?).into_iter().filter(|(id, _)| !seen.contains(id)).collect();
        seen.extend(groups.keys());
        // The relation's own run is the one whose values carry columns (an index's are empty).
        let main = groups.iter().find(|(_, p)| p.iter().all(|(_, v)| !v.is_empty())).map(|(id, _)| *id);
        let Some(id) = main else {
            return Err(bug(format!("relation {rel} wrote no rows")));
        };
        let mut layout = encode::Layout { name: rel, id, keys: nkeys, indices: Vec::new() };
        // An index's key: its columns, then the relation's key columns it does not name.
        for (index, icols) in INDICES.iter().filter(|(i, _)| i.split(':').next() == Some(rel)) {
            let mut ix: Vec<usize> = Vec::new();
            for c in icols.split(',').map(str::trim) {
                ix.push(pos(c).ok_or_else(|| bug(format!("index {index} names no column {c}")))?);
            }
            let rest: Vec<usize> = (0..nkeys).filter(|k| !ix.contains(k)).collect();
            ix.extend(rest);
            let found = groups.keys().copied().filter(|g| *g != id).find(|g| {
                let want = encode::Layout { name: rel, id, keys: nkeys, indices: vec![(*g, ix.clone())] };
                encode::probe_pairs(&want, *g, &probes).ok().as_ref() == groups.get(g)
            });
            let Some(g) = found else {
                return Err(bug(format!("no run of index {index} matches its encoding")));
            };
            layout.indices.push((g, ix));
        }
        if encode::probe_pairs(&layout, id, &probes)?.as_slice() != groups[&id].as_slice() {
            return Err(bug(format!("relation {rel}'s rows are not encoded as expected")));
        }
        if groups.len() != 1 + layout.indices.len() {
            return Err(bug(format!("relation {rel} has a run no index explains")));
        }
        out.push(layout);
    }
    if scan(&[], &DATA_START)? != catalog {
        return Err(bug("the catalog changed while probing".into()));
    }
    Ok((catalog, out))
}

/// The changes between two row sets, as Cozo deletions and puts.
#[derive(Default)]
pub struct Diff {
    data: BTreeMap<String, NamedRows>,
    pub changed_rows: usize,
}

/// Rows to delete (keys only in `old`) and to put (new or changed rows), per relation.
pub fn diff(old: &Rows, new: &Rows, old_facts: &[(String, Vec<u8>)], new_facts: &[(String, Vec<u8>)]) -> Diff {
    // Diff the typed rows first (a merge walk over sorted collections), then turn only
    // the changed rows into Cozo tuples: most rows of an incremental run are unchanged.
    let mut puts = Rows::default();
    let mut dels = Rows::default();
    split_map(&old.file, &new.file, &mut puts.file, &mut dels.file);
    split_map(&old.entity, &new.entity, &mut puts.entity, &mut dels.entity);
    split_set(&old.contains, &new.contains, &mut puts.contains, &mut dels.contains);
    split_map(&old.calls, &new.calls, &mut puts.calls, &mut dels.calls);
    split_set(&old.call_site, &new.call_site, &mut puts.call_site, &mut dels.call_site);
    split_set(&old.unresolved, &new.unresolved, &mut puts.unresolved, &mut dels.unresolved);
    split_map(&old.imports, &new.imports, &mut puts.imports, &mut dels.imports);
    split_map(&old.inherits, &new.inherits, &mut puts.inherits, &mut dels.inherits);
    let new_paths: std::collections::BTreeSet<&str> = new_facts.iter().map(|(p, _)| p.as_str()).collect();
    let gone: Vec<(String, Vec<u8>)> =
        old_facts.iter().filter(|(p, _)| !new_paths.contains(p.as_str())).cloned().collect();
    let put_t = to_tuples(&puts, encode::Facts::Encoded(new_facts), &[]);
    let del_t = to_tuples(&dels, encode::Facts::Encoded(&gone), &[]);
    let mut data = BTreeMap::new();
    let mut changed = 0;
    for (rel, rows) in put_t {
        if !rows.is_empty() {
            changed += rows.len();
            data.insert(rel.to_string(), named(&headers(rel), rows));
        }
    }
    for (rel, rows) in del_t {
        if !rows.is_empty() {
            let k = key_len(rel);
            changed += rows.len();
            let keys: Vec<Vec<DataValue>> = rows
                .into_iter()
                .map(|mut r| {
                    r.truncate(k);
                    r
                })
                .collect();
            data.insert(format!("-{rel}"), named(&headers(rel)[..k], keys));
        }
    }
    Diff { data, changed_rows: changed }
}

/// Entries of `new` that are new or changed go to `puts`; keys only in `old` to `dels`.
fn split_map<K: Ord + Clone, V: PartialEq + Clone>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
    puts: &mut BTreeMap<K, V>,
    dels: &mut BTreeMap<K, V>,
) {
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    dels.insert((*ka).clone(), (*va).clone());
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    puts.insert((*kb).clone(), (*vb).clone());
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if va != vb {
                        puts.insert((*kb).clone(), (*vb).clone());
                    }
                    a.next();
                    b.next();
                }
            },
            (Some((ka, va)), None) => {
                dels.insert((*ka).clone(), (*va).clone());
                a.next();
            }
            (None, Some((kb, vb))) => {
                puts.insert((*kb).clone(), (*vb).clone());
                b.next();
            }
            (None, None) => break,
        }
    }
}

fn split_set<K: Ord + Clone>(old: &BTreeSet<K>, new: &BTreeSet<K>, puts: &mut BTreeSet<K>, dels: &mut BTreeSet<K>) {
    puts.extend(new.difference(old).cloned());
    dels.extend(old.difference(new).cloned());
}

impl Store {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Apply a diff as one transaction.
    pub fn apply(
        &self,
        diff: Diff,
        root: &Path,
        digest: &str,
        counts: &crate::resolve::Counts,
    ) -> Result<(), StoreError> {
        let mut data = diff.data;
        let meta = meta_rows(root, digest, counts).into_iter().map(|(k, v)| vec![s(&k), s(&v)]).collect();
        data.insert("index_meta".into(), named(&["key", "value"], meta));
        guarded(&self.path, || self.db.import_relations(data).map_err(|e| read_err(&self.path, e)))
    }

    /// Set one `index_meta` row (tests use it to fake an index of another format).
    pub fn put_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let mut data = BTreeMap::new();
        data.insert("index_meta".to_string(), named(&["key", "value"], vec![vec![s(key), s(value)]]));
        self.db.import_relations(data).map_err(|e| read_err(&self.path, e))
    }

    /// Check every block of the file against its checksum: an incremental run checks
    /// the file before it builds on it, so a damaged one is rebuilt, not copied on.
    pub fn verify(&self) -> Result<(), StoreError> {
        self.storage.check_sums().map_err(|e| table_error(&self.path, e))
    }

    /// Was this index written by this very version of reproagent? An incremental update
    /// diffs against what this build's resolver would have written, so `index` rebuilds
    /// an index from another version.
    pub fn written_by_this_build(&self) -> bool {
        self.meta("reproagent_version").ok().flatten().as_deref() == Some(env!("CARGO_PKG_VERSION"))
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut params = BTreeMap::new();
        params.insert("k".to_string(), s(key));
        let r = self
            .db
            .run_script("?[v] := *index_meta{key: $k, value: v}", params, ScriptMutability::Immutable)
            .map_err(|e| read_err(&self.path, e))?;
        Ok(r.rows.first().and_then(|row| row.first()).and_then(|v| v.get_str()).map(str::to_string))
    }

    /// The stored facts of every file, sorted by path.
    pub fn load_facts(&self) -> Result<Vec<FileFacts>, StoreError> {
        // A scan of the relation (no query to plan and evaluate: the query engine's copy
        // and sort of 30-odd MB was a tenth of an incremental run on Django).
        let mut r = guarded(&self.path, || {
            self.db.export_relations(std::iter::once("index_facts")).map_err(|e| read_err(&self.path, e))
        })?;
        let r = r.remove("index_facts").ok_or_else(|| StoreError::Db("no index_facts relation".into()))?;
        let data_col = r.headers.iter().position(|h| h == "data").unwrap_or(1);
        // Decoding is most of the cost: spread it over the threads.
        use rayon::prelude::*;
        let mut out = r
            .rows
            .par_iter()
            .map(|row| {
                let data = match row.get(data_col) {
                    Some(DataValue::Bytes(b)) => b.as_slice(),
                    _ => &[],
                };
                bincode::Options::deserialize::<FileFacts>(facts_codec(), data)
                    .map_err(|e| StoreError::Db(format!("stored facts: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// `test_of`, walked back from its targets: for each of `targets`, the tests that reach
    /// it through at most [`TEST_REACH_DEPTH`] call edges at least [`TEST_REACH_CONFIDENCE`]
    /// sure, as (test, target), sorted. A test does not reach itself. The same pairs as a
    /// walk forward from every test (`resolve::test_of`, which a lib test holds this to),
    /// for the cost of a few batched lookups instead of a stored closure with more rows
    /// than `calls` (Guava: 204k against 163k).
    ///
    /// [`TEST_REACH_DEPTH`]: crate::resolve::TEST_REACH_DEPTH
    /// [`TEST_REACH_CONFIDENCE`]: crate::resolve::TEST_REACH_CONFIDENCE
    pub fn tests_reaching(&self, targets: &[&str]) -> Result<Vec<(String, String)>, StoreError> {
        use crate::resolve::{TEST_REACH_CONFIDENCE, TEST_REACH_DEPTH};
        // Each target's own walk (its seen set), the lookups shared: a level asks once for
        // the callers of every entity any walk reached at the level before.
        let mut known: HashMap<String, Vec<String>> = HashMap::new();
        let mut seen: Vec<HashSet<String>> = targets.iter().map(|t| HashSet::from([t.to_string()])).collect();
        let mut frontier: Vec<Vec<String>> = targets.iter().map(|t| vec![t.to_string()]).collect();
        for _ in 0..TEST_REACH_DEPTH {
            let missing: BTreeSet<&str> =
                frontier.iter().flatten().map(String::as_str).filter(|n| !known.contains_key(*n)).collect();
            if !missing.is_empty() {
                let batch: Vec<&str> = missing.into_iter().collect();
                let r = self.run_ids(
                    "?[callee, caller] := callee in $ids, *calls:by_callee{callee, caller, line}, *calls{caller, callee, line, confidence}, confidence >= $min",
                    &batch,
                    TEST_REACH_CONFIDENCE,
                )?;
                for n in &batch {
                    known.insert(n.to_string(), Vec::new());
                }
                for row in &r.rows {
                    if let (Some(callee), Some(caller)) = (row[0].get_str(), row[1].get_str()) {
                        known.entry(callee.to_string()).or_default().push(caller.to_string());
                    }
                }
            }
            for (i, f) in frontier.iter_mut().enumerate() {
                let mut next = Vec::new();
                for at in f.iter() {
                    for c in &known[at] {
                        if seen[i].insert(c.clone()) {
                            next.push(c.clone());
                        }
                    }
                }
                *f = next;
            }
        }
        // Which of the entities reached are tests.
        let reached: BTreeSet<&str> = seen.iter().flatten().map(String::as_str).collect();
        let reached: Vec<&str> = reached.into_iter().collect();
        let r = self.run_ids("?[id] := id in $ids, *entity{id, is_test}, is_test == true", &reached, 0.0)?;
        let tests: HashSet<&str> = r.rows.iter().filter_map(|row| row.first()?.get_str()).collect();
        let mut out: Vec<(String, String)> = Vec::new();
        for (target, reached) in targets.iter().zip(&seen) {
            out.extend(
                reached
                    .iter()
                    .filter(|t| *t != target && tests.contains(t.as_str()))
                    .map(|t| (t.clone(), target.to_string())),
            );
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The stored rows the files at `paths` hold: each file's row, its
    /// entities, and the edges and sites whose caller, parent, child or file is one of
    /// them. The same rows as resolving those files in the tree the index was built from
    /// (`resolve::resolve_files`): what an incremental run takes away before it puts the
    /// files' new rows.
    ///
    /// `of_files` is how many files the index holds: from a fifth of them on, each relation
    /// is scanned whole rather than looked up per file and entity (a scan costs about what
    /// the lookups of a fifth of the files cost, measured on Django: benches/README.md).
    pub fn rows_of_files(&self, paths: &[&str], of_files: usize) -> Result<Rows<'static>, StoreError> {
        if paths.len() * 5 >= of_files {
            self.rows_of_files_by_scan(paths)
        } else {
            self.rows_of_files_by_query(paths)
        }
    }

    /// [`Store::rows_of_files`] by a query per relation: a lookup per file and per entity.
    fn rows_of_files_by_query(&self, paths: &[&str]) -> Result<Rows<'static>, StoreError> {
        let mut rows = Rows::default();
        if paths.is_empty() {
            return Ok(rows);
        }
        let q = |script: &str, ids: &[&str]| self.run_ids(script, ids, 0.0).map(|r| r.rows);
        for r in q(
            "?[path, lang, hash, lines, is_test, syntax_errors] := path in $ids, *file{path, lang, hash, lines, is_test, syntax_errors}",
            paths,
        )? {
            rows.file.insert(st(&r[0]), (st(&r[1]), st(&r[2]), int(&r[3]), r[4].get_bool().unwrap_or_default(), int(&r[5])));
        }
        // Two steps: with both in one rule Cozo scans `entity` (160 ms on Django).
        let ids = q("?[id] := file in $ids, *entity:by_file{file, id}", paths)?;
        let ids: Vec<&str> = ids.iter().filter_map(|r| r.first()?.get_str()).collect();
        for r in q(
            "?[id, kind, name, qname, file, start_line, end_line, signature, doc, is_test] := id in $ids, *entity{id, kind, name, qname, file, start_line, end_line, signature, doc, is_test}",
            &ids,
        )? {
            rows.entity.insert(
                st(&r[0]),
                rows::EntityRow {
                    kind: st(&r[1]),
                    name: st(&r[2]),
                    qname: st(&r[3]),
                    file: st(&r[4]),
                    start_line: int(&r[5]),
                    end_line: int(&r[6]),
                    signature: st(&r[7]),
                    doc: st(&r[8]),
                    is_test: r[9].get_bool().unwrap_or_default(),
                },
            );
        }
        for r in q(
            "?[file, line, module, name, alias, target] := file in $ids, *imports{file, line, module, name, alias, target}",
            paths,
        )? {
            rows.imports.insert((st(&r[0]), int(&r[1]), st(&r[2]), st(&r[3])), (st(&r[4]), ost(&r[5])));
        }
        let ids: Vec<&str> = rows.entity.keys().map(|k| k.as_ref()).collect();
        for r in q("?[parent, child] := parent in $ids, *contains{parent, child}", &ids)? {
            rows.contains.insert((st(&r[0]), st(&r[1])));
        }
        for r in q(
            "?[caller, callee, line, how, confidence] := caller in $ids, *calls{caller, callee, line, how, confidence}",
            &ids,
        )? {
            rows.calls.insert((st(&r[0]), st(&r[1]), int(&r[2])), (st(&r[3]), r[4].get_float().unwrap_or_default()));
        }
        for r in q("?[caller, line, name, receiver] := caller in $ids, *call_site{caller, line, name, receiver}", &ids)?
        {
            rows.call_site.insert((st(&r[0]), int(&r[1]), st(&r[2]), st(&r[3])));
        }
        // `unresolved` is keyed by name: reached through the call sites, each of which
        // it repeats whole.
        for r in q(
            "?[name, caller, line, receiver] := caller in $ids, *call_site{caller, line, name, receiver}, *unresolved{name, caller, line, receiver}",
            &ids,
        )? {
            rows.unresolved.insert((st(&r[0]), st(&r[1]), int(&r[2]), st(&r[3])));
        }
        for r in q("?[child, base_name, base] := child in $ids, *inherits{child, base_name, base}", &ids)? {
            rows.inherits.insert((st(&r[0]), st(&r[1])), ost(&r[2]));
        }
        Ok(rows)
    }

    /// [`Store::rows_of_files`] by a scan of each relation, kept where a column is one of
    /// the files or their entities: for many files, cheaper than the lookups (an edit that
    /// adds a common name affects most files: 2,061 of Django's 2,805 for `x = 1`, whose
    /// 52,000 entities' lookups took 3 s).
    fn rows_of_files_by_scan(&self, paths: &[&str]) -> Result<Rows<'static>, StoreError> {
        let mut rows = Rows::default();
        if paths.is_empty() {
            return Ok(rows);
        }
        let scan = |rel: &str, cols: &[&str]| -> Result<(NamedRows, Vec<usize>), StoreError> {
            let mut r = guarded(&self.path, || {
                self.db.export_relations(std::iter::once(rel)).map_err(|e| read_err(&self.path, e))
            })?;
            let r = r.remove(rel).ok_or_else(|| StoreError::Db(format!("no {rel} relation")))?;
            let at = cols
                .iter()
                .map(|c| {
                    r.headers
                        .iter()
                        .position(|h| h == c)
                        .ok_or_else(|| StoreError::Db(format!("{rel} has no column {c}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((r, at))
        };
        let in_set = |set: &HashSet<&str>, v: &DataValue| v.get_str().is_some_and(|s| set.contains(s));
        let files: HashSet<&str> = paths.iter().copied().collect();

        // One relation at a time: each scan's rows go before the next is read.
        {
            let (r, c) = scan("file", &["path", "lang", "hash", "lines", "is_test", "syntax_errors"])?;
            for r in r.rows.iter().filter(|r| in_set(&files, &r[c[0]])) {
                let (lines, is_test) = (int(&r[c[3]]), r[c[4]].get_bool().unwrap_or_default());
                rows.file.insert(st(&r[c[0]]), (st(&r[c[1]]), st(&r[c[2]]), lines, is_test, int(&r[c[5]])));
            }
        }
        {
            let cols = ["id", "kind", "name", "qname", "file", "start_line", "end_line", "signature", "doc", "is_test"];
            let (r, c) = scan("entity", &cols)?;
            for r in r.rows.iter().filter(|r| in_set(&files, &r[c[4]])) {
                rows.entity.insert(
                    st(&r[c[0]]),
                    rows::EntityRow {
                        kind: st(&r[c[1]]),
                        name: st(&r[c[2]]),
                        qname: st(&r[c[3]]),
                        file: st(&r[c[4]]),
                        start_line: int(&r[c[5]]),
                        end_line: int(&r[c[6]]),
                        signature: st(&r[c[7]]),
                        doc: st(&r[c[8]]),
                        is_test: r[c[9]].get_bool().unwrap_or_default(),
                    },
                );
            }
        }
        {
            let (r, c) = scan("imports", &["file", "line", "module", "name", "alias", "target"])?;
            for r in r.rows.iter().filter(|r| in_set(&files, &r[c[0]])) {
                let key = (st(&r[c[0]]), int(&r[c[1]]), st(&r[c[2]]), st(&r[c[3]]));
                rows.imports.insert(key, (st(&r[c[4]]), ost(&r[c[5]])));
            }
        }
        let ids: HashSet<&str> = rows.entity.keys().map(|k| k.as_ref()).collect();
        {
            let (r, c) = scan("contains", &["parent", "child"])?;
            for r in r.rows.iter().filter(|r| in_set(&ids, &r[c[0]])) {
                rows.contains.insert((st(&r[c[0]]), st(&r[c[1]])));
            }
        }
        {
            let (r, c) = scan("calls", &["caller", "callee", "line", "how", "confidence"])?;
            for r in r.rows.iter().filter(|r| in_set(&ids, &r[c[0]])) {
                let key = (st(&r[c[0]]), st(&r[c[1]]), int(&r[c[2]]));
                rows.calls.insert(key, (st(&r[c[3]]), r[c[4]].get_float().unwrap_or_default()));
            }
        }
        {
            let (r, c) = scan("call_site", &["caller", "line", "name", "receiver"])?;
            for r in r.rows.iter().filter(|r| in_set(&ids, &r[c[0]])) {
                rows.call_site.insert((st(&r[c[0]]), int(&r[c[1]]), st(&r[c[2]]), st(&r[c[3]])));
            }
        }
        {
            // As the query joins them: the unresolved rows that repeat one of those sites.
            let (r, c) = scan("unresolved", &["name", "caller", "line", "receiver"])?;
            for r in r.rows.iter().filter(|r| in_set(&ids, &r[c[1]])) {
                let site = (st(&r[c[1]]), int(&r[c[2]]), st(&r[c[0]]), st(&r[c[3]]));
                if rows.call_site.contains(&site) {
                    let (caller, line, name, receiver) = site;
                    rows.unresolved.insert((name, caller, line, receiver));
                }
            }
        }
        {
            let (r, c) = scan("inherits", &["child", "base_name", "base"])?;
            for r in r.rows.iter().filter(|r| in_set(&ids, &r[c[0]])) {
                rows.inherits.insert((st(&r[c[0]]), st(&r[c[1]])), ost(&r[c[2]]));
            }
        }
        Ok(rows)
    }

    /// The types that inherit, directly or through others, from the types `ids` (the
    /// stored `inherits` rows walked back), with their files and names.
    pub fn inheriting(&self, ids: &[&str]) -> Result<Vec<crate::resolve::affected::Inheriting>, StoreError> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut level: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        let mut found: Vec<String> = Vec::new();
        while !level.is_empty() {
            let refs: Vec<&str> = level.iter().map(String::as_str).collect();
            let r = self.run_ids("?[child] := base in $ids, *inherits:by_base{base, child}", &refs, 0.0)?;
            level = r
                .rows
                .iter()
                .filter_map(|row| row.first()?.get_str().map(str::to_string))
                .filter(|c| seen.insert(c.clone()))
                .collect();
            found.extend(level.iter().cloned());
        }
        let refs: Vec<&str> = found.iter().map(String::as_str).collect();
        let r = self.run_ids("?[id, file, name] := id in $ids, *entity{id, file, name}", &refs, 0.0)?;
        Ok(r.rows
            .iter()
            .filter_map(|row| {
                Some(crate::resolve::affected::Inheriting {
                    id: row.first()?.get_str()?.to_string(),
                    path: row.get(1)?.get_str()?.to_string(),
                    name: row.get(2)?.get_str()?.to_string(),
                })
            })
            .collect())
    }

    fn run_ids(&self, script: &str, ids: &[&str], min: f64) -> Result<NamedRows, StoreError> {
        if ids.is_empty() {
            return Ok(NamedRows::new(vec![], vec![]));
        }
        let mut params = BTreeMap::new();
        params.insert("ids".to_string(), DataValue::List(ids.iter().map(|i| s(i)).collect()));
        params.insert("min".to_string(), DataValue::from(min));
        guarded(&self.path, || {
            self.db.run_script(script, params, ScriptMutability::Immutable).map_err(|e| read_err(&self.path, e))
        })
    }

    /// Run a read-only script. Writes are refused by Cozo itself; an error says where in
    /// the script it is (line and column) and what is wrong.
    pub fn query(&self, script: &str, params: BTreeMap<String, DataValue>) -> Result<NamedRows, StoreError> {
        guarded(&self.path, || self.query_unguarded(script, params))
    }

    fn query_unguarded(&self, script: &str, params: BTreeMap<String, DataValue>) -> Result<NamedRows, StoreError> {
        self.db.run_script(script, params, ScriptMutability::Immutable).map_err(|e| {
            if let Some(err) = damage(&self.path, &e) {
                return err;
            }
            let msg = format_query_error(&e, script);
            if msg.contains("read-only") {
                StoreError::Db(format!("refused, queries are read-only: {msg}"))
            } else {
                StoreError::Db(msg)
            }
        })
    }

    /// Every row of a public relation, for tests and exports.
    pub fn export(&self, rel: &str) -> Result<NamedRows, StoreError> {
        let cols = headers(rel).join(", ");
        self.query(&format!("?[{cols}] := *{rel}{{{cols}}}"), BTreeMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair Cozo itself writes for `rows`: the schema and all the rows imported into
    /// one in-memory Cozo, scanned whole (how the full build wrote the file before it
    /// encoded the pairs itself).
    fn cozo_pairs(rows: &Rows, facts: &[(String, Vec<u8>)], meta: &[(String, String)]) -> Vec<table::Pair> {
        let facts = encode::Facts::Encoded(facts);
        let storage = MemStorage::default();
        let db = Db::new(storage.clone()).unwrap();
        db.initialize().unwrap();
        db.run_script(&schema_script(), BTreeMap::new(), ScriptMutability::Mutable).unwrap();
        let data = to_tuples(rows, facts, meta)
            .into_iter()
            .map(|(rel, t)| (rel.to_string(), named(&headers(rel), t)))
            .collect();
        db.import_relations(data).unwrap();
        let tx = storage.transact(false).unwrap();
        tx.range_scan(&[], &DATA_END).collect::<Result<Vec<_>, _>>().unwrap()
    }

    fn text(i: usize) -> rows::Text<'static> {
        // Empty, one group short, exactly one and two groups, one over, non-ASCII.
        ["", "a", "abcdefg", "abcdefgh", "abcdefghijklmnop", "abcdefghi", "caf\u{e9}.py:\u{1F600}", "a\0b"][i % 8]
            .to_string()
            .into()
    }

    fn edge_rows() -> (Rows<'static>, Vec<(String, Vec<u8>)>) {
        let lines = [0, 1, -1, 7, 1 << 53, -(1 << 53), (1 << 53) - 1, i64::MAX, i64::MIN, 1 << 60];
        let mut r = Rows::default();
        for (i, line) in lines.iter().enumerate() {
            let id: rows::Text = format!("{}{i}", text(i)).into();
            r.file
                .insert(format!("{}{i}", text(i)).into(), (text(i + 1), text(i + 2), *line, i % 2 == 0, -(*line / 3)));
            r.entity.insert(
                id.clone(),
                rows::EntityRow {
                    kind: text(i + 3),
                    name: text(i + 4),
                    qname: text(i + 5),
                    file: text(i + 6),
                    start_line: *line,
                    end_line: line.wrapping_add(3),
                    signature: text(i + 7),
                    doc: text(i).repeat(40).into(),
                    is_test: i % 3 == 1,
                },
            );
            r.contains.insert((text(i + 1), id.clone()));
            let conf = [1.0, 0.5, 0.0, -0.0, 0.75, 1e-300, f64::MAX, 0.1, 0.9, 2.0][i];
            r.calls.insert((id.clone(), text(i + 2), *line), (text(i + 3), conf));
            r.call_site.insert((id.clone(), *line, text(i + 4), text(i + 5)));
            r.unresolved.insert((text(i + 6), id.clone(), *line, text(i)));
            let target = (i % 3 != 0).then(|| text(i + 1));
            r.imports.insert((text(i), *line, text(i + 2), text(i + 3)), (text(i + 4), target.clone()));
            r.inherits.insert((id, text(i + 5)), target);
        }
        // Sorted by path, as the index's files are.
        let mut facts: Vec<(String, Vec<u8>)> =
            (0..10).map(|i| (format!("{}{i}", text(i)), (0..i as u8 * 7).collect())).collect();
        facts.sort();
        (r, facts)
    }

    #[test]
    fn facts_encoded_as_written_are_the_facts_encoded_whole() {
        let mut ex = crate::extract::Extractor::new(crate::extract::Limits::default());
        let src = "import os\n\nclass A(B):\n    def f(self, x):\n        return os.path.join(x)\n";
        let parsed: Vec<FileFacts> = ["a.py", "b/c.py"]
            .iter()
            .map(|p| ex.extract_bytes(p, crate::lang::Lang::Python, src.as_bytes(), "h".into()).unwrap())
            .collect();
        let mut one_by_one = Vec::new();
        encode::Facts::Parsed(&parsed.iter().collect::<Vec<_>>())
            .each(&mut |p, d| {
                one_by_one.push((p.to_string(), d.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(one_by_one, encode_facts(&parsed.iter().collect::<Vec<_>>()).unwrap());
        for ((_, d), f) in one_by_one.iter().zip(&parsed) {
            assert_eq!(&bincode::Options::deserialize::<FileFacts>(facts_codec(), d).unwrap(), f);
        }
    }

    #[test]
    fn rows_out_of_key_order_stop_the_build_naming_the_relation() {
        let dir = std::env::temp_dir().join(format!("reproagent-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("graph.db");
        let (rows, mut facts) = edge_rows();
        facts.reverse();
        let counts = crate::resolve::Counts::default();
        let e = write_table(&path, Path::new("/r"), rows, encode::Facts::Encoded(&facts), "d", &counts).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Db(_)), "{msg}");
        assert!(msg.contains("writing relation index_facts") && msg.contains("out of order"), "{msg}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_full_build_writes_the_pairs_cozo_would() {
        let counts = crate::resolve::Counts::default();
        let dir = std::env::temp_dir().join(format!("reproagent-encode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("graph.db");
        let root = Path::new("/some/r\u{e9}po");
        // Facts of 100 KiB each: `index_facts` spans several of the writer's batches (whose
        // buffers, once handed back, are filled again).
        let (rows, mut big) = edge_rows();
        for (i, (_, blob)) in big.iter_mut().enumerate() {
            *blob = (0..100 * 1024).map(|j| (i * 31 + j % 251) as u8).collect();
        }
        for (rows, facts) in [edge_rows(), (Rows::default(), Vec::new()), (rows, big)] {
            write_table(&path, root, rows.clone(), encode::Facts::Encoded(&facts), "digest", &counts).unwrap();
            let ours = std::sync::Arc::new(table::Table::open(&path).unwrap()).all();
            std::fs::remove_file(&path).unwrap();
            let theirs = cozo_pairs(&rows, &facts, &meta_rows(root, "digest", &counts));
            assert_eq!(ours.len(), theirs.len());
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!(a, b);
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The scan and the lookups give the same rows of any set of files: none, one, every
    /// other, all, and paths the index does not have.
    #[test]
    fn rows_of_files_by_scan_are_the_rows_by_lookup() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        for fixture in ["python/shop", "java/bank", "typescript/tasks"] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("repo");
            crate::bench::case::copy_tree(&fixtures.join(fixture), &root).unwrap();
            let mut opts = crate::index::Options::new(&root);
            opts.full = true;
            crate::index::run(&opts).unwrap();
            let store = open(&db_path(&root.canonicalize().unwrap())).unwrap();
            let all: Vec<String> = store.load_facts().unwrap().into_iter().map(|f| f.path).collect();
            assert!(all.len() > 3, "{fixture}: {all:?}");
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            let every_other: Vec<&str> = all.iter().copied().step_by(2).collect();
            let sets: [Vec<&str>; 5] =
                [vec![], vec![all[0]], every_other, all.clone(), vec![all[1], "no/such/file.py"]];
            for paths in sets {
                let (scan, query) =
                    (store.rows_of_files_by_scan(&paths).unwrap(), store.rows_of_files_by_query(&paths).unwrap());
                assert_eq!(scan, query, "{fixture}: {paths:?}");
                // Every relation the scan filters has rows to compare in each fixture.
                if paths.len() == all.len() {
                    let sizes = [
                        scan.file.len(),
                        scan.entity.len(),
                        scan.imports.len(),
                        scan.contains.len(),
                        scan.calls.len(),
                        scan.call_site.len(),
                        scan.unresolved.len(),
                        scan.inherits.len(),
                    ];
                    assert!(sizes.iter().all(|&n| n > 0), "{fixture}: {sizes:?}");
                }
            }
        }
    }

    /// The walk back from targets gives the pairs the walk forward from every test gives,
    /// over cycles, tests that call tests, a test that calls itself, edges too unsure to
    /// follow and a chain one call longer than the walk goes; asked one target at a time or
    /// all at once.
    #[test]
    fn tests_reaching_is_the_forward_walk_from_every_test() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("pkg/__init__.py"), "").unwrap();
        std::fs::write(
            root.join("pkg/a.py"),
            "def f():\n    g()\n\ndef g():\n    h()\n\ndef h():\n    f()\n    k()\n\ndef k():\n    pass\n\n\
             class C:\n    def m(self):\n        return f()\n\ndef loose(x):\n    x.m()\n",
        )
        .unwrap();
        std::fs::write(
            root.join("tests/test_a.py"),
            "from pkg.a import f, g, C, loose\n\ndef test_one():\n    f()\n\ndef test_two():\n    test_one()\n    g()\n\n\
             def test_self():\n    test_self()\n\ndef test_loose():\n    loose(C())\n\nclass TestC:\n    def test_m(self):\n        C().m()\n",
        )
        .unwrap();
        let mut opts = crate::index::Options::new(&root);
        opts.full = true;
        crate::index::run(&opts).unwrap();
        let store = open(&db_path(&root.canonicalize().unwrap())).unwrap();
        let facts = store.load_facts().unwrap();
        let rows = crate::resolve::resolve(&facts);
        let files: Vec<&FileFacts> = facts.iter().collect();
        let forward: BTreeSet<(String, String)> =
            crate::resolve::test_of(&files, &rows).into_iter().map(|(t, x)| (t.into_owned(), x.into_owned())).collect();
        // The shape the test is about: k is 4 calls from test_one (f, g, h, k), 3 from test_two.
        let has = |t: &str, x: &str| forward.contains(&(format!("tests/test_a.py:{t}"), format!("pkg/a.py:{x}")));
        assert!(has("test_one", "h") && !has("test_one", "k") && has("test_two", "k"), "{forward:#?}");
        assert!(forward.contains(&("tests/test_a.py:test_two".into(), "tests/test_a.py:test_one".into())));
        assert!(!forward.iter().any(|(t, x)| t == x));
        let ids: Vec<&str> = rows.entity.keys().map(|k| k.as_ref()).collect();
        let back: BTreeSet<(String, String)> = store.tests_reaching(&ids).unwrap().into_iter().collect();
        assert_eq!(back, forward);
        let one_by_one: BTreeSet<(String, String)> =
            ids.iter().flat_map(|id| store.tests_reaching(&[id]).unwrap()).collect();
        assert_eq!(one_by_one, forward);
        // The rule of ad-hoc queries, too.
        let script = with_rules("?[test, target] := test_of[test, target]").unwrap();
        let r = store.query(&script, BTreeMap::new()).unwrap();
        let rule: BTreeSet<(String, String)> =
            r.rows.iter().map(|r| (r[0].get_str().unwrap().to_string(), r[1].get_str().unwrap().to_string())).collect();
        assert_eq!(rule, forward);
    }
}
