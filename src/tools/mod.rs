//! The agent tools of the paper's Table 1: each one typed struct with its name, its
//! arguments (a serde + `schemars` type, so its JSON schema is derived), and its output (a
//! serde type). The CLI (`reproagent tool`), the MCP server (`reproagent serve`) and the
//! agent loop all call them through [`Registry::call`]: one implementation, three surfaces.
//!
//! Every tool error is a value in the result (`{"error": ..., "hint": ...}`), never a
//! panic; every output is bounded and says when it was truncated and how to get the rest.
//! Every path is relative to the repository root and checked to stay inside it.

pub(crate) mod fs;
pub mod graph;
mod paths;
mod reindex;
pub(crate) mod runtime;
pub mod search;
pub(crate) mod thinking;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use thiserror::Error;

use crate::graph::GraphError;
use crate::sandbox::SandboxError;
use crate::search::SearchError;
use crate::store::{Store, StoreError};

pub use paths::Freshness;

/// What went wrong in a tool call. Each variant says what the caller can do in [`ToolError::hint`].
#[derive(Debug, Error)]
pub enum ToolError {
    /// No tool by that name: the nearest names are given.
    #[error("unknown tool '{name}'{}", list_text("nearest", .nearest))]
    UnknownTool { name: String, nearest: Vec<String> },
    /// The arguments do not fit the tool's schema.
    #[error("bad arguments for {tool}: {message}")]
    BadArgs { tool: String, message: String },
    /// A path that leaves the repository (`..`, an absolute path elsewhere, a symlink out).
    #[error("refused: '{0}' is outside the repository")]
    OutsideRepo(String),
    /// Not repository content: a FIFO, socket or device (refused by type), or `.git/`
    /// and `.reproagent/` (version control and our own state).
    #[error("refused: '{path}' is {why}")]
    NotContent { path: String, why: String },
    /// A path or entity that does not exist: the nearest names are given.
    #[error("no {what} '{name}'{}", list_text("nearest", .nearest))]
    NotFound { what: &'static str, name: String, nearest: Vec<String> },
    /// A name that several entities carry.
    #[error("'{name}' is ambiguous{}", list_text("candidates", .candidates))]
    Ambiguous { name: String, candidates: Vec<String> },
    /// A regular expression or glob that does not compile.
    #[error("bad {kind} '{pattern}': {message}")]
    BadPattern { kind: &'static str, pattern: String, message: String },
    /// Not text: a binary file cannot be read as lines.
    #[error("'{0}' is a binary file")]
    Binary(String),
    /// The graph index is missing, foreign or of another version.
    #[error(transparent)]
    Index(#[from] StoreError),
    /// The keyword index is missing, out of date with the graph, or failed.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// A runtime tool without a sandbox, or a sandbox error (a refusal carries its reason).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// Runtime tools need a sandbox, which this context has none of.
    #[error("no sandbox: runtime tools are not enabled here")]
    NoSandbox,
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Other(String),
}

fn list_text(label: &str, items: &[String]) -> String {
    if items.is_empty() {
        String::new()
    } else {
        format!("; {label}: {}", items.join(", "))
    }
}

impl ToolError {
    /// What the caller can do about it.
    pub fn hint(&self) -> Option<String> {
        let h: &str = match self {
            ToolError::UnknownTool { .. } => "`tools/list` (or `reproagent tool --list`) lists the tools",
            ToolError::BadArgs { .. } => {
                "the tool's JSON schema (`reproagent tool --list`) gives every argument and its type"
            }
            ToolError::OutsideRepo(_) => "paths are relative to the repository root and must stay inside it",
            ToolError::NotContent { .. } => {
                "only regular files of the repository are read; `ls` shows each entry's kind"
            }
            ToolError::NotFound { what: "path", .. } => "`ls` or `find` list what exists",
            ToolError::NotFound { .. } => "`find_entity` looks entities up by name, exactly and fuzzily",
            ToolError::Ambiguous { .. } => "pass one of the candidate ids (path:Qualified.name)",
            ToolError::BadPattern { kind: "regex", .. } => {
                "a Rust regex: escape `(`, `[`, `{`, `.` with `\\` to match them literally"
            }
            ToolError::BadPattern { .. } => {
                "a glob: `*` any name part, `**` any directories, `?` one character, `[ab]` and `{a,b}` alternatives"
            }
            ToolError::Binary(_) => "read_file reads text files only",
            ToolError::Index(e) => return e.hint().map(str::to_string),
            ToolError::Search(e) => return e.hint().map(str::to_string),
            ToolError::Sandbox(SandboxError::Refused(_)) => "rewrite the command without the refused part",
            ToolError::Sandbox(_) => return None,
            ToolError::NoSandbox => "start with a sandbox (`reproagent serve --sandbox local|docker`)",
            ToolError::Io(_) | ToolError::Other(_) => return None,
        };
        Some(h.to_string())
    }

    /// The error as the tool result: `{"error": ..., "hint": ..., "nearest"/"candidates": [...]}`.
    pub fn to_value(&self) -> Value {
        let mut v = json!({ "error": self.to_string() });
        if let Some(h) = self.hint() {
            v["hint"] = json!(h);
        }
        match self {
            ToolError::UnknownTool { nearest, .. } | ToolError::NotFound { nearest, .. } => {
                v["nearest"] = json!(nearest)
            }
            ToolError::Ambiguous { candidates, .. } => v["candidates"] = json!(candidates),
            _ => {}
        }
        v
    }
}

impl From<GraphError> for ToolError {
    fn from(e: GraphError) -> Self {
        match e {
            GraphError::Store(s) => ToolError::Index(s),
            GraphError::NotFound { name, nearest } => ToolError::NotFound { what: "entity", name, nearest },
            GraphError::Ambiguous { name, candidates } => ToolError::Ambiguous { name, candidates },
        }
    }
}

/// What a tool call gives back: a JSON value, and whether it is an error.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub value: Value,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn error(e: &ToolError) -> Self {
        ToolOutput { value: e.to_value(), is_error: true }
    }
}

/// A tool as the registry sees it: name, description, JSON schema of its arguments, call.
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// The JSON schema of the arguments (an object schema).
    fn schema(&self) -> Value;
    /// The JSON schema of a successful answer (what it serializes to; the fields every
    /// answer may gain, `stale`, `truncated` and `note`, are allowed beside it). An
    /// error answer is the error's JSON, not this.
    fn output_schema(&self) -> Value;
    fn call(&self, ctx: &ToolContext, args: Value) -> ToolOutput;
}

/// A tool written against typed arguments and output; [`Tool`] comes with it.
pub trait TypedTool: Send + Sync {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    type Args: DeserializeOwned + JsonSchema;
    type Output: Serialize + JsonSchema;
    fn run(&self, ctx: &ToolContext, args: Self::Args) -> Result<Self::Output, ToolError>;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn description(&self) -> &'static str {
        T::DESCRIPTION
    }
    fn schema(&self) -> Value {
        let mut v = serde_json::to_value(schemars::schema_for!(T::Args)).unwrap_or_else(|_| json!({"type": "object"}));
        if let Some(o) = v.as_object_mut() {
            o.remove("$schema");
            o.remove("title");
        }
        v
    }
    fn output_schema(&self) -> Value {
        let generator = schemars::generate::SchemaSettings::draft2020_12().for_serialize().into_generator();
        let mut v = serde_json::to_value(generator.into_root_schema_for::<T::Output>())
            .unwrap_or_else(|_| json!({"type": "object"}));
        if let Some(o) = v.as_object_mut() {
            o.remove("$schema");
            o.remove("title");
        }
        v
    }
    fn call(&self, ctx: &ToolContext, args: Value) -> ToolOutput {
        let args = if args.is_null() { json!({}) } else { args };
        let parsed: T::Args = match check_types(&self.schema(), &args)
            .and_then(|()| serde_json::from_value(args).map_err(|e| e.to_string()))
        {
            Ok(a) => a,
            Err(message) => return ToolOutput::error(&ToolError::BadArgs { tool: T::NAME.to_string(), message }),
        };
        STALE.with(|s| s.borrow_mut().take());
        let out = match self
            .run(ctx, parsed)
            .and_then(|o| serde_json::to_value(o).map_err(|e| ToolError::Other(e.to_string())))
        {
            Ok(value) => ToolOutput { value, is_error: false },
            Err(e) => ToolOutput::error(&e),
        };
        let mut out = with_stale(out);
        out.value = cap_chars(out.value, MAX_OUTPUT_CHARS);
        out
    }
}

/// The most characters of JSON one tool answer carries; the answer says how to get the rest.
pub const MAX_OUTPUT_CHARS: usize = 20_000;

/// Cut an answer longer than `max` characters: its longest list loses items from the end
/// (or its `content` text loses whole lines from the end), and `truncated`/`note` say
/// what was cut and how to page.
pub(crate) fn cap_chars(mut v: Value, max: usize) -> Value {
    for _ in 0..8 {
        let len = v.to_string().chars().count();
        if len <= max {
            return v;
        }
        let Some(o) = v.as_object_mut() else { return v };
        let over = len - max;
        let longest = o
            .iter()
            .filter(|(k, x)| x.is_array() || (k.as_str() == "content" && x.is_string()))
            .map(|(k, x)| (x.to_string().chars().count(), k.clone()))
            .max();
        let Some((size, key)) = longest else { return v };
        let note = if let Some(Value::Array(items)) = o.get_mut(&key) {
            // Keep the largest prefix that fits.
            let budget = size.saturating_sub(over + 200);
            let total = items.len();
            let mut used = 2;
            let mut keep = 0;
            for it in items.iter() {
                let n = it.to_string().chars().count() + 1;
                if used + n > budget {
                    break;
                }
                used += n;
                keep += 1;
            }
            items.truncate(keep);
            format!(
                "answer cut at {max} characters: the first {keep} of the {total} {key} shown; \
                 pass offset={keep} (where the tool takes one), a smaller limit or a narrower query"
            )
        } else if let Some(Value::String(text)) = o.get_mut(&key) {
            let budget = text.chars().count().saturating_sub(over + 200);
            let cut: String = text.chars().take(budget).collect();
            let cut = match cut.rfind('\n') {
                Some(i) => cut[..=i].to_string(),
                None => String::new(),
            };
            // Numbered lines (`  12 | text`): say where to go on.
            let last = cut.lines().last().and_then(|l| l.split('|').next()).and_then(|n| n.trim().parse::<u64>().ok());
            *text = cut;
            match last {
                Some(n) => {
                    o.insert("end_line".into(), json!(n));
                    format!("answer cut at {max} characters after line {n}; pass start_line={} for more", n + 1)
                }
                None => format!("answer cut at {max} characters"),
            }
        } else {
            return v;
        };
        o.insert("truncated".into(), json!(true));
        let merged = match o.get("note").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => format!("{note}; {n}"),
            _ => note,
        };
        o.insert("note".into(), json!(merged));
    }
    v
}

thread_local! {
    /// What the freshness check of this thread's tool call found changed.
    static STALE: std::cell::RefCell<Option<paths::Stale>> = const { std::cell::RefCell::new(None) };
}

/// An answer from an index that no longer describes the tree says so beside the answer:
/// which files changed, and how to update the index.
fn with_stale(mut out: ToolOutput) -> ToolOutput {
    if let Some(st) = STALE.with(|s| s.borrow_mut().take()) {
        if let Some(o) = out.value.as_object_mut() {
            o.insert(
                "stale".into(),
                json!({
                    "files": st.changed,
                    "total": st.total,
                    "note": "answered from the index as of the last `index`: these files changed since; \
                             the `index` tool (or `reproagent index`) updates it incrementally",
                }),
            );
        }
    }
    out
}

/// serde says "invalid type: string, expected usize" without the field; name it.
fn check_types(schema: &Value, args: &Value) -> Result<(), String> {
    let Some(obj) = args.as_object() else {
        return Err(format!("arguments must be a JSON object, got {}", type_name(args)));
    };
    let props = schema.get("properties").and_then(Value::as_object);
    for (k, v) in obj {
        let Some(p) = props.and_then(|p| p.get(k)) else { continue };
        let types: Vec<&str> = match p.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        let actual = type_name(v);
        let ok = types.iter().any(|t| *t == actual || (*t == "number" && actual == "integer"));
        if !ok {
            return Err(format!("argument `{k}` must be {}, got {actual}", types.join(" or ")));
        }
        if let (Some(min), Some(n)) = (p.get("minimum").and_then(Value::as_f64), v.as_f64()) {
            if n < min {
                return Err(format!("argument `{k}` must be at least {min}, got {n}"));
            }
        }
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// What the tools share in one session: the repository root, the graph index (opened on
/// first use, reopened when `reproagent index` replaced it), the freshness record, the
/// session's thought record and, when runtime tools are on, the sandbox.
pub struct ToolContext {
    root: PathBuf,
    store: Mutex<Option<(Arc<Store>, paths::DbStamp)>>,
    freshness: Mutex<Freshness>,
    /// The entity names `find_entity` and the "did you mean"s scan, per `graph.db`.
    names: Mutex<Option<(paths::DbStamp, Arc<crate::graph::NameTable>)>>,
    pub(crate) thoughts: Mutex<thinking::ThoughtRecord>,
    pub(crate) runtime: Option<runtime::RuntimeContext>,
}

impl ToolContext {
    /// A context on the repository at `root` (which must exist).
    pub fn new(root: &Path) -> Result<Self, ToolError> {
        let root =
            root.canonicalize().map_err(|e| ToolError::Io(format!("repository root {}: {e}", root.display())))?;
        Ok(ToolContext {
            root,
            store: Mutex::new(None),
            freshness: Mutex::new(Freshness::default()),
            names: Mutex::new(None),
            thoughts: Mutex::new(thinking::ThoughtRecord::default()),
            runtime: None,
        })
    }

    /// Enable the runtime tools on this sandbox.
    pub fn with_runtime(mut self, rt: runtime::RuntimeContext) -> Self {
        self.runtime = Some(rt);
        self
    }

    /// The canonical repository root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The graph index, opened on first use; refused when missing. When files changed
    /// since it was built, the answer of the tool that asked carries them (`stale`).
    pub fn store(&self) -> Result<Arc<Store>, ToolError> {
        let db = crate::store::db_path(&self.root);
        let stamp = paths::DbStamp::of(&db);
        let store = {
            let mut guard = self.store.lock().map_err(|_| ToolError::Other("store lock poisoned".into()))?;
            match guard.as_ref() {
                Some((s, st)) if Some(st) == stamp.as_ref() => s.clone(),
                _ => {
                    let s = Arc::new(crate::store::open(&db)?);
                    if let Some(st) = stamp.clone() {
                        *guard = Some((s.clone(), st));
                    }
                    s
                }
            }
        };
        let mut fresh = self.freshness.lock().map_err(|_| ToolError::Other("freshness lock poisoned".into()))?;
        let stale = fresh.check(&self.root, &store, stamp.as_ref())?;
        STALE.with(|s| *s.borrow_mut() = stale);
        Ok(store)
    }

    /// The state of the tree a retrieval's answer depends on, as a short digest: a call
    /// repeated with equal arguments on an equal state gets an equal answer. `None` for a
    /// tool that is not a retrieval ([`is_retrieval`]), or when the state cannot be read.
    ///
    /// - `read_file`: the file's metadata (resolved path, size, mtime, inode): its answer
    ///   depends on that file alone, so this costs a `stat`, not a freshness check.
    /// - every other retrieval: which index (`graph.db`), the current content of every
    ///   file it holds and the source files added since, as the freshness check sees
    ///   them (the rule of every answer's `stale`); for `ls`, the listed directory's
    ///   metadata too. A file the index does not hold (a template, a text file) is not
    ///   part of it: `grep` and `find` over such files are answered as of the index.
    pub fn state_for(&self, tool: &str, args: &Value) -> Option<String> {
        if !is_retrieval(tool) {
            return None;
        }
        let path = args.get("path").and_then(Value::as_str);
        match tool {
            "read_file" => {
                let abs = self.resolve_path(path?).ok()?;
                let m = std::fs::metadata(&abs).ok()?;
                #[cfg(unix)]
                let ino = std::os::unix::fs::MetadataExt::ino(&m);
                #[cfg(not(unix))]
                let ino = 0u64;
                let seen = format!("file|{}|{:?}|{}|{ino}", abs.display(), m.modified().ok(), m.len());
                Some(blake3::hash(seen.as_bytes()).to_hex()[..16].to_string())
            }
            "ls" => self.tree_state(Some(path.unwrap_or("."))),
            _ => self.tree_state(None),
        }
    }

    /// The tree as the freshness check sees it, as a short digest: which index, the
    /// current content of every file it holds, the source files added since, and for
    /// `path` its metadata. `None` without a usable index.
    pub fn tree_state(&self, path: Option<&str>) -> Option<String> {
        self.store().ok()?;
        STALE.with(|s| s.borrow_mut().take());
        let stamp = paths::DbStamp::of(&crate::store::db_path(&self.root))?;
        let fingerprint = self.freshness.lock().ok()?.fingerprint()?.to_string();
        let mut h = blake3::Hasher::new();
        h.update(format!("{stamp:?}").as_bytes());
        h.update(fingerprint.as_bytes());
        if let Some(p) = path {
            let meta = self.resolve_path(p).ok().and_then(|abs| std::fs::metadata(abs).ok());
            let seen = meta.map(|m| format!("{:?}|{}|{}", m.modified().ok(), m.len(), m.is_dir()));
            h.update(seen.unwrap_or_else(|| "missing".into()).as_bytes());
        }
        Some(h.finalize().to_hex()[..16].to_string())
    }

    /// The entity name table of the index `store` was opened from, read once per
    /// `graph.db` (the store is from [`ToolContext::store`]).
    pub(crate) fn names(&self, store: &Store) -> Result<Arc<crate::graph::NameTable>, ToolError> {
        let stamp = paths::DbStamp::of(&crate::store::db_path(&self.root));
        let mut guard = self.names.lock().map_err(|_| ToolError::Other("name table lock poisoned".into()))?;
        if let (Some((st, t)), Some(now)) = (guard.as_ref(), stamp.as_ref()) {
            if st == now {
                return Ok(t.clone());
            }
        }
        let t = Arc::new(crate::graph::NameTable::load(store)?);
        if let Some(now) = stamp {
            *guard = Some((now, t.clone()));
        }
        Ok(t)
    }

    /// A path argument, checked: inside the root (symlinks resolved) and existing.
    pub fn resolve_path(&self, rel: &str) -> Result<PathBuf, ToolError> {
        paths::resolve(&self.root, rel)
    }

    /// The repository-relative form of an absolute path under the root.
    pub fn rel(&self, abs: &Path) -> String {
        paths::rel(&self.root, abs)
    }
}

/// A list of tools by name.
pub struct Registry {
    tools: Vec<Box<dyn Tool>>,
}

/// The retrieval and reflection tools (no sandbox needed).
pub fn all() -> Registry {
    Registry {
        tools: vec![
            Box::new(thinking::SequentialThinking),
            Box::new(fs::Ls),
            Box::new(fs::Find),
            Box::new(fs::Grep),
            Box::new(fs::ReadFile),
            Box::new(search::SearchCode),
            Box::new(graph::FindEntity),
            Box::new(graph::ReadEntity),
            Box::new(graph::ClassStructure),
            Box::new(graph::Callers),
            Box::new(graph::Callees),
            Box::new(graph::CallChain),
            Box::new(graph::Imports),
            Box::new(graph::TestsFor),
        ],
    }
}

/// Is `name` a retrieval tool: one of [`all`] that only reads the tree or its index
/// (everything there but `sequential_thinking`), so that on the same tree
/// ([`ToolContext::tree_state`]) the same arguments get the same answer? The runtime
/// tools are not: a run's result depends on the sandbox's state.
pub fn is_retrieval(name: &str) -> bool {
    name != thinking::SequentialThinking::NAME && all().get(name).is_some()
}

/// What the MCP server offers: [`all`] plus `index`, which updates the index of the tree
/// the server serves (an agent that writes files keeps its answers current).
pub fn for_server(runtime: bool) -> Registry {
    let mut r = if runtime { with_runtime() } else { all() };
    r.tools.push(Box::new(reindex::Index));
    r
}

/// [`all`] plus the runtime tools (`run_command`, `run_python`, `run_test`), which need a
/// context made [`ToolContext::with_runtime`].
pub fn with_runtime() -> Registry {
    let mut r = all();
    r.tools.push(Box::new(runtime::RunCommand));
    r.tools.push(Box::new(runtime::RunPython));
    r.tools.push(Box::new(runtime::RunTest));
    r
}

impl Registry {
    /// The registry without the tool `name`.
    pub fn without(mut self, name: &str) -> Registry {
        self.tools.retain(|t| t.name() != name);
        self
    }

    pub fn tools(&self) -> impl Iterator<Item = &dyn Tool> {
        self.tools.iter().map(|t| t.as_ref())
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools().find(|t| t.name() == name)
    }

    /// Run the tool `name`; an unknown name answers with the nearest tool names.
    pub fn call(&self, ctx: &ToolContext, name: &str, args: Value) -> ToolOutput {
        match self.get(name) {
            Some(t) => t.call(ctx, args),
            None => {
                let mut scored: Vec<(usize, &str)> =
                    self.tools().map(|t| (strsim_distance(name, t.name()), t.name())).collect();
                scored.sort();
                let nearest = scored
                    .iter()
                    .filter(|(d, n)| *d <= name.len().max(4) / 2 + 1 || n.contains(name) || name.contains(n))
                    .take(3)
                    .map(|(_, n)| n.to_string())
                    .collect();
                ToolOutput::error(&ToolError::UnknownTool { name: name.to_string(), nearest })
            }
        }
    }

    /// Name, description and schema of each tool, as JSON.
    pub fn describe(&self) -> Value {
        Value::Array(
            self.tools()
                .map(|t| json!({"name": t.name(), "description": t.description(), "input_schema": t.schema()}))
                .collect(),
        )
    }
}

pub(crate) fn strsim_distance(a: &str, b: &str) -> usize {
    crate::graph::levenshtein(a, b)
}

/// Bounds on a list: `offset` and `limit`, with the note that tells how to get the rest.
#[derive(Debug, Clone, Serialize, PartialEq, JsonSchema)]
pub struct Page {
    /// How many there are in all (or at least, when counting stopped: see `note`).
    pub total: usize,
    pub offset: usize,
    pub shown: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Keep `limit` items from `offset`, and say what was left out.
pub(crate) fn page<T>(items: Vec<T>, offset: usize, limit: usize, what: &str) -> (Vec<T>, Page) {
    let total = items.len();
    let kept: Vec<T> = items.into_iter().skip(offset).take(limit).collect();
    let shown = kept.len();
    let truncated = offset + shown < total;
    let note = truncated.then(|| {
        format!("showing {what} {}-{} of {total}; pass offset={} for more", offset + 1, offset + shown, offset + shown)
    });
    (kept, Page { total, offset, shown, truncated, note })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_to_the_cap_and_says_how_to_page() {
        let edges: Vec<Value> =
            (0..1000).map(|i| json!({"caller": format!("pkg/mod.py:function_{i}"), "line": i})).collect();
        let v = cap_chars(json!({"entity": "x", "edges": edges, "note": "showing edges 1-1000 of 4000"}), 20_000);
        assert!(v.to_string().chars().count() <= 20_000, "{}", v.to_string().len());
        let kept = v["edges"].as_array().unwrap().len();
        assert!(kept > 300 && kept < 1000, "{kept}");
        assert_eq!(v["truncated"], true);
        let note = v["note"].as_str().unwrap();
        assert!(
            note.starts_with(&format!("answer cut at 20000 characters: the first {kept} of the 1000 edges")),
            "{note}"
        );
        assert!(note.ends_with("showing edges 1-1000 of 4000"), "the tool's own note is kept: {note}");

        let content: String = (1..=2000).map(|i| format!("{i:>5} | line number {i} of the file\n")).collect();
        let v = cap_chars(json!({"path": "a.py", "start_line": 1, "end_line": 2000, "content": content}), 20_000);
        assert!(v.to_string().chars().count() <= 20_000);
        let last = v["end_line"].as_u64().unwrap();
        assert!(v["content"].as_str().unwrap().ends_with(&format!("line number {last} of the file\n")));
        assert!(v["note"].as_str().unwrap().contains(&format!("start_line={}", last + 1)), "{v}");

        let small = json!({"edges": [1, 2, 3]});
        assert_eq!(cap_chars(small.clone(), 20_000), small);
    }
}
