//! Paths inside the repository, and whether the index still describes the tree.
//!
//! Every path argument is relative to the root. It is checked twice: lexically (no `..`
//! climbing out, no absolute path elsewhere) and after resolving symlinks (the canonical
//! path must stay under the canonical root). Nothing outside the root is ever read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use super::ToolError;
use crate::store::Store;

/// `rel` resolved under `root` (canonical), refused when it leads outside.
pub(crate) fn resolve(root: &Path, rel: &str) -> Result<PathBuf, ToolError> {
    let given = Path::new(rel);
    let joined = if given.is_absolute() { given.to_path_buf() } else { root.join(given) };
    // Lexical check first: a path that does not exist still must not name the outside.
    let mut norm = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                if !norm.pop() {
                    return Err(ToolError::OutsideRepo(rel.to_string()));
                }
            }
            Component::CurDir => {}
            other => norm.push(other.as_os_str()),
        }
    }
    if !norm.starts_with(root) {
        return Err(ToolError::OutsideRepo(rel.to_string()));
    }
    match norm.canonicalize() {
        Ok(canon) if canon.starts_with(root) => {
            let inside = canon.strip_prefix(root).unwrap_or(&canon);
            if let Some(Component::Normal(first)) = inside.components().next() {
                if first == ".git" || first == ".reproagent" {
                    let what = first.to_string_lossy();
                    return Err(ToolError::NotContent {
                        path: rel.to_string(),
                        why: format!("inside {what}/, which the tools never read"),
                    });
                }
            }
            if let Ok(m) = std::fs::metadata(&canon) {
                if let Some(kind) = crate::confine::special_kind(&m.file_type()) {
                    return Err(ToolError::NotContent {
                        path: rel.to_string(),
                        why: format!("a {kind}, not a regular file"),
                    });
                }
            }
            Ok(canon)
        }
        Ok(_) => Err(ToolError::OutsideRepo(rel.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling symlink inside the root still must not be followed out.
            if std::fs::symlink_metadata(&norm).is_ok() {
                return Err(ToolError::OutsideRepo(rel.to_string()));
            }
            Err(ToolError::NotFound { what: "path", name: rel.to_string(), nearest: nearest_paths(root, &norm) })
        }
        Err(e) => Err(ToolError::Io(format!("{rel}: {e}"))),
    }
}

/// Entries of the nearest existing parent whose names look like the missing one.
fn nearest_paths(root: &Path, missing: &Path) -> Vec<String> {
    let want = missing.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let mut dir = missing.parent();
    while let Some(d) = dir {
        if d.is_dir() && d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    let Some(dir) = dir.filter(|d| d.starts_with(root)) else { return Vec::new() };
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut scored: Vec<(usize, String)> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != ".git" && e.file_name() != ".reproagent")
        .map(|e| {
            let name = e.file_name().to_string_lossy().to_lowercase();
            (super::strsim_distance(&want, &name), rel(root, &e.path()))
        })
        .filter(|(d, _)| *d <= want.len().max(4) / 2 + 1)
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, p)| p).collect()
}

/// `abs` relative to `root`, with `/` separators; the root itself is `.`.
pub(crate) fn rel(root: &Path, abs: &Path) -> String {
    let r = abs.strip_prefix(root).unwrap_or(abs);
    let parts: Vec<String> = r.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// Identity of the database: `index` replaces its base file or its delta by rename,
/// which changes this.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DbStamp {
    base: FileStamp,
    delta: Option<FileStamp>,
}

#[derive(Debug, Clone, PartialEq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    ino: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            modified: m.modified().ok(),
            len: m.len(),
            #[cfg(unix)]
            ino: std::os::unix::fs::MetadataExt::ino(&m),
        })
    }
}

impl DbStamp {
    pub(crate) fn of(path: &Path) -> Option<DbStamp> {
        let base = FileStamp::of(path)?;
        Some(DbStamp { base, delta: FileStamp::of(&crate::store::engine::delta_path(path)) })
    }
}

/// Files that changed since the last `index`: the first few by name, and how many.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stale {
    pub changed: Vec<String>,
    pub total: usize,
}

/// How long a walk for new files holds when no directory it saw changed: a file added in
/// a directory the walk found no source in is seen within this time. (Without a watch.)
const WALK_AGAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Does the index still describe the tree? Run before every tool call. The index's
/// files are read once per database. With a watch on the tree (inotify, see
/// [`super::watch`]), a call where nothing happened costs one non-blocking read and gets
/// the last answer; files the watch names are hashed again, and the tree is walked for
/// new files only when a directory, an ignore file or a source file appeared or went.
/// Every [`WALK_AGAIN`] one check `stat`s every file anyway, as without a watch.
/// Without one, each file is `stat`ed (and hashed again only when its size or mtime
/// changed), and the tree walked when a directory the last walk saw changed its mtime
/// (or [`WALK_AGAIN`] passed).
#[derive(Default)]
pub struct Freshness {
    root: Option<PathBuf>,
    seen: HashMap<PathBuf, (Option<SystemTime>, u64, String)>,
    /// The index's files (path => content hash) and the database they were read from.
    stored: Option<(DbStamp, BTreeMap<String, String>)>,
    /// The directories the last walk saw, with their mtimes; when it ran; the source
    /// files it found that the index does not hold (added after the index was written).
    dirs: Vec<(PathBuf, Option<SystemTime>)>,
    walked: Option<std::time::Instant>,
    new_files: Vec<String>,
    /// A digest of what the last check saw: every indexed file's current content hash
    /// (or its absence) and the new files. Equal digests on the same index: the same tree.
    fingerprint: Option<String>,
    /// The watch on the tree's directories, once set up; `watch_tried` once it was tried
    /// (a refused watch is not asked for again on every call).
    watch: Option<super::watch::Watch>,
    watch_tried: bool,
    /// The last answer, given again while the watch reports nothing.
    last: Option<Option<Stale>>,
    /// When every file was last `stat`ed: even under a watch, once per [`WALK_AGAIN`]
    /// (inotify sees this kernel's writes, not another NFS client's).
    looked: Option<std::time::Instant>,
}

impl Freshness {
    /// `None` when the index describes the tree, else what changed.
    pub(crate) fn check(
        &mut self,
        root: &Path,
        store: &Store,
        stamp: Option<&DbStamp>,
    ) -> Result<Option<Stale>, ToolError> {
        if self.root.as_deref() != Some(root) {
            *self = Freshness { root: Some(root.to_path_buf()), ..Default::default() };
        }
        let reload = match (&self.stored, stamp) {
            (Some((st, _)), Some(now)) => st != now,
            _ => true,
        };
        if reload {
            let files: BTreeMap<String, String> =
                crate::graph::files(store)?.into_iter().map(|f| (f.path, f.hash)).collect();
            // A new database: what the last walk found new may be indexed now.
            self.walked = None;
            self.last = None;
            self.stored = stamp.map(|st| (st.clone(), files.clone()));
            if stamp.is_none() {
                self.fingerprint = None;
                return self.compare(root, store, &files, Mode::Stat);
            }
        }
        // What the watch saw since the last call decides how much is looked at again.
        let mut mode = Mode::Stat;
        if let Some(w) = self.watch.as_mut() {
            let c = w.drain();
            if c.lost {
                // Events were dropped: set up a new watch and look at everything.
                self.watch = None;
                self.watch_tried = false;
            } else {
                let due = self.looked.is_none_or(|t| t.elapsed() > WALK_AGAIN);
                if c.is_empty() && !reload && !due {
                    if let Some(last) = &self.last {
                        return Ok(last.clone());
                    }
                }
                for f in &c.files {
                    self.seen.remove(f);
                }
                if due && c.walk {
                    self.walked = None;
                }
                mode = if due { Mode::Stat } else { Mode::Watched { walk: c.walk } };
            }
        }
        if self.watch.is_none() && !self.watch_tried {
            self.watch_tried = true;
            // Watched before anything is looked at, so no change can fall in between.
            self.watch = super::watch::Watch::new();
            if self.watch.is_some() {
                self.walked = None;
            }
        }
        match self.stored.take() {
            Some((st, files)) => {
                let r = self.compare(root, store, &files, mode);
                self.stored = Some((st, files));
                if let Ok(stale) = &r {
                    self.last = Some(stale.clone());
                }
                r
            }
            None => Ok(None),
        }
    }

    fn compare(
        &mut self,
        root: &Path,
        store: &Store,
        stored: &BTreeMap<String, String>,
        mode: Mode,
    ) -> Result<Option<Stale>, ToolError> {
        self.fingerprint = None;
        // The walk (and the watches it adds) comes first, so a change made while the
        // files are looked at is reported by the watch's next read.
        let walk = match mode {
            _ if self.walked.is_none() => true,
            Mode::Watched { walk } => walk,
            Mode::Stat => {
                self.walked.is_some_and(|w| w.elapsed() > WALK_AGAIN)
                    || self.dirs.iter().any(|(d, t)| std::fs::metadata(d).and_then(|m| m.modified()).ok() != *t)
            }
        };
        if walk {
            self.walk_new(root, store, stored);
        }
        let trusted = matches!(mode, Mode::Watched { .. }) && self.watch.is_some();
        if !trusted {
            self.looked = Some(std::time::Instant::now());
        }
        // Under a trusted watch a file it did not name is as the last look found it; the
        // rest are `stat`ed, on every core (one `statx` per indexed file is most of a
        // graph tool's time on a large tree), then compared in order.
        use rayon::prelude::*;
        let abs: Vec<PathBuf> = stored.keys().map(|p| root.join(p)).collect();
        let stats: Vec<Option<Option<std::fs::Metadata>>> = abs
            .par_iter()
            .map(|a| if trusted && self.seen.contains_key(a) { None } else { Some(std::fs::metadata(a).ok()) })
            .collect();
        let mut changed = Vec::new();
        let mut digest = blake3::Hasher::new();
        for (((path, hash), abs), stat) in stored.iter().zip(abs).zip(stats) {
            let now = match stat {
                None => self.seen.get(&abs).map(|(_, _, h)| h.clone()),
                Some(meta) => self.hash_of(abs, meta),
            };
            digest.update(path.as_bytes());
            digest.update(&[0]);
            digest.update(now.as_deref().unwrap_or("-").as_bytes());
            digest.update(&[0]);
            match now {
                Some(h) if h == *hash => {}
                Some(_) => changed.push(format!("{path} (modified)")),
                None => changed.push(format!("{path} (deleted)")),
            }
        }
        for f in &self.new_files {
            digest.update(b"new\0");
            digest.update(f.as_bytes());
            digest.update(&[0]);
        }
        self.fingerprint = Some(digest.finalize().to_hex().to_string());
        changed.extend(self.new_files.iter().map(|f| format!("{f} (new)")));
        if changed.is_empty() {
            return Ok(None);
        }
        let total = changed.len();
        changed.truncate(10);
        Ok(Some(Stale { changed, total }))
    }

    /// Walk the tree for source files the index does not hold. One that changed after the
    /// index was written is new (its content, or on Unix its name or place: a file renamed
    /// or copied in with its old mtime is new too); older ones are files `index` skipped
    /// (too large, too slow to parse). Every directory walked, and every indexed file's
    /// directory, is watched (when there is a watch).
    fn walk_new(&mut self, root: &Path, store: &Store, stored: &BTreeMap<String, String>) {
        let written = std::fs::metadata(store.path()).and_then(|m| m.modified()).ok();
        let (files, _, walked_dirs) = crate::index::walk_with_dirs(root, false);
        let mut dirs: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::from([root.to_path_buf()]);
        self.new_files.clear();
        for f in files {
            let mut d = f.abs.parent();
            while let Some(p) = d.filter(|p| p.starts_with(root)) {
                if !dirs.insert(p.to_path_buf()) {
                    break;
                }
                d = p.parent();
            }
            if !stored.contains_key(&f.rel) {
                let modified = std::fs::metadata(&f.abs).ok().and_then(|m| changed_at(&m));
                let after = match (modified, written) {
                    (Some(m), Some(w)) => m > w,
                    _ => true,
                };
                if after {
                    self.new_files.push(f.rel);
                }
            }
        }
        if let Some(w) = self.watch.as_mut() {
            // Indexed files outside the walk (a vendored directory indexed on request).
            let parents: std::collections::BTreeSet<PathBuf> =
                stored.keys().filter_map(|p| root.join(p).parent().map(Path::to_path_buf)).collect();
            let all = walked_dirs.iter().map(PathBuf::as_path).chain(parents.iter().map(PathBuf::as_path));
            if !w.add_dirs(all) {
                // The kernel's limit on watches: back to a `stat` per file on every call.
                self.watch = None;
            }
        }
        self.dirs =
            dirs.into_iter().map(|d| (d.clone(), std::fs::metadata(&d).and_then(|m| m.modified()).ok())).collect();
        self.walked = Some(std::time::Instant::now());
    }

    /// The digest of the tree the last [`Freshness::check`] saw (`None` before one).
    pub(crate) fn fingerprint(&self) -> Option<&str> {
        self.fingerprint.as_deref()
    }

    fn hash_of(&mut self, path: PathBuf, meta: Option<std::fs::Metadata>) -> Option<String> {
        let Some(m) = meta else {
            self.seen.remove(&path);
            return None;
        };
        let key = (m.modified().ok(), m.len());
        if let Some((t, l, h)) = self.seen.get(&path) {
            if (*t, *l) == key {
                return Some(h.clone());
            }
        }
        // Through the confinement rule: a file swapped for a symlink out or a FIFO is "changed".
        let root = self.root.as_deref()?;
        let Ok(bytes) = crate::confine::read_regular(root, &path) else {
            self.seen.remove(&path);
            return None;
        };
        let h = crate::extract::content_hash(&bytes);
        self.seen.insert(path, (key.0, key.1, h.clone()));
        Some(h)
    }
}

/// When a file last changed: its mtime, or on Unix its status-change time when later (a
/// rename or a `cp -p` keeps the mtime but not the ctime).
fn changed_at(m: &std::fs::Metadata) -> Option<std::time::SystemTime> {
    #[cfg(unix)]
    let ctime = {
        use std::os::unix::fs::MetadataExt;
        u64::try_from(m.ctime())
            .ok()
            .map(|s| std::time::UNIX_EPOCH + std::time::Duration::new(s, u32::try_from(m.ctime_nsec()).unwrap_or(0)))
    };
    #[cfg(not(unix))]
    let ctime = None;
    m.modified().ok().max(ctime)
}

/// How much a freshness check looks at again.
#[derive(Clone, Copy)]
enum Mode {
    /// Every indexed file's `stat`.
    Stat,
    /// Under a watch: only the files it named (dropped from `seen`) and, when `walk`, the tree.
    Watched { walk: bool },
}
