//! Key-free fault localization: rank files and entities for an issue by what it carries
//! (traceback frames, names in code spans, file paths, its words) over the graph and the
//! keyword index. The first stage of the key-free reproduce mode, and the baseline the
//! model's localization stage is compared against.

pub(crate) mod issue;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use thiserror::Error;

use crate::graph;
use crate::search::{SearchError, SearchIndex};
use crate::store::{Store, StoreError};
pub use issue::{read as read_issue, IssueFacts};

#[derive(Debug, Error)]
pub enum LocalizeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error(transparent)]
    Graph(#[from] graph::GraphError),
    /// Nothing to go on: no frame, no name, no words that match the code.
    #[error("the issue text is empty")]
    Empty,
}

impl LocalizeError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            LocalizeError::Store(e) => e.hint(),
            LocalizeError::Search(e) => e.hint(),
            LocalizeError::Graph(e) => e.hint(),
            LocalizeError::Empty => Some("give the issue as a Markdown or text file"),
        }
    }
}

/// A ranked suspect.
#[derive(Debug, Clone, Serialize)]
pub struct Suspect {
    pub file: String,
    /// The entity id, for entity suspects.
    pub entity: Option<String>,
    pub start_line: i64,
    pub end_line: i64,
    pub score: f64,
    /// Why it ranks: the strongest piece of evidence.
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Localization {
    pub files: Vec<Suspect>,
    pub entities: Vec<Suspect>,
    pub issue: IssueFacts,
}

/// Weights of the evidence. A frame is the strongest: it is where the program was.
const FRAME: f64 = 10.0;
const PATH_NAMED: f64 = 4.0;
const QUALIFIED_NAMED: f64 = 6.0;
const NAME_NAMED: f64 = 3.0;
const TEXT_MATCH: f64 = 3.0;
const NEIGHBOUR: f64 = 1.0;
/// A name carried by more entities than this says little.
const MAX_NAME_MATCHES: usize = 8;
/// Test files are where a bug shows, rarely where it is: they rank below the code they
/// test unless the issue is about a test (it names a test file of the repository).
const TEST_FILE_FACTOR: f64 = 0.2;
/// The file a traceback's innermost repository frame calls into, when the trace goes on
/// outside the repository (or stops there): the frame's weight times this.
const CALLED_FROM_FRAME: f64 = 0.5;
/// How many pieces of evidence beyond the strongest count toward a file's score.
const FILE_SUPPORT: usize = 4;
/// BM25 over whole files: the file-level view of the issue's words.
const FILE_TEXT_MATCH: f64 = 4.0;

/// The evidence for one suspect: its strongest piece counts whole, the others a quarter,
/// so one strong piece (the innermost frame) beats several weak ones (outer frames).
#[derive(Default)]
struct Evidence {
    sum: f64,
    /// (weight, reason): the strongest names the suspect's reason.
    best: Option<(f64, String)>,
}

impl Evidence {
    fn add(&mut self, w: f64, reason: impl FnOnce() -> String) {
        self.sum += w;
        if self.best.as_ref().is_none_or(|(b, _)| w > *b) {
            self.best = Some((w, reason()));
        }
    }

    fn score(&self) -> f64 {
        let max = self.best.as_ref().map(|b| b.0).unwrap_or(0.0);
        max + 0.25 * (self.sum - max)
    }
}

struct EntityRow {
    file: String,
    kind: String,
    start: i64,
    end: i64,
}

/// Rank suspects for an issue text.
pub fn localize(
    store: &Store,
    search: Option<&SearchIndex>,
    text: &str,
    limit: usize,
) -> Result<Localization, LocalizeError> {
    if text.trim().is_empty() {
        return Err(LocalizeError::Empty);
    }
    let facts = issue::read(text);
    let files: Vec<(String, bool)> = graph::files(store)?.into_iter().map(|f| (f.path, f.is_test)).collect();
    // Test files by the index's conventions, and by the directories projects keep tests,
    // documentation and examples in (`testing/python/raises.py`, `doc/en/example/x.py`):
    // none of them is where a library's bug is.
    let is_test: HashMap<&str, bool> = files.iter().map(|(p, t)| (p.as_str(), *t || aside_from_code(p))).collect();
    // An issue about a test names test files of the repository and no other file.
    let named: Vec<bool> = facts
        .paths
        .iter()
        .filter_map(|p| match_path(&files, p))
        .map(|p| is_test.get(p.as_str()).copied().unwrap_or(false))
        .collect();
    let about_tests = !named.is_empty() && named.iter().all(|t| *t);
    let test_factor = if about_tests { 1.0 } else { TEST_FILE_FACTOR };

    let mut ent: BTreeMap<String, Evidence> = BTreeMap::new();
    let mut file_ev: BTreeMap<String, Evidence> = BTreeMap::new();
    let mut rows: HashMap<String, EntityRow> = HashMap::new();
    let remember = |e: &graph::EntityInfo, rows: &mut HashMap<String, EntityRow>| -> String {
        rows.entry(e.id.clone()).or_insert_with(|| EntityRow {
            file: e.file.clone(),
            kind: e.kind.clone(),
            start: e.start_line,
            end: e.end_line,
        });
        e.id.clone()
    };

    // Frames: innermost first gets the full weight, outer ones less.
    let mut frames: Vec<&issue::Frame> = facts.frames.iter().collect();
    if facts.innermost_last {
        frames.reverse();
    }
    let mut step = 0;
    // The innermost frame that is in the repository, and whether frames outside it come
    // after it (the trace went on into the standard library or a dependency).
    let mut innermost_repo: Option<(String, i64, f64)> = None;
    let mut outside_before_first_repo = false;
    for fr in frames {
        let Some(path) = match_frame(store, &files, fr)? else {
            if innermost_repo.is_none() {
                outside_before_first_repo = true;
            }
            continue;
        };
        let mut w = FRAME * 0.5f64.powi(step);
        step += 1;
        if is_test.get(path.as_str()).copied().unwrap_or(false) {
            w *= 0.3;
        }
        let where_ = if fr.function.is_empty() { String::new() } else { format!(" in {}", fr.function) };
        let reason = || format!("traceback frame: line {}{where_}", fr.line);
        file_ev.entry(path.clone()).or_default().add(w, reason);
        // The innermost entity holding the line.
        let holding = graph::entities_at(store, &path, fr.line as i64)?;
        if let Some(x) = holding.first() {
            let id = remember(x, &mut rows);
            if innermost_repo.is_none() {
                innermost_repo = Some((id.clone(), fr.line as i64, w));
            }
            ent.entry(id).or_default().add(w, reason);
        } else if innermost_repo.is_none() {
            // A frame at module level or with no line: nothing to follow.
            innermost_repo = Some((String::new(), 0, w));
        }
    }
    // What the innermost repository frame calls on its line, when the trace goes on
    // outside the repository: the repository code it hands its arguments to is as
    // likely the culprit as the frame itself.
    if let Some((id, line, w)) = innermost_repo.filter(|(id, _, _)| !id.is_empty()) {
        if outside_before_first_repo {
            for x in &graph::callees_on_line(store, &id, line, 0.5)? {
                let callee = remember(x, &mut rows);
                if callee != id {
                    ent.entry(callee)
                        .or_default()
                        .add(w * CALLED_FROM_FRAME, || format!("called by {id} at the traceback's line {line}"));
                }
            }
        }
    }

    // Paths the issue names.
    for p in &facts.paths {
        if let Some(path) = match_path(&files, p) {
            file_ev.entry(path).or_default().add(PATH_NAMED, || format!("named in the issue ({p})"));
        }
    }

    // Names in code spans and blocks.
    for ident in facts.identifiers.iter().take(40) {
        // Both kinds are one indexed lookup by the last name; a dotted name then keeps
        // the entities whose qualified name ends with it.
        let last = ident.rsplit('.').next().unwrap_or(ident);
        let mut named = graph::entities_named(store, last)?;
        let weight = if ident.contains('.') {
            let tail = format!(".{ident}");
            named.retain(|x| x.qname.ends_with(&tail));
            QUALIFIED_NAMED
        } else {
            named.retain(|x| x.kind != "module");
            NAME_NAMED
        };
        if named.is_empty() || named.len() > MAX_NAME_MATCHES {
            continue;
        }
        let w = weight / named.len() as f64;
        for x in &named {
            let id = remember(x, &mut rows);
            ent.entry(id).or_default().add(w, || format!("`{ident}` is named in the issue"));
        }
    }

    // The issue's words over the keyword index.
    if let Some(index) = search {
        let q = issue::keyword_text(&facts);
        let hits = index.search(&q, None, None, 30)?;
        let max = hits.iter().map(|h| h.score).fold(0.0f32, f32::max).max(1e-6);
        for (rank, h) in hits.iter().enumerate() {
            let w = TEXT_MATCH * (h.score / max) as f64;
            let reason = || format!("matches the issue's words (keyword rank {})", rank + 1);
            if h.kind == "file" {
                file_ev.entry(h.path.clone()).or_default().add(w, reason);
            } else {
                rows.entry(h.id.clone()).or_insert_with(|| EntityRow {
                    file: h.path.clone(),
                    kind: h.kind.clone(),
                    start: h.start_line,
                    end: h.end_line,
                });
                ent.entry(h.id.clone()).or_default().add(w, reason);
            }
        }
        // Whole files: what plain BM25 over files would rank.
        let hits = index.search(&issue::file_keyword_text(&facts), Some("file"), None, 20)?;
        let max = hits.iter().map(|h| h.score).fold(0.0f32, f32::max).max(1e-6);
        for (rank, h) in hits.iter().enumerate() {
            let w = FILE_TEXT_MATCH * (h.score / max) as f64;
            file_ev
                .entry(h.path.clone())
                .or_default()
                .add(w, || format!("the file matches the issue's words (file rank {})", rank + 1));
        }
    }

    // The neighbours of the strongest suspects in the call graph.
    let mut strongest: Vec<(String, f64)> = ent.iter().map(|(k, v)| (k.clone(), v.score())).collect();
    strongest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let top_score = strongest.first().map(|x| x.1).unwrap_or(1.0).max(1e-6);
    for (id, sc) in strongest.into_iter().take(5) {
        let near = graph::callees(store, &id, 1, 0.5)?
            .into_iter()
            .map(|e| (e.callee, "called by"))
            .chain(graph::callers(store, &id, 1, 0.5)?.into_iter().map(|e| (e.caller, "calls")));
        for (other, rel) in near {
            if other == id {
                continue;
            }
            if !rows.contains_key(&other) {
                if let Some(x) = graph::entity(store, &other)? {
                    remember(&x, &mut rows);
                }
            }
            let w = NEIGHBOUR * sc / top_score;
            ent.entry(other).or_default().add(w, || format!("{rel} {id}"));
        }
    }

    // Entities, with test files down-weighted, then files from their entities.
    let mut entities: Vec<Suspect> = Vec::new();
    for (id, ev) in &ent {
        let Some(row) = rows.get(id) else { continue };
        if row.kind == "module" {
            continue;
        }
        let factor = if is_test.get(row.file.as_str()).copied().unwrap_or(false) { test_factor } else { 1.0 };
        entities.push(Suspect {
            file: row.file.clone(),
            entity: Some(id.clone()),
            start_line: row.start,
            end_line: row.end,
            score: ev.score() * factor,
            reason: ev.best.as_ref().map(|b| b.1.clone()).unwrap_or_default(),
        });
    }
    entities.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.entity.cmp(&b.entity)));

    // A file's score: its strongest piece whole, and a quarter of its next strongest
    // (at most `FILE_SUPPORT` entities): many weak matches in a long file (a test module
    // matching the issue's words everywhere) do not add up to one strong one.
    let mut per_file: BTreeMap<String, (Vec<f64>, String)> = BTreeMap::new(); // (entity scores, reason of max)
    for e in &entities {
        let slot = per_file.entry(e.file.clone()).or_insert((Vec::new(), String::new()));
        if slot.0.iter().all(|s| e.score > *s) {
            slot.1 = format!("{} ({})", e.entity.as_deref().unwrap_or(""), e.reason);
        }
        slot.0.push(e.score);
    }
    for f in file_ev.keys() {
        per_file.entry(f.clone()).or_insert((Vec::new(), String::new()));
    }
    let mut ranked_files: Vec<Suspect> = per_file
        .into_iter()
        .map(|(f, (mut scores, why))| {
            let direct = file_ev.get(&f);
            let factor = if is_test.get(f.as_str()).copied().unwrap_or(false) { test_factor } else { 1.0 };
            let direct_score = direct.map(|d| d.score() * factor).unwrap_or(0.0);
            let max = scores.iter().copied().fold(0.0, f64::max);
            scores.push(direct_score);
            scores.sort_by(|a, b| b.total_cmp(a));
            let score = scores[0] + 0.25 * scores.iter().skip(1).take(FILE_SUPPORT).sum::<f64>();
            let reason = match direct.and_then(|d| d.best.as_ref()) {
                Some((w, r)) if *w * factor >= max => r.clone(),
                _ => why,
            };
            Suspect { file: f, entity: None, start_line: 0, end_line: 0, score, reason }
        })
        .collect();
    ranked_files.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.file.cmp(&b.file)));
    ranked_files.truncate(limit);
    entities.truncate(limit);
    Ok(Localization { files: ranked_files, entities, issue: facts })
}

/// A file in a directory of tests, documentation or examples.
fn aside_from_code(path: &str) -> bool {
    let mut dirs: Vec<&str> = path.split('/').collect();
    dirs.pop();
    dirs.iter().any(|d| {
        matches!(
            *d,
            "tests" | "test" | "testing" | "__tests__" | "doc" | "docs" | "example" | "examples" | "benchmarks"
        )
    })
}

/// A repository file whose path is the longest suffix of `p` (component-wise). A path
/// into an installed copy (`.../site-packages/pkg/x.py`, `dist-packages`, Windows
/// separators) maps only onto a file that ends with everything after the install
/// directory, so `site-packages/other/core/x.py` never lands on this repository's
/// `pkg/core/x.py`.
fn match_path(files: &[(String, bool)], p: &str) -> Option<String> {
    let want: Vec<&str> = p.split(['/', '\\']).filter(|c| !c.is_empty() && *c != ".").collect();
    let need = want
        .iter()
        .rposition(|c| matches!(c.to_ascii_lowercase().as_str(), "site-packages" | "dist-packages"))
        .map(|i| want.len() - i - 1)
        .unwrap_or(0);
    let mut best: Option<(usize, &str)> = None;
    let mut ties = 0;
    for (f, _) in files {
        let have: Vec<&str> = f.split('/').collect();
        let n = have.iter().rev().zip(want.iter().rev()).take_while(|(a, b)| a == b).count();
        if n < need || !(n > 0 && n == have.len().min(want.len()) || n >= 2) {
            continue;
        }
        match best {
            Some((bn, _)) if n < bn => {}
            Some((bn, bf)) if n == bn => {
                ties += 1;
                if f.as_str() < bf {
                    best = Some((n, f));
                }
            }
            _ => {
                best = Some((n, f));
                ties = 0;
            }
        }
    }
    // A bare file name that several files carry (`manage.py`, `utils.py`) names none.
    best.filter(|(n, _)| !(*n == 1 && ties > 0)).map(|(_, f)| f.to_string())
}

fn match_frame(store: &Store, files: &[(String, bool)], fr: &issue::Frame) -> Result<Option<String>, LocalizeError> {
    if !fr.class.is_empty() {
        // Java: the class's qualified name finds its file; nested classes use `$`.
        let outer = fr.class.split('$').next().unwrap_or(&fr.class);
        return Ok(graph::file_of_type(store, outer)?);
    }
    Ok(match_path(files, &fr.path))
}
