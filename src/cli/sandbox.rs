//! `reproagent sandbox prepare|exec|clean`: environment images, one-off commands in
//! the sandbox for people debugging, and removal of containers left behind.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};

use crate::sandbox::{self, docker, image, policy, Choice, ExecRequest, SandboxConfig};

/// Environment images and one-off commands in the sandbox.
#[derive(Args, Debug)]
pub struct SandboxArgs {
    #[command(subcommand)]
    pub command: SandboxCommand,
    /// Print JSON instead of a human summary.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Build an environment image for a repository: its Dockerfile when it has one (the
    /// FROM image must be present: nothing is pulled), else the base image plus the
    /// install steps its manifests call for; tagged by a hash of the manifests and reused
    /// until they change. Prints what it ran.
    Prepare(PrepareArgs),
    /// Run one command in the sandbox (a copy of the repository; the user's tree is not touched).
    Exec(ExecArgs),
    /// Remove every sandbox container left behind (they carry the `reproagent.sandbox` label).
    Clean,
}

#[derive(Args, Debug)]
pub struct PrepareArgs {
    /// The repository (default: the current directory).
    pub path: Option<PathBuf>,
    /// The image to start from, present locally (e.g. python:3.12-slim, node:20, eclipse-temurin:17).
    #[arg(long, default_value = "debian:bookworm-slim")]
    pub base_image: String,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SandboxChoice {
    Auto,
    Docker,
    Local,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Which sandbox: docker when the engine answers and an image is ready, else local.
    #[arg(long, value_enum, default_value = "auto")]
    pub sandbox: SandboxChoice,
    /// The repository (default: the current directory).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Docker image (default: the one `sandbox prepare` recorded for the repository).
    #[arg(long)]
    pub image: Option<String>,
    /// Seconds before the command's whole process tree is killed.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Memory limit in MiB.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(16..=1_048_576))]
    pub memory_mb: u64,
    /// Disk limit in MiB for the container's writable layer (Docker, where the storage
    /// driver supports a quota; the sandbox line says when it does not).
    #[arg(long, default_value_t = 10240, value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    pub disk_mb: u64,
    #[command(flatten)]
    pub env: super::EnvFlags,
    /// Session id for the container label (tests use it to find their container).
    #[arg(long, hide = true)]
    pub session: Option<String>,
    /// The command, after `--`.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

pub fn run(args: SandboxArgs) -> anyhow::Result<()> {
    if matches!(args.command, SandboxCommand::Exec(_)) {
        // Before the runtime's threads exist: Ctrl-C and SIGTERM remove the sandbox.
        crate::sandbox::interrupt::install().map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        match args.command {
            SandboxCommand::Prepare(p) => prepare(p, args.json).await,
            SandboxCommand::Exec(e) => exec(e, args.json).await,
            SandboxCommand::Clean => clean(args.json).await,
        }
    })
}

fn repo_path(p: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let p = match p {
        Some(p) => p,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    if !p.is_dir() {
        bail!("{} is not a directory (hint: pass the repository's path)", p.display());
    }
    p.canonicalize().with_context(|| format!("resolving {}", p.display()))
}

async fn prepare(args: PrepareArgs, json: bool) -> anyhow::Result<()> {
    let repo = repo_path(args.path)?;
    let prepared = image::prepare(&repo, &args.base_image, |step| {
        if !json {
            eprintln!("running ({}): {}", step.because, step.command);
        }
    })
    .await
    .context("sandbox prepare")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&prepared)?);
    } else if prepared.reused {
        println!("{} is up to date (manifests unchanged); nothing ran", prepared.image);
    } else {
        for s in &prepared.steps {
            println!("ran ({}) in {:.1}s: {}", s.step.because, s.duration_ms as f64 / 1000.0, s.step.command);
        }
        if prepared.steps.is_empty() {
            println!("no install steps: the manifests call for none");
        }
        println!("built {} from {}", prepared.image, prepared.base_image);
    }
    Ok(())
}

async fn exec(args: ExecArgs, json: bool) -> anyhow::Result<()> {
    let repo = repo_path(args.repo)?;
    let choice = match args.sandbox {
        SandboxChoice::Auto => Choice::Auto,
        SandboxChoice::Docker => Choice::Docker,
        SandboxChoice::Local => Choice::Local,
    };
    let image = args.image.or_else(|| image::recorded_image(&repo)).unwrap_or_else(|| "reproagent-env:none".into());
    let environment = args.env.resolve(&repo)?;
    let mut config = SandboxConfig::new(&repo, image).with_env(Some(environment), &args.env.options());
    config.limits.memory_bytes = args.memory_mb << 20;
    config.limits.disk_bytes = args.disk_mb << 20;
    if let Some(s) = args.session {
        config.session = s;
    }
    // Refuse before anything starts, with the reason.
    if let Err(r) = policy::check_argv(&args.cmd, args.env.workdir.as_deref().unwrap_or(docker::WORKDIR)) {
        bail!(
            "refused: {} (hint: rule `{}`; the sandbox runs tests offline inside the repository copy)",
            r.reason,
            r.rule
        );
    }
    let opened = sandbox::open(choice, config).await.context("opening the sandbox")?;
    eprintln!("sandbox: {}", opened.reason);
    let sb = opened.sandbox;
    let req = ExecRequest::new(args.cmd.clone()).timeout(Duration::from_secs(args.timeout));
    // Ctrl-C and SIGTERM: the interrupt handler kills the command, removes the sandbox
    // (container or copy, both registered) and exits 130 / 143.
    let result = sb.exec(&req).await.map_err(anyhow::Error::from);
    // A command that died under the signal handler: let the handler finish and exit.
    crate::sandbox::interrupt::wait_if_interrupted();
    // Cleanup on every other path: success, error, timeout.
    let closed = sb.close().await;
    drop(sb);
    let out = result?;
    closed.context("removing the sandbox")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", out.stdout);
        eprint!("{}", out.stderr);
        if out.truncated {
            eprintln!(
                "(output truncated: {} bytes of stdout, {} of stderr in all)",
                out.stdout_bytes, out.stderr_bytes
            );
        }
        if out.timed_out {
            eprintln!("timed out after {}s; the process tree was killed", args.timeout);
        }
        if out.memory_exceeded {
            eprintln!("the memory limit ({} MiB) was hit", args.memory_mb);
        }
    }
    if !out.success() {
        bail!("the command exited with {}", out.exit_code.map_or("no code".into(), |c| c.to_string()));
    }
    Ok(())
}

async fn clean(json: bool) -> anyhow::Result<()> {
    // Local copies whose owner is gone (a killed run), and what still runs in them.
    let (local, errors) = sandbox::owner::clean_local(&std::env::temp_dir());
    let docker = match docker::connect().await {
        Ok(d) => Ok(docker::clean(&d).await.context("removing sandbox containers")?),
        Err(e) => Err(e),
    };
    if json {
        let containers = docker.as_ref().ok().cloned().unwrap_or_default();
        let docker_error = docker.as_ref().err().map(|e| e.to_string());
        println!(
            "{}",
            serde_json::json!({ "removed": containers, "local": local, "errors": errors, "docker_error": docker_error })
        );
    } else {
        match &docker {
            Ok(removed) if removed.is_empty() => {
                println!("no sandbox containers left behind (those of live runs are kept)")
            }
            Ok(removed) => removed.iter().for_each(|r| println!("removed {r}")),
            Err(e) => println!("docker: not reachable ({e}); only local copies cleaned"),
        }
        if local.is_empty() {
            println!("no local sandbox copies left behind (those of live runs are kept)");
        }
        for l in &local {
            println!("removed {} (killed {} process(es) still running in it)", l.dir.display(), l.killed);
        }
        for e in &errors {
            eprintln!("{e}");
        }
    }
    Ok(())
}
