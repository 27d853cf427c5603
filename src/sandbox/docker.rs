//! The Docker sandbox, through bollard: one container per sandbox, created from an
//! environment image with memory, CPU and process limits and no network; the repository
//! uploaded as a tar archive (never a bind mount, so nothing done inside reaches the
//! user's tree); commands run as execs with a timeout; files copied in and out as archives.
//!
//! Every container carries the [`CONTAINER_LABEL`] label and is removed on every exit
//! path: [`Sandbox::close`], or `Drop` (errors, panics, a future dropped on Ctrl-C).
//! [`clean`] removes any left behind by a killed process.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, InspectContainerOptions, ListContainersOptions,
    RemoveContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::{
    check_rel, looks_like_oom, output_from, BoxFuture, Capture, ExecOutput, ExecRequest, Result, Sandbox,
    SandboxConfig, SandboxError, SandboxKind, CONTAINER_LABEL,
};

/// Where the repository copy lives inside the container.
pub const WORKDIR: &str = "/sandbox/repo";
/// The label holding a sandbox's session id.
pub const SESSION_LABEL: &str = "reproagent.session";

/// PID 1 of a sandbox container: a shell that keeps the container up and reaps orphans.
/// `kill -KILL -1` from an exec (our tree kill) spares PID 1; the loop restarts `sleep`.
const KEEPALIVE: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done";

/// Connect to the local engine and check it answers.
pub async fn connect() -> Result<Docker> {
    let docker = Docker::connect_with_local_defaults()?;
    match tokio::time::timeout(Duration::from_secs(5), docker.ping()).await {
        Ok(r) => {
            r?;
            Ok(docker)
        }
        Err(_) => Err(SandboxError::Other("the Docker engine did not answer within 5 s".into())),
    }
}

pub struct DockerSandbox {
    docker: Docker,
    id: String,
    /// Where the repository copy is (and commands run): [`WORKDIR`] or the image's own.
    workdir: String,
    /// A shell line every command runs after, in bash.
    activate: Option<String>,
    closed: AtomicBool,
    output_bytes: usize,
    /// The cgroup's OOM-kill count after the last command.
    oom_kills: AtomicU64,
    disk_quota: DiskQuota,
    /// Removes the container on Ctrl-C, whatever the owner is doing then.
    _interrupt: super::interrupt::Registration,
}

/// The disk quota of a container's writable layer.
#[derive(Debug, Clone, PartialEq)]
pub enum DiskQuota {
    /// The engine enforces this many bytes.
    Bytes(u64),
    /// The storage driver has no quota: the engine's reason.
    Unsupported(String),
    /// An adopted container: what it was created with is not known here.
    Unknown,
}

impl std::fmt::Display for DiskQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskQuota::Bytes(b) => write!(f, "disk quota {} MiB", b >> 20),
            DiskQuota::Unsupported(why) => {
                write!(f, "no disk quota: the storage driver does not support one ({why})")
            }
            DiskQuota::Unknown => write!(f, "disk quota unknown (a container created elsewhere)"),
        }
    }
}

/// The engine's refusal of `--storage-opt size=` on a driver without quotas.
fn quota_refused(e: &bollard::errors::Error) -> bool {
    let m = e.to_string().to_lowercase();
    m.contains("storage-opt") || m.contains("storage opt") || m.contains("storageopt") || m.contains("quota")
}

fn first_line(s: &str) -> String {
    crate::extract::truncate(s.lines().next().unwrap_or("").trim().to_string(), 200)
}

impl DockerSandbox {
    /// Create and start the container, then upload the repository into it. A failure at
    /// any step removes the container before returning.
    pub async fn open(config: SandboxConfig) -> Result<Self> {
        config.limits.check()?;
        let docker = connect().await?;
        if docker.inspect_image(&config.image).await.is_err() {
            return Err(SandboxError::ImageMissing {
                image: config.image.clone(),
                hint: "build it with `reproagent sandbox prepare` (tests: `bash .ci/build-images.sh`)".into(),
            });
        }
        let limits = &config.limits;
        let labels = HashMap::from([
            (CONTAINER_LABEL.to_string(), "1".to_string()),
            (SESSION_LABEL.to_string(), config.session.clone()),
            (super::owner::OWNER_LABEL.to_string(), super::owner::this_process()),
        ]);
        let memory = i64::try_from(limits.memory_bytes).unwrap_or(i64::MAX);
        let mut host = HostConfig {
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: Some((limits.cpus * 1e9) as i64),
            pids_limit: Some(i64::from(limits.pids)),
            network_mode: Some("none".into()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            ..Default::default()
        };
        // A disk quota where the storage driver has one (overlay2 on xfs with pquota,
        // btrfs, zfs, devicemapper); the engine refuses the option elsewhere, and the
        // container is created without it, saying so.
        host.storage_opt = Some(HashMap::from([("size".to_string(), format!("{}", limits.disk_bytes))]));
        let mut body = ContainerCreateBody {
            image: Some(config.image.clone()),
            cmd: Some(vec!["sh".into(), "-c".into(), KEEPALIVE.into()]),
            working_dir: Some("/".into()),
            env: Some(vec!["LANG=C.UTF-8".into(), "HOME=/root".into()]),
            labels: Some(labels),
            network_disabled: Some(true),
            host_config: Some(host),
            ..Default::default()
        };
        let opts =
            CreateContainerOptions { name: Some(format!("reproagent-{}", config.session)), ..Default::default() };
        super::interrupt::creating_container();
        let (id, quota) = match docker.create_container(Some(opts.clone()), body.clone()).await {
            Ok(c) => (c.id, DiskQuota::Bytes(limits.disk_bytes)),
            Err(e) if quota_refused(&e) => {
                if let Some(h) = body.host_config.as_mut() {
                    h.storage_opt = None;
                }
                let id = docker.create_container(Some(opts), body).await?.id;
                (id, DiskQuota::Unsupported(first_line(&e.to_string())))
            }
            Err(e) => return Err(e.into()),
        };
        let mut sb = Self::adopt(docker, id, &config).await?;
        sb.disk_quota = quota;
        Ok(sb)
    }

    /// The disk quota the container got, or why it has none.
    pub fn disk_quota(&self) -> &DiskQuota {
        &self.disk_quota
    }

    /// Take charge of a created container: start it and upload the repository. From
    /// here on the sandbox owns the container: an error drops it, which removes it.
    pub async fn adopt(docker: Docker, id: String, config: &SandboxConfig) -> Result<Self> {
        let _interrupt = super::interrupt::register_container(&id);
        let workdir = match &config.workdir {
            Some(w) => check_workdir(w)?,
            None => WORKDIR.to_string(),
        };
        let activate = config.activate.clone().filter(|a| !a.trim().is_empty());
        let sb = DockerSandbox {
            docker,
            id,
            workdir,
            activate,
            closed: AtomicBool::new(false),
            output_bytes: config.limits.output_bytes,
            oom_kills: AtomicU64::new(0),
            disk_quota: DiskQuota::Unknown,
            _interrupt,
        };
        sb.docker.start_container(&sb.id, None::<bollard::query_parameters::StartContainerOptions>).await?;
        let repo = config.repo.clone();
        let prefix = sb.workdir.clone();
        // A host environment inside the repository (`.venv`) means nothing in the image.
        let skip: Vec<std::path::PathBuf> =
            config.env.as_ref().and_then(|e| super::local::env_inside(&repo, e)).into_iter().collect();
        let archive = tokio::task::spawn_blocking(move || repo_archive_at(&repo, &prefix, &skip))
            .await
            .map_err(|e| SandboxError::Other(format!("archiving the repository: {e}")))??;
        sb.upload("/", archive).await?;
        Ok(sb)
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn upload(&self, path: &str, archive: Vec<u8>) -> Result<()> {
        let opts = UploadToContainerOptions { path: path.into(), ..Default::default() };
        self.docker.upload_to_container(&self.id, Some(opts), bollard::body_full(archive.into())).await?;
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            Err(SandboxError::Closed)
        } else {
            Ok(())
        }
    }

    /// Run one command. A command that failed, or a Docker error, because the container
    /// went away under it (`docker rm -f`, the engine restarting) is
    /// [`SandboxError::Gone`], which names the container: its output is no result.
    async fn run(&self, req: &ExecRequest) -> Result<ExecOutput> {
        super::check_timeout(req.timeout.as_secs().max(1), super::MAX_TIMEOUT_SECS)?;
        let r = self.run_inner(req).await;
        let (suspect, killed) = match &r {
            Ok(o) => (!o.success(), !o.timed_out && matches!(o.exit_code, None | Some(137))),
            Err(SandboxError::Docker(_)) => (true, true),
            Err(_) => (false, false),
        };
        let gone = || SandboxError::Gone(self.id.chars().take(12).collect());
        if suspect && !self.alive().await {
            return Err(gone());
        }
        // A command killed from outside: the engine may not show the removal yet.
        if killed {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if !self.alive().await {
                return Err(gone());
            }
        }
        r
    }

    /// Whether the container still exists and runs (`removing`, `exited`, `dead`: no).
    async fn alive(&self) -> bool {
        use bollard::models::ContainerStateStatusEnum as S;
        match self.docker.inspect_container(&self.id, None::<InspectContainerOptions>).await {
            Ok(c) => c.state.is_some_and(|s| s.running == Some(true) && matches!(s.status, Some(S::RUNNING) | None)),
            Err(_) => false,
        }
    }

    async fn run_inner(&self, req: &ExecRequest) -> Result<ExecOutput> {
        self.check_open()?;
        if req.argv.is_empty() {
            return Err(SandboxError::Other("empty command".into()));
        }
        let cwd = match &req.cwd {
            Some(c) => format!("{}/{}", self.workdir, check_rel(c)?.display()),
            None => self.workdir.clone(),
        };
        let cmd = match &self.activate {
            None => req.argv.clone(),
            Some(a) => {
                // The activation step, then the command in the environment it made.
                let script = format!(
                    "{a}\nst=$?; if [ $st -ne 0 ]; then echo \"reproagent: the activation step failed (exit $st)\" >&2; exit 125; fi\nexec \"$@\""
                );
                let mut v = vec!["bash".to_string(), "-c".to_string(), script, "reproagent-activate".to_string()];
                v.extend(req.argv.iter().cloned());
                v
            }
        };
        let config = ExecConfig {
            cmd: Some(cmd),
            working_dir: Some(cwd),
            env: Some(req.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let start = Instant::now();
        let exec_id = self.docker.create_exec(&self.id, config).await?.id;
        let started = self
            .docker
            .start_exec(&exec_id, Some(StartExecOptions { detach: false, tty: false, output_capacity: Some(64 << 10) }))
            .await?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(SandboxError::Other("the exec did not attach".into()));
        };
        let (mut out, mut err) = (Capture::new(self.output_bytes), Capture::new(self.output_bytes));
        let push = |item: LogOutput, out: &mut Capture, err: &mut Capture| match item {
            LogOutput::StdErr { message } => err.push(&message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => out.push(&message),
            LogOutput::StdIn { .. } => {}
        };
        let deadline = tokio::time::sleep(req.timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut exited_at: Option<Instant> = None;
        let mut timed_out = false;
        let mut stream_done = false;
        loop {
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(item)) => push(item, &mut out, &mut err),
                    Some(Err(e)) => return Err(e.into()),
                    None => { stream_done = true; break; }
                },
                _ = &mut deadline => { timed_out = true; break; }
                _ = tick.tick() => {
                    // A background child can hold the output open after the command exits.
                    let running = self.docker.inspect_exec(&exec_id).await?.running.unwrap_or(false);
                    if !running {
                        let t = *exited_at.get_or_insert_with(Instant::now);
                        if t.elapsed() > Duration::from_millis(500) { break; }
                    }
                }
            }
        }
        // Kill every process of the container but PID 1: the timed-out tree, and anything
        // the command left running in the background, so nothing leaks into the next command.
        let ooms = self.kill_all().await?;
        if !stream_done {
            let drain = async {
                while let Some(Ok(item)) = output.next().await {
                    push(item, &mut out, &mut err);
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        }
        let inspect = self.docker.inspect_exec(&exec_id).await?;
        let mut o = output_from(out, err);
        o.exit_code = inspect.exit_code;
        o.timed_out = timed_out;
        if let Some(n) = ooms {
            o.memory_exceeded = n > self.oom_kills.swap(n, Ordering::SeqCst);
        } else if !timed_out && o.exit_code == Some(137) {
            // No counter readable: fall back on the engine's flag.
            let state = self.docker.inspect_container(&self.id, None::<InspectContainerOptions>).await?.state;
            o.memory_exceeded = state.and_then(|s| s.oom_killed).unwrap_or(false);
        }
        o.memory_exceeded |= !timed_out && !o.success() && looks_like_oom(&o.stderr);
        o.duration_ms = start.elapsed().as_millis() as u64;
        Ok(o)
    }

    /// Kill every process but PID 1, and read the cgroup's OOM-kill counter (v1
    /// `memory.oom_control`, v2 `memory.events`) so a command's OOM kill can be told apart.
    async fn kill_all(&self) -> Result<Option<u64>> {
        let script = "kill -KILL -1 2>/dev/null; cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null | grep '^oom_kill '; true";
        let config = ExecConfig {
            cmd: Some(vec!["sh".into(), "-c".into(), script.into()]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let id = self.docker.create_exec(&self.id, config).await?.id;
        let mut text = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = self.docker.start_exec(&id, None).await? {
            let read = async {
                while let Some(Ok(item)) = output.next().await {
                    if let LogOutput::StdOut { message } = item {
                        text.extend_from_slice(&message);
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        }
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse().ok())))
    }

    async fn remove(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        self.docker.remove_container(&self.id, Some(opts)).await?;
        Ok(())
    }
}

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        // Drop cannot await, and the caller's runtime may be shutting down: remove the
        // container from a thread with its own runtime and connection, and wait for it.
        let id = self.id.clone();
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async {
                if let Ok(d) = Docker::connect_with_local_defaults() {
                    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
                    let _ = d.remove_container(&id, Some(opts)).await;
                }
            });
        });
        let _ = handle.join();
    }
}

impl Sandbox for DockerSandbox {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Docker
    }
    fn workdir(&self) -> &str {
        &self.workdir
    }
    fn network_isolated(&self) -> bool {
        true
    }
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput>> {
        Box::pin(self.run(req))
    }
    fn write_file<'a>(&'a self, rel: &'a str, contents: &'a [u8]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.check_open()?;
            let rel = check_rel(rel)?;
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            h.set_size(contents.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(now_secs());
            h.set_cksum();
            b.append_data(&mut h, rel, contents).map_err(|e| SandboxError::io("archiving the file", e))?;
            let archive = b.into_inner().map_err(|e| SandboxError::io("archiving the file", e))?;
            self.upload(&self.workdir, archive).await
        })
    }
    fn read_file<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Vec<u8>>> {
        Box::pin(async move {
            self.check_open()?;
            let path = format!("{}/{}", self.workdir, check_rel(rel)?.display());
            let opts = DownloadFromContainerOptions { path };
            let mut stream = self.docker.download_from_container(&self.id, Some(opts));
            let mut archive = Vec::new();
            while let Some(chunk) = stream.next().await {
                archive.extend_from_slice(&chunk?);
            }
            let mut ar = tar::Archive::new(archive.as_slice());
            let entries = ar.entries().map_err(|e| SandboxError::io("reading the archive", e))?;
            for entry in entries {
                let mut entry = entry.map_err(|e| SandboxError::io("reading the archive", e))?;
                if entry.header().entry_type().is_file() {
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut entry, &mut data)
                        .map_err(|e| SandboxError::io("reading the archive", e))?;
                    return Ok(data);
                }
            }
            Err(SandboxError::Other(format!("{rel} is not a regular file")))
        })
    }
    fn close(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.remove())
    }
}

/// A `--workdir`: absolute, normal, not `/` and not a system directory.
fn check_workdir(w: &str) -> Result<String> {
    let p = Path::new(w);
    let normal = p.is_absolute() && p.components().skip(1).all(|c| matches!(c, std::path::Component::Normal(_)));
    let top = p.components().nth(1).map(|c| c.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
    if !normal
        || p.components().count() < 2
        || ["bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "sys", "usr"].contains(&top.as_str())
    {
        return Err(SandboxError::Other(format!(
            "--workdir {w:?}: give the absolute directory the image keeps the repository in (e.g. /testbed), not a system directory"
        )));
    }
    Ok(w.trim_end_matches('/').to_string())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A tar of the repository (but `skip`) under `dir` (absolute), to upload at `/`; the
/// directories leading to it are entries too, so it extracts over an existing one.
pub(crate) fn repo_archive_at(repo: &Path, dir: &str, skip: &[std::path::PathBuf]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let prefix = Path::new(dir.trim_start_matches('/'));
    let io = |e| SandboxError::io("archiving the repository", e);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_mtime(now_secs());
    h.set_size(0);
    h.set_cksum();
    let mut lead = std::path::PathBuf::new();
    for c in prefix.components() {
        lead.push(c);
        b.append_data(&mut h.clone(), &lead, std::io::empty()).map_err(io)?;
    }
    let skipped = super::copy::append_to_tar(&mut b, repo, prefix, skip)?;
    super::copy::report_skipped(&skipped);
    b.into_inner().map_err(io)
}

/// Remove every container carrying our label (left behind by a killed process).
/// Returns the names removed.
pub async fn clean(docker: &Docker) -> Result<Vec<String>> {
    let filters = HashMap::from([("label".to_string(), vec![CONTAINER_LABEL.to_string()])]);
    let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
    let mut removed = Vec::new();
    for c in docker.list_containers(Some(opts)).await? {
        let Some(id) = c.id else { continue };
        if owner_alive(c.labels.as_ref()) {
            continue;
        }
        let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        docker.remove_container(&id, Some(opts)).await?;
        let name = c.names.and_then(|n| n.first().cloned()).unwrap_or(id);
        removed.push(name.trim_start_matches('/').to_string());
    }
    removed.sort();
    Ok(removed)
}

/// Whether a sandbox container's owning process is alive: by its owner label, or, for a
/// container made before the label existed, by the pid its session id starts with.
fn owner_alive(labels: Option<&HashMap<String, String>>) -> bool {
    let Some(l) = labels else { return false };
    if let Some(tag) = l.get(super::owner::OWNER_LABEL) {
        return super::owner::alive(tag);
    }
    l.get(SESSION_LABEL)
        .and_then(|s| s.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Containers of one session (for tests and diagnostics).
pub async fn session_containers(docker: &Docker, session: &str) -> Result<Vec<String>> {
    let filters = HashMap::from([("label".to_string(), vec![format!("{SESSION_LABEL}={session}")])]);
    let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
    Ok(docker.list_containers(Some(opts)).await?.into_iter().filter_map(|c| c.id).collect())
}
