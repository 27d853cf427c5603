//! A watch on the repository's directories (Linux inotify), so the freshness check of a
//! tool call costs one non-blocking `read` instead of a `stat` per indexed file.
//!
//! The kernel queues an event when a write, a truncation, a rename or a removal happens,
//! before the system call that caused it returns; the check reads the queue itself, so a
//! file written just before a tool call is always seen by that call. Elsewhere (not
//! Linux, or when the kernel refuses a watch) [`Watch::new`] gives `None` and the check
//! falls back to `stat`ing every file.

use std::path::{Path, PathBuf};

/// What the events read since the last [`Watch::drain`] say about the tree.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Files written, truncated, touched, removed or renamed (absolute paths).
    pub files: Vec<PathBuf>,
    /// A directory, an ignore file or a source file appeared, moved or went: walk again.
    pub walk: bool,
    /// The kernel dropped events (its queue overflowed) or a watch failed: trust nothing.
    pub lost: bool,
}

impl Changes {
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty() && !self.walk && !self.lost
    }
}

#[cfg(target_os = "linux")]
pub(crate) use linux::Watch;

#[cfg(not(target_os = "linux"))]
pub(crate) struct Watch;

#[cfg(not(target_os = "linux"))]
impl Watch {
    pub(crate) fn new() -> Option<Watch> {
        None
    }
    pub(crate) fn add_dirs<'a>(&mut self, _dirs: impl IntoIterator<Item = &'a Path>) -> bool {
        false
    }
    pub(crate) fn drain(&mut self) -> Changes {
        Changes { lost: true, ..Default::default() }
    }
}

/// Does an event on this file change what the walk finds? A source file appearing or
/// going (`appears_or_goes`), or any change to an ignore file.
fn changes_walk(path: &Path, appears_or_goes: bool) -> bool {
    (appears_or_goes && crate::lang::Lang::of_path(path).is_some())
        || matches!(path.file_name().and_then(|n| n.to_str()), Some(".gitignore" | ".ignore"))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    use super::{changes_walk, Changes};

    /// An inotify instance watching a set of directories (not recursive: every directory
    /// the walk visits is added).
    pub(crate) struct Watch {
        fd: libc::c_int,
        dirs: HashMap<libc::c_int, PathBuf>,
        watched: std::collections::HashSet<PathBuf>,
        /// A watch the kernel refused (the per-user limit): events may be missed.
        failed: bool,
        /// The read buffer, kept between calls (a check runs before every tool call);
        /// `u64`s so it is aligned for `inotify_event`.
        buf: Vec<u64>,
    }

    const MASK: u32 = libc::IN_MODIFY
        | libc::IN_ATTRIB
        | libc::IN_CLOSE_WRITE
        | libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_ONLYDIR;

    impl Watch {
        pub(crate) fn new() -> Option<Watch> {
            // SAFETY: plain system call; a negative result is an error, checked.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd < 0 {
                return None;
            }
            Some(Watch { fd, dirs: HashMap::new(), watched: Default::default(), failed: false, buf: vec![0; 8192] })
        }

        /// Watch these directories (those already watched are skipped). `false` when the
        /// kernel refused one: the caller must not trust the watch from then on.
        pub(crate) fn add_dirs<'a>(&mut self, dirs: impl IntoIterator<Item = &'a Path>) -> bool {
            for d in dirs {
                if self.watched.contains(d) {
                    continue;
                }
                let Ok(c) = CString::new(d.as_os_str().as_bytes()) else { continue };
                // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
                let wd = unsafe { libc::inotify_add_watch(self.fd, c.as_ptr(), MASK) };
                if wd < 0 {
                    let err = std::io::Error::last_os_error();
                    // A directory removed since the walk saw it is not a failure.
                    if err.raw_os_error() != Some(libc::ENOENT) && err.raw_os_error() != Some(libc::ENOTDIR) {
                        self.failed = true;
                    }
                    continue;
                }
                self.dirs.insert(wd, d.to_path_buf());
                self.watched.insert(d.to_path_buf());
            }
            !self.failed
        }

        /// Every event queued since the last call, without blocking.
        pub(crate) fn drain(&mut self) -> Changes {
            let mut out = Changes { lost: self.failed, ..Default::default() };
            let mut buf = std::mem::take(&mut self.buf);
            loop {
                let bytes = buf.len() * 8;
                // SAFETY: the buffer is valid for `bytes` bytes and owned for the call.
                let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), bytes) };
                if n < 0 {
                    let err = std::io::Error::last_os_error();
                    match err.kind() {
                        std::io::ErrorKind::WouldBlock => break,
                        std::io::ErrorKind::Interrupted => continue,
                        _ => {
                            out.lost = true;
                            break;
                        }
                    }
                }
                if n == 0 {
                    break;
                }
                // SAFETY: the kernel wrote `n` bytes of whole events into `buf`.
                let raw = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
                self.parse(raw, &mut out);
            }
            self.buf = buf;
            out
        }

        fn parse(&mut self, raw: &[u8], out: &mut Changes) {
            const HEAD: usize = std::mem::size_of::<libc::inotify_event>();
            let mut at = 0;
            while at + HEAD <= raw.len() {
                // SAFETY: a whole header lies at `at` (checked above); read unaligned.
                let ev: libc::inotify_event = unsafe { std::ptr::read_unaligned(raw[at..].as_ptr().cast()) };
                let len = ev.len as usize;
                let name_bytes = raw.get(at + HEAD..at + HEAD + len).unwrap_or(&[]);
                at += HEAD + len;
                let name = name_bytes.split(|b| *b == 0).next().unwrap_or(&[]);
                if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                    out.lost = true;
                    continue;
                }
                if ev.mask & libc::IN_IGNORED != 0 {
                    // The directory went (or was unmounted): its watch is gone.
                    if let Some(d) = self.dirs.remove(&ev.wd) {
                        self.watched.remove(&d);
                    }
                    out.walk = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&ev.wd) else { continue };
                if ev.mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
                    out.walk = true;
                    continue;
                }
                if name.is_empty() {
                    continue;
                }
                let path = dir.join(std::ffi::OsStr::from_bytes(name));
                let appears_or_goes =
                    ev.mask & (libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO) != 0;
                if ev.mask & libc::IN_ISDIR != 0 {
                    if appears_or_goes {
                        out.walk = true;
                    }
                    continue;
                }
                if changes_walk(&path, appears_or_goes) {
                    out.walk = true;
                }
                out.files.push(path);
            }
        }
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            // SAFETY: the descriptor is ours and closed once.
            unsafe { libc::close(self.fd) };
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_write_a_new_file_and_a_removal_are_seen_by_the_next_drain() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("pkg")).unwrap();
        std::fs::write(root.join("pkg/a.py"), "x = 1\n").unwrap();
        let mut w = Watch::new().expect("inotify");
        assert!(w.add_dirs([root.as_path(), root.join("pkg").as_path()]));
        assert!(w.drain().is_empty(), "nothing happened yet");

        std::fs::write(root.join("pkg/a.py"), "x = 2\n").unwrap();
        let c = w.drain();
        assert!(c.files.contains(&root.join("pkg/a.py")), "{c:?}");
        assert!(!c.walk && !c.lost, "{c:?}");

        std::fs::write(root.join("pkg/notes.txt"), "hi").unwrap();
        let c = w.drain();
        assert!(!c.walk, "a file no walk indexes does not ask for a walk: {c:?}");

        std::fs::write(root.join("pkg/b.py"), "y = 1\n").unwrap();
        assert!(w.drain().walk, "a new source file asks for a walk");

        std::fs::create_dir(root.join("pkg/sub")).unwrap();
        assert!(w.drain().walk, "a new directory asks for a walk");

        std::fs::remove_file(root.join("pkg/a.py")).unwrap();
        let c = w.drain();
        assert!(c.walk && c.files.contains(&root.join("pkg/a.py")), "{c:?}");
        assert!(w.drain().is_empty());
    }
}
