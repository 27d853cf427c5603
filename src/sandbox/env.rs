//! The environment a test runs in: which Python interpreter (and virtualenv), which
//! Node, which Java, resolved once per run and recorded with the reason it was chosen.
//!
//! Python, the first that gives one:
//! 1. `--python PATH` (an interpreter or a virtualenv directory), else `[sandbox] python`
//!    in `reproagent.toml` (relative to the repository root);
//! 2. `VIRTUAL_ENV` (an activated virtualenv);
//! 3. a virtualenv in the repository: `.venv`, `venv`, `env`, `.tox/<env>` (a directory
//!    with `pyvenv.cfg`);
//! 4. the environments of poetry, pipenv, uv, hatch and conda, found by reading their
//!    configuration and data directories only (nothing is run, nothing reaches the
//!    network): poetry's `<name>-<hash>-py3.X` under its virtualenvs dir, pipenv's
//!    `<dir>-<hash>` under `WORKON_HOME` (the one whose `.project` names the
//!    repository), uv's `UV_PROJECT_ENVIRONMENT`, hatch's `env/virtual/<name>/<id>/`,
//!    conda's `CONDA_PREFIX` or the env `environment.yml` names under conda's envs dirs;
//! 5. the system's `python3`.
//!
//! [`lookup_python`], [`lookup_node`] and [`lookup_java`] are pure over an environment
//! map and the file tree; [`resolve`] reads the process environment and the toml, then
//! [`probe`]s the chosen interpreter (its version, whether `pytest` imports).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Where the local sandbox looks for the system's interpreter and tools.
pub const SYSTEM_DIRS: &[&str] = &["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// What the user said about the environment (flags, a bench case's `tests`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvOptions {
    /// `--python`: an interpreter or a virtualenv directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// Docker: where the image keeps the repository (`--workdir`); our copy is uploaded over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Docker: a shell line run before every command (`--activate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activate: Option<String>,
}

/// Why the environment could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// `--python` (or the toml's `python`, or a case's `tests.python`) is not usable.
    #[error("{origin} {path}: {problem}")]
    BadPython { origin: String, path: String, problem: String },
    /// `reproagent.toml` cannot be read or its `[sandbox]` table is wrong.
    #[error("{0}")]
    Config(String),
}

impl EnvError {
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            EnvError::BadPython { .. } => {
                "give an interpreter (e.g. .venv/bin/python) or a virtualenv directory (one with pyvenv.cfg)"
            }
            EnvError::Config(_) => "reproagent.toml's [sandbox] table takes `python = \"PATH\"`",
        })
    }
}

/// Which rule chose the Python environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PythonSource {
    Flag,
    Config,
    Case,
    VirtualEnv,
    RepoVenv,
    Poetry,
    Pipenv,
    Uv,
    Hatch,
    Conda,
    System,
}

/// What kind of Python installation it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PythonKind {
    /// A virtualenv (`pyvenv.cfg`): `VIRTUAL_ENV` is set, its `bin/` leads `PATH`.
    Venv,
    /// A conda environment (`conda-meta/`): `CONDA_PREFIX` is set, its `bin/` leads `PATH`.
    Conda,
    /// A bare interpreter: a `python3` shim for it leads `PATH`.
    Interpreter,
    /// The system's `python3`.
    System,
}

/// The Python a test runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonEnv {
    pub source: PythonSource,
    pub kind: PythonKind,
    /// The interpreter (after the probe: `sys.executable`).
    pub interpreter: PathBuf,
    /// The virtualenv or conda environment's directory.
    pub prefix: Option<PathBuf>,
    /// Why this one.
    pub reason: String,
    /// What was looked at and passed over, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<String>,
    /// Filled by [`probe`].
    pub version: Option<String>,
    /// Whether `pytest` imports in it; filled by [`probe`].
    pub pytest: Option<bool>,
}

impl PythonEnv {
    /// The directory whose executables lead `PATH` (the environment's `bin/`), if any.
    pub fn bin_dir(&self) -> Option<PathBuf> {
        match self.kind {
            PythonKind::Venv | PythonKind::Conda => self.prefix.as_ref().map(|p| p.join("bin")),
            PythonKind::Interpreter => self.interpreter.parent().map(Path::to_path_buf),
            PythonKind::System => None,
        }
    }

    /// The command that installs pytest into this environment.
    pub fn pytest_fix(&self) -> String {
        let py = match (self.kind, &self.prefix) {
            (PythonKind::Venv | PythonKind::Conda, Some(p)) => p.join("bin").join("python"),
            _ => self.interpreter.clone(),
        };
        format!("{} -m pip install pytest", py.display())
    }

    /// One line: what, which version, why.
    pub fn describe(&self) -> String {
        let what = match (&self.prefix, self.kind) {
            (Some(p), PythonKind::Venv) => format!("virtualenv {}", p.display()),
            (Some(p), PythonKind::Conda) => format!("conda env {}", p.display()),
            _ => self.interpreter.display().to_string(),
        };
        let version = self.version.as_deref().map(|v| format!(" (Python {v})")).unwrap_or_default();
        let pytest = match self.pytest {
            Some(false) => {
                format!("; it has no pytest: Python tests fall back to unittest (fix: `{}`)", self.pytest_fix())
            }
            _ => String::new(),
        };
        format!("{what}{version}: {}{pytest}", self.reason)
    }
}

/// The Node a test runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEnv {
    /// The directory of the user's `node`, put ahead of the system's (None: the system's).
    pub bin_dir: Option<PathBuf>,
    /// Whether the repository has `node_modules/.bin` (it leads `PATH`, in the copy).
    pub node_modules_bin: bool,
    pub reason: String,
}

/// The Java a test runs with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JavaEnv {
    /// `JAVA_HOME`, when it is set and has `bin/java`: its `bin/` leads `PATH`.
    pub java_home: Option<PathBuf>,
    /// The project's build tool, when one was found, and why it is not used.
    pub build_tool: Option<String>,
    pub reason: String,
}

/// The whole environment, resolved once per run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub python: PythonEnv,
    pub node: NodeEnv,
    pub java: JavaEnv,
}

impl Environment {
    /// The lines `reproduce` and `sandbox exec` print.
    pub fn summary(&self) -> String {
        format!(
            "environment: python {}\nenvironment: node {}\nenvironment: java {}",
            self.python.describe(),
            self.node.reason,
            self.java.reason
        )
    }
}

/// What the lookups read: the repository, an environment map, and what the user said.
pub struct Inputs<'a> {
    /// The repository root, canonical (hashes of poetry, pipenv and hatch are over it).
    pub repo: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    /// An explicit interpreter or venv, and where it came from (`--python`, ...).
    pub explicit: Option<(&'a Path, PythonSource)>,
}

impl Inputs<'_> {
    fn var(&self, k: &str) -> Option<&str> {
        self.env.get(k).map(String::as_str).filter(|v| !v.is_empty())
    }
    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }
    /// `$XDG_<KIND>_HOME`, else `~/<default>`.
    fn xdg(&self, var: &str, default: &str) -> Option<PathBuf> {
        self.var(var).map(PathBuf::from).or_else(|| self.home().map(|h| h.join(default)))
    }
}

fn is_venv(dir: &Path) -> bool {
    dir.join("pyvenv.cfg").is_file()
}

fn is_conda(dir: &Path) -> bool {
    dir.join("conda-meta").is_dir()
}

/// The interpreter of an environment directory: `bin/python`, else `bin/python3`.
fn env_python(dir: &Path) -> Option<PathBuf> {
    ["python", "python3"].iter().map(|n| dir.join("bin").join(n)).find(|p| p.exists())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// An environment directory (venv or conda) as a [`PythonEnv`], if it is one.
fn from_env_dir(dir: &Path, source: PythonSource, reason: String) -> Option<PythonEnv> {
    let kind = if is_venv(dir) {
        PythonKind::Venv
    } else if is_conda(dir) {
        PythonKind::Conda
    } else {
        return None;
    };
    let interpreter = env_python(dir)?;
    Some(PythonEnv {
        source,
        kind,
        interpreter,
        prefix: Some(dir.to_path_buf()),
        reason,
        passed_over: Vec::new(),
        version: None,
        pytest: None,
    })
}

/// An explicit `PATH`: a venv or conda directory, a directory with `bin/python`, an
/// interpreter (inside a venv or not), or a bare name looked up on the user's `PATH`.
pub fn explicit_python(
    path: &Path,
    source: PythonSource,
    origin: &str,
    env: &BTreeMap<String, String>,
) -> Result<PythonEnv, EnvError> {
    let bad = |problem: &str| EnvError::BadPython {
        origin: origin.to_string(),
        path: path.display().to_string(),
        problem: problem.to_string(),
    };
    let reason = format!("{origin} {}", path.display());
    let path = if path.components().count() == 1 && !path.is_absolute() && !path.exists() {
        // A bare name (`python3.11`): the user's PATH.
        let found = env
            .get("PATH")
            .map(|p| p.split(':').map(|d| Path::new(d).join(path)).find(|c| is_executable(c)))
            .unwrap_or(None);
        found.ok_or_else(|| bad("not found on PATH"))?
    } else {
        path.to_path_buf()
    };
    if !path.exists() {
        return Err(bad("no such file or directory"));
    }
    if path.is_dir() {
        if let Some(e) = from_env_dir(&path, source, reason.clone()) {
            return Ok(e);
        }
        if is_venv(&path) || is_conda(&path) {
            return Err(bad("an environment directory without bin/python"));
        }
        return match env_python(&path) {
            Some(interpreter) => Ok(PythonEnv {
                source,
                kind: PythonKind::Interpreter,
                interpreter,
                prefix: None,
                reason,
                passed_over: Vec::new(),
                version: None,
                pytest: None,
            }),
            None => Err(bad("a directory that is neither a virtualenv (pyvenv.cfg) nor has bin/python")),
        };
    }
    if !is_executable(&path) {
        return Err(bad("not an executable file"));
    }
    // An interpreter inside an environment stands for the environment.
    if let Some(dir) = path.parent().filter(|b| b.file_name().is_some_and(|n| n == "bin")).and_then(Path::parent) {
        if is_venv(dir) || is_conda(dir) {
            let kind = if is_venv(dir) { PythonKind::Venv } else { PythonKind::Conda };
            return Ok(PythonEnv {
                source,
                kind,
                interpreter: path.clone(),
                prefix: Some(dir.to_path_buf()),
                reason,
                passed_over: Vec::new(),
                version: None,
                pytest: None,
            });
        }
    }
    Ok(PythonEnv {
        source,
        kind: PythonKind::Interpreter,
        interpreter: path,
        prefix: None,
        reason,
        passed_over: Vec::new(),
        version: None,
        pytest: None,
    })
}

/// URL-safe base64 of a SHA-256, cut to 8 characters: the project hash poetry, pipenv
/// (over 6 bytes) and hatch put in their environment names.
fn hash8(data: &[u8], bytes: usize) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data);
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    let d = &digest[..bytes.min(digest.len())];
    for chunk in d.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out.chars().take(8).collect()
}

/// Subdirectories of `dir`, sorted by name.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// A file outside the repository (a tool's configuration under the home directory), as
/// text; empty when missing, unreadable or not a regular file (a FIFO would block). The
/// checked reader with `/` for the root: any path, but by type and non-blocking.
fn read(p: &Path) -> String {
    crate::confine::read_regular(Path::new("/"), p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// A file of the repository, read through the checked reader (never a symlink out of it,
/// never a FIFO); empty when refused or missing.
fn read_repo(repo: &Path, rel: &str) -> String {
    crate::confine::read_text(repo, rel).unwrap_or_default()
}

/// `(major, minor)` of a `py3.12` suffix, for picking the newest.
fn py_version(name: &str) -> (u32, u32) {
    let v = name.rsplit("-py").next().unwrap_or("");
    let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// The Python environment, by the rules in the module's doc. Pure over `i.env` and the
/// file tree; the interpreter is not run (see [`probe`]).
pub fn lookup_python(i: &Inputs) -> Result<PythonEnv, EnvError> {
    if let Some((path, source)) = i.explicit {
        let origin = match source {
            PythonSource::Flag => "--python",
            PythonSource::Config => "reproagent.toml [sandbox] python =",
            PythonSource::Case => "the case's tests.python",
            _ => "python",
        };
        return explicit_python(path, source, origin, i.env);
    }
    let mut passed_over = Vec::new();
    let found = lookup_found(i, &mut passed_over);
    let mut env = found.unwrap_or_else(|| {
        let interpreter = SYSTEM_DIRS
            .iter()
            .map(|d| Path::new(d).join("python3"))
            .find(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("/usr/bin/python3"));
        PythonEnv {
            source: PythonSource::System,
            kind: PythonKind::System,
            interpreter,
            prefix: None,
            reason: "the system's: no --python, no [sandbox] python, no VIRTUAL_ENV, no virtualenv in the repository, no poetry/pipenv/uv/hatch/conda environment for it".into(),
            passed_over: Vec::new(),
            version: None,
            pytest: None,
        }
    });
    env.passed_over = passed_over;
    Ok(env)
}

fn lookup_found(i: &Inputs, passed_over: &mut Vec<String>) -> Option<PythonEnv> {
    // VIRTUAL_ENV: an activated virtualenv.
    if let Some(v) = i.var("VIRTUAL_ENV") {
        match from_env_dir(Path::new(v), PythonSource::VirtualEnv, format!("VIRTUAL_ENV={v} (an activated virtualenv)"))
        {
            Some(e) => return Some(e),
            None => passed_over.push(format!("VIRTUAL_ENV={v}: not a virtualenv with bin/python")),
        }
    }
    // A virtualenv in the repository.
    for name in [".venv", "venv", "env"] {
        let dir = i.repo.join(name);
        if is_venv(&dir) {
            let by = if read_repo(i.repo, &format!("{name}/pyvenv.cfg"))
                .lines()
                .any(|l| l.trim_start().starts_with("uv "))
            {
                " (made by uv)"
            } else {
                ""
            };
            match from_env_dir(&dir, PythonSource::RepoVenv, format!("the repository's virtualenv {name}/{by}")) {
                Some(e) => return Some(e),
                None => passed_over.push(format!("{name}/: pyvenv.cfg but no bin/python")),
            }
        }
    }
    let tox: Vec<PathBuf> = subdirs(&i.repo.join(".tox")).into_iter().filter(|d| is_venv(d)).collect();
    if !tox.is_empty() {
        // The newest `py3X` env, else the first by name.
        let name = |d: &PathBuf| d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let pick = tox
            .iter()
            .filter(|d| name(d).starts_with("py3"))
            .max_by_key(|d| name(d)[3..].parse::<u32>().unwrap_or(0))
            .or_else(|| tox.first())
            .cloned();
        if let Some(d) = pick {
            let others: Vec<String> = tox.iter().filter(|x| **x != d).map(name).collect();
            let also = if others.is_empty() { String::new() } else { format!("; also there: {}", others.join(", ")) };
            if let Some(e) =
                from_env_dir(&d, PythonSource::RepoVenv, format!("the repository's tox env .tox/{}{also}", name(&d)))
            {
                return Some(e);
            }
        }
    }
    let pyproject = read_repo(i.repo, "pyproject.toml");
    // poetry
    if pyproject.contains("[tool.poetry") || i.repo.join("poetry.lock").is_file() {
        match poetry(i) {
            Ok(e) => return Some(e),
            Err(why) => passed_over.push(format!("poetry: {why}")),
        }
    }
    // pipenv
    if i.repo.join("Pipfile").is_file() {
        match pipenv(i) {
            Ok(e) => return Some(e),
            Err(why) => passed_over.push(format!("pipenv: {why}")),
        }
    }
    // uv: `.venv` was checked above; UV_PROJECT_ENVIRONMENT moves it.
    if let Some(v) = i.var("UV_PROJECT_ENVIRONMENT") {
        let dir = if Path::new(v).is_absolute() { PathBuf::from(v) } else { i.repo.join(v) };
        match from_env_dir(&dir, PythonSource::Uv, format!("uv's project environment UV_PROJECT_ENVIRONMENT={v}")) {
            Some(e) => return Some(e),
            None => passed_over.push(format!("uv: UV_PROJECT_ENVIRONMENT={v} is not a virtualenv")),
        }
    }
    // hatch
    if pyproject.contains("[tool.hatch") || i.repo.join("hatch.toml").is_file() {
        match hatch(i) {
            Ok(e) => return Some(e),
            Err(why) => passed_over.push(format!("hatch: {why}")),
        }
    }
    // conda
    if let Some(p) = i.var("CONDA_PREFIX") {
        match from_env_dir(
            Path::new(p),
            PythonSource::Conda,
            format!("CONDA_PREFIX={p} (an activated conda environment)"),
        ) {
            Some(e) => return Some(e),
            None => passed_over.push(format!("CONDA_PREFIX={p}: not an environment with bin/python")),
        }
    }
    if let Some(name) = conda_env_name(i.repo) {
        match conda_named(i, &name) {
            Some(e) => return Some(e),
            None => {
                passed_over.push(format!("conda: environment.yml names {name:?}, not found under conda's envs dirs"))
            }
        }
    }
    None
}

/// poetry: `<name>-<hash>-py<X.Y>` under its virtualenvs dir; the hash is over the
/// project's real path, so the directory's name is matched on it.
fn poetry(i: &Inputs) -> Result<PythonEnv, String> {
    let dir = if let Some(p) = i.var("POETRY_VIRTUALENVS_PATH") {
        PathBuf::from(p)
    } else {
        let config_dir = i
            .var("POETRY_CONFIG_DIR")
            .map(PathBuf::from)
            .or_else(|| i.xdg("XDG_CONFIG_HOME", ".config").map(|c| c.join("pypoetry")));
        let cache = i
            .var("POETRY_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| i.xdg("XDG_CACHE_HOME", ".cache").map(|c| c.join("pypoetry")));
        let configured = config_dir.and_then(|c| {
            let v: toml::Value = toml::from_str(&read(&c.join("config.toml"))).ok()?;
            v.get("virtualenvs")?.get("path")?.as_str().map(str::to_string)
        });
        match (configured, cache) {
            (Some(p), cache) => {
                PathBuf::from(p.replace("{cache-dir}", &cache.map(|c| c.display().to_string()).unwrap_or_default()))
            }
            (None, Some(c)) => c.join("virtualenvs"),
            (None, None) => return Err("no HOME to find its virtualenvs in".into()),
        }
    };
    let hash = hash8(i.repo.to_string_lossy().as_bytes(), 32);
    let mine: Vec<PathBuf> = subdirs(&dir)
        .into_iter()
        .filter(|d| {
            d.file_name().map(|n| n.to_string_lossy().into_owned()).is_some_and(|n| n.contains(&format!("-{hash}-py")))
        })
        .filter(|d| is_venv(d))
        .collect();
    if mine.is_empty() {
        return Err(format!("no virtualenv for this project (hash {hash}) in {}", dir.display()));
    }
    // `poetry env use` records the chosen minor version in envs.toml.
    let chosen_minor = toml::from_str::<toml::Value>(&read(&dir.join("envs.toml"))).ok().and_then(|v| {
        v.as_table()?
            .iter()
            .find(|(k, _)| k.ends_with(&format!("-{hash}")))?
            .1
            .get("minor")?
            .as_str()
            .map(str::to_string)
    });
    let name = |d: &PathBuf| d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let pick = chosen_minor
        .and_then(|m| mine.iter().find(|d| name(d).ends_with(&format!("-py{m}"))).cloned())
        .or_else(|| mine.iter().max_by_key(|d| py_version(&name(d))).cloned())
        .ok_or("no virtualenv")?;
    from_env_dir(&pick, PythonSource::Poetry, format!("poetry's virtualenv for this project ({})", pick.display()))
        .ok_or_else(|| "its virtualenv has no bin/python".into())
}

/// pipenv: under `WORKON_HOME` (default `~/.local/share/virtualenvs`), the directory
/// whose `.project` names the repository, or `<dir name>-<hash of the Pipfile's path>`.
fn pipenv(i: &Inputs) -> Result<PythonEnv, String> {
    let home = i
        .var("WORKON_HOME")
        .map(PathBuf::from)
        .or_else(|| i.xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("virtualenvs")))
        .ok_or("no HOME")?;
    let repo = i.repo.to_string_lossy();
    let base: String = i
        .repo
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .map(|c| if " &$`!*@\"()[]\\\r\n\t".contains(c) { '_' } else { c })
                .take(42)
                .collect()
        })
        .unwrap_or_default();
    let expected = format!("{base}-{}", hash8(format!("{repo}/Pipfile").as_bytes(), 6));
    let pick = subdirs(&home)
        .into_iter()
        .filter(|d| is_venv(d))
        .find(|d| {
            read(&d.join(".project")).trim() == repo || d.file_name().is_some_and(|n| n.to_string_lossy() == expected)
        })
        .ok_or_else(|| format!("no virtualenv for this project in {} (looked for {expected})", home.display()))?;
    from_env_dir(&pick, PythonSource::Pipenv, format!("pipenv's virtualenv for this project ({})", pick.display()))
        .ok_or_else(|| "its virtualenv has no bin/python".into())
}

/// hatch: `<data dir>/env/virtual/<project>/<id>/<env>`, `<id>` a hash of the project's
/// path; the default environment is named after the project.
fn hatch(i: &Inputs) -> Result<PythonEnv, String> {
    let data = i
        .var("HATCH_DATA_DIR")
        .map(PathBuf::from)
        .or_else(|| i.xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("hatch")))
        .ok_or("no HOME")?;
    let id = hash8(i.repo.to_string_lossy().as_bytes(), 32);
    let root = data.join("env").join("virtual");
    for project in subdirs(&root) {
        let envs: Vec<PathBuf> = subdirs(&project.join(&id)).into_iter().filter(|d| is_venv(d)).collect();
        if envs.is_empty() {
            continue;
        }
        let default = project.file_name().map(|n| n.to_os_string());
        let pick = envs.iter().find(|d| d.file_name().map(|n| n.to_os_string()) == default).unwrap_or(&envs[0]).clone();
        return from_env_dir(
            &pick,
            PythonSource::Hatch,
            format!("hatch's environment for this project ({})", pick.display()),
        )
        .ok_or_else(|| "its environment has no bin/python".into());
    }
    Err(format!("no environment for this project (id {id}) under {}", root.display()))
}

/// `name:` of the repository's `environment.yml`.
fn conda_env_name(repo: &Path) -> Option<String> {
    ["environment.yml", "environment.yaml"].iter().find_map(|f| {
        read_repo(repo, f)
            .lines()
            .find_map(|l| l.strip_prefix("name:").map(|n| n.trim().trim_matches(|c| c == '"' || c == '\'').to_string()))
            .filter(|n| !n.is_empty())
    })
}

/// The conda environment called `name`: under `CONDA_ENVS_PATH`/`CONDA_ENVS_DIRS`,
/// `~/.conda/environments.txt`, the root of `CONDA_EXE`, and the usual install places.
fn conda_named(i: &Inputs, name: &str) -> Option<PythonEnv> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CONDA_ENVS_PATH", "CONDA_ENVS_DIRS"] {
        if let Some(v) = i.var(var) {
            dirs.extend(v.split([':', ',']).filter(|s| !s.is_empty()).map(|s| Path::new(s).join(name)));
        }
    }
    let home = i.home();
    if let Some(h) = &home {
        for line in read(&h.join(".conda/environments.txt")).lines() {
            let p = Path::new(line.trim());
            if p.file_name().is_some_and(|n| n == name) {
                dirs.push(p.to_path_buf());
            }
        }
    }
    if let Some(exe) = i.var("CONDA_EXE") {
        if let Some(root) = Path::new(exe).parent().and_then(Path::parent) {
            dirs.push(root.join("envs").join(name));
        }
    }
    if let Some(h) = &home {
        for d in ["miniconda3", "anaconda3", "miniforge3", "mambaforge", "micromamba", ".conda"] {
            dirs.push(h.join(d).join("envs").join(name));
        }
    }
    for d in ["/opt/conda", "/opt/miniconda3", "/opt/anaconda3", "/opt/miniforge3"] {
        dirs.push(Path::new(d).join("envs").join(name));
    }
    dirs.into_iter().find_map(|d| {
        from_env_dir(
            &d,
            PythonSource::Conda,
            format!("the conda environment {name:?} that environment.yml names ({})", d.display()),
        )
    })
}

/// Node: the repository's `node_modules/.bin`, and the directory of the `node` on the
/// user's `PATH`, ahead of the system's.
pub fn lookup_node(i: &Inputs) -> NodeEnv {
    let node_modules_bin = i.repo.join("node_modules/.bin").is_dir();
    let user = i.var("PATH").and_then(|p| {
        p.split(':').filter(|d| !d.is_empty()).map(PathBuf::from).find(|d| is_executable(&d.join("node")))
    });
    let nm = if node_modules_bin { "the repository's node_modules/.bin, then " } else { "" };
    match user {
        Some(d) if !SYSTEM_DIRS.contains(&d.to_string_lossy().as_ref()) => NodeEnv {
            reason: format!("{nm}{}/node (the first node on your PATH)", d.display()),
            bin_dir: Some(d),
            node_modules_bin,
        },
        Some(d) => NodeEnv {
            reason: format!("{nm}the system's ({}/node, also first on your PATH)", d.display()),
            bin_dir: None,
            node_modules_bin,
        },
        None => NodeEnv {
            reason: format!("{nm}the system's, if any (no node on your PATH)"),
            bin_dir: None,
            node_modules_bin,
        },
    }
}

/// Java: `JAVA_HOME/bin` first when set. The project's build tool is recorded, not used:
/// the JUnit runner compiles with `javac` against `lib/` and `target/dependency/` jars.
pub fn lookup_java(i: &Inputs) -> JavaEnv {
    let on_path =
        |tool: &str| i.var("PATH").is_some_and(|p| p.split(':').any(|d| is_executable(&Path::new(d).join(tool))));
    let build_tool = if i.repo.join("pom.xml").is_file() {
        Some(format!(
            "maven (pom.xml; mvn {}): not used, `mvn -o` cannot be kept offline and out of your ~/.m2 from the sandbox; \
             `mvn dependency:copy-dependencies` puts the jars in target/dependency/, where the runner finds them",
            if on_path("mvn") { "on PATH" } else { "not on PATH" }
        ))
    } else if i.repo.join("build.gradle").is_file() || i.repo.join("build.gradle.kts").is_file() {
        let wrapper = i.repo.join("gradlew").is_file();
        Some(format!(
            "gradle ({}): not used, `gradle --offline` needs your ~/.gradle caches, which the sandbox does not share; \
             copy the test runtime classpath's jars into lib/ for the runner to find them",
            if wrapper {
                "gradlew in the repository"
            } else if on_path("gradle") {
                "gradle on PATH"
            } else {
                "no gradle on PATH"
            }
        ))
    } else {
        None
    };
    let tool = build_tool.as_deref().map(|t| format!("; build tool {t}")).unwrap_or_default();
    match i.var("JAVA_HOME").map(PathBuf::from) {
        Some(h) if is_executable(&h.join("bin/java")) => {
            JavaEnv { reason: format!("JAVA_HOME={}{tool}", h.display()), java_home: Some(h), build_tool }
        }
        Some(h) => JavaEnv {
            reason: format!("the system's (JAVA_HOME={} has no bin/java){tool}", h.display()),
            java_home: None,
            build_tool,
        },
        None => JavaEnv { reason: format!("the system's (no JAVA_HOME){tool}"), java_home: None, build_tool },
    }
}

/// The `[sandbox]` table of `reproagent.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxToml {
    /// An interpreter or a virtualenv directory, relative to the repository root.
    pub python: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct TomlFile {
    #[serde(default)]
    sandbox: SandboxToml,
}

/// Read `[sandbox]` from `root/reproagent.toml` (none: defaults).
pub fn load_toml(root: &Path) -> Result<SandboxToml, EnvError> {
    let path = root.join(crate::model::config::CONFIG_FILE);
    match crate::confine::read_config(root, crate::model::config::CONFIG_FILE) {
        Ok(Some(text)) => toml::from_str::<TomlFile>(&text)
            .map(|f| f.sandbox)
            .map_err(|e| EnvError::Config(format!("{}: {}", path.display(), e.message()))),
        Ok(None) => Ok(SandboxToml::default()),
        Err(why) => Err(EnvError::Config(why)),
    }
}

/// What the probe learns from the interpreter.
#[derive(Debug, Deserialize)]
struct Probed {
    version: String,
    executable: String,
    pytest: bool,
}

const PROBE: &str = r#"import sys, json
try:
    import importlib.util as u
    has = u.find_spec("pytest") is not None
except ImportError:
    import imp
    try:
        imp.find_module("pytest")
        has = True
    except ImportError:
        has = False
print(json.dumps({"version": "%d.%d.%d" % tuple(sys.version_info[:3]), "executable": sys.executable, "pytest": has}))
"#;

/// Run the interpreter once, locally, as the sandbox would (scrubbed environment, no
/// user site): its version, its real executable, whether `pytest` imports.
pub fn probe(p: &mut PythonEnv) -> Result<(), EnvError> {
    let origin = match p.source {
        PythonSource::Flag => "--python",
        PythonSource::Config => "reproagent.toml [sandbox] python =",
        PythonSource::Case => "the case's tests.python",
        _ => "python",
    };
    let bad = |problem: String| EnvError::BadPython {
        origin: origin.into(),
        path: p.interpreter.display().to_string(),
        problem,
    };
    let mut path: Vec<String> = p.bin_dir().map(|b| b.display().to_string()).into_iter().collect();
    path.extend(SYSTEM_DIRS.iter().map(|s| s.to_string()));
    let mut cmd = std::process::Command::new(&p.interpreter);
    cmd.args(["-c", PROBE])
        .env_clear()
        .env("PATH", path.join(":"))
        .env("LANG", "C.UTF-8")
        .env("PYTHONNOUSERSITE", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let (PythonKind::Venv, Some(pre)) = (p.kind, &p.prefix) {
        cmd.env("VIRTUAL_ENV", pre);
    }
    let mut child = cmd.spawn().map_err(|e| bad(format!("cannot run it: {e}")))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > Duration::from_secs(30) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(bad("it did not answer within 30 s".into()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(bad(format!("waiting for it: {e}"))),
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    let probed: Probed = match (status.success(), serde_json::from_str(out.trim())) {
        (true, Ok(x)) => x,
        _ => {
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it printed nothing we understand");
            return Err(bad(format!("not a working Python interpreter ({last})")));
        }
    };
    p.version = Some(probed.version);
    p.pytest = Some(probed.pytest);
    // A shim (pyenv's, say) stands for the interpreter it runs: keep the real one, which
    // works without the shim's environment. A venv keeps its own path (it finds pyvenv.cfg by it).
    if matches!(p.kind, PythonKind::Interpreter | PythonKind::System) && !probed.executable.is_empty() {
        p.interpreter = PathBuf::from(probed.executable);
    }
    Ok(())
}

/// Resolve the environment for a run: `opts.python` (a flag), else the toml's, else the
/// lookup over the process environment; then probe the interpreter.
pub fn resolve(repo: &Path, opts: &EnvOptions) -> Result<Environment, EnvError> {
    resolve_with(repo, opts.python.as_deref(), PythonSource::Flag)
}

/// [`resolve`] with the origin of an explicit python named (a bench case's `tests.python`).
pub fn resolve_with(repo: &Path, python: Option<&Path>, source: PythonSource) -> Result<Environment, EnvError> {
    let repo = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let toml = load_toml(&repo)?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let explicit: Option<(PathBuf, PythonSource)> = match (python, &toml.python) {
        (Some(p), _) => Some((absolute(&cwd, p), source)),
        (None, Some(t)) => Some((absolute(&repo, Path::new(t)), PythonSource::Config)),
        (None, None) => None,
    };
    let inputs = Inputs { repo: &repo, env: &env, explicit: explicit.as_ref().map(|(p, s)| (p.as_path(), *s)) };
    let mut python = lookup_python(&inputs)?;
    probe(&mut python)?;
    Ok(Environment { python, node: lookup_node(&inputs), java: lookup_java(&inputs) })
}

/// [`resolve_with`], once per (repository, python) in the process: the bench harness
/// asks for each case's tests, and the answer does not change within a run.
pub fn resolve_cached(
    repo: &Path,
    python: Option<&Path>,
    source: PythonSource,
) -> Result<std::sync::Arc<Environment>, EnvError> {
    use std::sync::{Arc, Mutex, OnceLock};
    type Cache = Mutex<BTreeMap<(PathBuf, Option<PathBuf>), Arc<Environment>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (repo.to_path_buf(), python.map(Path::to_path_buf));
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(e) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(e);
    }
    let e = Arc::new(resolve_with(repo, python, source)?);
    if let Ok(mut c) = cache.lock() {
        c.insert(key, e.clone());
    }
    Ok(e)
}

/// `p` against `base` when relative; a bare name stays bare (it is looked up on PATH).
fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() || (p.components().count() == 1 && !base.join(p).exists()) {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn venv(dir: &Path) {
        std::fs::create_dir_all(dir.join("bin")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap_or_else(|e| panic!("{e}"));
        exe(&dir.join("bin/python"));
    }

    fn exe(p: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(p.parent().unwrap_or(Path::new("/"))).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(p, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    }

    fn look(repo: &Path, env: &[(&str, &str)], explicit: Option<(&Path, PythonSource)>) -> Result<PythonEnv, EnvError> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        lookup_python(&Inputs { repo, env: &env, explicit })
    }

    #[test]
    fn the_resolution_order() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (repo, home) = (t.path().join("proj"), t.path().join("home"));
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        let h = home.display().to_string();
        // Nothing: the system's.
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.source, PythonSource::System);
        // conda's CONDA_PREFIX.
        let conda = t.path().join("conda/envs/x");
        std::fs::create_dir_all(conda.join("conda-meta")).unwrap_or_else(|e| panic!("{e}"));
        exe(&conda.join("bin/python"));
        let c = conda.display().to_string();
        let e = look(&repo, &[("HOME", &h), ("CONDA_PREFIX", &c)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.kind), (PythonSource::Conda, PythonKind::Conda));
        // A repository venv beats conda; a tox env comes after the named ones.
        venv(&repo.join(".tox/py39"));
        venv(&repo.join(".tox/py311"));
        venv(&repo.join(".tox/lint"));
        let e = look(&repo, &[("HOME", &h), ("CONDA_PREFIX", &c)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.prefix, Some(repo.join(".tox/py311")), "{e:?}");
        venv(&repo.join("venv"));
        let e = look(&repo, &[("HOME", &h), ("CONDA_PREFIX", &c)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.prefix.clone()), (PythonSource::RepoVenv, Some(repo.join("venv"))));
        venv(&repo.join(".venv"));
        std::fs::write(repo.join(".venv/pyvenv.cfg"), "home = /usr/bin\nuv = 0.4.0\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.prefix, Some(repo.join(".venv")));
        assert!(e.reason.contains("uv"), "{}", e.reason);
        // VIRTUAL_ENV beats the repository's; a broken one is passed over, and said.
        let active = t.path().join("active");
        venv(&active);
        let a = active.display().to_string();
        let e = look(&repo, &[("HOME", &h), ("VIRTUAL_ENV", &a)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.kind), (PythonSource::VirtualEnv, PythonKind::Venv));
        let e = look(&repo, &[("HOME", &h), ("VIRTUAL_ENV", "/no/such/venv")], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.source, PythonSource::RepoVenv);
        assert!(e.passed_over[0].contains("/no/such/venv"), "{:?}", e.passed_over);
        // An explicit one beats everything: a venv dir, an interpreter in a venv, a bare interpreter.
        let e = look(&repo, &[("HOME", &h), ("VIRTUAL_ENV", &a)], Some((&conda, PythonSource::Flag)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.kind), (PythonSource::Flag, PythonKind::Conda));
        let e = look(&repo, &[], Some((&active.join("bin/python"), PythonSource::Config)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.kind, e.prefix.clone()), (PythonKind::Venv, Some(active.clone())));
        let bare = t.path().join("py/bin/python3.9");
        exe(&bare);
        let e = look(&repo, &[], Some((&bare, PythonSource::Flag))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.kind, e.bin_dir()), (PythonKind::Interpreter, Some(t.path().join("py/bin"))));
        // A bare name is looked up on the user's PATH.
        let p = t.path().join("py/bin").display().to_string();
        let e = look(&repo, &[("PATH", &p)], Some((Path::new("python3.9"), PythonSource::Flag)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.interpreter, bare);
        // Bad ones are errors that say what is wrong.
        let err = look(&repo, &[], Some((&t.path().join("nope"), PythonSource::Flag)))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("--python ") && err.ends_with("no such file or directory"), "{err}");
        std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
        let err = look(&repo, &[], Some((&home, PythonSource::Flag))).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("neither a virtualenv"), "{err}");
        std::fs::write(t.path().join("notexe"), "x").unwrap_or_else(|e| panic!("{e}"));
        let err = look(&repo, &[], Some((&t.path().join("notexe"), PythonSource::Flag)))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not an executable"), "{err}");
    }

    #[test]
    fn hashes_match_the_tools() {
        // Python: base64.urlsafe_b64encode(hashlib.sha256(b"/home/u/proj").digest()).decode()[:8]
        assert_eq!(hash8(b"/home/u/proj", 32), "nAn4BVom");
        // pipenv: base64.urlsafe_b64encode(hashlib.sha256(b"/home/u/proj/Pipfile").digest()[:6]).decode()[:8]
        assert_eq!(hash8(b"/home/u/proj/Pipfile", 6), "kl-QKK3C");
    }

    #[test]
    fn managed_environments() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (repo, home) = (t.path().join("proj"), t.path().join("home"));
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        let h = home.display().to_string();
        let hash = hash8(repo.to_string_lossy().as_bytes(), 32);
        // poetry: the cache's virtualenvs, newest Python unless envs.toml says otherwise.
        std::fs::write(repo.join("pyproject.toml"), "[tool.poetry]\nname = \"proj\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let venvs = home.join(".cache/pypoetry/virtualenvs");
        venv(&venvs.join(format!("proj-{hash}-py3.9")));
        venv(&venvs.join(format!("proj-{hash}-py3.11")));
        venv(&venvs.join("other-AAAAAAAA-py3.12"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (e.source, e.prefix.clone()),
            (PythonSource::Poetry, Some(venvs.join(format!("proj-{hash}-py3.11"))))
        );
        std::fs::write(venvs.join("envs.toml"), format!("[proj-{hash}]\nminor = \"3.9\"\npatch = \"3.9.18\"\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.prefix, Some(venvs.join(format!("proj-{hash}-py3.9"))));
        std::fs::remove_file(repo.join("pyproject.toml")).unwrap_or_else(|e| panic!("{e}"));
        // pipenv: the env whose .project names the repository.
        std::fs::write(repo.join("Pipfile"), "[packages]\n").unwrap_or_else(|e| panic!("{e}"));
        let workon = home.join(".local/share/virtualenvs");
        venv(&workon.join("proj-zzzzzzzz"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.source, PythonSource::System, "a stranger's env is not taken");
        assert!(e.passed_over.iter().any(|p| p.starts_with("pipenv:")), "{:?}", e.passed_over);
        std::fs::write(workon.join("proj-zzzzzzzz/.project"), repo.display().to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.prefix.clone()), (PythonSource::Pipenv, Some(workon.join("proj-zzzzzzzz"))));
        std::fs::remove_file(repo.join("Pipfile")).unwrap_or_else(|e| panic!("{e}"));
        // hatch: env/virtual/<project>/<id>/<project>.
        std::fs::write(repo.join("hatch.toml"), "").unwrap_or_else(|e| panic!("{e}"));
        let hv = home.join(".local/share/hatch/env/virtual/proj").join(&hash);
        venv(&hv.join("proj"));
        venv(&hv.join("docs"));
        let e = look(&repo, &[("HOME", &h)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.prefix.clone()), (PythonSource::Hatch, Some(hv.join("proj"))));
        std::fs::remove_file(repo.join("hatch.toml")).unwrap_or_else(|e| panic!("{e}"));
        // uv: UV_PROJECT_ENVIRONMENT.
        venv(&t.path().join("uvenv"));
        let u = t.path().join("uvenv").display().to_string();
        let e = look(&repo, &[("HOME", &h), ("UV_PROJECT_ENVIRONMENT", &u)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.source, PythonSource::Uv);
        // conda: environment.yml's name, found through CONDA_EXE's root.
        std::fs::write(repo.join("environment.yml"), "name: testbed\ndependencies:\n  - python=3.9\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let root = t.path().join("miniconda3");
        exe(&root.join("bin/conda"));
        std::fs::create_dir_all(root.join("envs/testbed/conda-meta")).unwrap_or_else(|e| panic!("{e}"));
        exe(&root.join("envs/testbed/bin/python"));
        let ce = root.join("bin/conda").display().to_string();
        let e = look(&repo, &[("HOME", &h), ("CONDA_EXE", &ce)], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((e.source, e.prefix.clone()), (PythonSource::Conda, Some(root.join("envs/testbed"))));
    }

    #[test]
    fn node_and_java() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let repo = t.path().join("proj");
        std::fs::create_dir_all(repo.join("node_modules/.bin")).unwrap_or_else(|e| panic!("{e}"));
        exe(&t.path().join("nvm/bin/node"));
        let path = format!("{}:/usr/bin", t.path().join("nvm/bin").display());
        let env: BTreeMap<String, String> = [("PATH".to_string(), path)].into();
        let i = Inputs { repo: &repo, env: &env, explicit: None };
        let n = lookup_node(&i);
        assert_eq!(n.bin_dir, Some(t.path().join("nvm/bin")));
        assert!(n.node_modules_bin);
        exe(&t.path().join("jdk/bin/java"));
        std::fs::write(repo.join("pom.xml"), "<project/>").unwrap_or_else(|e| panic!("{e}"));
        let env: BTreeMap<String, String> =
            [("JAVA_HOME".to_string(), t.path().join("jdk").display().to_string())].into();
        let j = lookup_java(&Inputs { repo: &repo, env: &env, explicit: None });
        assert_eq!(j.java_home, Some(t.path().join("jdk")));
        assert!(j.build_tool.as_deref().unwrap_or("").starts_with("maven"), "{j:?}");
        // The system's node adds nothing to PATH.
        let env: BTreeMap<String, String> = [("PATH".to_string(), "/usr/bin".to_string())].into();
        assert_eq!(lookup_node(&Inputs { repo: &repo, env: &env, explicit: None }).bin_dir, None);
    }
}
