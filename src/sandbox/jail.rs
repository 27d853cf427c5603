//! The local sandbox's file-system confinement: every command runs in its own mount
//! namespace where the whole tree is read-only (recursively, `mount_setattr` with
//! `AT_RECURSIVE`, kernels >= 5.12) except the sandbox's own directory (the copy, its
//! home and temp dir), `/dev/shm` is a fresh private tmpfs, and the Docker and containerd
//! sockets are covered by `/dev/null` (a connect gets "connection refused"). As root this
//! is `unshare(CLONE_NEWNS)`; otherwise a user namespace that maps only the caller's own
//! uid and gid comes with it. The network namespace (loopback only) is made in the same
//! step. [`Jail::probe`] runs `/bin/true` confined once, so a kernel or policy that
//! refuses is known when the sandbox opens, with the reason, never on the first test.
//!
//! A read-only mount namespace alone does not hold: the host's `/proc` lets a command
//! walk into another process's namespace (`open("/proc/$PPID/cwd/x", "w")` follows the
//! parent's working directory into the writable tree; `/proc/1/root/var/run/docker.sock`
//! reaches the real socket). So the command also gets its own PID namespace with a fresh
//! `/proc` that shows only its own processes. The forked child cannot enter a PID
//! namespace itself, so it forks twice: the first fork's child is the namespace's init
//! (PID 1), which reaps and waits for the command (PID 2); the command is never PID 1,
//! so signals reach it as anywhere. When the command ends, init exits with its status and
//! the kernel kills whatever is left in the namespace: no process of the command outlives
//! it, `setsid` or not. Each waiting process exits with the status of the one it waits
//! for (a signal `s` as `128 + s`).

use std::ffi::CString;
use std::path::Path;

/// What the sandbox could have, found by [`Jail::probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolation {
    /// Read-only tree outside the sandbox dir, Docker socket hidden, its own PID
    /// namespace and `/proc`.
    pub fs: bool,
    /// Private network namespace with only loopback.
    pub net: bool,
}

/// Everything the child needs, prepared before `fork` (no allocation after it).
#[derive(Clone)]
pub struct Jail {
    sandbox_dir: CString,
    cwd: CString,
    hide: Vec<CString>,
    shm: bool,
    user: Option<UserMaps>,
    pub fs: bool,
    pub net: bool,
}

#[derive(Clone)]
struct UserMaps {
    uid_map: CString,
    gid_map: CString,
}

/// Sockets that must not answer inside the sandbox (each one that exists is covered).
fn socket_paths() -> Vec<String> {
    let mut v: Vec<String> = [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/var/run/containerd/containerd.sock",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    v.push(format!("/run/user/{uid}/docker.sock"));
    if let Ok(x) = std::env::var("XDG_RUNTIME_DIR") {
        v.push(format!("{x}/docker.sock"));
    }
    if let Ok(h) = std::env::var("DOCKER_HOST") {
        if let Some(p) = h.strip_prefix("unix://") {
            v.push(p.to_string());
        }
    }
    v
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::Error::other("path with a NUL byte"))
}

impl Jail {
    /// The confinement of commands in `sandbox_dir` (writable), run from `cwd`.
    pub fn new(sandbox_dir: &Path, cwd: &Path, iso: Isolation) -> std::io::Result<Jail> {
        let mut hide = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for p in socket_paths() {
            // The real path: a bind over a symlink would follow it anyway.
            let Ok(real) = Path::new(&p).canonicalize() else {
                continue;
            };
            if std::fs::symlink_metadata(&real).is_ok_and(|m| !m.is_dir()) && seen.insert(real.clone()) {
                hide.push(cstr(&real)?);
            }
        }
        // SAFETY: plain getters.
        let (uid, gid, euid) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid()) };
        let user = (euid != 0).then(|| UserMaps {
            uid_map: CString::new(format!("{uid} {uid} 1\n")).unwrap_or_default(),
            gid_map: CString::new(format!("{gid} {gid} 1\n")).unwrap_or_default(),
        });
        Ok(Jail {
            sandbox_dir: cstr(sandbox_dir)?,
            cwd: cstr(cwd)?,
            hide,
            shm: Path::new("/dev/shm").is_dir(),
            user,
            fs: iso.fs,
            net: iso.net,
        })
    }

    /// Which confinement this process can have: each tried on `/bin/true`, the reason
    /// for a missing file-system confinement given.
    pub fn probe(sandbox_dir: &Path) -> (Isolation, Option<String>) {
        let try_with = |iso: Isolation| -> std::result::Result<(), String> {
            let jail = Jail::new(sandbox_dir, sandbox_dir, iso).map_err(|e| e.to_string())?;
            let mut cmd = std::process::Command::new("/bin/true");
            // SAFETY: only async-signal-safe syscalls on data prepared before the fork.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || jail.enter());
            }
            match cmd.status() {
                Ok(s) if s.success() => Ok(()),
                Ok(s) => Err(format!("/bin/true exited {s}")),
                Err(e) => Err(e.to_string()),
            }
        };
        let full = Isolation { fs: true, net: true };
        match try_with(full) {
            Ok(()) => (full, None),
            Err(e) => {
                let fs_only = Isolation { fs: true, net: false };
                if try_with(fs_only).is_ok() {
                    return (fs_only, None);
                }
                let net = try_with(Isolation { fs: false, net: true }).is_ok();
                (Isolation { fs: false, net }, Some(e))
            }
        }
    }

    /// Enter the confinement: called in the child between fork and exec.
    pub fn enter(&self) -> std::io::Result<()> {
        let err = std::io::Error::last_os_error;
        let mut flags = 0;
        if self.fs {
            flags |= libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        }
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        if flags == 0 {
            return Ok(());
        }
        if self.user.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        // SAFETY: raw syscalls on C strings owned by self; the child is single-threaded.
        unsafe {
            if libc::unshare(flags) != 0 {
                return Err(err());
            }
            if let Some(u) = &self.user {
                write_proc(c"/proc/self/setgroups", c"deny")?;
                write_proc(c"/proc/self/uid_map", &u.uid_map)?;
                write_proc(c"/proc/self/gid_map", &u.gid_map)?;
            }
            if self.net {
                super::local::loopback_up();
            }
            if !self.fs {
                return Ok(());
            }
            let none = std::ptr::null::<libc::c_char>();
            if libc::mount(none, c"/".as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) != 0 {
                return Err(err());
            }
            // The sandbox dir becomes a mount of its own, so it can stay writable.
            let dir = self.sandbox_dir.as_ptr();
            if libc::mount(dir, dir, none, libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                return Err(err());
            }
            let setattr = |path: *const libc::c_char, set: u64, clr: u64| -> std::io::Result<()> {
                let attr = MountAttr { attr_set: set, attr_clr: clr, propagation: 0, userns_fd: 0 };
                let r = libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    path,
                    AT_RECURSIVE,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                );
                if r != 0 {
                    return Err(err());
                }
                Ok(())
            };
            setattr(c"/".as_ptr(), MOUNT_ATTR_RDONLY, 0)?;
            setattr(dir, 0, MOUNT_ATTR_RDONLY)?;
            if self.shm {
                let opts = c"mode=1777,size=64m";
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    c"/dev/shm".as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ) != 0
                {
                    return Err(err());
                }
            }
            for h in &self.hide {
                if libc::mount(c"/dev/null".as_ptr(), h.as_ptr(), none, libc::MS_BIND, std::ptr::null()) != 0 {
                    return Err(err());
                }
            }
            // The working directory was entered before the mounts: enter it again, so it
            // is the writable mount's.
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                return Err(err());
            }
            // Into the PID namespace: this process waits outside it for its init.
            wait_in_fork()?;
            // Here: PID 1 of the new namespace. Its own /proc, then the command as PID 2.
            mount_proc()?;
            wait_in_fork()?;
        }
        Ok(())
    }
}

/// Fork; the parent waits for the child and exits with its status, never returning; the
/// child returns. The parent closes every descriptor past stdio first: it never execs, so
/// it must not hold the pipe on which `Command` learns that the exec succeeded (spawn
/// would wait for the whole command), nor any other the command's caller reads.
///
/// SAFETY: between fork and exec; async-signal-safe syscalls only.
unsafe fn wait_in_fork() -> std::io::Result<()> {
    let pid = libc::fork();
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // The child dies with its waiter (which is in its process group, so a group kill
        // takes both at once anyway).
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        return Ok(());
    }
    libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, 0 as libc::c_uint);
    // As the namespace's init: reap every orphan until the command itself ends.
    let mut status: libc::c_int = 0;
    loop {
        let r = libc::waitpid(-1, &mut status, 0);
        if r == pid {
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFEXITED(status) {
        libc::_exit(libc::WEXITSTATUS(status));
    }
    if libc::WIFSIGNALED(status) {
        libc::_exit(128 + libc::WTERMSIG(status));
    }
    libc::_exit(127)
}

/// A fresh `/proc` for the new PID namespace; where the kernel refuses one (a user
/// namespace under a `/proc` with covered entries, as in some containers), an empty
/// read-only tmpfs, so the host's processes are not reachable either way.
///
/// SAFETY: between fork and exec; async-signal-safe syscalls only.
unsafe fn mount_proc() -> std::io::Result<()> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), flags, std::ptr::null()) == 0 {
        return Ok(());
    }
    let opts = c"mode=0555,size=4k";
    if libc::mount(
        c"tmpfs".as_ptr(),
        c"/proc".as_ptr(),
        c"tmpfs".as_ptr(),
        flags | libc::MS_RDONLY,
        opts.as_ptr().cast(),
    ) == 0
    {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

/// Write a small value to a /proc file (async-signal-safe: open, write, close).
unsafe fn write_proc(path: &std::ffi::CStr, value: &std::ffi::CStr) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let bytes = value.to_bytes();
    let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    libc::close(fd);
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
