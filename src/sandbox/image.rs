//! `sandbox prepare`: an environment image for a repository, the base image plus the
//! install steps its manifests call for, tagged by a hash of the base and the manifests
//! so it is reused until they change.
//!
//! Steps: Python `pip install -e .` (pyproject.toml/setup.py) and `pip install -r` for
//! requirements files; JavaScript/TypeScript `npm ci` when a lockfile is there; Java:
//! the main sources compiled with the jars the repository carries (`lib/`,
//! `target/dependency/`), offline. Installing reaches the package registries, so a
//! prepare whose steps install anything runs with the default bridge network; a prepare
//! with only offline steps, and every test run, has none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CommitContainerOptions, CreateContainerOptions, RemoveContainerOptions};
use serde::{Deserialize, Serialize};

use super::{docker, ExecRequest, Result, Sandbox, SandboxConfig, SandboxError, CONTAINER_LABEL};

/// Repository name of prepared images; the tag is the manifest hash.
pub const ENV_REPO: &str = "reproagent-env";
/// Where `prepare` records the image it built, inside the repository's state dir.
pub const IMAGE_RECORD: &str = ".reproagent/sandbox-image";

/// One install step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The manifest that calls for it.
    pub because: String,
    pub command: String,
    /// Whether the step needs the network (package registries).
    pub network: bool,
}

/// What `prepare` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepared {
    pub image: String,
    pub base_image: String,
    pub reused: bool,
    pub steps: Vec<StepRun>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRun {
    pub step: Step,
    pub exit_code: Option<i64>,
    pub duration_ms: u64,
    /// The last lines of its output.
    pub tail: String,
}

const MANIFESTS: &[&str] = &[
    "Dockerfile",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
];

/// The install steps a repository's manifests call for, in order.
pub fn plan(repo: &Path) -> Vec<Step> {
    let has = |p: &str| repo.join(p).is_file();
    let mut steps = Vec::new();
    let pip = "PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip install";
    for req in ["requirements.txt", "requirements-dev.txt", "requirements-test.txt"] {
        if has(req) {
            steps.push(Step { because: req.into(), command: format!("{pip} -r {req}"), network: true });
        }
    }
    if has("pyproject.toml") || has("setup.py") {
        let because = if has("pyproject.toml") { "pyproject.toml" } else { "setup.py" };
        steps.push(Step { because: because.into(), command: format!("{pip} -e ."), network: true });
    }
    if has("package.json") && (has("package-lock.json") || has("npm-shrinkwrap.json")) {
        steps.push(Step {
            because: "package-lock.json".into(),
            command: "npm ci --no-audit --no-fund".into(),
            network: true,
        });
    }
    if repo.join("src/main/java").is_dir() {
        let because = if has("pom.xml") {
            "pom.xml"
        } else if has("build.gradle") {
            "build.gradle"
        } else {
            "src/main/java"
        };
        steps.push(Step {
            because: because.into(),
            command: "mkdir -p target/classes && find src/main/java -name '*.java' > target/sources.txt && \
                      javac -nowarn -d target/classes -cp \"$(ls lib/*.jar target/dependency/*.jar 2>/dev/null | tr '\\n' ':')\" @target/sources.txt"
                .into(),
            network: false,
        });
    }
    steps
}

/// The tag for a repository on a base image: a hash of the base's id and the manifests.
pub fn tag_for(repo: &Path, base_image_id: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(base_image_id.as_bytes());
    for m in MANIFESTS {
        if let Some(bytes) = crate::confine::read_bytes(repo, m) {
            h.update(m.as_bytes());
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
    }
    format!("{ENV_REPO}:{}", &h.finalize().to_hex()[..16])
}

/// The image `prepare` last built for this repository, if it is recorded.
pub fn recorded_image(repo: &Path) -> Option<String> {
    std::fs::read_to_string(repo.join(IMAGE_RECORD)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Build (or reuse) the environment image. `on_step` is told each step before it runs.
/// A repository with a `Dockerfile` is built from it (its `FROM` must be present
/// locally: nothing is pulled), and `base_image` is not used.
pub async fn prepare(repo: &Path, base_image: &str, mut on_step: impl FnMut(&Step)) -> Result<Prepared> {
    let d = docker::connect().await?;
    if repo.join("Dockerfile").is_file() {
        return build_dockerfile(&d, repo, &mut on_step).await;
    }
    let base = d.inspect_image(base_image).await.map_err(|_| SandboxError::ImageMissing {
        image: base_image.to_string(),
        hint: format!("it is not present locally: `docker pull {base_image}` first, or pass --base-image"),
    })?;
    let tag = tag_for(repo, base.id.as_deref().unwrap_or(base_image));
    let record = |tag: &str| -> Result<()> {
        let p: PathBuf = repo.join(IMAGE_RECORD);
        crate::store::ensure_state_dir(repo).map_err(|e| SandboxError::io("creating .reproagent/", e))?;
        std::fs::write(&p, format!("{tag}\n")).map_err(|e| SandboxError::io("recording the image", e))
    };
    if d.inspect_image(&tag).await.is_ok() {
        record(&tag)?;
        return Ok(Prepared { image: tag, base_image: base_image.into(), reused: true, steps: Vec::new() });
    }
    let steps = plan(repo);
    let network = steps.iter().any(|s| s.network);
    // Open a sandbox on the base image, with the network only if a step installs.
    let mut config = SandboxConfig::new(repo, base_image);
    config.limits.memory_bytes = 4 << 30;
    config.limits.pids = 4096;
    let sb = if network { open_networked(&d, config).await? } else { docker::DockerSandbox::open(config).await? };
    let mut runs = Vec::new();
    for step in steps {
        on_step(&step);
        let req = ExecRequest::shell(&step.command).timeout(Duration::from_secs(30 * 60));
        let out = sb.exec(&req).await?;
        let text = format!("{}\n{}", out.stdout, out.stderr);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        let ok = out.success();
        runs.push(StepRun {
            step: step.clone(),
            exit_code: out.exit_code,
            duration_ms: out.duration_ms,
            tail: tail.clone(),
        });
        if !ok {
            sb.close().await?;
            return Err(SandboxError::Other(format!("`{}` failed (exit {:?}):\n{tail}", step.command, out.exit_code)));
        }
    }
    let (repo_name, tag_name) = tag.split_once(':').unwrap_or((ENV_REPO, "latest"));
    let opts = CommitContainerOptions {
        container: Some(sb.id().to_string()),
        repo: Some(repo_name.into()),
        tag: Some(tag_name.into()),
        comment: Some("reproagent sandbox prepare".into()),
        pause: true,
        ..Default::default()
    };
    let labels = HashMap::from([("reproagent.base".to_string(), base_image.to_string())]);
    let commit = d
        .commit_container(
            opts,
            ContainerConfig { labels: Some(labels), working_dir: Some(docker::WORKDIR.into()), ..Default::default() },
        )
        .await;
    sb.close().await?;
    commit?;
    record(&tag)?;
    Ok(Prepared { image: tag, base_image: base_image.into(), reused: false, steps: runs })
}

/// A sandbox like [`docker::DockerSandbox::open`] but on the default bridge network, for
/// install steps only.
async fn open_networked(d: &bollard::Docker, config: SandboxConfig) -> Result<docker::DockerSandbox> {
    // Create the container by hand with a network, then adopt it: same labels, same cleanup.
    let labels = HashMap::from([
        (CONTAINER_LABEL.to_string(), "1".to_string()),
        (docker::SESSION_LABEL.to_string(), config.session.clone()),
    ]);
    let memory = i64::try_from(config.limits.memory_bytes).unwrap_or(i64::MAX);
    let body = ContainerCreateBody {
        image: Some(config.image.clone()),
        cmd: Some(vec!["sh".into(), "-c".into(), "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done".into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            memory: Some(memory),
            pids_limit: Some(i64::from(config.limits.pids)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts =
        CreateContainerOptions { name: Some(format!("reproagent-prepare-{}", config.session)), ..Default::default() };
    crate::sandbox::interrupt::creating_container();
    let id = d.create_container(Some(opts), body).await?.id;
    match docker::DockerSandbox::adopt(d.clone(), id.clone(), &config).await {
        Ok(sb) => Ok(sb),
        Err(e) => {
            let _ = d.remove_container(&id, Some(RemoveContainerOptions { force: true, ..Default::default() })).await;
            Err(e)
        }
    }
}

/// `prepare` for a repository with a `Dockerfile`: `docker build` of the repository with
/// it, tagged by a hash of the Dockerfile and the manifests, reused until they change.
/// The base image is never pulled; the build has the default network (its `RUN` steps
/// may install packages), every test run in the image has none.
async fn build_dockerfile(d: &bollard::Docker, repo: &Path, on_step: &mut impl FnMut(&Step)) -> Result<Prepared> {
    use futures_util::StreamExt;
    // Through the confinement rule: a Dockerfile symlinked out of the repository is refused.
    let dockerfile = crate::confine::read_bytes(repo, "Dockerfile").ok_or_else(|| {
        SandboxError::Other("the Dockerfile is missing, not a regular file, or a symlink out of the repository".into())
    })?;
    let text = String::from_utf8_lossy(&dockerfile).into_owned();
    let base = text
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("FROM ").or_else(|| l.strip_prefix("from ")))
        .and_then(|rest| rest.split_whitespace().find(|w| !w.starts_with("--")))
        .unwrap_or("")
        .to_string();
    let mut h = blake3::Hasher::new();
    h.update(b"Dockerfile\0");
    h.update(&dockerfile);
    let tag = tag_for(repo, &h.finalize().to_hex());
    let record = |tag: &str| -> Result<()> {
        let p: PathBuf = repo.join(IMAGE_RECORD);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| SandboxError::io("creating .reproagent/", e))?;
        }
        std::fs::write(&p, format!("{tag}\n")).map_err(|e| SandboxError::io("recording the image", e))
    };
    if d.inspect_image(&tag).await.is_ok() {
        record(&tag)?;
        return Ok(Prepared { image: tag, base_image: base, reused: true, steps: Vec::new() });
    }
    if !base.is_empty() && !base.contains('$') && base != "scratch" && d.inspect_image(&base).await.is_err() {
        return Err(SandboxError::ImageMissing {
            image: base.clone(),
            hint: format!("the Dockerfile starts FROM it and prepare never pulls: `docker pull {base}` first"),
        });
    }
    let step =
        Step { because: "Dockerfile".into(), command: format!("docker build -t {tag} (FROM {base})"), network: true };
    on_step(&step);
    let started = std::time::Instant::now();
    let context = {
        let repo = repo.to_path_buf();
        tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let mut b = tar::Builder::new(Vec::new());
            b.follow_symlinks(false);
            let io = |e| SandboxError::io("archiving the build context", e);
            super::copy::append_to_tar(&mut b, &repo, Path::new(""), &[])?;
            b.into_inner().map_err(io)
        })
        .await
        .map_err(|e| SandboxError::Other(format!("archiving the build context: {e}")))??
    };
    let (repo_name, tag_name) = tag.split_once(':').unwrap_or((ENV_REPO, "latest"));
    let opts = bollard::query_parameters::BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(format!("{repo_name}:{tag_name}")),
        rm: true,
        forcerm: true,
        labels: Some(HashMap::from([("reproagent.base".to_string(), base.clone())])),
        ..Default::default()
    };
    let mut stream = d.build_image(opts, None, Some(bollard::body_full(context.into())));
    let mut log = String::new();
    let mut failure = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(s) = info.stream {
                    log.push_str(&s);
                }
                if let Some(e) = info.error_detail.and_then(|e| e.message).or(info.error) {
                    failure = Some(e);
                }
            }
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    if let Some(e) = failure {
        return Err(SandboxError::Other(format!("building the Dockerfile failed: {e}\n{tail}")));
    }
    record(&tag)?;
    let run = StepRun { step, exit_code: Some(0), duration_ms: started.elapsed().as_millis() as u64, tail };
    Ok(Prepared { image: tag, base_image: base, reused: false, steps: vec![run] })
}
