//! The one confinement rule for repository content: a path is read only when, with every
//! symlink resolved, it stays under the canonical root and names a regular file; it is
//! written only through components that are not symlinks leading out, and never through
//! a symlink at the last component; a walk keeps a symlink only while it resolves inside
//! the root and reports the others ([`Walk`]). The indexer's walk, the tools' walks and
//! reads, the sandbox copy, the keyword index's snippets, the freshness check, the local
//! sandbox's file writes and `reproduce --write` all go through here.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug)]
pub enum Refused {
    /// With symlinks resolved, the path leads outside the root (`target` is where).
    Outside {
        target: PathBuf,
    },
    /// A symlink whose target does not exist (it could be created anywhere).
    Dangling,
    /// Not a regular file: a FIFO, socket or device (reading it could block forever).
    Special(&'static str),
    /// A directory where a file was wanted.
    Directory,
    Missing,
    Io(std::io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Outside { target } => {
                write!(f, "symlink out of the repository (to {})", target.display())
            }
            Refused::Dangling => write!(f, "dangling symlink"),
            Refused::Special(k) => write!(f, "not a regular file ({k})"),
            Refused::Directory => write!(f, "a directory"),
            Refused::Missing => write!(f, "no such file"),
            Refused::Io(e) => write!(f, "unreadable: {e}"),
        }
    }
}

/// What kind of special file `ft` is, or `None` for a regular file, directory or symlink.
pub fn special_kind(ft: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        Some("FIFO")
    } else if ft.is_socket() {
        Some("socket")
    } else if ft.is_block_device() || ft.is_char_device() {
        Some("device")
    } else {
        None
    }
}

/// `path` (absolute, under `root`) with symlinks resolved, when it stays under `root`
/// (canonical). A missing path that is not a symlink is `Missing`.
pub fn resolve_inside(root: &Path, path: &Path) -> Result<PathBuf, Refused> {
    match path.canonicalize() {
        Ok(c) if c.starts_with(root) => Ok(c),
        Ok(c) => Err(Refused::Outside { target: c }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                Err(Refused::Dangling)
            } else {
                Err(Refused::Missing)
            }
        }
        Err(e) => Err(Refused::Io(e)),
    }
}

/// Open a regular file under `root`, checked: inside after resolving symlinks, and a
/// regular file by type (checked before opening, and again on the open descriptor, which
/// is opened non-blocking so a FIFO swapped in between cannot hang the reader).
pub fn open_regular(root: &Path, path: &Path) -> Result<File, Refused> {
    let canon = resolve_inside(root, path)?;
    let meta = std::fs::metadata(&canon).map_err(Refused::Io)?;
    check_type(&meta)?;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&canon)
        .map_err(Refused::Io)?;
    check_type(&f.metadata().map_err(Refused::Io)?)?;
    Ok(f)
}

fn check_type(meta: &std::fs::Metadata) -> Result<(), Refused> {
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(Refused::Directory);
    }
    if let Some(k) = special_kind(&ft) {
        return Err(Refused::Special(k));
    }
    if !ft.is_file() {
        return Err(Refused::Special("unknown type"));
    }
    Ok(())
}

/// Open a file a [`Walk`] under `root` yielded. A plain entry (not itself a symlink) is
/// opened without following a link at its last component (`O_NOFOLLOW`, non-blocking) and
/// checked to be a regular file on the descriptor: the walk checked the directories on the
/// way, so this costs no path resolution. A symlink the walk followed goes through
/// [`open_regular`].
pub fn open_walked(root: &Path, e: &ignore::DirEntry) -> Result<File, Refused> {
    open_walked_path(root, e.path(), e.path_is_symlink())
}

/// [`open_walked`] for an entry kept as its path and whether it was a symlink.
pub fn open_walked_path(root: &Path, path: &Path, is_symlink: bool) -> Result<File, Refused> {
    if is_symlink {
        return open_regular(root, path);
    }
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(path);
    let f = match opened {
        Ok(f) => f,
        // Swapped for a symlink since the walk: by the rule, as any link.
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return open_regular(root, path),
        Err(err) => return Err(Refused::Io(err)),
    };
    check_type(&f.metadata().map_err(Refused::Io)?)?;
    Ok(f)
}

/// Read a regular file under `root` (see [`open_regular`]).
pub fn read_regular(root: &Path, path: &Path) -> Result<Vec<u8>, Refused> {
    let mut f = open_regular(root, path)?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(Refused::Io)?;
    Ok(buf)
}

/// Why a write was refused, or failed.
#[derive(Debug)]
pub enum WriteError {
    /// `rel` is absolute or climbs with `..`.
    BadPath(String),
    /// A component is a symlink (the last one: any; a directory: one leading out).
    Symlink(String),
    Exists(String),
    Io(String, std::io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::BadPath(p) => write!(f, "{p}: not a relative path inside the repository"),
            WriteError::Symlink(p) => {
                write!(f, "{p} is a symlink; files are never written through one")
            }
            WriteError::Exists(p) => write!(f, "{p} already exists"),
            WriteError::Io(p, e) => write!(f, "{p}: {e}"),
        }
    }
}

impl std::error::Error for WriteError {}

/// Write `bytes` to `root/rel` without following a symlink out of `root`: missing
/// directories are made one by one; a directory component that is a symlink must resolve
/// inside `root`; the file itself must not be a symlink (dangling or not) and is opened
/// with `O_NOFOLLOW`. With `overwrite` false an existing file is refused.
pub fn write_inside(root: &Path, rel: &str, bytes: &[u8], overwrite: bool) -> Result<PathBuf, WriteError> {
    let root_c = root.canonicalize().map_err(|e| WriteError::Io(root.display().to_string(), e))?;
    let given = Path::new(rel);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in given.components() {
        match c {
            Component::Normal(s) => parts.push(s),
            Component::CurDir => {}
            _ => return Err(WriteError::BadPath(rel.to_string())),
        }
    }
    let Some((name, dirs)) = parts.split_last() else {
        return Err(WriteError::BadPath(rel.to_string()));
    };
    let mut dir = root_c.clone();
    for d in dirs {
        let next = dir.join(d);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => match next.canonicalize() {
                Ok(c) if c.starts_with(&root_c) && c.is_dir() => dir = c,
                _ => return Err(WriteError::Symlink(rel_of(&root_c, &next))),
            },
            Ok(m) if m.is_dir() => dir = next,
            Ok(_) => return Err(WriteError::Io(rel_of(&root_c, &next), std::io::Error::other("not a directory"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next).map_err(|e| WriteError::Io(rel_of(&root_c, &next), e))?;
                dir = next;
            }
            Err(e) => return Err(WriteError::Io(rel_of(&root_c, &next), e)),
        }
    }
    let dest = dir.join(name);
    match std::fs::symlink_metadata(&dest) {
        Ok(m) if m.file_type().is_symlink() => return Err(WriteError::Symlink(rel.to_string())),
        Ok(_) if !overwrite => return Err(WriteError::Exists(rel.to_string())),
        Ok(m) if !m.is_file() => {
            return Err(WriteError::Io(rel.to_string(), std::io::Error::other("not a regular file")))
        }
        _ => {}
    }
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(&dest).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => WriteError::Symlink(rel.to_string()),
        _ if e.kind() == std::io::ErrorKind::AlreadyExists => WriteError::Exists(rel.to_string()),
        _ => WriteError::Io(rel.to_string(), e),
    })?;
    f.write_all(bytes).map_err(|e| WriteError::Io(rel.to_string(), e))?;
    Ok(dest)
}

/// `abs` relative to `root`, with `/` separators.
pub fn rel_of(root: &Path, abs: &Path) -> String {
    let r = abs.strip_prefix(root).unwrap_or(abs);
    r.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

/// `root/rel` as text, read through [`read_regular`] (so never through a symlink out of
/// `root`, never a FIFO); `None` when refused, missing or unreadable. Invalid UTF-8 is
/// replaced.
pub fn read_text(root: &Path, rel: impl AsRef<Path>) -> Option<String> {
    let canon = root.canonicalize().ok()?;
    let bytes = read_regular(&canon, &canon.join(rel)).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// A configuration file of the repository (`reproagent.toml`), read through
/// [`read_regular`]: `Ok(None)` when there is none, `Err` with the reason when it is
/// refused (a symlink out of the repository, a FIFO) or unreadable.
pub fn read_config(root: &Path, rel: &str) -> Result<Option<String>, String> {
    let canon = root.canonicalize().map_err(|e| format!("{}: {e}", root.display()))?;
    match read_regular(&canon, &canon.join(rel)) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(Refused::Missing) => Ok(None),
        Err(r) => Err(format!("{}: {r}", root.join(rel).display())),
    }
}

/// `root/rel` as bytes, read through [`read_regular`]; `None` when refused or missing.
pub fn read_bytes(root: &Path, rel: impl AsRef<Path>) -> Option<Vec<u8>> {
    let canon = root.canonicalize().ok()?;
    read_regular(&canon, &canon.join(rel)).ok()
}

// ------------------------------------------------------------------ the one walk

/// A walk entry the rule refused, reported to the user: its path relative to the root
/// (`/`-separated) and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// The confinement rule for a symlink met by a walk: its canonical target when that stays
/// under `canon_root`, else why it is skipped ("symlink out of the repository (to ...)",
/// "broken symlink").
pub fn check_link(canon_root: &Path, path: &Path) -> Result<PathBuf, String> {
    resolve_inside(canon_root, path).map_err(|why| match why {
        Refused::Dangling | Refused::Missing => "broken symlink".to_string(),
        other => other.to_string(),
    })
}

/// What a walk visits, apart from the confinement rule (which every walk applies).
#[derive(Debug, Clone, Copy)]
pub struct WalkRule {
    /// Honour `.gitignore`, `.git/info/exclude`, `.ignore` and the global gitignore (the
    /// indexer and the tools); the sandbox copy keeps ignored files.
    pub gitignore: bool,
    /// Leave out hidden files and directories.
    pub skip_hidden: bool,
    /// Descend through symlinks that stay inside (the indexer and the tools read what they
    /// lead to); without it a link is an entry of its own (the copy re-creates it).
    pub follow_links: bool,
    pub max_depth: Option<usize>,
}

/// The one walk of repository content, shared by the indexer, the tools and the sandbox
/// copy. Entries come sorted by name, a directory before what it holds. The rule: a
/// symlink is kept (followed, or kept as a link) only while it resolves inside the root;
/// one leading out of it, or dangling, is left out and reported in [`Walk::skipped`].
/// `.git` and `.reproagent` are never entered. `keep(entry, rel)` leaves out what the
/// caller does not want (vendored directories, caches); what it leaves out is not reported.
pub struct Walk {
    inner: ignore::Walk,
    root: PathBuf,
    skipped: std::sync::Arc<std::sync::Mutex<Vec<Skipped>>>,
}

impl Walk {
    /// Walk `start` (`root` itself or a directory under it) under `rule`; paths in
    /// [`Walk::skipped`] are relative to `root`.
    pub fn new<F>(root: &Path, start: &Path, rule: WalkRule, keep: F) -> Walk
    where
        F: Fn(&ignore::DirEntry, &Path) -> bool + Send + Sync + 'static,
    {
        let canon = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let skipped: std::sync::Arc<std::sync::Mutex<Vec<Skipped>>> = Default::default();
        let (sink, root_w) = (skipped.clone(), root.to_path_buf());
        let mut b = ignore::WalkBuilder::new(start);
        // With `gitignore`, ripgrep's filters (parent directories' and the global
        // gitignore included), as before; without it, none.
        b.standard_filters(rule.gitignore)
            .hidden(rule.skip_hidden)
            .require_git(false)
            .follow_links(rule.follow_links)
            .max_depth(rule.max_depth)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(move |e| {
                let name = e.file_name();
                if name == ".git" || name == ".reproagent" {
                    return false;
                }
                let rel = e.path().strip_prefix(&root_w).unwrap_or(e.path());
                if e.depth() > 0 && e.path_is_symlink() {
                    if let Err(reason) = check_link(&canon, e.path()) {
                        if let Ok(mut s) = sink.lock() {
                            s.push(Skipped { path: rel_of(&root_w, e.path()), reason });
                        }
                        return false;
                    }
                }
                e.depth() == 0 || keep(e, rel)
            });
        Walk { inner: b.build(), root: root.to_path_buf(), skipped }
    }

    /// The entries the rule left out so far, sorted by path.
    pub fn skipped(&self) -> Vec<Skipped> {
        let mut v = self.skipped.lock().map(|s| s.clone()).unwrap_or_default();
        v.sort_by(|a, b| (&a.path, &a.reason).cmp(&(&b.path, &b.reason)));
        v.dedup();
        v
    }
}

/// Entries the walk could not enter (a symlink loop, an unreadable directory) are not
/// yielded: they go to [`Walk::skipped`] with the reason.
impl Iterator for Walk {
    type Item = ignore::DirEntry;

    fn next(&mut self) -> Option<ignore::DirEntry> {
        loop {
            match self.inner.next()? {
                Ok(e) => return Some(e),
                Err(err) => {
                    let k = walk_error(&self.root, &err);
                    if let Ok(mut s) = self.skipped.lock() {
                        s.push(k);
                    }
                }
            }
        }
    }
}

fn walk_error(root: &Path, err: &ignore::Error) -> Skipped {
    fn inner(root: &Path, err: &ignore::Error) -> Option<Skipped> {
        match err {
            ignore::Error::WithPath { path, err } => {
                let mut s = inner(root, err).unwrap_or(Skipped { path: String::new(), reason: err.to_string() });
                s.path = rel_of(root, path);
                // Following links, the walk meets a dangling one as a missing target: say it
                // as the rule does (`check_link`).
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) && !path.exists() {
                    s.reason = "broken symlink".into();
                }
                Some(s)
            }
            ignore::Error::Loop { child, ancestor } => {
                let a = rel_of(root, ancestor);
                Some(Skipped {
                    path: rel_of(root, child),
                    reason: format!("symlink loop back to {}", if a.is_empty() { "." } else { &a }),
                })
            }
            ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => inner(root, err),
            ignore::Error::Io(e) => Some(Skipped { path: String::new(), reason: io_reason(e) }),
            other => Some(Skipped { path: String::new(), reason: other.to_string() }),
        }
    }
    inner(root, err).unwrap_or(Skipped { path: String::new(), reason: err.to_string() })
}

/// An I/O error without the path (the skip names it already).
pub fn io_reason(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        return "broken symlink or missing file".into();
    }
    match e.raw_os_error() {
        Some(code) => format!("unreadable: {}", std::io::Error::from_raw_os_error(code)),
        None => format!("unreadable: {e}"),
    }
}

/// A relative link target for a symlink at `rel` (relative to the root) that reaches
/// `target_canon` (canonical, inside `canon_root`): what a copy writes for a link whose
/// absolute target would lead back into the user's tree.
pub fn relative_link(rel: &Path, canon_root: &Path, target_canon: &Path) -> PathBuf {
    let to = target_canon.strip_prefix(canon_root).unwrap_or(target_canon);
    let depth = rel.parent().map(|p| p.components().count()).unwrap_or(0);
    if to.as_os_str().is_empty() && depth == 0 {
        return PathBuf::from(".");
    }
    let mut out = PathBuf::new();
    for _ in 0..depth {
        out.push("..");
    }
    out.push(to);
    out
}
