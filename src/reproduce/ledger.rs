//! Stage memory: a compact evidence ledger passed from stage to stage.
//!
//! Every retrieval and run the model makes leaves one entry: what was asked (the tool
//! and its arguments), on which tree ([`crate::tools::ToolContext::state_for`]), where
//! (`path:lines`, the first places the result names) and the fact found there, written
//! for a later stage: the definitions a read showed, the entities a search found, who
//! calls what, where a run raised which exception. When a stage's artifact is accepted,
//! the lines its conclusion cites (localization's suspects, root cause's execution path)
//! are quoted into the entries that showed them ([`Ledger::cite`]).
//!
//! The ledger is rendered into the prompts of the later stages, so they start from what
//! an earlier one established, and is written to `ledger.json` in the run directory. A
//! retrieval repeated with the same arguments on the same tree is answered from it
//! ([`Ledger::recall`]): the earlier result as it was, marked as such, without running
//! the tool again. The full result rather than a pointer, because the later stage had the
//! entry's fact in its prompt and asked anyway: it needs the text, and a pointer would
//! cost a model call (which sends the whole conversation again) to save the tokens of one
//! bounded result.

use std::path::Path;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::excerpt;

/// Entries rendered into a prompt (the most recent ones).
pub const MAX_RENDERED: usize = 40;
/// Places kept per entry.
const MAX_PLACES: usize = 5;
/// Characters of a fact.
const FACT_CHARS: usize = 400;
/// Items a fact names (hits, matches, callers, definitions).
const MAX_ITEMS: usize = 4;
/// Definitions a read's fact names.
const MAX_DEFS: usize = 8;
/// Quoted lines per entry.
const MAX_QUOTED: usize = 8;
/// A cited span longer than this (a whole class) is not quoted: its place says enough.
const MAX_QUOTED_SPAN: i64 = 8;

/// One call and what it found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// The stage that made it.
    pub stage: String,
    /// The tool and its arguments (compact JSON, keys sorted).
    pub tool: String,
    pub args: String,
    /// The tree the call was answered on (empty for runs in the sandbox, whose result
    /// depends on the sandbox, not the tree).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tree: String,
    /// `path:start-end` of what the result names.
    #[serde(default)]
    pub places: Vec<String>,
    /// What was found there, in a line.
    pub fact: String,
    /// Lines of the result a stage's conclusion rests on, quoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cited: Vec<Quote>,
    /// Later stages that made the same call again on the same tree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked_again_by: Vec<String>,
    /// Times the call was answered from this entry instead of being made again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub answered_from_ledger: u32,
    /// The result as the tool gave it (kept in memory only; a resumed run's entries lack
    /// it, and their first repeat runs the tool).
    #[serde(skip)]
    pub result: Option<Value>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A line a stage's conclusion cites, as a read showed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Quote {
    /// `path:line`.
    pub at: String,
    pub code: String,
    /// The stage that cited it.
    pub by: String,
}

impl std::fmt::Display for Quote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.at, self.code, self.by.replace('_', " "))
    }
}

/// A place a stage's conclusion cites: a file and a line span.
#[derive(Debug, Clone, PartialEq)]
pub struct Spot {
    pub path: String,
    pub start: i64,
    pub end: i64,
}

/// The ledger of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Ledger {
    pub entries: Vec<Entry>,
}

/// Tools whose results are not evidence about the code.
fn ignored(tool: &str) -> bool {
    matches!(tool, "sequential_thinking")
}

/// Arguments as a key: compact JSON, keys sorted (serde_json's map is ordered).
fn canonical(args: &Value) -> String {
    serde_json::to_string(args).unwrap_or_default()
}

impl Ledger {
    /// Note one tool call. `tree` is the state of the tree it was answered on (`None`
    /// for a run in the sandbox); `root` the repository, against which paths in a
    /// traceback are made relative. The same call with the same fact on the same tree is
    /// not noted twice: a later stage making it again is counted in `asked_again_by`.
    #[allow(clippy::too_many_arguments)]
    pub fn note(
        &mut self,
        stage: &str,
        tool: &str,
        args: &Value,
        result: &Value,
        is_error: bool,
        tree: Option<&str>,
        root: &Path,
    ) {
        if ignored(tool) || is_error {
            return;
        }
        let args_s = canonical(args);
        let tree = tree.unwrap_or("").to_string();
        let (mut places, fact) = facts(tool, args, result, root);
        let fact = excerpt(&fact, FACT_CHARS);
        if let Some(e) = self
            .entries
            .iter_mut()
            .rev()
            .find(|e| e.tool == tool && e.args == args_s && e.tree == tree && e.fact == fact)
        {
            if e.stage != stage {
                e.asked_again_by.push(stage.to_string());
            }
            if e.result.is_none() {
                e.result = Some(result.clone());
            }
            return;
        }
        places.dedup();
        places.truncate(MAX_PLACES);
        self.entries.push(Entry {
            stage: stage.into(),
            tool: tool.into(),
            args: args_s,
            tree,
            places,
            fact,
            cited: Vec::new(),
            asked_again_by: Vec::new(),
            answered_from_ledger: 0,
            result: Some(result.clone()),
        });
    }

    /// The answer to a call already made with these arguments on this tree: the earlier
    /// result, with a `ledger` field saying where it comes from; `None` when there is no
    /// such entry (or it has no result in memory), and the tool must run.
    pub fn recall(&mut self, stage: &str, tool: &str, args: &Value, tree: &str) -> Option<Value> {
        if ignored(tool) || tree.is_empty() {
            return None;
        }
        let args_s = canonical(args);
        let (i, e) = self
            .entries
            .iter_mut()
            .enumerate()
            .rev()
            .find(|(_, e)| e.tool == tool && e.args == args_s && e.tree == tree && e.result.is_some())?;
        let mut v = e.result.clone()?;
        if e.stage != stage {
            e.asked_again_by.push(stage.to_string());
        }
        e.answered_from_ledger += 1;
        let note = format!(
            "answered from the evidence ledger (entry E{}): the {} stage made this call on the same tree; this is its result as it was then, not read again",
            i + 1,
            e.stage.replace('_', " ")
        );
        match v.as_object_mut() {
            Some(o) => {
                o.insert("ledger".into(), json!(note));
            }
            None => v = json!({"result": v, "ledger": note}),
        }
        Some(v)
    }

    /// A stage's conclusion cites these spots: each read whose result showed a cited
    /// line quotes it (once in the ledger), so a later stage has the line itself.
    pub fn cite(&mut self, by: &str, spots: &[Spot]) {
        let mut quoted: Vec<String> = self.entries.iter().flat_map(|e| e.cited.iter()).map(|q| q.at.clone()).collect();
        for e in self.entries.iter_mut() {
            let Some((path, lines)) = e.result.as_ref().and_then(shown_lines) else { continue };
            for s in spots.iter().filter(|s| same_path(&s.path, &path) && s.end - s.start < MAX_QUOTED_SPAN) {
                for (n, text) in lines.iter().filter(|(n, _)| (s.start..=s.end).contains(n)) {
                    let at = format!("{path}:{n}");
                    if e.cited.len() >= MAX_QUOTED || quoted.contains(&at) || text.trim().is_empty() {
                        continue;
                    }
                    e.cited.push(Quote { at: at.clone(), code: excerpt(text.trim(), 120), by: by.to_string() });
                    quoted.push(at);
                }
            }
        }
    }

    /// Calls a stage made that an earlier stage had already made, with the same
    /// arguments on the same tree.
    pub fn repeats(&self) -> usize {
        self.entries.iter().map(|e| e.asked_again_by.len()).sum()
    }

    /// Calls answered from the ledger instead of being made again.
    pub fn answered(&self) -> usize {
        self.entries.iter().map(|e| e.answered_from_ledger as usize).sum()
    }

    /// The entries of earlier stages, as a Markdown section for a prompt; empty when
    /// there are none.
    pub fn render(&self) -> String {
        if self.entries.is_empty() {
            return String::new();
        }
        let skip = self.entries.len().saturating_sub(MAX_RENDERED);
        let mut s = String::from(
            "## Evidence ledger\n\nWhat earlier stages asked and found there, one entry a call. Build on it rather than reading it again: a call repeated with the same arguments on the same tree is answered from this ledger with the earlier result, so repeat one only when you need its full text.\n\n",
        );
        for (i, e) in self.entries.iter().enumerate().skip(skip) {
            // A listing's fact names its places already.
            let listed = !matches!(e.tool.as_str(), "read_file" | "read_entity" | "class_structure")
                && !e.tool.starts_with("run_");
            let at = if e.places.is_empty() || listed { String::new() } else { format!(" at {}", e.places.join(", ")) };
            s.push_str(&format!("- E{} [{}] `{}` {}{at}: {}\n", i + 1, e.stage, e.tool, excerpt(&e.args, 200), e.fact));
            for c in &e.cited {
                s.push_str(&format!("  - cited: {c}\n"));
            }
        }
        if skip > 0 {
            s.push_str(&format!("- ({skip} earlier entries in ledger.json)\n"));
        }
        s
    }

    /// Carry a reused stage's evidence over from a previous run's ledger (`--resume`):
    /// the entries `stage` made, and the lines it cited in any entry, so the ledger is as
    /// it was when that stage ended; the stages after it run again and cite anew.
    pub fn carry(&mut self, old: &Ledger, stage: &str) {
        for e in old.entries.iter().filter(|e| e.stage == stage) {
            self.entries.push(Entry { cited: Vec::new(), ..e.clone() });
        }
        for o in &old.entries {
            let same = |e: &&mut Entry| e.stage == o.stage && e.tool == o.tool && e.args == o.args && e.tree == o.tree;
            let Some(e) = self.entries.iter_mut().find(same) else { continue };
            for q in o.cited.iter().filter(|q| q.by == stage) {
                if !e.cited.contains(q) {
                    e.cited.push(q.clone());
                }
            }
        }
    }
}

fn same_path(a: &str, b: &str) -> bool {
    a.trim_start_matches("./") == b.trim_start_matches("./")
}

/// The file a read showed and its numbered lines (`read_file`, `read_entity`).
fn shown_lines(v: &Value) -> Option<(String, Vec<(i64, String)>)> {
    let path = v
        .get("path")
        .and_then(Value::as_str)
        .or_else(|| v.get("entity").and_then(|e| e.get("file")).and_then(Value::as_str))?;
    let content = v.get("content").and_then(Value::as_str)?;
    let lines = content.lines().filter_map(numbered).map(|(n, t)| (n, t.to_string())).collect();
    Some((path.to_string(), lines))
}

/// `  12 | code` as (12, "code").
fn numbered(line: &str) -> Option<(i64, &str)> {
    let (n, code) = line.split_once(" | ").or_else(|| line.split_once('|'))?;
    Some((n.trim().parse().ok()?, code))
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn int_of(v: &Value, k: &str) -> Option<i64> {
    v.get(k).and_then(Value::as_i64)
}

fn arr<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn span(path: &str, start: Option<i64>, end: Option<i64>) -> String {
    match (start, end) {
        (Some(s), Some(e)) if e > s => format!("{path}:{s}-{e}"),
        (Some(s), _) => format!("{path}:{s}"),
        _ => path.to_string(),
    }
}

/// `N things: a; b; c (and M more)`, or `none` when empty.
fn listing(what: &str, total: usize, items: Vec<String>, none: &str) -> String {
    if items.is_empty() {
        return none.to_string();
    }
    let more = total.saturating_sub(items.len().min(MAX_ITEMS));
    let shown: Vec<String> = items.into_iter().take(MAX_ITEMS).collect();
    let tail = if more > 0 { format!(" (and {more} more)") } else { String::new() };
    format!("{total} {what}: {}{tail}", shown.join("; "))
}

/// The path part of an entity id (`path:Qualified.name`).
fn id_path(id: &str) -> &str {
    id.split_once(':').map(|x| x.0).unwrap_or(id)
}

/// The places a result names and its fact, by tool.
fn facts(tool: &str, args: &Value, v: &Value, root: &Path) -> (Vec<String>, String) {
    let mut places = Vec::new();
    let fact = match tool {
        "read_file" => {
            let path = str_of(v, "path");
            places.push(span(path, int_of(v, "start_line"), int_of(v, "end_line")));
            read_fact(v)
        }
        "read_entity" => {
            let e = v.get("entity").unwrap_or(&Value::Null);
            places.push(span(str_of(e, "file"), int_of(v, "start_line"), int_of(v, "end_line")));
            let sig = str_of(e, "signature");
            let sig = if sig.is_empty() { String::new() } else { format!(": `{}`", excerpt(sig, 120)) };
            format!("{} {}{sig}; {}", str_of(e, "kind"), str_of(e, "qname"), read_fact(v))
        }
        "search_code" => {
            let hits = arr(v, "hits");
            let items = hits
                .iter()
                .map(|h| {
                    places.push(span(str_of(h, "path"), int_of(h, "start_line"), int_of(h, "end_line")));
                    let lines = match (int_of(h, "start_line"), int_of(h, "end_line")) {
                        (Some(a), Some(b)) if b > a => format!(", {a}-{b}"),
                        (Some(a), _) => format!(", {a}"),
                        _ => String::new(),
                    };
                    format!("{} ({}{lines})", str_of(h, "id"), str_of(h, "kind"))
                })
                .collect();
            listing("hits", hits.len(), items, &format!("no hits for {:?}", str_of(args, "query")))
        }
        "find_entity" => {
            let es = arr(v, "entities");
            let items = es
                .iter()
                .map(|e| {
                    places.push(span(str_of(e, "file"), int_of(e, "start_line"), int_of(e, "end_line")));
                    let sig = str_of(e, "signature");
                    if sig.is_empty() {
                        format!("{} ({})", str_of(e, "id"), str_of(e, "kind"))
                    } else {
                        format!("{} ({}) `{}`", str_of(e, "id"), str_of(e, "kind"), excerpt(sig, 100))
                    }
                })
                .collect();
            let what = if str_of(v, "matched") == "fuzzy" { "nearest names (no exact match)" } else { "entities" };
            listing(what, es.len(), items, &format!("no entity named {:?}", str_of(args, "name")))
        }
        "grep" => {
            let ms = arr(v, "matches");
            let items = ms
                .iter()
                .map(|m| {
                    let at = span(str_of(m, "path"), int_of(m, "line"), None);
                    places.push(at.clone());
                    format!("{at} `{}`", excerpt(str_of(m, "text").trim(), 100))
                })
                .collect();
            let total = v.get("total").and_then(Value::as_u64).map(|n| n as usize).unwrap_or(ms.len());
            let files = v.get("files_with_matches").and_then(Value::as_u64).unwrap_or(0);
            listing(&format!("matches in {files} files"), total, items, "no matches")
        }
        "callers" | "callees" => {
            let entity = str_of(v, "entity");
            let caller = tool == "callers";
            let total = v.get("total").and_then(Value::as_u64).map(|n| n as usize);
            let items: Vec<String> = if let Some(groups) = v.get("grouped").and_then(Value::as_array) {
                groups.iter().map(|g| format!("{} ({} calls)", str_of(g, "entity"), g["calls"])).collect()
            } else {
                arr(v, "edges")
                    .iter()
                    .map(|e| {
                        let other = str_of(e, if caller { "caller" } else { "callee" });
                        // The line is the call site's, in the caller's file.
                        let site = if caller { id_path(other) } else { id_path(entity) };
                        if let Some(l) = int_of(e, "line") {
                            places.push(format!("{site}:{l}"));
                        }
                        format!("{other} ({}, line {})", str_of(e, "how"), e["line"])
                    })
                    .collect()
            };
            let n = total.unwrap_or(items.len());
            listing(&format!("{tool} of {entity}"), n, items, &format!("no {tool} of {entity}"))
        }
        "call_chain" => {
            let chains = arr(v, "chains");
            let render = |c: &Value| {
                let edges = c.as_array().map(Vec::as_slice).unwrap_or(&[]);
                let mut names: Vec<&str> = edges.iter().map(|e| str_of(e, "caller")).collect();
                names.extend(edges.last().map(|e| str_of(e, "callee")));
                names.join(" → ")
            };
            let items = chains.iter().map(render).collect();
            listing(
                "chains",
                chains.len(),
                items,
                &format!("no call chain from {} to {}", str_of(v, "from"), str_of(v, "to")),
            )
        }
        "tests_for" => {
            let ts = arr(v, "tests");
            let items = ts.iter().filter_map(Value::as_str).map(str::to_string).collect();
            let total = v.get("total").and_then(Value::as_u64).map(|n| n as usize).unwrap_or(ts.len());
            let entity = str_of(v, "entity");
            listing(&format!("tests of {entity}"), total, items, &format!("no tests of {entity}"))
        }
        "imports" => {
            let names = |l: &[Value]| -> Vec<String> {
                l.iter()
                    .map(|i| {
                        let (m, n) = (str_of(i, "module"), str_of(i, "name"));
                        if n.is_empty() {
                            m.to_string()
                        } else {
                            format!("{m}.{n}")
                        }
                    })
                    .collect()
            };
            let by: Vec<String> = arr(v, "imported_by").iter().map(|i| str_of(i, "file").to_string()).collect();
            let mut by_files = by.clone();
            by_files.dedup();
            let imports = names(arr(v, "imports"));
            format!(
                "{}; {}",
                listing("imports", imports.len(), imports.clone(), "imports nothing"),
                listing("files import it", by_files.len(), by_files, "no file imports it")
            )
        }
        "class_structure" => {
            let c = v.get("class").unwrap_or(&Value::Null);
            places.push(span(str_of(c, "file"), int_of(c, "start_line"), int_of(c, "end_line")));
            let bases: Vec<&str> = arr(v, "bases").iter().map(|b| str_of(b, "name")).collect();
            let methods: Vec<&str> = arr(v, "methods").iter().map(|m| str_of(m, "name")).collect();
            let subs = arr(v, "subclasses").len();
            format!(
                "{} {}: bases {}; {} methods: {}{}; {subs} subclasses",
                str_of(c, "kind"),
                str_of(c, "id"),
                if bases.is_empty() { "none".to_string() } else { bases.join(", ") },
                methods.len(),
                methods.iter().take(MAX_DEFS).copied().collect::<Vec<_>>().join(", "),
                if methods.len() > MAX_DEFS { ", ..." } else { "" },
            )
        }
        "ls" => {
            let es = arr(v, "entries");
            let items = es.iter().map(|e| format!("{} ({})", str_of(e, "path"), str_of(e, "kind"))).collect();
            let total = v.get("total").and_then(Value::as_u64).map(|n| n as usize).unwrap_or(es.len());
            listing("entries", total, items, "empty")
        }
        "find" => {
            let fs = arr(v, "files");
            let items = fs.iter().filter_map(Value::as_str).map(str::to_string).collect();
            let total = v.get("total").and_then(Value::as_u64).map(|n| n as usize).unwrap_or(fs.len());
            listing("files", total, items, "no files")
        }
        "run_test" => test_fact(v, root, &mut places),
        "run_python" | "run_command" => run_fact(v, root, &mut places),
        _ => {
            let mut labels = Vec::new();
            walk(v, &mut places, &mut labels);
            if labels.is_empty() {
                "nothing found".to_string()
            } else {
                labels.iter().take(MAX_ITEMS).cloned().collect::<Vec<_>>().join("; ")
            }
        }
    };
    (places, fact)
}

/// `path:start-end` and a label of each object in the result that names a place.
fn walk(v: &Value, places: &mut Vec<String>, labels: &mut Vec<String>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| walk(x, places, labels)),
        Value::Object(o) => {
            let path = o.get("path").or_else(|| o.get("file")).and_then(Value::as_str);
            let start = o.get("start_line").or_else(|| o.get("line")).and_then(Value::as_i64);
            if let (Some(p), Some(s)) = (path, start) {
                let at = span(p, Some(s), o.get("end_line").and_then(Value::as_i64));
                let label = ["id", "qualified_name", "name", "snippet", "text"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .map(|l| excerpt(l, 80));
                if let Some(l) = label {
                    labels.push(format!("{l} ({at})"));
                }
                places.push(at);
            }
            for (k, x) in o {
                if matches!(x, Value::Array(_) | Value::Object(_)) && k != "before" && k != "after" {
                    walk(x, places, labels);
                }
            }
        }
        _ => {}
    }
}

/// A read's fact: the lines shown and the definitions in them with their lines, else
/// its first lines.
fn read_fact(v: &Value) -> String {
    let content = v.get("content").and_then(Value::as_str).unwrap_or("");
    let lines: Vec<(i64, &str)> = content.lines().filter_map(numbered).collect();
    let defs: Vec<String> = lines
        .iter()
        .filter(|(_, code)| {
            let c = code.trim_start();
            [
                "def ",
                "async def ",
                "class ",
                "function ",
                "async function ",
                "export ",
                "public ",
                "private ",
                "protected ",
                "static ",
                "interface ",
                "enum ",
            ]
            .iter()
            .any(|p| c.starts_with(p))
        })
        .map(|(n, code)| format!("`{}` at {n}", excerpt(code.trim().trim_end_matches(['{', ':']).trim_end(), 100)))
        .collect();
    let shown = match (lines.first(), lines.last()) {
        (Some((a, _)), Some((b, _))) => format!("lines {a}-{b}"),
        _ => "no lines".to_string(),
    };
    let total = v.get("total_lines").and_then(Value::as_u64);
    let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
    if defs.is_empty() {
        let first: Vec<&str> = lines.iter().map(|(_, c)| c.trim()).filter(|c| !c.is_empty()).take(2).collect();
        format!("{shown}{of}; starts: {}", excerpt(&first.join(" / "), 160))
    } else {
        let more = if defs.len() > MAX_DEFS { format!(" and {} more", defs.len() - MAX_DEFS) } else { String::new() };
        format!("{shown}{of}; defines {}{more}", defs.into_iter().take(MAX_DEFS).collect::<Vec<_>>().join(", "))
    }
}

/// A snippet's or command's fact: how it ended, the exception it raised and where in the
/// repository (the innermost frame in it, with its code line), and what it printed.
fn run_fact(v: &Value, root: &Path, places: &mut Vec<String>) -> String {
    let stdout = str_of(v, "stdout").trim();
    let stderr = str_of(v, "stderr").trim();
    let ended = if v.get("timed_out").and_then(Value::as_bool) == Some(true) {
        "timed out".to_string()
    } else {
        match v.get("exit_code").and_then(Value::as_i64) {
            Some(c) => format!("exit {c}"),
            None => "killed".to_string(),
        }
    };
    let mut parts = vec![ended];
    let raised = exception(stderr).or_else(|| exception(stdout));
    if let Some(x) = &raised {
        parts.push(format!("raised {x}"));
    }
    if let Some(at) = raised_at(&format!("{stderr}\n{stdout}"), root) {
        places.push(at.place.clone());
        parts.push(format!("at {at}"));
    }
    if !stdout.is_empty() {
        parts.push(format!("printed: {}", excerpt(stdout, 120)));
    }
    if raised.is_none() && !stderr.is_empty() {
        let tail: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        parts.push(format!("stderr ends: {}", excerpt(&tail[tail.len().saturating_sub(2)..].join(" / "), 160)));
    }
    parts.join("; ")
}

/// A test run's fact: its status and counts, the first failure and where it was raised.
fn test_fact(v: &Value, root: &Path, places: &mut Vec<String>) -> String {
    let mut s = format!(
        "{}: {} passed, {} failed",
        str_of(v, "status"),
        v.get("passed").and_then(Value::as_u64).unwrap_or(0),
        v.get("failed").and_then(Value::as_u64).unwrap_or(0)
    );
    let failures = arr(v, "failures");
    if let Some(f) = failures.first() {
        let message = str_of(f, "message");
        let said = exception(message).unwrap_or_else(|| {
            let first = message.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
            match str_of(f, "kind") {
                "" => excerpt(first, 160),
                k if first.is_empty() => k.to_string(),
                k if first.starts_with(k) => excerpt(first, 160),
                k => format!("{k}: {}", excerpt(first, 160)),
            }
        });
        s.push_str(&format!("; {}: {said}", str_of(f, "name")));
    }
    if let Some(e) = v.get("error").and_then(Value::as_str).filter(|e| !e.trim().is_empty()) {
        s.push_str(&format!("; error: {}", excerpt(e.trim(), 160)));
    }
    let out = v.get("output").unwrap_or(&Value::Null);
    let text = format!(
        "{}\n{}\n{}",
        failures.iter().map(|f| str_of(f, "message")).collect::<Vec<_>>().join("\n"),
        str_of(out, "stdout"),
        str_of(out, "stderr")
    );
    if let Some(at) = raised_at(&text, root) {
        places.push(at.place.clone());
        s.push_str(&format!("; at {at}"));
    }
    s
}

fn re(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

/// The last exception a text names (`IndexError: list index out of range`,
/// `java.lang.NumberFormatException: For input string: " 7"`), skipping stack frames.
fn exception(text: &str) -> Option<String> {
    static EXC: OnceLock<Option<Regex>> = OnceLock::new();
    let r = re(
        &EXC,
        r"(?:^|\s)([A-Za-z_][\w.$]*(?:Error|Exception|Failure|Exit|Interrupt))\b(?:\s*\[[^\]]*\])?(?::\s?(.*))?$",
    )?;
    let found: Vec<(&str, Option<&str>)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("at ") && !l.starts_with("File "))
        .filter_map(|l| {
            let c = r.captures(l)?;
            Some((c.get(1)?.as_str(), c.get(2).map(|m| m.as_str().trim()).filter(|m| !m.is_empty())))
        })
        .collect();
    // The last one named; its message from the last line that gives one (pytest ends
    // with `path.py:11: IndexError` after `E   IndexError: list index out of range`).
    let (name, message) = *found.last()?;
    let message = message.or_else(|| found.iter().rev().find(|(n, m)| *n == name && m.is_some()).and_then(|x| x.1));
    Some(match message {
        Some(m) => format!("{name}: {}", excerpt(m, 160)),
        None => name.to_string(),
    })
}

/// Where a traceback says the exception came from in the repository.
struct Raised {
    place: String,
    func: Option<String>,
    code: Option<String>,
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.place)?;
        if let Some(func) = &self.func {
            write!(f, " in {func}")?;
        }
        if let Some(code) = &self.code {
            write!(f, " `{}`", excerpt(code, 100))?;
        }
        Ok(())
    }
}

/// A traceback's path as a path of the repository: the longest suffix of it that names
/// a file under `root` (a sandbox runs a copy elsewhere).
fn in_repo(path: &str, root: &Path) -> Option<String> {
    let p = path.trim_start_matches("file://");
    let candidates = std::iter::once(p).chain(p.match_indices('/').map(|(i, _)| &p[i + 1..]));
    candidates
        .filter(|s| !s.is_empty() && !Path::new(s).is_absolute() && !s.split('/').any(|c| c == ".."))
        .find(|s| root.join(s).is_file())
        .map(str::to_string)
}

/// The innermost stack frame in the repository: Python (`File "...", line N, in f`, or
/// pytest's `path.py:N: Error`), Java (`at pkg.Cls.m(Cls.java:N)`, outside the JDK and
/// JUnit), JavaScript (`at f (/path/x.js:N:C)`, outside node_modules).
fn raised_at(text: &str, root: &Path) -> Option<Raised> {
    static PY: OnceLock<Option<Regex>> = OnceLock::new();
    static PYTEST: OnceLock<Option<Regex>> = OnceLock::new();
    static JAVA: OnceLock<Option<Regex>> = OnceLock::new();
    static JS: OnceLock<Option<Regex>> = OnceLock::new();
    let lines: Vec<&str> = text.lines().collect();
    // Python: the last frame in the repository, with the code line under it.
    if let Some(py) = re(&PY, r#"^\s*File "([^"]+)", line (\d+), in (\S+)"#) {
        let last = lines.iter().enumerate().rev().find_map(|(i, l)| {
            let c = py.captures(l)?;
            let path = in_repo(c.get(1)?.as_str(), root)?;
            let code = lines
                .get(i + 1)
                .map(|n| n.trim())
                .filter(|n| !n.is_empty() && !n.starts_with("File ") && !n.chars().all(|ch| "~^ ".contains(ch)));
            Some(Raised {
                place: format!("{path}:{}", c.get(2)?.as_str()),
                func: Some(c.get(3)?.as_str().to_string()),
                code: code.map(str::to_string),
            })
        });
        if last.is_some() {
            return last;
        }
    }
    if let Some(pt) = re(&PYTEST, r"^([^\s:]+\.py):(\d+): \w") {
        let last = lines.iter().rev().find_map(|l| {
            let c = pt.captures(l.trim())?;
            let path = in_repo(c.get(1)?.as_str(), root)?;
            Some(Raised { place: format!("{path}:{}", c.get(2)?.as_str()), func: None, code: None })
        });
        if last.is_some() {
            return last;
        }
    }
    if let Some(java) = re(&JAVA, r"at ([\w.$<>]+)\(([\w$]+\.java):(\d+)\)") {
        let skip = ["java.", "javax.", "jdk.", "sun.", "org.junit.", "junit.", "org.opentest4j."];
        let first = lines.iter().find_map(|l| {
            let c = java.captures(l)?;
            let method = c.get(1)?.as_str();
            if skip.iter().any(|s| method.starts_with(s)) {
                return None;
            }
            Some(Raised {
                place: format!("{}:{}", c.get(2)?.as_str(), c.get(3)?.as_str()),
                func: Some(method.to_string()),
                code: None,
            })
        });
        if first.is_some() {
            return first;
        }
    }
    if let Some(js) = re(&JS, r"at (?:(\S+) \()?((?:file://)?/[^\s():]+):(\d+):\d+\)?") {
        return lines.iter().find_map(|l| {
            let c = js.captures(l)?;
            let raw = c.get(2)?.as_str();
            if raw.contains("/node_modules/") {
                return None;
            }
            let path = in_repo(raw, root)?;
            Some(Raised {
                place: format!("{path}:{}", c.get(3)?.as_str()),
                func: c.get(1).map(|m| m.as_str().to_string()),
                code: None,
            })
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/slug.py"), "x\n").unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        std::fs::write(d.path().join("src/chunk.js"), "x\n").unwrap();
        d
    }

    fn read_result() -> Value {
        json!({"path": "a/slug.py", "start_line": 1, "end_line": 14, "total_lines": 14,
            "content": " 1 | import re\n 2 | \n 9 | def slugify(title):\n10 |     words = title.split()\n11 |     first = words[0]\n12 |     return first\n14 | class Slug:\n"})
    }

    #[test]
    fn a_read_notes_its_place_and_definitions_once_and_a_repeat_on_the_same_tree_is_answered_from_it() {
        let d = repo();
        let mut l = Ledger::default();
        let args = json!({"path": "a/slug.py"});
        l.note("localization", "read_file", &args, &read_result(), false, Some("t1"), d.path());
        assert_eq!(l.entries[0].places, ["a/slug.py:1-14"]);
        let fact = &l.entries[0].fact;
        assert!(fact.contains("lines 1-14 of 14") && fact.contains("`def slugify(title)` at 9"), "{fact}");
        assert!(fact.contains("`class Slug` at 14"), "{fact}");
        // The same call on the same tree: the earlier result, said to come from the ledger.
        let again = l.recall("root_cause", "read_file", &args, "t1").unwrap();
        assert_eq!(again["content"], read_result()["content"]);
        assert!(
            again["ledger"].as_str().unwrap().contains("entry E1")
                && again["ledger"].as_str().unwrap().contains("localization stage")
        );
        assert_eq!((l.repeats(), l.answered()), (1, 1));
        // Another tree, other arguments, or a tool that is not evidence: no answer.
        assert!(l.recall("root_cause", "read_file", &args, "t2").is_none());
        assert!(l.recall("root_cause", "read_file", &json!({"path": "a/slug.py", "start_line": 9}), "t1").is_none());
        assert!(l.recall("root_cause", "read_file", &args, "").is_none());
        // Noting the same call again (a run resumed without results) adds no entry.
        l.note("root_cause", "read_file", &args, &read_result(), false, Some("t1"), d.path());
        l.note("root_cause", "sequential_thinking", &json!({}), &json!({}), false, None, d.path());
        assert_eq!(l.entries.len(), 1);
        assert_eq!(l.entries[0].asked_again_by, ["root_cause", "root_cause"]);
        // A read on a changed tree is a new entry.
        l.note("test_plan", "read_file", &args, &read_result(), false, Some("t2"), d.path());
        assert_eq!(l.entries.len(), 2);
        let r = l.render();
        assert!(
            r.contains("- E1 [localization] `read_file` {\"path\":\"a/slug.py\"} at a/slug.py:1-14: lines 1-14"),
            "{r}"
        );
        assert!(r.contains("answered from this ledger"), "{r}");
        assert!(Ledger::default().render().is_empty());
    }

    #[test]
    fn a_cited_line_is_quoted_once_into_the_read_that_showed_it() {
        let d = repo();
        let mut l = Ledger::default();
        l.note("localization", "read_file", &json!({"path": "a/slug.py"}), &read_result(), false, Some("t"), d.path());
        let entity = json!({"entity": {"file": "a/slug.py", "kind": "function", "qname": "a.slug.slugify", "signature": "def slugify(title)"},
            "start_line": 9, "end_line": 12, "content": " 9 | def slugify(title):\n11 |     first = words[0]\n"});
        l.note("localization", "read_entity", &json!({"name": "slugify"}), &entity, false, Some("t"), d.path());
        assert!(
            l.entries[1].fact.starts_with("function a.slug.slugify: `def slugify(title)`"),
            "{}",
            l.entries[1].fact
        );
        l.cite("root_cause", &[Spot { path: "a/slug.py".into(), start: 11, end: 11 }]);
        // A whole class is not quoted: a span longer than 8 lines.
        l.cite("localization", &[Spot { path: "a/slug.py".into(), start: 1, end: 40 }]);
        assert_eq!(
            l.entries[0].cited.iter().map(Quote::to_string).collect::<Vec<_>>(),
            ["a/slug.py:11: first = words[0] (root cause)"]
        );
        // A resumed run carries a stage's entries, and the lines it cited, as they were.
        let mut resumed = Ledger::default();
        resumed.carry(&l, "localization");
        assert_eq!(resumed.entries.len(), 2);
        assert!(resumed.entries[0].cited.is_empty());
        resumed.carry(&l, "root_cause");
        assert_eq!(serde_json::to_value(&resumed).unwrap(), serde_json::to_value(&l).unwrap());
        assert!(l.entries[1].cited.is_empty(), "quoted once: {:?}", l.entries[1].cited);
        assert!(l.render().contains("  - cited: a/slug.py:11: first = words[0] (root cause)"));
    }

    #[test]
    fn searches_and_graph_queries_say_what_they_found() {
        let d = repo();
        let mut l = Ledger::default();
        let mut note = |tool: &str, args: Value, result: Value| {
            l.note("localization", tool, &args, &result, false, Some("t"), d.path());
            l.entries.last().unwrap().clone()
        };
        let e = note(
            "search_code",
            json!({"query": "slugify"}),
            json!({"hits": [{"kind": "function", "id": "a/slug.py:slugify", "path": "a/slug.py", "start_line": 9, "end_line": 12}]}),
        );
        assert_eq!(
            (e.places.as_slice(), e.fact.as_str()),
            (&["a/slug.py:9-12".to_string()][..], "1 hits: a/slug.py:slugify (function, 9-12)")
        );
        let e = note("search_code", json!({"query": "nope"}), json!({"hits": []}));
        assert_eq!(e.fact, "no hits for \"nope\"");
        let e = note(
            "callers",
            json!({"name": "slugify"}),
            json!({"entity": "a/slug.py:slugify", "total": 1, "edges": [{"caller": "tests/t.py:test_a", "callee": "a/slug.py:slugify", "how": "import", "line": 5}]}),
        );
        assert_eq!(e.fact, "1 callers of a/slug.py:slugify: tests/t.py:test_a (import, line 5)");
        assert_eq!(e.places, ["tests/t.py:5"]);
        let e = note(
            "callees",
            json!({"name": "slugify"}),
            json!({"entity": "a/slug.py:slugify", "total": 0, "edges": []}),
        );
        assert_eq!(e.fact, "no callees of a/slug.py:slugify");
        let e = note(
            "grep",
            json!({"pattern": "words\\["}),
            json!({"total": 6, "files_with_matches": 2, "matches": [{"path": "a/slug.py", "line": 11, "text": "    first = words[0]"}]}),
        );
        assert_eq!(e.fact, "6 matches in 2 files: a/slug.py:11 `first = words[0]` (and 5 more)");
        let e = note(
            "tests_for",
            json!({"name": "slugify"}),
            json!({"entity": "a/slug.py:slugify", "total": 0, "tests": []}),
        );
        assert_eq!(e.fact, "no tests of a/slug.py:slugify");
        let e = note(
            "call_chain",
            json!({"from": "a", "to": "c"}),
            json!({"from": "a", "to": "c", "chains": [[{"caller": "m:a", "callee": "m:b"}, {"caller": "m:b", "callee": "m:c"}]]}),
        );
        assert_eq!(e.fact, "1 chains: m:a → m:b → m:c");
        let e = note("find", json!({"pattern": "*.py"}), json!({"files": ["a/slug.py"], "total": 1}));
        assert_eq!(e.fact, "1 files: a/slug.py");
    }

    #[test]
    fn a_run_notes_the_exception_and_where_in_the_repository_it_was_raised() {
        let d = repo();
        let mut l = Ledger::default();
        let frames = "  File \"/usr/lib/python3/x.py\", line 1, in <module>\n    f()\n".repeat(20);
        let result = json!({"exit_code": 1, "stdout": "before\n",
            "stderr": format!("Traceback (most recent call last):\n{frames}  File \"/tmp/sb-1/a/slug.py\", line 11, in slugify\n    first = words[0]\n            ~~~~~^^^\nIndexError: list index out of range\n")});
        l.note("test_plan", "run_python", &json!({"code": "f()"}), &result, false, None, d.path());
        let e = &l.entries[0];
        assert_eq!(
            e.fact,
            "exit 1; raised IndexError: list index out of range; at a/slug.py:11 in slugify `first = words[0]`; printed: before"
        );
        assert_eq!(e.places, ["a/slug.py:11"]);
        // A run is never answered from the ledger (its result depends on the sandbox); a
        // repeat with another outcome is a new entry.
        assert!(l.recall("generation", "run_python", &json!({"code": "f()"}), "").is_none());
        l.note(
            "generation",
            "run_python",
            &json!({"code": "f()"}),
            &json!({"exit_code": 0, "stdout": "ok"}),
            false,
            None,
            d.path(),
        );
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[1].fact, "exit 0; printed: ok");

        // A test run: status, the first failure, and where (pytest's form, Java, JavaScript).
        let t = json!({"status": "failed", "passed": 0, "failed": 1, "output": {"stdout": "", "stderr": ""},
            "failures": [{"name": "tests/t.py::test_a", "kind": "IndexError", "message": "def test_a():\n>   slugify('')\nE   IndexError: list index out of range\n\na/slug.py:11: IndexError"}]});
        l.note("generation", "run_test", &json!({"file": "tests/t.py"}), &t, false, None, d.path());
        assert_eq!(
            l.entries[2].fact,
            "failed: 0 passed, 1 failed; tests/t.py::test_a: IndexError: list index out of range; at a/slug.py:11"
        );
        let java = "java.lang.NumberFormatException: For input string: \" 7\"\n\tat java.base/java.lang.Integer.parseInt(Integer.java:652)\n\tat com.acme.util.Percent.parse(Percent.java:12)\n\tat PercentIssueTest.parsesALeadingSpace(PercentIssueTest.java:6)\n";
        let at = raised_at(java, d.path()).unwrap().to_string();
        assert_eq!(at, "Percent.java:12 in com.acme.util.Percent.parse");
        assert_eq!(exception(java).unwrap(), "java.lang.NumberFormatException: For input string: \" 7\"");
        let js = "AssertionError [ERR_ASSERTION]: Expected values\n    at chunk (file:///tmp/sb/src/chunk.js:5:11)\n    at /tmp/sb/node_modules/x/index.js:1:1\n";
        assert_eq!(raised_at(js, d.path()).unwrap().to_string(), "src/chunk.js:5 in chunk");
    }
}
