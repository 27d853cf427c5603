//! `index`: walk a repository, parse what changed in parallel, resolve, store.
//!
//! Incremental by default: a file whose content hash matches the stored one keeps its
//! stored facts and is not parsed again. Resolution then runs over the facts of every
//! file, in memory (it is pure and takes a small share of the time), and only the rows
//! that differ from the previous index are written, in one transaction; so an
//! incremental index is identical to a full one by construction, and the tests check it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde::Serialize;
use thiserror::Error;

use crate::extract::{content_hash, Extractor, FileFacts, Limits, Skip};
use crate::lang::Lang;
use crate::resolve::{resolve, Counts, Rows};
use crate::search::{self, SearchDoc};
use crate::store::{self, StoreError};

/// Directories skipped unless `include_vendored` is set. `.git` and `.reproagent` are
/// always skipped.
pub const VENDORED_DIRS: &[&str] = &[
    "node_modules",
    "bower_components",
    "vendor",
    "third_party",
    "site-packages",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
];

#[derive(Debug, Error)]
pub enum IndexError {
    /// The path given does not exist or is not a directory.
    #[error("{0}: no such directory")]
    NoRoot(PathBuf),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("thread pool: {0}")]
    Threads(String),
    #[error("query file: {0}")]
    Query(String),
}

impl IndexError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            IndexError::NoRoot(_) => Some("give the path of a repository checkout"),
            IndexError::Store(e) => e.hint(),
            IndexError::Query(_) => Some("fix the query file named by REPROAGENT_QUERIES, or unset it"),
            IndexError::Threads(_) => None,
        }
    }
}

/// What to index and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub root: PathBuf,
    /// Worker threads; `None`: one per core.
    pub threads: Option<usize>,
    pub include_vendored: bool,
    /// Rebuild from scratch even when an index exists.
    pub full: bool,
    pub limits: Limits,
    pub progress: bool,
}

impl Options {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Options {
            root: root.into(),
            threads: None,
            include_vendored: false,
            full: false,
            limits: Limits::default(),
            progress: false,
        }
    }
}

/// What a run did, for the summary line and `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub root: String,
    pub db: String,
    /// `full`, `incremental` or `unchanged`.
    pub mode: String,
    /// Why a full build was done, when an index existed.
    pub rebuilt_because: Option<String>,
    pub files: usize,
    pub parsed: usize,
    pub removed: usize,
    pub entities: usize,
    pub edges: usize,
    pub edges_by_how: BTreeMap<String, usize>,
    pub files_with_syntax_errors: usize,
    pub skipped: Vec<Skip>,
    /// Files kept in part: the entity budget was hit (the reason says where).
    pub truncated: Vec<Skip>,
    pub rows_written: usize,
    pub threads: usize,
    pub seconds: f64,
    /// Wall seconds per phase: walk+parse (with reading stored facts), resolve, graph
    /// store, keyword store. A full build feeds the keyword index during the parse: its
    /// phase is the time it took past the parse's end.
    pub phases: BTreeMap<String, f64>,
}

impl Summary {
    /// The one-line summary.
    pub fn line(&self) -> String {
        let how: Vec<String> = self.edges_by_how.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let mode = match self.mode.as_str() {
            "incremental" => format!("incremental: {} parsed, {} removed", self.parsed, self.removed),
            "unchanged" => "unchanged".to_string(),
            _ => "full".to_string(),
        };
        format!(
            "indexed {} files ({mode}), {} entities, {} edges ({}), {} skipped, {} with syntax errors{}, {:.2}s",
            self.files,
            self.entities,
            self.edges,
            if how.is_empty() { "none".into() } else { how.join(", ") },
            self.skipped.len(),
            self.files_with_syntax_errors,
            if self.truncated.is_empty() { String::new() } else { format!(", {} truncated", self.truncated.len()) },
            self.seconds
        )
    }
}

/// A source file found by the walk.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub abs: PathBuf,
    pub rel: String,
    pub lang: Lang,
    /// The walk met it as a symlink (one that stays inside the root).
    pub link: bool,
}

/// Walk `root` honouring .gitignore; source files sorted by relative path, plus what the
/// walk could not enter or refused. The walk is [`crate::confine::Walk`], the one rule the
/// tools and the sandbox copy share: symlinks are followed only while they stay inside the
/// root (canonical); one leading out, or dangling, is skipped and reported, so nothing
/// outside the repository is ever indexed. FIFOs, sockets and devices are refused by type.
pub fn walk(root: &Path, include_vendored: bool) -> (Vec<SourceFile>, Vec<Skip>) {
    let (files, skipped, _) = walk_with_dirs(root, include_vendored);
    (files, skipped)
}

/// [`walk`], and every directory it went into (the root first): what a watch on the
/// tree must cover to see every file a later walk would find.
pub fn walk_with_dirs(root: &Path, include_vendored: bool) -> (Vec<SourceFile>, Vec<Skip>, Vec<PathBuf>) {
    let mut dirs = vec![root.to_path_buf()];
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let rule = crate::confine::WalkRule { gitignore: true, skip_hidden: true, follow_links: true, max_depth: None };
    let mut walker = crate::confine::Walk::new(root, root, rule, move |e, _| {
        let is_dir = e.file_type().is_some_and(|t| t.is_dir());
        !is_dir || include_vendored || !VENDORED_DIRS.contains(&e.file_name().to_string_lossy().as_ref())
    });
    for e in walker.by_ref() {
        let path = e.path();
        if e.file_type().is_some_and(|t| t.is_dir()) {
            if path != root {
                dirs.push(path.to_path_buf());
            }
            continue;
        }
        let Some(lang) = Lang::of_path(path) else { continue };
        let rel = crate::confine::rel_of(root, path);
        if path.strip_prefix(root).unwrap_or(path).to_str().is_none() {
            // Stored by a lossy name it could never be found again ("stale" forever).
            skipped.push(Skip { path: rel, reason: "file name is not UTF-8".into() });
            continue;
        }
        match e.file_type() {
            Some(t) if t.is_file() => {
                files.push(SourceFile { abs: path.to_path_buf(), rel, lang, link: e.path_is_symlink() })
            }
            Some(t) if t.is_dir() => {}
            Some(t) => {
                let kind = crate::confine::special_kind(&t).unwrap_or("unknown type");
                skipped.push(Skip { path: rel, reason: format!("not a regular file ({kind})") });
            }
            None => skipped.push(Skip { path: rel, reason: "not a regular file".into() }),
        }
    }
    skipped.extend(walker.skipped().into_iter().map(|k| Skip { path: k.path, reason: k.reason }));
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    files.dedup_by(|a, b| a.rel == b.rel);
    skipped.sort_by(|a, b| (&a.path, &a.reason).cmp(&(&b.path, &b.reason)));
    (files, skipped, dirs)
}

fn pool(threads: Option<usize>) -> Result<rayon::ThreadPool, IndexError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n.max(1));
    }
    b.build().map_err(|e| IndexError::Threads(e.to_string()))
}

fn progress_bar(show: bool, len: usize) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} parsing {pos}/{len} files {wide_bar} {eta}") {
        pb.set_style(style);
    }
    pb
}

/// The exclusive lock of `.reproagent/index.lock` (flock), held for a whole run; the
/// file names the holder's pid. The kernel drops it when the holder dies, so a killed
/// run never leaves a stale lock.
pub struct IndexLock(#[allow(dead_code)] std::fs::File);

impl IndexLock {
    /// Take the lock, waiting for a run that holds it (saying which, on stderr).
    pub fn take(root: &Path) -> Result<IndexLock, IndexError> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::io::AsRawFd;
        let dir = root.join(".reproagent");
        std::fs::create_dir_all(&dir).map_err(StoreError::Io)?;
        let path = dir.join("index.lock");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(StoreError::Io)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { "another run".to_string() } else { format!("pid {holder}") };
            eprintln!("waiting for another `reproagent index` of this repository ({who}) to finish");
            // SAFETY: as above; blocks until the holder releases or dies.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(StoreError::Io(std::io::Error::last_os_error()).into());
            }
        }
        f.set_len(0).map_err(StoreError::Io)?;
        f.rewind().map_err(StoreError::Io)?;
        write!(f, "{}", std::process::id()).map_err(StoreError::Io)?;
        Ok(IndexLock(f))
    }
}

/// Index `opts.root`: incrementally when an index of this version exists, else from scratch.
pub fn run(opts: &Options) -> Result<Summary, IndexError> {
    let started = Instant::now();
    if !opts.root.is_dir() {
        return Err(IndexError::NoRoot(opts.root.clone()));
    }
    crate::extract::check_queries().map_err(IndexError::Query)?;
    let root = opts.root.canonicalize().unwrap_or_else(|_| opts.root.clone());
    let db_path = store::db_path(&root);
    // One run at a time per repository: a second waits for the first (and says so).
    let _lock = IndexLock::take(&root)?;
    // Also for an existing index: a `.reproagent/` made before it had its `.gitignore` gets one.
    let state = store::ensure_state_dir(&root).map_err(StoreError::from)?;
    // What a killed run left behind (a half-written graph or keyword index) goes, full
    // run or incremental: under the lock, no other run of this repository is writing.
    store::remove_dead_temps(&state);
    // The walk (one thread: it sorts, follows links, checks loops) runs while the stored
    // index is opened and its facts decoded.
    let walker = {
        let (root, vendored) = (root.clone(), opts.include_vendored);
        std::thread::spawn(move || walk(&root, vendored))
    };

    let mut rebuilt_because = None;
    let existing = if opts.full {
        None
    } else {
        match store::open(&db_path) {
            Ok(s) if s.written_by_this_build() => Some(s),
            Ok(_) => {
                rebuilt_because = Some("written by another version of reproagent".into());
                None
            }
            Err(StoreError::Missing(_)) => None,
            Err(e @ (StoreError::Version { .. } | StoreError::Foreign(_) | StoreError::Damaged { .. })) => {
                rebuilt_because = Some(e.to_string());
                None
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (existing, old_facts) = match existing {
        Some(s) => match s.verify().and_then(|_| s.load_facts()) {
            Ok(f) => (Some(s), f),
            Err(e @ StoreError::Damaged { .. }) => {
                rebuilt_because = Some(e.to_string());
                (None, Vec::new())
            }
            Err(e) => return Err(e.into()),
        },
        None => (None, Vec::new()),
    };
    let opened = started.elapsed().as_secs_f64();
    let (files, mut skipped) =
        walker.join().map_err(|_| IndexError::Store(StoreError::Db("the walk panicked".into())))?;
    let pool = pool(opts.threads)?;
    let threads = pool.current_num_threads();
    let pb = progress_bar(opts.progress, files.len());
    let mut phases: BTreeMap<String, f64> = BTreeMap::new();
    phases.insert("0 open the stored index".into(), opened);
    let summary = |done: Done, phases: BTreeMap<String, f64>| Summary {
        root: root.display().to_string(),
        db: db_path.display().to_string(),
        mode: done.mode.to_string(),
        rebuilt_because: rebuilt_because.clone(),
        files: done.files,
        parsed: done.parsed,
        removed: done.removed,
        entities: done.counts.entities.max(0) as usize,
        edges: done.counts.edges.max(0) as usize,
        edges_by_how: done.counts.by_how.iter().map(|(k, v)| (k.clone(), (*v).max(0) as usize)).collect(),
        files_with_syntax_errors: done.with_syntax_errors,
        skipped: done.skipped,
        truncated: done.truncated,
        rows_written: done.rows_written,
        threads,
        seconds: started.elapsed().as_secs_f64(),
        phases,
    };
    let Some(store) = existing else {
        let done = full(&root, &db_path, &files, skipped, &pool, opts.limits, &pb, started, &mut phases)?;
        return Ok(summary(done, phases));
    };
    // Unchanged files' facts are moved, not copied, into this run's list.
    let old_by_path: HashMap<&str, (usize, &str)> =
        old_facts.iter().enumerate().map(|(i, f)| (f.path.as_str(), (i, f.hash.as_str()))).collect();
    let parsed = AtomicUsize::new(0);
    let limits = opts.limits;
    let results: Vec<Result<Got, Skip>> = pool.install(|| {
        files
            .par_iter()
            .map_init(
                || Extractor::new(limits),
                |ex, sf| {
                    let r = extract_or_reuse(&root, ex, sf, limits, &old_by_path, &parsed);
                    pb.inc(1);
                    r
                },
            )
            .collect()
    });
    pb.finish_and_clear();
    let mut lap = Instant::now();
    let mut mark = |name: &str, phases: &mut BTreeMap<String, f64>| {
        *phases.entry(name.to_string()).or_insert(0.0) += lap.elapsed().as_secs_f64();
        lap = Instant::now();
    };
    phases.insert("1 walk, read, parse".into(), started.elapsed().as_secs_f64() - opened);

    let mut old_slots: Vec<Option<FileFacts>> = Vec::new();
    let mut new_facts = Vec::with_capacity(results.len());
    // Which of `new_facts` were parsed in this run (added or changed).
    let mut fresh: Vec<bool> = Vec::with_capacity(results.len());
    drop(old_by_path);
    old_slots.extend(old_facts.into_iter().map(Some));
    for r in results {
        match r {
            Ok(Got::Reused(i)) => {
                // Stored paths are unique, so each stored file is reused at most once.
                let f = old_slots.get_mut(i).and_then(Option::take);
                let f = f.ok_or_else(|| StoreError::Db(format!("stored facts: file #{i} is listed twice")))?;
                new_facts.push(f);
                fresh.push(false);
            }
            Ok(Got::Parsed(f)) => {
                new_facts.push(*f);
                fresh.push(true);
            }
            Err(s) => skipped.push(s),
        }
    }
    // What is left of the stored facts: the old versions of changed and removed files.
    let old_changed: Vec<FileFacts> = old_slots.into_iter().flatten().collect();
    skipped.sort_by(|a, b| (&a.path, &a.reason).cmp(&(&b.path, &b.reason)));
    let parsed = parsed.load(Ordering::Relaxed);
    let new_paths: HashSet<&str> = new_facts.iter().map(|f| f.path.as_str()).collect();
    let removed = old_changed.iter().filter(|f| !new_paths.contains(f.path.as_str())).count();

    let digest = store::tree_digest(&new_facts);
    // The keyword index can be updated in place only when it matches the graph it was
    // built with; else (missing, or an interrupted run) it is rebuilt from all files.
    let old_digest = store.meta("tree_digest")?;
    let search_fresh = search::SearchIndex::open(&root).and_then(|i| i.check_fresh(old_digest.as_deref())).is_ok();
    // Counts kept by the previous run; an index without them is counted afresh.
    let stored: Option<Counts> = store.meta("counts")?.and_then(|j| serde_json::from_str(&j).ok());
    let (mode, rows_written, counts) = if parsed == 0 && removed == 0 {
        let counts = match &stored {
            Some(c) => c.clone(),
            None => Counts::of(&resolve(&new_facts)),
        };
        mark("2 resolve", &mut phases);
        if old_digest.as_deref() != Some(digest.as_str()) || stored.is_none() {
            store.apply(store::Diff::default(), &root, &digest, &counts)?;
        }
        if !search_fresh || old_digest.as_deref() != Some(digest.as_str()) {
            rebuild_search(&root, &new_facts, &digest)?;
        }
        ("unchanged", 0, counts)
    } else {
        let changed: Vec<&FileFacts> = new_facts.iter().zip(&fresh).filter(|(_, &f)| f).map(|(f, _)| f).collect();
        let (old_rows, new_rows, counts) = match stored {
            Some(mut counts) => {
                let paths: BTreeSet<&str> = changed
                    .iter()
                    .map(|f| f.path.as_str())
                    .chain(old_changed.iter().map(|f| f.path.as_str()))
                    .collect();
                let (old_part, new_part) = resolve_affected(&store, &old_changed, &new_facts, &paths)?;
                counts.add(&Counts::of(&old_part), -1);
                counts.add(&Counts::of(&new_part), 1);
                (old_part, new_part, counts)
            }
            None => {
                let new_rows = resolve(&new_facts);
                let counts = Counts::of(&new_rows);
                // The old tree: the unchanged files (the same facts) and the old versions.
                let mut old_refs: Vec<&FileFacts> =
                    new_facts.iter().zip(&fresh).filter(|(_, &f)| !f).map(|(f, _)| f).chain(&old_changed).collect();
                old_refs.sort_by(|a, b| a.path.cmp(&b.path));
                (crate::resolve::resolve_world(&crate::resolve::World::of(old_refs)), new_rows, counts)
            }
        };
        mark("2 resolve", &mut phases);
        let diff = store::diff(
            &old_rows,
            &new_rows,
            &store::encode_facts(&old_changed.iter().collect::<Vec<_>>())?,
            &store::encode_facts(&changed)?,
        );
        let n = diff.changed_rows;
        store.apply(diff, &root, &digest, &counts)?;
        mark("3 graph store", &mut phases);
        if search_fresh {
            let mut paths: Vec<String> = changed.iter().map(|f| f.path.clone()).collect();
            paths.extend(old_changed.iter().map(|f| f.path.clone()));
            paths.sort();
            paths.dedup();
            store::text::update(&root, &paths, changed.iter().flat_map(|f| docs_from_disk(&root, f)), &digest)?;
        } else {
            rebuild_search(&root, &new_facts, &digest)?;
        }
        mark("4 keyword store", &mut phases);
        ("incremental", n, counts)
    };

    let done = Done {
        mode,
        rows_written,
        counts,
        parsed,
        removed,
        skipped,
        files: new_facts.len(),
        with_syntax_errors: new_facts.iter().filter(|f| f.syntax_errors > 0).count(),
        truncated: truncated_of(&new_facts),
    };
    Ok(summary(done, phases))
}

/// What a run did, before it becomes a [`Summary`].
struct Done {
    mode: &'static str,
    rows_written: usize,
    counts: Counts,
    parsed: usize,
    removed: usize,
    skipped: Vec<Skip>,
    files: usize,
    with_syntax_errors: usize,
    truncated: Vec<Skip>,
}

/// Files kept in part, with where the entity budget stopped them.
fn truncated_of<'a>(facts: impl IntoIterator<Item = &'a FileFacts>) -> Vec<Skip> {
    facts
        .into_iter()
        .filter(|f| !f.truncated.is_empty())
        .map(|f| Skip { path: f.path.clone(), reason: f.truncated.clone() })
        .collect()
}

/// Values set once each by some threads and waited for by another (`OnceLock::wait` is
/// newer than our minimum Rust): a setter sets, then takes the lock to wake the waiters; a
/// waiter looks again under the lock before it sleeps, so no wake-up is missed.
struct Slots<T> {
    cells: Vec<OnceLock<T>>,
    lock: Mutex<()>,
    set: Condvar,
}

impl<T> Slots<T> {
    fn new(n: usize) -> Slots<T> {
        Slots { cells: (0..n).map(|_| OnceLock::new()).collect(), lock: Mutex::new(()), set: Condvar::new() }
    }

    /// Set slot `i` unless it is set already.
    fn set(&self, i: usize, v: T) {
        if let Some(c) = self.cells.get(i) {
            if c.set(v).is_ok() {
                let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.set.notify_all();
            }
        }
    }

    /// Slot `i`'s value, once it is set (`None` for a slot that does not exist).
    fn wait(&self, i: usize) -> Option<&T> {
        let c = self.cells.get(i)?;
        if let Some(v) = c.get() {
            return Some(v);
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = c.get() {
                return Some(v);
            }
            g = self.set.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Fills what the parse left unset when it stops early (a worker panicked): the feeder
/// waits for every file's slot in turn and then for the digest, and must not wait forever.
struct FillUnset<'a> {
    files: &'a Slots<Result<FileFacts, Skip>>,
    digest: &'a Slots<Option<String>>,
}

impl Drop for FillUnset<'_> {
    fn drop(&mut self) {
        for i in 0..self.files.cells.len() {
            self.files.set(i, Err(Skip { path: String::new(), reason: "not parsed: the parse stopped".into() }));
        }
        self.digest.set(0, None);
    }
}

/// A build from scratch. The keyword index needs only each file's facts and text, so it
/// is fed while the parse runs: workers take files in path order (a shared counter, so
/// the parse advances through the list as one front) and put each file's facts in its
/// slot; the feeder thread waits for the slots in order, reads each file again (its text
/// is in the page cache) and hands its documents to tantivy's indexing thread. Documents
/// go in the order of a build after the parse, so the index and every search answer are
/// the same; at most one file's documents wait in the feeder. Once the parse ends, the
/// graph is resolved and written on the index's pool (the parse freed its memory in those
/// threads' malloc arenas, which resolving and writing then reuse: from another thread
/// they grow a new arena, 30-60 MiB more peak RSS on Django) while tantivy finishes.
/// Tantivy gets one indexing thread of two (with both, it wrote two segments whose term
/// dictionaries each held most terms, for 5-10% more CPU time and 70-90 MiB more memory
/// on TypeScript). Its commit waits for the tree digest, known when the parse ends.
#[allow(clippy::too_many_arguments)]
fn full(
    root: &Path,
    db_path: &Path,
    files: &[SourceFile],
    mut skipped: Vec<Skip>,
    pool: &rayon::ThreadPool,
    limits: Limits,
    pb: &indicatif::ProgressBar,
    started: Instant,
    phases: &mut BTreeMap<String, f64>,
) -> Result<Done, IndexError> {
    let threads = pool.current_num_threads();
    let slots: Slots<Result<FileFacts, Skip>> = Slots::new(files.len());
    let digest_slot: Slots<Option<String>> = Slots::new(1);
    let build = store::text::FullBuild::begin(root, threads.saturating_sub(1).max(1))?;
    let (graph, text, parse_end) = std::thread::scope(|s| {
        let text = s.spawn(|| {
            let docs =
                (0..files.len()).filter_map(|i| slots.wait(i)?.as_ref().ok()).flat_map(|f| docs_from_disk(root, f));
            let added = build.add(docs);
            match (added, digest_slot.wait(0)) {
                (Ok(()), Some(Some(digest))) => build.finish(digest).map(|_| Instant::now()),
                (added, _) => {
                    build.abandon();
                    added.and(Err(StoreError::Db("the keyword index was not finished: the parse stopped".into())))
                }
            }
        });
        let unset = FillUnset { files: &slots, digest: &digest_slot };
        let next = AtomicUsize::new(0);
        pool.broadcast(|_| {
            let mut ex = Extractor::new(limits);
            let mut bytes = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(sf) = files.get(i) else { break };
                let got = read_source_into(root, sf, limits, &mut bytes).and_then(|()| {
                    let hash = content_hash(&bytes);
                    ex.extract_bytes(&sf.rel, sf.lang, &bytes, hash)
                });
                slots.set(i, got);
                pb.inc(1);
            }
        });
        pb.finish_and_clear();
        let facts: Vec<&FileFacts> = slots.cells.iter().filter_map(|s| s.get()?.as_ref().ok()).collect();
        let digest = store::tree_digest(facts.iter().copied());
        digest_slot.set(0, Some(digest.clone()));
        drop(unset);
        let parse_end = Instant::now();
        let graph = pool.install(|| {
            let t = Instant::now();
            let rows = crate::resolve::resolve_world(&crate::resolve::World::of(facts.clone()));
            let resolved = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let counts = Counts::of(&rows);
            let total = total_rows(&rows);
            store::write_full(db_path, root, rows, &facts, &digest, &counts)
                .map(|_| (resolved, t.elapsed().as_secs_f64(), total, counts))
        });
        (graph, text.join(), parse_end)
    });
    let text_done = text.map_err(|_| IndexError::Store(StoreError::Db("the keyword index writer panicked".into())))?;
    let (resolved, graph, rows, counts) = graph?;
    let text_done = text_done?;
    let opened = phases.get("0 open the stored index").copied().unwrap_or(0.0);
    phases.insert("1 walk, read, parse".into(), (parse_end - started).as_secs_f64() - opened);
    phases.insert("2 resolve".into(), resolved);
    phases.insert("3 graph store".into(), graph);
    // The keyword store's time past the parse's end (it ran during the parse).
    phases.insert("4 keyword store".into(), text_done.saturating_duration_since(parse_end).as_secs_f64());
    phases.insert("2-4 resolve and stores, at once".into(), parse_end.elapsed().as_secs_f64());
    let mut facts = Vec::with_capacity(slots.cells.len());
    for slot in slots.cells {
        match slot.into_inner() {
            Some(Ok(f)) => facts.push(f),
            Some(Err(s)) => skipped.push(s),
            None => {}
        }
    }
    skipped.sort_by(|a, b| (&a.path, &a.reason).cmp(&(&b.path, &b.reason)));
    Ok(Done {
        mode: "full",
        rows_written: rows + facts.len(),
        counts,
        parsed: facts.len(),
        removed: 0,
        skipped,
        files: facts.len(),
        with_syntax_errors: facts.iter().filter(|f| f.syntax_errors > 0).count(),
        truncated: truncated_of(&facts),
    })
}

/// The rows an incremental run can change, before and after: those of the files the
/// change affects ([`resolve::affected`]). (`test_of` is not stored: it is walked back
/// from its targets when asked, so no closure has to be walked again here.)
fn resolve_affected<'a>(
    store: &store::Store,
    old_changed: &[FileFacts],
    new: &'a [FileFacts],
    changed: &BTreeSet<&str>,
) -> Result<(Rows<'static>, Rows<'a>), IndexError> {
    use crate::resolve::{affected, resolve_files, World};
    let new_w = World::new(new);
    let old_changed: Vec<&FileFacts> = old_changed.iter().collect();
    let (old_paths, an) = affected::affected(&old_changed, &new_w, changed, |ids| store.inheriting(ids))?;
    // The old rows of the affected files are read from the index, not resolved again.
    let old_paths: Vec<&str> = old_paths.iter().map(String::as_str).collect();
    let old_part = store.rows_of_files(&old_paths, new.len().max(old_paths.len()))?;
    let new_part = resolve_files(&new_w, &an);
    Ok((old_part, new_part))
}

/// Rebuild the keyword index from every indexed file (read again: they are in the page
/// cache after the walk), one file's documents at a time, into one segment as a full
/// build does (one tantivy thread): the same documents in the same order, so the same
/// hits, scores and ties. (Two threads split the documents between two segments as they
/// came, which orders tied hits by chance and sums scores in another order.)
fn rebuild_search(root: &Path, facts: &[FileFacts], digest: &str) -> Result<(), IndexError> {
    store::text::write_full(root, facts.iter().flat_map(|f| docs_from_disk(root, f)), digest, 1)?;
    Ok(())
}

/// A file's keyword documents, from its facts and its text read again (under the
/// confinement rule). Read after the parse, not kept from it: a file changed in between
/// (its content no longer the hash its facts were made from) gets documents without text
/// (its file and entities found by path, name, signature and doc, not by body) until the
/// next run, which sees the change and parses it again.
fn docs_from_disk(root: &Path, f: &FileFacts) -> Vec<SearchDoc> {
    let bytes = crate::confine::read_regular(root, &root.join(&f.path)).ok();
    let text =
        bytes.as_deref().filter(|b| content_hash(b) == f.hash).and_then(|b| crate::extract::decode_source(b).ok());
    search::docs_for(f, text.as_deref().unwrap_or(""))
}

fn total_rows(r: &Rows) -> usize {
    r.file.len()
        + r.entity.len()
        + r.contains.len()
        + r.calls.len()
        + r.call_site.len()
        + r.unresolved.len()
        + r.imports.len()
        + r.inherits.len()
}

/// A file's facts: the stored ones (by index), or parsed in this run.
enum Got {
    Reused(usize),
    Parsed(Box<FileFacts>),
}

fn extract_or_reuse(
    canon_root: &Path,
    ex: &mut Extractor,
    sf: &SourceFile,
    limits: Limits,
    old: &HashMap<&str, (usize, &str)>,
    parsed: &AtomicUsize,
) -> Result<Got, Skip> {
    let bytes = read_source(canon_root, sf, limits)?;
    let hash = content_hash(&bytes);
    if let Some(&(i, old_hash)) = old.get(sf.rel.as_str()) {
        if old_hash == hash {
            return Ok(Got::Reused(i));
        }
    }
    // Counted once extracted: a file skipped for its content (binary, not UTF-8) has no
    // facts to compare against next time, and must not make every run look changed.
    let facts = ex.extract_bytes(&sf.rel, sf.lang, &bytes, hash)?;
    parsed.fetch_add(1, Ordering::Relaxed);
    Ok(Got::Parsed(Box::new(facts)))
}

/// A walked file's bytes, or why it is skipped.
fn read_source(canon_root: &Path, sf: &SourceFile, limits: Limits) -> Result<Vec<u8>, Skip> {
    let mut bytes = Vec::new();
    read_source_into(canon_root, sf, limits, &mut bytes)?;
    Ok(bytes)
}

/// [`read_source`] into a buffer the caller reuses from file to file (a large buffer
/// allocated per file cost a consolidation of glibc's free lists each time).
fn read_source_into(canon_root: &Path, sf: &SourceFile, limits: Limits, bytes: &mut Vec<u8>) -> Result<(), Skip> {
    let skip = |reason: String| Skip { path: sf.rel.clone(), reason };
    let refused = |e: crate::confine::Refused| match e {
        crate::confine::Refused::Io(e) => skip(crate::confine::io_reason(&e)),
        other => skip(other.to_string()),
    };
    // Opened as the walk met it (no path resolution for a plain entry), and checked to
    // be a regular file on the descriptor; its size from the same descriptor.
    let mut file = crate::confine::open_walked_path(canon_root, &sf.abs, sf.link).map_err(refused)?;
    let len = file.metadata().map_err(|e| skip(crate::confine::io_reason(&e)))?.len();
    if len > limits.max_bytes {
        return Err(skip(format!("too large: {len} bytes, limit {} (--max-file-bytes)", limits.max_bytes)));
    }
    bytes.clear();
    bytes.reserve(len as usize + 1);
    std::io::Read::read_to_end(&mut file, bytes).map_err(|e| skip(crate::confine::io_reason(&e)))?;
    Ok(())
}

/// Parse every source file with tree-sitter and nothing else: the baseline the index
/// benchmark compares a full index against. Returns (files parsed, time taken).
pub fn parse_only(root: &Path, threads: Option<usize>) -> Result<(usize, Duration), IndexError> {
    let started = Instant::now();
    let (files, _) = walk(root, false);
    let canon_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let pool = pool(threads)?;
    let n = pool.install(|| {
        files
            .par_iter()
            .map_init(tree_sitter::Parser::new, |parser, sf| {
                let Ok(bytes) = crate::confine::read_regular(&canon_root, &sf.abs) else { return 0 };
                if parser.set_language(&sf.lang.ts_language(&sf.rel)).is_err() {
                    return 0;
                }
                usize::from(parser.parse(&bytes, None).is_some())
            })
            .sum()
    });
    Ok((n, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::Limits;

    /// A waiter sees each slot's first value once it is set, in the order it asks, however
    /// the setters interleave; a slot set twice keeps its first value.
    #[test]
    fn slots_hand_values_over_in_order() {
        let slots: Slots<usize> = Slots::new(64);
        let seen = std::thread::scope(|s| {
            let waiter = s.spawn(|| (0..64).map(|i| *slots.wait(i).unwrap()).collect::<Vec<_>>());
            let setters: Vec<_> = (0..4)
                .map(|t| {
                    let slots = &slots;
                    s.spawn(move || {
                        for i in (t..64).step_by(4).rev() {
                            std::thread::sleep(Duration::from_micros(50 * (i as u64 % 7)));
                            slots.set(i, i * 10);
                        }
                    })
                })
                .collect();
            for h in setters {
                h.join().unwrap();
            }
            slots.set(3, 999);
            waiter.join().unwrap()
        });
        assert_eq!(seen, (0..64).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(slots.wait(3), Some(&30));
        assert_eq!(slots.wait(64), None);
    }

    /// The keyword documents are made from the file read again after the parse: the
    /// text the facts were made from gives the bodies; a file changed in between gives
    /// documents without bodies (still found by name), never bodies of other text.
    #[test]
    fn documents_read_again_hold_the_parsed_text_or_no_body() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let src = "def shipping_cost(order):\n    return order.weight * rate_per_kilo\n";
        std::fs::write(root.join("cost.py"), src).unwrap();
        let facts = Extractor::new(Limits::default())
            .extract_bytes("cost.py", Lang::Python, src.as_bytes(), content_hash(src.as_bytes()))
            .unwrap();
        let body_of = |docs: &[SearchDoc], id: &str| docs.iter().find(|d| d.id.ends_with(id)).map(|d| d.body.clone());

        let docs = docs_from_disk(&root, &facts);
        assert_eq!(docs, search::docs_for(&facts, src));
        assert!(body_of(&docs, "shipping_cost").unwrap().contains("rate_per_kilo"));

        std::fs::write(root.join("cost.py"), "def other():\n    return unrelated_words\n").unwrap();
        let docs = docs_from_disk(&root, &facts);
        assert_eq!(docs.len(), search::docs_for(&facts, src).len());
        assert!(docs.iter().all(|d| d.body.is_empty()), "{docs:?}");
        assert!(docs.iter().any(|d| d.name == "shipping_cost"));

        std::fs::remove_file(root.join("cost.py")).unwrap();
        assert!(docs_from_disk(&root, &facts).iter().all(|d| d.body.is_empty()));
    }
}
