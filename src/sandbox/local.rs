//! The local sandbox, for machines without Docker: a temporary copy of the repository,
//! each command in its own session and process group with a timeout that kills the
//! whole group, rlimits, a scrubbed environment, and its own mount, PID and network
//! namespaces ([`super::jail`]): the tree read-only but the sandbox's temp dir, the
//! Docker socket covered, a `/proc` of its own processes only, only loopback. Without a
//! mount namespace it refuses to open.
//!
//! It is weaker than the container: RLIMIT_NPROC does not bind root, RLIMIT_DATA is not
//! a cgroup, and the rest of the file system is readable. The container is the default
//! whenever it can be had.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::{
    check_rel, looks_like_oom, output_from, BoxFuture, Capture, ExecOutput, ExecRequest, Limits, Result, Sandbox,
    SandboxConfig, SandboxError, SandboxKind,
};

/// The system's PATH, the tail of the local sandbox's: the environment resolved for the
/// run ([`super::env`]) goes ahead of it, never the user's shims.
pub const LOCAL_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Set to `1` to let the local sandbox run commands without file-system isolation where
/// no mount namespace can be had (it says so on every open).
pub const UNCONFINED_VAR: &str = "REPROAGENT_LOCAL_UNCONFINED";

/// The sandbox-private directory (beside the copy, not in it) holding the
/// `sitecustomize.py` that keeps imports on the copy.
const PYSITE: &str = "pysite";
/// The sandbox-private directory holding `python3`/`python` shims for a bare interpreter.
const PYBIN: &str = "pybin";

pub struct LocalSandbox {
    dir: Mutex<Option<tempfile::TempDir>>,
    root: PathBuf,
    repo: PathBuf,
    repo_str: String,
    limits: Limits,
    netns: bool,
    /// What each command's confinement is (see [`super::jail`]).
    iso: super::jail::Isolation,
    /// `PATH` and the variables every command gets (before the request's own).
    path: String,
    base_env: Vec<(String, String)>,
    env: Option<std::sync::Arc<super::env::Environment>>,
    /// Deletes the copy on Ctrl-C, whatever the owner is doing then.
    _interrupt: super::interrupt::Registration,
}

impl LocalSandbox {
    /// Copy the repository into a fresh temporary directory.
    pub fn open(config: SandboxConfig) -> Result<Self> {
        config.limits.check()?;
        let dir = tempfile::Builder::new()
            .prefix(super::owner::LOCAL_PREFIX)
            .tempdir()
            .map_err(|e| SandboxError::io("creating the sandbox temp dir", e))?;
        // Canonical: the confinement binds this path, and a symlink in it would escape.
        let root = dir.path().canonicalize().map_err(|e| SandboxError::io("resolving the sandbox temp dir", e))?;
        // Registered at once: a SIGTERM from here on removes the dir, even mid-copy.
        let _interrupt = super::interrupt::register_dir(&root);
        // Registered: `sandbox clean` removes the dir once this process is gone.
        {
            let _fill = super::interrupt::filling();
            std::fs::write(root.join(super::owner::OWNER_FILE), super::owner::this_process())
                .map_err(|e| SandboxError::io("writing the sandbox's owner file", e))?;
        }
        let (iso, why_not) = super::jail::Jail::probe(&root);
        if !iso.fs {
            if std::env::var_os(UNCONFINED_VAR).is_some_and(|v| v == "1") {
                eprintln!("warning: the local sandbox runs commands WITHOUT file-system isolation ({UNCONFINED_VAR}=1): they can write anywhere this user can");
            } else {
                return Err(SandboxError::Unconfined(format!(
                    "{} (hint: use --sandbox docker, or allow user namespaces (sysctl kernel.unprivileged_userns_clone=1), or set {UNCONFINED_VAR}=1 to run unconfined at your own risk)",
                    why_not.unwrap_or_else(|| "mount namespace refused".into())
                )));
            }
        }
        let repo = root.join("repo");
        for sub in ["home", "tmp", PYSITE] {
            // `create_dir_all` would bring back a root an interrupt just deleted: under the fill gate.
            let _fill = super::interrupt::filling();
            std::fs::create_dir_all(root.join(sub)).map_err(|e| SandboxError::io("creating the sandbox home", e))?;
        }
        // An environment that lives in the repository (`.venv`) is used where it is, not copied.
        let skip: Vec<PathBuf> = config.env.as_ref().and_then(|e| env_inside(&config.repo, e)).into_iter().collect();
        let copied = super::copy::copy_tree(&config.repo, &repo)?;
        super::copy::report_skipped(&copied.skipped);
        let fill = super::interrupt::filling();
        copy_skip(&repo, &skip)?;
        let repo_str = repo.to_string_lossy().into_owned();
        let (path, base_env) = environment(&root, &repo, &config.repo, config.env.as_deref())?;
        drop(fill);
        let sb = LocalSandbox {
            dir: Mutex::new(Some(dir)),
            root,
            repo,
            repo_str,
            limits: config.limits,
            netns: iso.net,
            iso,
            path,
            base_env,
            env: config.env,
            _interrupt,
        };
        Ok(sb)
    }

    /// Whether commands run with the tree read-only outside the sandbox dir and the
    /// Docker socket hidden.
    pub fn fs_isolated(&self) -> bool {
        self.iso.fs
    }

    fn is_open(&self) -> bool {
        self.dir.lock().map(|d| d.is_some()).unwrap_or(false)
    }

    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput> {
        if !self.is_open() {
            return Err(SandboxError::Closed);
        }
        super::check_timeout(req.timeout.as_secs().max(1), super::MAX_TIMEOUT_SECS)?;
        let Some((prog, args)) = req.argv.split_first() else {
            return Err(SandboxError::Other("empty command".into()));
        };
        let cwd = match &req.cwd {
            Some(c) => self.repo.join(check_rel(c)?),
            None => self.repo.clone(),
        };
        // The request's PYTHONPATH goes ahead of ours; its other variables replace ours.
        let mut env: Vec<(String, String)> = self.base_env.clone();
        for (k, v) in &req.env {
            match env.iter_mut().find(|(ek, _)| ek == k) {
                Some(slot) if k == "PYTHONPATH" => slot.1 = format!("{v}:{}", slot.1),
                Some(slot) => slot.1 = v.clone(),
                None => env.push((k.clone(), v.clone())),
            }
        }
        // A program named without a directory is looked up on the sandbox's PATH.
        let prog: PathBuf = if prog.contains('/') {
            PathBuf::from(prog)
        } else {
            which(&self.path, prog).unwrap_or_else(|| PathBuf::from(prog))
        };
        let mut cmd = tokio::process::Command::new(&prog);
        cmd.args(args)
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.root.join("home"))
            .env("TMPDIR", self.root.join("tmp"))
            .env("LANG", "C.UTF-8")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mem = self.limits.memory_bytes;
        let pids = u64::from(self.limits.pids);
        let cpu_secs = req.timeout.as_secs().saturating_add(2);
        let jail = super::jail::Jail::new(&self.root, &cwd, self.iso)
            .map_err(|e| SandboxError::io("preparing the confinement", e))?;
        // SAFETY: only async-signal-safe syscalls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                child_setup(mem, pids, cpu_secs)?;
                jail.enter()
            });
        }
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| SandboxError::io(format!("running {}", prog.display()), e))?;
        let pgid = child.id().map(|p| p as i32);
        // Kills the group on every exit path, a dropped future (Ctrl-C) included; the
        // registration kills it on Ctrl-C while the owner is blocked elsewhere.
        let _guard = GroupGuard(pgid);
        let _interrupt = pgid.map(super::interrupt::register_group);
        let limit = self.limits.output_bytes;
        let out_task = read_capped(child.stdout.take(), limit);
        let err_task = read_capped(child.stderr.take(), limit);

        let (status, timed_out) = match tokio::time::timeout(req.timeout, child.wait()).await {
            Ok(s) => (Some(s.map_err(|e| SandboxError::io("waiting for the command", e))?), false),
            Err(_) => (None, true),
        };
        // Whatever the outcome, nothing of this command outlives it.
        kill_group(pgid);
        let status = match status {
            Some(s) => s,
            None => child.wait().await.map_err(|e| SandboxError::io("waiting for the command", e))?,
        };
        let (out, out_held) = join_capture(out_task, limit).await;
        let (mut err, err_held) = join_capture(err_task, limit).await;
        if out_held || err_held {
            err.push(ESCAPED_NOTE.as_bytes());
            // The escaped process is still in the sandbox: it does not outlive the command.
            super::owner::kill_inside(&self.root);
        }
        let mut o = output_from(out, err);
        use std::os::unix::process::ExitStatusExt;
        o.exit_code = status.code().map(i64::from).or_else(|| status.signal().map(|s| 128 + i64::from(s)));
        o.timed_out = timed_out;
        o.memory_exceeded = !timed_out && !status.success() && looks_like_oom(&o.stderr);
        o.duration_ms = start.elapsed().as_millis() as u64;
        Ok(o)
    }
}

fn child_setup(mem: u64, pids: u64, cpu_secs: u64) -> std::io::Result<()> {
    // SAFETY: plain syscalls on values we own.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The command dies with us, even by SIGKILL (the forking thread waits for it).
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let set = |res, v: u64| {
            let r = libc::rlimit { rlim_cur: v as libc::rlim_t, rlim_max: v as libc::rlim_t };
            libc::setrlimit(res, &r)
        };
        set(libc::RLIMIT_DATA, mem);
        set(libc::RLIMIT_NPROC, pids);
        set(libc::RLIMIT_CPU, cpu_secs);
        set(libc::RLIMIT_CORE, 0);
    }
    Ok(())
}

/// Bring `lo` up in a fresh network namespace, as Docker's `none` network has it, so
/// tests that serve on 127.0.0.1 inside the sandbox still work.
pub(super) unsafe fn loopback_up() {
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
    if fd < 0 {
        return;
    }
    let mut req: libc::ifreq = std::mem::zeroed();
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) == 0 {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
    }
    libc::close(fd);
}

fn kill_group(pgid: Option<i32>) {
    if let Some(p) = pgid {
        if p > 1 {
            // SAFETY: signalling a process group we created; ESRCH when it is gone is fine.
            unsafe {
                libc::kill(-p, libc::SIGKILL);
            }
        }
    }
}

struct GroupGuard(Option<i32>);
impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// What a reader has captured so far, shared so that a reader given up on still gives
/// what it read.
type Shared = std::sync::Arc<std::sync::Mutex<Capture>>;

fn read_capped<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    r: Option<R>,
    limit: usize,
) -> (tokio::task::JoinHandle<()>, Shared) {
    let cap: Shared = std::sync::Arc::new(std::sync::Mutex::new(Capture::new(limit)));
    let into = cap.clone();
    let task = tokio::spawn(async move {
        if let Some(mut r) = r {
            let mut buf = vec![0u8; 16 << 10];
            while let Ok(n) = r.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut c) = into.lock() {
                    c.push(&buf[..n]);
                }
            }
        }
    });
    (task, cap)
}

/// What the output says when a process that escaped the command's process group
/// (`setsid`, a daemon) still held its stdout or stderr open: on stderr, so stdout stays
/// what the command printed.
pub(crate) const ESCAPED_NOTE: &str =
    "\n[reproagent: a process that left the command's process group held its output open; stopped reading it]\n";

/// The capture of a finished command, and whether a process that escaped the group still
/// held the pipe: such a reader is given up on after a grace period, keeping what it read.
async fn join_capture((task, cap): (tokio::task::JoinHandle<()>, Shared), limit: usize) -> (Capture, bool) {
    let abort = task.abort_handle();
    let held = tokio::time::timeout(ESCAPED_GRACE, task).await.is_err();
    if held {
        abort.abort();
    }
    let c = match cap.lock() {
        Ok(mut g) => std::mem::replace(&mut *g, Capture::new(limit)),
        Err(_) => Capture::new(limit),
    };
    (c, held)
}

/// How long the output of a finished command is still read: an escaped process that
/// holds the pipe does not hold the run.
const ESCAPED_GRACE: Duration = Duration::from_secs(2);

impl Sandbox for LocalSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Local
    }
    fn workdir(&self) -> &str {
        &self.repo_str
    }
    fn network_isolated(&self) -> bool {
        self.netns
    }
    fn environment(&self) -> Option<&super::env::Environment> {
        self.env.as_deref()
    }
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput>> {
        Box::pin(self.run(req))
    }
    fn write_file<'a>(&'a self, rel: &'a str, contents: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if !self.is_open() {
                return Err(SandboxError::Closed);
            }
            check_rel(rel)?;
            // Never through a symlink out of the copy (the repository may hold `tests -> /elsewhere`).
            let written = {
                let _fill = super::interrupt::filling();
                crate::confine::write_inside(&self.repo, rel, contents, true)
            };
            match written {
                Ok(_) => Ok(()),
                Err(crate::confine::WriteError::Io(p, e)) => Err(SandboxError::io(format!("writing {p}"), e)),
                Err(crate::confine::WriteError::Symlink(p)) => {
                    Err(SandboxError::PathOutside(format!("{p} (a symlink; files are never written through one)")))
                }
                Err(e) => Err(SandboxError::Other(e.to_string())),
            }
        })
    }
    fn read_file<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move {
            if !self.is_open() {
                return Err(SandboxError::Closed);
            }
            let path = self.repo.join(check_rel(rel)?);
            crate::confine::read_regular(&self.repo, &path).map_err(|e| match e {
                crate::confine::Refused::Io(e) => SandboxError::io(format!("reading {rel}"), e),
                crate::confine::Refused::Missing => {
                    SandboxError::io(format!("reading {rel}"), std::io::Error::from(std::io::ErrorKind::NotFound))
                }
                other => SandboxError::PathOutside(format!("{rel} ({other})")),
            })
        })
    }
    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let dir = self.dir.lock().map_err(|_| SandboxError::Other("sandbox lock poisoned".into()))?.take();
            match dir {
                Some(d) => d.close().map_err(|e| SandboxError::io("removing the sandbox temp dir", e)),
                None => Ok(()),
            }
        })
    }
}

/// The environment's directory relative to the repository, when it lives inside it.
pub(crate) fn env_inside(repo: &Path, env: &super::env::Environment) -> Option<PathBuf> {
    let prefix = env.python.prefix.as_ref()?;
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let rel = canon(prefix).strip_prefix(canon(repo)).ok()?.to_path_buf();
    (!rel.as_os_str().is_empty()).then_some(rel)
}

/// The first executable called `name` on `path`.
fn which(path: &str, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `PATH` and the variables of every command: the environment's directories ahead of
/// the system's, `VIRTUAL_ENV`/`CONDA_PREFIX`, and `PYTHONPATH` = the sandbox-private
/// `sitecustomize` directory, the copy's root and its `src/`.
fn environment(
    root: &Path,
    copy: &Path,
    user_tree: &Path,
    env: Option<&super::env::Environment>,
) -> Result<(String, Vec<(String, String)>)> {
    use super::env::PythonKind;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut vars: Vec<(String, String)> = Vec::new();
    if let Some(e) = env {
        let py = &e.python;
        if py.kind == PythonKind::Interpreter {
            // A bare interpreter has no `python3` beside it for sure: shims that run it.
            let bin = root.join(PYBIN);
            std::fs::create_dir_all(&bin).map_err(|e| SandboxError::io("creating the python shims", e))?;
            let script =
                format!("#!/bin/sh\nexec '{}' \"$@\"\n", py.interpreter.display().to_string().replace('\'', r"'\''"));
            for name in ["python3", "python"] {
                let p = bin.join(name);
                std::fs::write(&p, &script).map_err(|e| SandboxError::io("writing a python shim", e))?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| SandboxError::io("writing a python shim", e))?;
            }
            dirs.push(bin);
        }
        if let Some(b) = py.bin_dir() {
            dirs.push(b);
        }
        match (py.kind, &py.prefix) {
            (PythonKind::Venv, Some(p)) => vars.push(("VIRTUAL_ENV".into(), p.display().to_string())),
            (PythonKind::Conda, Some(p)) => vars.push(("CONDA_PREFIX".into(), p.display().to_string())),
            _ => {}
        }
        if py.kind != PythonKind::System {
            // The user's environment is not ours to write bytecode into.
            vars.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        }
    }
    let nm = copy.join("node_modules/.bin");
    if nm.is_dir() {
        dirs.push(nm);
    }
    if let Some(e) = env {
        if let Some(b) = &e.node.bin_dir {
            dirs.push(b.clone());
        }
        if let Some(j) = &e.java.java_home {
            dirs.push(j.join("bin"));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut path: Vec<String> = dirs
        .into_iter()
        .map(|d| d.display().to_string())
        .filter(|d| !super::env::SYSTEM_DIRS.contains(&d.as_str()) && seen.insert(d.clone()))
        .collect();
    path.push(LOCAL_PATH.to_string());

    let site = root.join(PYSITE);
    let mut users = vec![user_tree.display().to_string()];
    if let Ok(c) = user_tree.canonicalize() {
        users.push(c.display().to_string());
    }
    std::fs::write(site.join("sitecustomize.py"), sitecustomize(&users, &copy.display().to_string()))
        .map_err(|e| SandboxError::io("writing the sandbox's sitecustomize.py", e))?;
    let mut pythonpath = vec![site.display().to_string(), copy.display().to_string()];
    if copy.join("src").is_dir() {
        pythonpath.push(copy.join("src").display().to_string());
    }
    vars.push(("PYTHONPATH".into(), pythonpath.join(":")));
    Ok((path.join(":"), vars))
}

/// The `sitecustomize.py` of the sandbox: `sys.path` entries and the editable-install
/// finders' mappings (setuptools' `__editable__` finders) that point into the user's
/// tree, or name a package the copy has, are turned to the copy; then the next
/// `sitecustomize` on the path (the interpreter's own) runs as it would have.
fn sitecustomize(users: &[String], copy: &str) -> String {
    let users = serde_json::to_string(users).unwrap_or_else(|_| "[]".into());
    let copy = serde_json::to_string(copy).unwrap_or_else(|_| "\"\"".into());
    format!(
        r#"# Written by reproagent: tests import the sandbox's copy of the repository, never the user's tree.
import os, sys

_USERS = [os.path.normpath(p) for p in {users}]
_COPY = os.path.normpath({copy})
_SELF = os.path.dirname(_COPY)
_KEEP = set(os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, getattr(sys, "base_prefix", sys.prefix)))


def _under(p, root):
    return p == root or p.startswith(root.rstrip(os.sep) + os.sep)


def _to_copy(p):
    if not isinstance(p, str) or not p:
        return p
    n = os.path.normpath(p)
    if _under(n, _SELF):
        return p
    if any(_under(n, k) or _under(os.path.realpath(n), k) for k in _KEEP):
        return p
    for u in _USERS:
        if _under(n, u):
            return _COPY + n[len(u):]
    return p


def _in_copy(name):
    for base in (_COPY, os.path.join(_COPY, "src")):
        d = os.path.join(base, *name.split("."))
        if os.path.isdir(d) or os.path.isfile(d + ".py"):
            return d if os.path.isdir(d) else d + ".py"
    return None


def _fix():
    sys.path[:] = [_to_copy(p) for p in sys.path]
    for name, mod in list(sys.modules.items()):
        if not (name.startswith("__editable__") and name.endswith("_finder")):
            continue
        mapping = getattr(mod, "MAPPING", None)
        if isinstance(mapping, dict):
            for k in list(mapping):
                moved = _to_copy(mapping[k])
                if moved == mapping[k]:
                    moved = _in_copy(k) or moved
                mapping[k] = moved
        ns = getattr(mod, "NAMESPACES", None)
        if isinstance(ns, dict):
            for k in list(ns):
                ns[k] = [_to_copy(x) for x in ns[k]]
    sys.path_importer_cache.clear()


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec
    except ImportError:
        return
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = module_from_spec(spec)
        spec.loader.exec_module(mod)


_fix()
try:
    _chain()
except Exception:
    pass
"#
    )
}

/// Remove from the copy the environments that live in the repository (a conda env has no
/// `pyvenv.cfg`, so the copy rule keeps it): they are used where they are.
fn copy_skip(copy: &Path, skip: &[PathBuf]) -> Result<()> {
    for rel in skip {
        let p = copy.join(rel);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&p)
                .map_err(|e| SandboxError::io(format!("leaving {} out of the copy", rel.display()), e))?;
        }
    }
    Ok(())
}
