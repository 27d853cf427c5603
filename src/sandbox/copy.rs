//! What a sandbox copy of a repository holds, and how it is made.
//!
//! The local sandbox copies the tree into a temp dir, the Docker sandbox uploads it as a
//! tar, and the bench materializes case directories: all three take the same entries
//! ([`repo_entries`]) under one rule ([`left_out`]).
//!
//! The rule. Left out, at any depth:
//! - version-control and our own state: `.git` (a directory, or the file of a worktree or
//!   submodule), `.hg`, `.svn`, `.reproagent`;
//! - caches a test run rebuilds: `__pycache__`, `.pytest_cache`, `.mypy_cache`,
//!   `.ruff_cache`, `.hypothesis`, `.tox`, `.nox`, `.gradle`, and `node_modules/.cache`;
//! - virtualenvs: any directory holding a `pyvenv.cfg` (`.venv`, `venv`, `env`, ...). The
//!   environment a test runs in is chosen apart from the copy; a venv copied elsewhere is
//!   not a working venv anyway.
//!
//! Everything else is kept, *including what `.gitignore` ignores*: ignored files are often
//! exactly what a test needs and cannot be rebuilt offline (`node_modules`, a built
//! extension `*.so`, the `*.egg-info` an editable install's entry points read, Java's
//! `target/dependency` jars, a generated `_version.py`, a local settings module). So the
//! rule names what is known to be unneeded instead of guessing from `.gitignore`.
//!
//! Files are cloned with the `FICLONE` ioctl where the file system shares extents
//! (btrfs, XFS, bcachefs, overlayfs over those), else copied in the kernel
//! (`copy_file_range`, through `std::io::copy`). Never hard links: a test writing a file
//! of a hard-linked copy would write the user's file. A clone is copy-on-write, so a
//! write to it leaves the original as it was.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{Result, SandboxError};

/// Directory (or file) names left out of every copy, wherever they are.
pub const LEFT_OUT_NAMES: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".reproagent",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".tox",
    ".nox",
    ".gradle",
];

/// Why `rel` (a path relative to the repository root whose last part is `name`) is left
/// out of a copy, or None when it is copied. `is_dir` is false for symlinks.
pub fn left_out(root: &Path, rel: &Path, is_dir: bool) -> Option<&'static str> {
    let name = rel.file_name()?.to_str().unwrap_or("");
    if let Some(n) = LEFT_OUT_NAMES.iter().find(|n| **n == name) {
        return Some(match *n {
            ".git" | ".hg" | ".svn" => "version control",
            ".reproagent" => "reproagent's state",
            _ => "cache",
        });
    }
    if is_dir {
        if name == ".cache" && rel.parent().and_then(Path::file_name).is_some_and(|p| p == "node_modules") {
            return Some("cache");
        }
        if root.join(rel).join("pyvenv.cfg").is_file() {
            return Some("virtualenv");
        }
    }
    None
}

/// One entry of a copy, relative to the repository root.
#[derive(Debug, Clone)]
pub struct Entry {
    pub rel: PathBuf,
    /// Its own metadata (links not followed).
    pub meta: std::fs::Metadata,
    /// For a symlink: what the copy's link points to (its own relative target, or
    /// [`crate::confine::relative_link`] for an absolute one).
    pub link: Option<PathBuf>,
}

/// The repository's entries to copy, relative and sorted (a directory before what it
/// holds), under the rule of [`left_out`].
pub fn repo_entries(root: &Path) -> Result<Vec<PathBuf>> {
    Ok(entries(root)?.0.into_iter().map(|e| e.rel).collect())
}

/// [`repo_entries`] with each entry's metadata and link target, and the symlinks left out.
/// The walk is [`crate::confine::Walk`], the rule the indexer and the tools share: a
/// symlink that resolves inside the root is kept as a link (an absolute target rewritten
/// to a relative one, so the copy's link stays in the copy), one leading out of the root or
/// dangling is left out and reported; links are never followed.
pub fn entries(root: &Path) -> Result<(Vec<Entry>, Vec<crate::confine::Skipped>)> {
    let rule = crate::confine::WalkRule { gitignore: false, skip_hidden: false, follow_links: false, max_depth: None };
    let root_k = root.to_path_buf();
    let mut walk = crate::confine::Walk::new(root, root, rule, move |e, rel| {
        let is_dir = e.file_type().is_some_and(|t| t.is_dir());
        left_out(&root_k, rel, is_dir).is_none()
    });
    let canon = root.canonicalize().map_err(|e| SandboxError::io(format!("reading {}", root.display()), e))?;
    let mut out = Vec::new();
    for e in walk.by_ref() {
        if e.depth() == 0 {
            continue;
        }
        let rel = e.path().strip_prefix(root).unwrap_or(e.path()).to_path_buf();
        let meta = e.metadata().map_err(|err| SandboxError::Other(format!("reading {}: {err}", rel.display())))?;
        let link = if meta.file_type().is_symlink() {
            let read = |err| SandboxError::io(format!("reading {}", rel.display()), err);
            let text = std::fs::read_link(e.path()).map_err(read)?;
            // A relative target resolves the same way in the copy; an absolute one (which
            // the walk kept, so it resolves inside the root) is made relative.
            Some(if text.is_relative() {
                text
            } else {
                crate::confine::relative_link(&rel, &canon, &e.path().canonicalize().map_err(read)?)
            })
        } else {
            None
        };
        out.push(Entry { rel, meta, link });
    }
    Ok((out, walk.skipped()))
}

/// Say on stderr which symlinks a copy left out (one line; nothing when none).
pub fn report_skipped(skipped: &[crate::confine::Skipped]) {
    if skipped.is_empty() {
        return;
    }
    let shown: Vec<String> = skipped.iter().take(5).map(|k| format!("{} ({})", k.path, k.reason)).collect();
    let more = if skipped.len() > 5 { format!(" and {} more", skipped.len() - 5) } else { String::new() };
    eprintln!("note: left out of the sandbox copy: {}{more}", shown.join(", "));
}

/// Append the repository's entries (but those under `skip`) to a tar under `prefix`:
/// files and directories as they are, symlinks with the target [`entries`] gives. The
/// Docker sandbox's upload and an image's build context.
pub fn append_to_tar<W: std::io::Write>(
    b: &mut tar::Builder<W>,
    repo: &Path,
    prefix: &Path,
    skip: &[PathBuf],
) -> Result<Vec<crate::confine::Skipped>> {
    let io = |e| SandboxError::io("archiving the repository", e);
    let (list, skipped) = entries(repo)?;
    for e in list.into_iter().filter(|e| !skip.iter().any(|s| e.rel.starts_with(s))) {
        match &e.link {
            Some(target) => {
                let mut h = tar::Header::new_gnu();
                h.set_metadata_in_mode(&e.meta, tar::HeaderMode::Complete);
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, prefix.join(&e.rel), target).map_err(io)?;
            }
            None => b.append_path_with_name(repo.join(&e.rel), prefix.join(&e.rel)).map_err(io)?,
        }
    }
    Ok(skipped)
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Regular files written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those files, how many were cloned (shared extents) rather than copied.
    pub reflinked: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Symlinks left out: leading out of the repository, or dangling.
    pub skipped: Vec<crate::confine::Skipped>,
}

/// Threads that copy files at once. Creating a file waits on the file system's journal
/// more than on a CPU, so a few more than the two cores of a small machine pay off.
pub const COPY_THREADS: usize = 4;

/// Copy the repository at `src` into `dst` (created if needed) under the rule of
/// [`left_out`]; symlinks that stay inside stay symlinks (never followed), those leading
/// out or dangling are left out and reported in [`CopyStats::skipped`]; sockets, fifos
/// and devices are skipped. Files are copied on [`COPY_THREADS`] threads.
pub fn copy_tree(src: &Path, dst: &Path) -> Result<CopyStats> {
    copy_tree_with(src, dst, COPY_THREADS)
}

/// [`copy_tree`] on `threads` threads (at least one).
pub fn copy_tree_with(src: &Path, dst: &Path, threads: usize) -> Result<CopyStats> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    // Each step holds the fill gate: an interrupt deletes the copy between steps, never
    // under one (a later step would bring the dir back).
    use crate::sandbox::interrupt::filling;
    {
        let _fill = filling();
        std::fs::create_dir_all(dst).map_err(|e| SandboxError::io("creating the repository copy", e))?;
    }
    let (list, skipped) = entries(src)?;
    let mut stats = CopyStats { skipped, ..CopyStats::default() };
    let mut files = Vec::new();
    // Directories and links first, in order (a directory comes before what it holds).
    for Entry { rel, meta, link } in list {
        let to = dst.join(&rel);
        let _fill = filling();
        let res = if meta.is_dir() {
            stats.dirs += 1;
            std::fs::create_dir(&to)
        } else if let Some(target) = link {
            stats.symlinks += 1;
            std::os::unix::fs::symlink(target, &to)
        } else {
            if meta.is_file() {
                files.push((rel, meta));
            }
            continue; // sockets, fifos, devices: not part of a repository
        };
        res.map_err(|e| SandboxError::io(format!("copying {}", rel.display()), e))?;
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let copy_some = || -> Result<CopyStats> {
        let mut cloner = Cloner::default();
        let mut st = CopyStats::default();
        while !failed.load(Ordering::Relaxed) {
            let Some((rel, meta)) = files.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
            let fill = filling();
            let copied = cloner.copy(&src.join(rel), &dst.join(rel), meta);
            drop(fill);
            match copied {
                Ok(cloned) => {
                    st.files += 1;
                    st.bytes += meta.len();
                    st.reflinked += u64::from(cloned);
                }
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(SandboxError::io(format!("copying {}", rel.display()), e));
                }
            }
        }
        Ok(st)
    };
    let threads = threads.clamp(1, files.len().max(1));
    let parts: Vec<Result<CopyStats>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(copy_some)).collect();
        let mut parts = vec![copy_some()];
        for h in handles {
            parts.push(h.join().unwrap_or_else(|_| Err(SandboxError::Other("a copying thread panicked".into()))));
        }
        parts
    });
    for part in parts {
        let p = part?;
        stats.files += p.files;
        stats.bytes += p.bytes;
        stats.reflinked += p.reflinked;
    }
    Ok(stats)
}

/// Copies files, cloning them while the file system lets it.
#[derive(Default)]
struct Cloner {
    /// Set once a clone was refused for a reason that holds for every file of the copy
    /// (the file system cannot, or the two trees are on different ones).
    no_clone: bool,
}

impl Cloner {
    /// Copy one regular file with its permission bits; true when it was cloned.
    fn copy(&mut self, from: &Path, to: &Path, meta: &std::fs::Metadata) -> std::io::Result<bool> {
        use std::os::unix::fs::PermissionsExt;
        let mut src = File::open(from)?;
        let mut dst = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to)?;
        let cloned = !self.no_clone && meta.len() > 0 && self.clone_into(&src, &dst);
        if !cloned {
            // Linux: copy_file_range in the kernel (no user-space buffer), sendfile or a
            // read/write loop where it cannot.
            std::io::copy(&mut src, &mut dst)?;
        }
        dst.set_permissions(std::fs::Permissions::from_mode(meta.permissions().mode() & 0o7777))?;
        Ok(cloned)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn clone_into(&mut self, src: &File, dst: &File) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: FICLONE takes the source descriptor as its argument; both are open files we own.
        let r = unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONE as _, src.as_raw_fd()) };
        if r == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // Not this file system, not across two, or no such ioctl: no file of this copy will
        // clone. Anything else (a busy file, a quota) is tried again with the next file.
        if matches!(e, libc::EOPNOTSUPP | libc::EXDEV | libc::ENOTTY | libc::EINVAL | libc::ENOSYS | libc::EPERM) {
            self.no_clone = true;
        }
        false
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn clone_into(&mut self, _src: &File, _dst: &File) -> bool {
        self.no_clone = true;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, body: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }

    #[test]
    fn the_rule() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        write(root, "pkg/__init__.py", "");
        write(root, "pkg/__pycache__/x.cpython-311.pyc", "");
        write(root, ".venv/pyvenv.cfg", "home = /usr/bin\n");
        write(root, "sub/.git", "gitdir: ../.git/modules/sub\n");
        write(root, "node_modules/left-pad/index.js", "");
        write(root, "node_modules/.cache/babel/x", "");
        write(root, "build/.cache/keep", "");
        write(root, "venvish/lib.py", "");
        let rels: Vec<String> = repo_entries(root).unwrap().iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            rels,
            [
                "build",
                "build/.cache",
                "build/.cache/keep",
                "node_modules",
                "node_modules/left-pad",
                "node_modules/left-pad/index.js",
                "pkg",
                "pkg/__init__.py",
                "sub",
                "venvish",
                "venvish/lib.py"
            ]
        );
        assert_eq!(left_out(root, Path::new(".venv"), true), Some("virtualenv"));
        assert_eq!(left_out(root, Path::new(".venv"), false), None, "a symlink is copied as a link");
        assert_eq!(left_out(root, Path::new("sub/.git"), false), Some("version control"));
    }

    #[test]
    fn copies_keep_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        write(&src, "bin/run.sh", "#!/bin/sh\necho hi\n");
        std::fs::set_permissions(src.join("bin/run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
        write(&src, "empty.txt", "");
        // Links inside stay links (an absolute one made relative, so it stays in the copy);
        // links out, and dangling ones, are left out and reported.
        std::os::unix::fs::symlink("run.sh", src.join("bin/alias.sh")).unwrap();
        std::os::unix::fs::symlink(src.join("bin/run.sh"), src.join("bin/abs.sh")).unwrap();
        std::os::unix::fs::symlink(src.join("bin"), src.join("bindir")).unwrap();
        std::os::unix::fs::symlink("../etc/passwd-not-here", src.join("link")).unwrap();
        std::os::unix::fs::symlink(t.path(), src.join("up")).unwrap();
        let stats = copy_tree(&src, &dst).unwrap();
        assert_eq!((stats.files, stats.dirs, stats.symlinks, stats.bytes), (2, 1, 3, 18));
        let mode = std::fs::metadata(dst.join("bin/run.sh")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o751);
        assert_eq!(std::fs::read_link(dst.join("bin/alias.sh")).unwrap(), Path::new("run.sh"));
        assert_eq!(std::fs::read_link(dst.join("bin/abs.sh")).unwrap(), Path::new("../bin/run.sh"));
        assert_eq!(std::fs::read_link(dst.join("bindir")).unwrap(), Path::new("bin"));
        assert_eq!(dst.join("bin/abs.sh").canonicalize().unwrap(), dst.join("bin/run.sh").canonicalize().unwrap());
        assert!(
            std::fs::symlink_metadata(dst.join("link")).is_err() && std::fs::symlink_metadata(dst.join("up")).is_err()
        );
        let why: Vec<(&str, &str)> = stats.skipped.iter().map(|k| (k.path.as_str(), k.reason.as_str())).collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert_eq!(why[0], ("link", "broken symlink"));
        assert!(why[1].0 == "up" && why[1].1.starts_with("symlink out of the repository"), "{why:?}");
        assert_eq!(std::fs::read(dst.join("empty.txt")).unwrap(), b"");
    }
}
