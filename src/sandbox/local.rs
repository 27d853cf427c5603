//! The local sandbox, for machines without Docker: a temporary copy of the repository,
//! each command in its own session and process group with a timeout that kills the
//! whole group, rlimits, a scrubbed environment and (where the kernel lets us) a
//! private network namespace with only loopback.
//!
//! It is weaker than the container: a process that calls `setsid` itself leaves the
//! group, RLIMIT_NPROC does not bind root, and RLIMIT_DATA is not a cgroup. The
//! container is the default whenever it can be had.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::{
    check_rel, looks_like_oom, output_from, BoxFuture, Capture, ExecOutput, ExecRequest, Limits, Result, Sandbox,
    SandboxConfig, SandboxError, SandboxKind,
};

/// PATH inside the local sandbox: the system's, never the user's shims or virtualenvs.
pub const LOCAL_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct LocalSandbox {
    dir: Mutex<Option<tempfile::TempDir>>,
    root: PathBuf,
    repo: PathBuf,
    repo_str: String,
    limits: Limits,
    netns: bool,
    /// Deletes the copy on Ctrl-C, whatever the owner is doing then.
    _interrupt: super::interrupt::Registration,
}

impl LocalSandbox {
    /// Copy the repository into a fresh temporary directory.
    pub fn open(config: SandboxConfig) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("reproagent-sandbox-")
            .tempdir()
            .map_err(|e| SandboxError::io("creating the sandbox temp dir", e))?;
        let root = dir.path().to_path_buf();
        let _interrupt = super::interrupt::register_dir(&root);
        let repo = root.join("repo");
        for sub in ["home", "tmp"] {
            std::fs::create_dir_all(root.join(sub)).map_err(|e| SandboxError::io("creating the sandbox home", e))?;
        }
        super::copy::copy_tree(&config.repo, &repo)?;
        let repo_str = repo.to_string_lossy().into_owned();
        let mut sb = LocalSandbox { dir: Mutex::new(Some(dir)), root, repo, repo_str, limits: config.limits, netns: true, _interrupt };
        sb.netns = sb.probe_netns();
        Ok(sb)
    }

    /// Whether this process may unshare a network namespace (root, or CAP_SYS_ADMIN).
    fn probe_netns(&self) -> bool {
        let mut cmd = std::process::Command::new("/bin/true");
        // SAFETY: unshare is a plain syscall, safe between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.status().map(|s| s.success()).unwrap_or(false)
    }

    fn is_open(&self) -> bool {
        self.dir.lock().map(|d| d.is_some()).unwrap_or(false)
    }

    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput> {
        if !self.is_open() {
            return Err(SandboxError::Closed);
        }
        let Some((prog, args)) = req.argv.split_first() else {
            return Err(SandboxError::Other("empty command".into()));
        };
        let cwd = match &req.cwd {
            Some(c) => self.repo.join(check_rel(c)?),
            None => self.repo.clone(),
        };
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args)
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", LOCAL_PATH)
            .env("HOME", self.root.join("home"))
            .env("TMPDIR", self.root.join("tmp"))
            .env("LANG", "C.UTF-8")
            .envs(req.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mem = self.limits.memory_bytes;
        let pids = u64::from(self.limits.pids);
        let cpu_secs = req.timeout.as_secs().saturating_add(2);
        let netns = self.netns;
        // SAFETY: only async-signal-safe syscalls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || child_setup(mem, pids, cpu_secs, netns));
        }
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| SandboxError::io(format!("running {prog}"), e))?;
        let pgid = child.id().map(|p| p as i32);
        // Kills the group on every exit path, a dropped future (Ctrl-C) included; the
        // registration kills it on Ctrl-C while the owner is blocked elsewhere.
        let _guard = GroupGuard(pgid);
        let _interrupt = pgid.map(super::interrupt::register_group);
        let limit = self.limits.output_bytes;
        let out_task = tokio::spawn(read_capped(child.stdout.take(), limit));
        let err_task = tokio::spawn(read_capped(child.stderr.take(), limit));

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
        let out = join_capture(out_task, limit).await;
        let err = join_capture(err_task, limit).await;
        let mut o = output_from(out, err);
        use std::os::unix::process::ExitStatusExt;
        o.exit_code = status.code().map(i64::from).or_else(|| status.signal().map(|s| 128 + i64::from(s)));
        o.timed_out = timed_out;
        o.memory_exceeded = !timed_out && !status.success() && looks_like_oom(&o.stderr);
        o.duration_ms = start.elapsed().as_millis() as u64;
        Ok(o)
    }
}

fn child_setup(mem: u64, pids: u64, cpu_secs: u64, netns: bool) -> std::io::Result<()> {
    // SAFETY: plain syscalls on values we own.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let set = |res, v: u64| {
            let r = libc::rlimit { rlim_cur: v as libc::rlim_t, rlim_max: v as libc::rlim_t };
            libc::setrlimit(res, &r)
        };
        set(libc::RLIMIT_DATA, mem);
        set(libc::RLIMIT_NPROC, pids);
        set(libc::RLIMIT_CPU, cpu_secs);
        set(libc::RLIMIT_CORE, 0);
        if netns {
            if libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            loopback_up();
        }
    }
    Ok(())
}

/// Bring `lo` up in a fresh network namespace, as Docker's `none` network has it, so
/// tests that serve on 127.0.0.1 inside the sandbox still work.
unsafe fn loopback_up() {
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

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(r: Option<R>, limit: usize) -> Capture {
    let mut cap = Capture::new(limit);
    if let Some(mut r) = r {
        let mut buf = vec![0u8; 16 << 10];
        while let Ok(n) = r.read(&mut buf).await {
            if n == 0 {
                break;
            }
            cap.push(&buf[..n]);
        }
    }
    cap
}

/// A reader blocked by a process that escaped the group is abandoned after a grace period.
async fn join_capture(task: tokio::task::JoinHandle<Capture>, limit: usize) -> Capture {
    let abort = task.abort_handle();
    match tokio::time::timeout(Duration::from_secs(2), task).await {
        Ok(Ok(c)) => c,
        _ => {
            abort.abort();
            let mut c = Capture::new(limit);
            c.push(b"");
            c
        }
    }
}

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
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput>> {
        Box::pin(self.run(req))
    }
    fn write_file<'a>(&'a self, rel: &'a str, contents: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if !self.is_open() {
                return Err(SandboxError::Closed);
            }
            let path = self.repo.join(check_rel(rel)?);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| SandboxError::io(format!("creating {rel}"), e))?;
            }
            std::fs::write(&path, contents).map_err(|e| SandboxError::io(format!("writing {rel}"), e))
        })
    }
    fn read_file<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move {
            if !self.is_open() {
                return Err(SandboxError::Closed);
            }
            let path = self.repo.join(check_rel(rel)?);
            std::fs::read(&path).map_err(|e| SandboxError::io(format!("reading {rel}"), e))
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
