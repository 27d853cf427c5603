//! The one confinement rule for repository content: a path is read only when, with every
//! symlink resolved, it stays under the canonical root and names a regular file; it is
//! written only through components that are not symlinks leading out, and never through
//! a symlink at the last component. The indexer's walk, the tools, the keyword index's
//! snippets, the freshness check, the local sandbox's file writes and `reproduce --write`
//! all go through here.

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
fn rel_of(root: &Path, abs: &Path) -> String {
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
