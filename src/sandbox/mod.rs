//! The sandbox: where the reproduce pipeline runs what it writes (commands, Python
//! snippets, single test files) in the repository's environment, without touching the
//! user's tree or the network.
//!
//! One trait, [`Sandbox`], two implementations that pass the same test suite:
//! [`docker::DockerSandbox`] (a container through bollard, the repository uploaded as an
//! archive) and [`local::LocalSandbox`] (a temporary copy, processes in their own
//! process group). [`open`] makes the auto choice and says why. Test runners
//! ([`runners`]) turn a test run into a structured [`runners::TestResult`]; the
//! [`policy`] refuses dangerous commands before they reach either implementation;
//! [`interrupt`] tears down whatever is live on Ctrl-C.

pub mod copy;
pub mod docker;
pub mod env;
pub mod image;
pub(crate) mod interrupt;
pub(crate) mod jail;
pub mod local;
pub mod owner;
pub(crate) mod policy;
pub mod runners;
pub mod tools;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A boxed future, so that [`Sandbox`] stays usable as `&dyn Sandbox`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The label every container we create carries; `reproagent sandbox clean` removes
/// whatever still has it.
pub const CONTAINER_LABEL: &str = "reproagent.sandbox";

/// Errors of the sandbox layer.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The Docker engine refused or failed a request; check `docker info`.
    #[error("docker: {0}")]
    Docker(#[from] bollard::errors::Error),
    /// The image is not there; build it (`reproagent sandbox prepare`, or for the tests
    /// `bash .ci/build-images.sh`).
    #[error("image {image} not found: {hint}")]
    ImageMissing { image: String, hint: String },
    /// A file system operation failed.
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// The policy refused the command before it ran; rewrite it without the refused part.
    #[error("refused: {0}")]
    Refused(policy::Refusal),
    /// A path given to the sandbox leaves its work dir; use a path relative to the repository.
    #[error("path {0:?} is outside the sandbox work dir")]
    PathOutside(String),
    /// The sandbox was already closed; open a new one.
    #[error("the sandbox is closed")]
    Closed,
    /// The run was interrupted (Ctrl-C); the sandbox was cleaned up.
    #[error("interrupted")]
    Interrupted,
    /// The sandbox died under a command: its container was removed or stopped from
    /// outside. Nothing of it is left to clean; open a new one.
    #[error("the sandbox container {0} is gone (removed or stopped from outside while a command ran)")]
    Gone(String),
    /// The local sandbox cannot confine commands here (no mount namespace): it will not
    /// run them unconfined. Use Docker, or allow user namespaces.
    #[error("the local sandbox cannot isolate the file system here: {0}")]
    Unconfined(String),
    /// Something else went wrong inside the sandbox; the message says what.
    #[error("{0}")]
    Other(String),
}

impl SandboxError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io { context: context.into(), source }
    }
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

/// Which implementation a sandbox is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    Docker,
    Local,
}

impl std::fmt::Display for SandboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SandboxKind::Docker => "docker",
            SandboxKind::Local => "local",
        })
    }
}

/// Resource limits applied to every command a sandbox runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limits {
    /// Memory, in bytes (Docker: the container's cgroup; local: RLIMIT_DATA).
    pub memory_bytes: u64,
    /// CPUs (Docker: NanoCpus; local: not enforced beyond the CPU-time limit).
    pub cpus: f64,
    /// Processes (Docker: the pids cgroup; local: RLIMIT_NPROC, which root ignores).
    pub pids: u32,
    /// Bytes kept of each of stdout and stderr; the rest is counted and dropped.
    pub output_bytes: usize,
    /// Disk the container's writable layer may fill (Docker, where the storage driver
    /// supports a quota; the sandbox's reason says when it does not).
    pub disk_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_bytes: 2 << 30, cpus: 1.0, pids: 512, output_bytes: 256 << 10, disk_bytes: 10 << 30 }
    }
}

/// The longest timeout a command may ask for, in seconds (a day: nothing waits forever,
/// and a huge value cannot overflow a deadline).
pub const MAX_TIMEOUT_SECS: u64 = 86_400;
/// The longest timeout a runtime tool call (a model's) may ask for, in seconds.
pub const MAX_TOOL_TIMEOUT_SECS: u64 = 3_600;
/// The least memory a sandbox may be given: below it nothing starts (0 would mean "no
/// limit" to Docker, and crash the local sandbox's interpreter).
pub const MIN_MEMORY_MB: u64 = 16;
/// The most memory a sandbox may be given (1 TiB).
pub const MAX_MEMORY_MB: u64 = 1 << 20;
/// The least disk a Docker sandbox may be given: the repository copy needs room.
pub const MIN_DISK_MB: u64 = 64;

impl Limits {
    /// Refuse limits that mean "none" or cannot hold: memory outside
    /// [`MIN_MEMORY_MB`]..=[`MAX_MEMORY_MB`], no processes, no CPU.
    pub fn check(&self) -> Result<()> {
        let mb = self.memory_bytes >> 20;
        if !(MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&mb) {
            return Err(SandboxError::Other(format!(
                "memory limit {mb} MiB is out of range (hint: give {MIN_MEMORY_MB} to {MAX_MEMORY_MB} MiB)"
            )));
        }
        let disk = self.disk_bytes >> 20;
        if disk < MIN_DISK_MB {
            return Err(SandboxError::Other(format!(
                "disk limit {disk} MiB is too small (hint: give at least {MIN_DISK_MB} MiB)"
            )));
        }
        if self.pids == 0 || !(self.cpus > 0.0 && self.cpus.is_finite()) {
            return Err(SandboxError::Other(
                "process and CPU limits must be positive (hint: leave the defaults)".into(),
            ));
        }
        Ok(())
    }
}

/// Refuse a timeout of 0 or above `max` seconds.
pub fn check_timeout(secs: u64, max: u64) -> Result<()> {
    if secs == 0 || secs > max {
        return Err(SandboxError::Other(format!("timeout {secs} s is out of range (hint: give 1 to {max} seconds)")));
    }
    Ok(())
}

/// How a sandbox is opened.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The repository to copy in.
    pub repo: PathBuf,
    /// Docker image (ignored by the local sandbox).
    pub image: String,
    pub limits: Limits,
    /// Label value identifying this sandbox's container (a fresh one by default).
    pub session: String,
    /// The environment tests run in (local sandbox: the Python, Node and Java it puts
    /// first on `PATH`); resolved once per run by [`env::resolve`]. None: the system's.
    pub env: Option<std::sync::Arc<env::Environment>>,
    /// Docker: where the image keeps the repository; the copy is uploaded over it and
    /// every command runs there (default [`docker::WORKDIR`]).
    pub workdir: Option<String>,
    /// Docker: a shell line every command runs after (e.g. `source
    /// /opt/miniconda3/bin/activate && conda activate testbed`), in bash.
    pub activate: Option<String>,
}

impl SandboxConfig {
    pub fn new(repo: impl Into<PathBuf>, image: impl Into<String>) -> Self {
        SandboxConfig {
            repo: repo.into(),
            image: image.into(),
            limits: Limits::default(),
            session: new_session_id(),
            env: None,
            workdir: None,
            activate: None,
        }
    }

    /// With the environment resolved for the run and the Docker placement options.
    pub fn with_env(mut self, env: Option<std::sync::Arc<env::Environment>>, opts: &env::EnvOptions) -> Self {
        self.env = env;
        self.workdir = opts.workdir.clone();
        self.activate = opts.activate.clone();
        self
    }

    /// What the Docker sandbox does with the repository, for the reasons `open` gives.
    fn placement(&self) -> String {
        let mut s = String::new();
        if let Some(w) = &self.workdir {
            s.push_str(&format!(", repository over {w}"));
        }
        if let Some(a) = &self.activate {
            s.push_str(&format!(", after `{a}`"));
        }
        s
    }
}

/// A unique id for a sandbox session: process id, time and a counter.
pub fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{:x}-{}", std::process::id(), t, N.fetch_add(1, Ordering::Relaxed))
}

/// One command to run in the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRequest {
    /// The program and its arguments (use [`ExecRequest::shell`] for a shell line).
    pub argv: Vec<String>,
    /// Working directory relative to the repository root (default: the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; the whole process tree is killed when it runs out.
    pub timeout: Duration,
}

impl ExecRequest {
    pub fn new(argv: Vec<String>) -> Self {
        ExecRequest { argv, cwd: None, env: Vec::new(), timeout: Duration::from_secs(120) }
    }
    /// `sh -c LINE`.
    pub fn shell(line: impl Into<String>) -> Self {
        Self::new(vec!["sh".into(), "-c".into(), line.into()])
    }
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ExecOutput {
    /// Exit code; None when the process was killed by a signal without one.
    pub exit_code: Option<i64>,
    pub stdout: String,
    pub stderr: String,
    /// Bytes written to stdout/stderr in all, kept or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
    /// The timeout ran out and the process tree was killed.
    pub timed_out: bool,
    /// The memory limit was hit (OOM kill, or an allocation failure the runtime reported).
    pub memory_exceeded: bool,
    pub duration_ms: u64,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// A sandbox: a private copy of the repository where commands run with limits.
///
/// Architecture invariant: nothing done through a sandbox writes to the user's tree;
/// the copy is made when the sandbox opens and discarded when it closes.
pub trait Sandbox: Send + Sync {
    fn kind(&self) -> SandboxKind;
    /// Absolute path of the repository copy, as seen by commands in the sandbox.
    fn workdir(&self) -> &str;
    /// Whether commands can reach the network (false for test runs).
    fn network_isolated(&self) -> bool;
    /// Run one command to completion, within its timeout and the sandbox's limits.
    fn exec<'a>(&'a self, req: &'a ExecRequest) -> BoxFuture<'a, Result<ExecOutput>>;
    /// Write a file, path relative to the repository copy (parents are created).
    fn write_file<'a>(&'a self, rel: &'a str, contents: &'a [u8]) -> BoxFuture<'a, Result<()>>;
    /// Read a file back out of the sandbox, path relative to the repository copy.
    fn read_file<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Vec<u8>>>;
    /// Tear the sandbox down (container removed, temp dir deleted). Dropping a sandbox
    /// also tears it down; this is the form that reports errors.
    fn close(&self) -> BoxFuture<'_, Result<()>>;
    /// The environment commands run in, when the sandbox knows it (the local sandbox;
    /// a Docker image is what it is).
    fn environment(&self) -> Option<&env::Environment> {
        None
    }
}

/// Check a relative path stays inside the repository copy: no absolute paths, no `..`.
pub(crate) fn check_rel(rel: &str) -> Result<&Path> {
    let p = Path::new(rel);
    let ok = !rel.is_empty()
        && p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    if ok {
        Ok(p)
    } else {
        Err(SandboxError::PathOutside(rel.to_string()))
    }
}

/// Keeps the head of a stream up to a byte bound, counting the rest.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    buf: Vec<u8>,
    total: u64,
    limit: usize,
}

impl Capture {
    pub(crate) fn new(limit: usize) -> Self {
        Capture { buf: Vec::new(), total: 0, limit }
    }
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.limit.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
    }
    pub(crate) fn truncated(&self) -> bool {
        self.total > self.buf.len() as u64
    }
    pub(crate) fn finish(self) -> (String, u64) {
        (String::from_utf8_lossy(&self.buf).into_owned(), self.total)
    }
}

/// Fill an [`ExecOutput`] from two captures.
pub(crate) fn output_from(out: Capture, err: Capture) -> ExecOutput {
    let truncated = out.truncated() || err.truncated();
    let (stdout, stdout_bytes) = out.finish();
    let (stderr, stderr_bytes) = err.finish();
    ExecOutput { stdout, stderr, stdout_bytes, stderr_bytes, truncated, ..Default::default() }
}

/// What runtimes print when an allocation fails under a memory limit.
pub(crate) fn looks_like_oom(stderr: &str) -> bool {
    const MARKERS: &[&str] = &[
        "MemoryError",
        "Cannot allocate memory",
        "std::bad_alloc",
        "JavaScript heap out of memory",
        "java.lang.OutOfMemoryError",
        "Could not reserve enough space",
        "out of memory",
    ];
    MARKERS.iter().any(|m| stderr.contains(m))
}

/// Which sandbox to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    #[default]
    Auto,
    Docker,
    Local,
}

/// The sandbox opened by [`open`] and why it was chosen.
pub struct Opened {
    pub sandbox: Box<dyn Sandbox>,
    pub reason: String,
}

/// Open a sandbox. `Auto` takes Docker when the engine answers and the image is there,
/// otherwise the local sandbox; the returned reason says which and why.
pub async fn open(choice: Choice, config: SandboxConfig) -> Result<Opened> {
    match choice {
        Choice::Docker => {
            let placement = config.placement();
            let sb = docker::DockerSandbox::open(config).await?;
            let quota = sb.disk_quota().to_string();
            Ok(Opened { sandbox: Box::new(sb), reason: format!("docker (asked for){placement}; {quota}") })
        }
        Choice::Local => {
            let sb = local::LocalSandbox::open(config)?;
            Ok(Opened { sandbox: Box::new(sb), reason: "local (asked for)".into() })
        }
        Choice::Auto => {
            let why_not = match docker::connect().await {
                Err(e) => format!("the Docker engine does not answer ({e})"),
                Ok(d) => match d.inspect_image(&config.image).await {
                    Ok(_) => {
                        let image = config.image.clone();
                        let placement = config.placement();
                        let sb = docker::DockerSandbox::open(config).await?;
                        let quota = sb.disk_quota().to_string();
                        return Ok(Opened {
                            sandbox: Box::new(sb),
                            reason: format!(
                                "docker: the engine answers and image {image} is ready{placement}; {quota}"
                            ),
                        });
                    }
                    Err(_) => format!("image {} is not built (run `reproagent sandbox prepare`)", config.image),
                },
            };
            let sb = local::LocalSandbox::open(config)?;
            Ok(Opened { sandbox: Box::new(sb), reason: format!("local: {why_not}") })
        }
    }
}
