//! The environment tests run in: `--python`, `VIRTUAL_ENV` and a repository `.venv` end
//! to end through the CLI with real virtualenvs; editable installs that point into the
//! user's tree still import the sandbox's copy (flat and `src/` layouts); the fallback
//! when the environment has no pytest; Docker `--workdir`/`--activate` on an image built
//! from a repository's Dockerfile.
//!
//! The virtualenvs are made once per test binary (and kept between runs under
//! `CARGO_TARGET_TMPDIR`), without the network: Debian's Python with its system
//! packages (pytest, setuptools, wheel) for the editable installs, a pyenv Python
//! without pip for the environment that lacks pytest.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use reproagent::sandbox::env::{self, EnvOptions, PythonKind, PythonSource};
use reproagent::sandbox::local::LocalSandbox;
use reproagent::sandbox::runners::{Framework, TestStatus};
use reproagent::sandbox::tools::{self, RunTestArgs};
use reproagent::sandbox::{ExecRequest, Sandbox, SandboxConfig};

/// The shared virtualenvs and the two projects installed in `full` in editable mode.
struct Envs {
    /// Debian's Python with system site-packages (pytest), `flatpkg` and `srcpkg` editable.
    full: PathBuf,
    /// A pyenv Python 3.11 venv without pip, hence without pytest.
    bare: PathBuf,
    /// The user trees the editable installs point into.
    flat: PathBuf,
    src: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn pyproject(name: &str, src_layout: bool) -> String {
    let find = if src_layout {
        "[tool.setuptools.packages.find]\nwhere = [\"src\"]\n".to_string()
    } else {
        format!("[tool.setuptools]\npackages = [\"{name}\"]\n")
    };
    format!("[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"{name}\"\nversion = \"0.1\"\n\n{find}")
}

fn envs() -> &'static Envs {
    static ENVS: OnceLock<Envs> = OnceLock::new();
    ENVS.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reproagent-env-tests-v1");
        let e = Envs {
            full: root.join("full"),
            bare: root.join("bare"),
            flat: root.join("flat"),
            src: root.join("srcproj"),
        };
        if root.join("ready").exists() {
            return e;
        }
        let _ = std::fs::remove_dir_all(&root);
        write(&e.flat.join("pyproject.toml"), &pyproject("flatpkg", false));
        write(&e.flat.join("flatpkg/__init__.py"), "def origin():\n    return __file__\n");
        write(&e.src.join("pyproject.toml"), &pyproject("srcpkg", true));
        write(&e.src.join("src/srcpkg/__init__.py"), "def origin():\n    return __file__\n");
        run(Command::new("/usr/bin/python3").args(["-m", "venv", "--system-site-packages"]).arg(&e.full));
        run(Command::new(e.full.join("bin/python"))
            .args(["-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "-e"])
            .arg(&e.flat)
            .arg("-e")
            .arg(&e.src));
        let pyenv =
            std::env::var("HOME").map(PathBuf::from).unwrap_or_default().join(".pyenv/versions/3.11.7/bin/python3");
        let py = if pyenv.exists() { pyenv } else { PathBuf::from("/usr/bin/python3") };
        run(Command::new(py).args(["-m", "venv", "--without-pip"]).arg(&e.bare));
        std::fs::write(root.join("ready"), "").expect("ready");
        e
    })
}

/// Where the interpreter of `venv` says a module comes from, run on the host outside
/// any sandbox (what the editable install points to).
fn host_origin(venv: &Path, module: &str) -> String {
    let out = Command::new(venv.join("bin/python"))
        .args(["-c", &format!("import {module}; print({module}.origin())")])
        .current_dir("/")
        .output()
        .expect("python");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn local(repo: &Path, python: &Path) -> LocalSandbox {
    let environment = env::resolve(repo, &EnvOptions { python: Some(python.to_path_buf()), ..EnvOptions::default() })
        .expect("resolve");
    LocalSandbox::open(SandboxConfig::new(repo, "unused").with_env(Some(Arc::new(environment)), &EnvOptions::default()))
        .expect("open")
}

async fn sh(sb: &dyn Sandbox, cwd: Option<&str>, line: &str) -> String {
    let mut req = ExecRequest::shell(line);
    req.cwd = cwd.map(Into::into);
    let out = sb.exec(&req).await.expect("exec");
    assert!(out.success(), "{line}: {out:?}");
    out.stdout.trim().to_string()
}

/// The project installed editable in the environment, a test in the sandbox: the
/// package comes from the sandbox's copy, for a flat and a `src/` layout, from the
/// root and from a subdirectory, through the setuptools finder's mapping too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editable_installs_import_the_copy() {
    let e = envs();
    for (tree, pkg) in [(&e.flat, "flatpkg"), (&e.src, "srcpkg")] {
        // Outside the sandbox the environment imports the user's tree: the test below is not vacuous.
        let host = host_origin(&e.full, pkg);
        assert!(host.starts_with(tree.to_str().expect("utf-8")), "{pkg} on the host comes from {host}");
        let sb = local(tree, &e.full);
        let copy = sb.workdir().to_string();
        let test = format!(
            "import os\nimport sys\nimport {pkg}\n\n\ndef test_imports_the_copy():\n    where = os.path.realpath({pkg}.origin())\n    assert where.startswith(os.path.realpath({copy:?}) + os.sep), where\n    assert sys.prefix == {full:?}, sys.prefix\n",
            full = e.full.display().to_string()
        );
        sb.write_file("tests/test_where.py", test.as_bytes()).await.expect("write");
        let args = RunTestArgs {
            file: "tests/test_where.py".into(),
            test: None,
            framework: None,
            command: None,
            timeout_secs: 120,
        };
        let r = tools::run_test(&sb, tree, &args).await.expect("run_test");
        assert_eq!((r.status, r.framework), (TestStatus::Passed, Framework::Pytest), "{pkg}: {r:#?}");
        // From a subdirectory (the copy's root is not the working directory).
        let origin = sh(&sb, Some("tests"), &format!("python3 -c 'import {pkg}; print({pkg}.origin())'")).await;
        assert!(origin.starts_with(&copy), "{pkg} from tests/: {origin}");
        // Nothing on sys.path, and no editable finder mapping, points into the user's tree.
        let probe = "import sys, json; m = [v for n, mod in sys.modules.items() if n.startswith('__editable__') for v in getattr(mod, 'MAPPING', {}).values()]; print(json.dumps([p for p in sys.path + m]))";
        let paths: Vec<String> =
            serde_json::from_str(&sh(&sb, Some("tests"), &format!("python3 -c \"{probe}\"")).await).expect("json");
        assert!(paths.iter().all(|p| !p.starts_with(tree.to_str().expect("utf-8"))), "{pkg}: {paths:?}");
        if pkg == "flatpkg" {
            assert!(
                paths.iter().any(|p| p == &format!("{copy}/flatpkg")),
                "the finder's mapping is moved to the copy: {paths:?}"
            );
        }
        sb.close().await.expect("close");
    }
}

/// An environment without pytest: the test runs with unittest in that environment
/// (not the system's pytest), and the result says so with the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pytest_falls_back_to_unittest() {
    let e = envs();
    let repo = tempfile::tempdir().expect("tmp");
    write(&repo.path().join("calc.py"), "def mean(xs):\n    return sum(xs) // len(xs)\n");
    let sb = local(repo.path(), &e.bare);
    let py = sb.environment().expect("environment").python.clone();
    assert_eq!((py.pytest, py.kind), (Some(false), PythonKind::Venv), "{py:?}");
    let test = format!(
        "import sys\nimport unittest\n\nfrom calc import mean\n\n\nclass T(unittest.TestCase):\n    def test_env(self):\n        self.assertEqual(sys.prefix, {bare:?})\n\n    def test_mean(self):\n        self.assertEqual(mean([1, 2]), 1.5)\n",
        bare = e.bare.display().to_string()
    );
    sb.write_file("tests/test_calc.py", test.as_bytes()).await.expect("write");
    let args = RunTestArgs {
        file: "tests/test_calc.py".into(),
        test: None,
        framework: Some("pytest".into()),
        command: None,
        timeout_secs: 120,
    };
    let r = tools::run_test(&sb, repo.path(), &args).await.expect("run_test");
    assert_eq!(r.framework, Framework::Unittest, "{r:#?}");
    assert_eq!((r.status, r.passed, r.failed), (TestStatus::Failed, 1, 1), "{r:#?}");
    assert_eq!(r.failures[0].kind.as_deref(), Some("AssertionError"), "{r:#?}");
    let note = r.note.unwrap_or_default();
    assert!(note.contains(&format!("{}/bin/python -m pip install pytest", e.bare.display())), "{note}");
    sb.close().await.expect("close");
}

fn reproagent(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reproagent"));
    cmd.args(args);
    for k in ["VIRTUAL_ENV", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT"] {
        cmd.env_remove(k);
    }
    cmd.envs(envs.iter().copied());
    cmd.output().expect("run reproagent")
}

fn prefix_in_sandbox(repo: &Path, extra: &[&str], envs: &[(&str, &str)]) -> (String, String) {
    let mut args = vec!["sandbox", "exec", "--sandbox", "local", "--repo", repo.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", "python3 -c 'import sys; print(sys.prefix)'; ls -a"]);
    let out = reproagent(&args, envs);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// `--python`, `VIRTUAL_ENV` and the repository's `.venv`, each end to end through
/// `sandbox exec`, in that order of precedence; each said on the terminal with why.
#[test]
fn python_flag_virtual_env_and_dot_venv() {
    let e = envs();
    let repo = tempfile::tempdir().expect("tmp");
    write(&repo.path().join("m.py"), "x = 1\n");
    let full = e.full.to_str().expect("utf-8");
    let bare = e.bare.to_str().expect("utf-8");
    // Nothing said: the system's.
    let (out, err) = prefix_in_sandbox(repo.path(), &[], &[]);
    assert_eq!(out.lines().next(), Some("/usr"), "{out}\n{err}");
    assert!(err.contains("environment: python /usr/bin/python3") && err.contains("the system's"), "{err}");
    // A .venv in the repository: used where it is, not copied.
    run(Command::new("/usr/bin/python3").args(["-m", "venv", "--without-pip"]).arg(repo.path().join(".venv")));
    let dot = repo.path().canonicalize().expect("canon").join(".venv");
    let (out, err) = prefix_in_sandbox(repo.path(), &[], &[]);
    assert_eq!(out.lines().next(), Some(dot.to_str().expect("utf-8")), "{out}\n{err}");
    assert!(!out.lines().any(|l| l == ".venv"), "the .venv is copied into the sandbox: {out}");
    assert!(err.contains("the repository's virtualenv .venv/"), "{err}");
    // VIRTUAL_ENV beats it.
    let (out, err) = prefix_in_sandbox(repo.path(), &[], &[("VIRTUAL_ENV", bare)]);
    assert_eq!(out.lines().next(), Some(bare), "{out}\n{err}");
    assert!(err.contains(&format!("VIRTUAL_ENV={bare}")) && err.contains("has no pytest"), "{err}");
    // --python beats both, as a venv directory or as its interpreter.
    for p in [full.to_string(), format!("{full}/bin/python")] {
        let (out, err) = prefix_in_sandbox(repo.path(), &["--python", &p], &[("VIRTUAL_ENV", bare)]);
        assert_eq!(out.lines().next(), Some(full), "{out}\n{err}");
        assert!(err.contains(&format!("--python {p}")), "{err}");
    }
    // reproagent.toml's [sandbox] python, relative to the repository.
    std::fs::rename(repo.path().join(".venv"), repo.path().join("pyenv-x")).expect("mv");
    write(&repo.path().join("reproagent.toml"), "[sandbox]\npython = \"pyenv-x\"\n");
    let (out, err) = prefix_in_sandbox(repo.path(), &[], &[("VIRTUAL_ENV", bare)]);
    assert_eq!(
        out.lines().next(),
        Some(repo.path().canonicalize().expect("canon").join("pyenv-x").to_str().expect("utf-8")),
        "{out}\n{err}"
    );
    // A bad --python: one line, with the hint, before anything runs.
    let out = reproagent(
        &[
            "sandbox",
            "exec",
            "--sandbox",
            "local",
            "--repo",
            repo.path().to_str().expect("utf-8"),
            "--python",
            "/no/such/python",
            "--",
            "true",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--python /no/such/python: no such file or directory (hint: give an interpreter"), "{err}");
}

/// The resolution through the library, as `reproduce` records it: the source, the
/// version and whether pytest imports.
#[test]
fn resolve_probes_the_interpreter() {
    let e = envs();
    let repo = tempfile::tempdir().expect("tmp");
    let r = env::resolve(repo.path(), &EnvOptions { python: Some(e.full.clone()), ..EnvOptions::default() })
        .expect("resolve");
    assert_eq!((r.python.source, r.python.kind, r.python.pytest), (PythonSource::Flag, PythonKind::Venv, Some(true)));
    assert!(r.python.version.as_deref().is_some_and(|v| v.starts_with("3.")), "{:?}", r.python);
    let not_python = repo.path().join("fake");
    write(&not_python, "#!/bin/sh\necho hello\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&not_python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let err = env::resolve(repo.path(), &EnvOptions { python: Some(not_python), ..EnvOptions::default() })
        .expect_err("an error")
        .to_string();
    assert!(err.contains("not a working Python interpreter"), "{err}");
}

/// `sandbox prepare` builds a repository's Dockerfile (FROM the test image, nothing
/// pulled); `sandbox exec --image --workdir --activate` runs in that image as it is,
/// with the copy uploaded over the image's repository directory and the activation
/// step before the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_workdir_and_activate() {
    if crate::sandbox::skip_docker() {
        return;
    }
    let _engine = crate::sandbox::ENGINE.read().await;
    let repo = tempfile::tempdir().expect("tmp");
    let image_files = "RUN mkdir -p /testbed /opt/act && echo 'export MARKER=activated' > /opt/act/activate && echo from-image > /testbed/image_only.txt && echo old > /testbed/m.py";
    write(
        &repo.path().join("Dockerfile"),
        &format!("FROM {}\n# {}\n{image_files}\n", crate::sandbox::IMAGE, std::process::id()),
    );
    write(&repo.path().join("m.py"), "x = 'ours'\n");
    let repo_s = repo.path().to_str().expect("utf-8");
    let out = reproagent(&["sandbox", "prepare", "--json", repo_s], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let tag = p["image"].as_str().expect("image").to_string();
    assert_eq!(p["steps"][0]["step"]["because"], "Dockerfile", "{p}");
    assert_eq!(p["base_image"], crate::sandbox::IMAGE, "{p}");
    let line = "echo $MARKER; pwd; cat image_only.txt; python3 -c 'import m; print(m.x)'";
    let args = [
        "sandbox",
        "exec",
        "--sandbox",
        "docker",
        "--repo",
        repo_s,
        "--image",
        &tag,
        "--workdir",
        "/testbed",
        "--activate",
        ". /opt/act/activate",
        "--",
        "sh",
        "-c",
        line,
    ];
    let out = reproagent(&args, &[]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["activated", "/testbed", "from-image", "ours"], "{stderr}");
    assert!(stderr.contains("repository over /testbed") && stderr.contains("after `. /opt/act/activate`"), "{stderr}");
    // A failing activation step stops the command, and says so.
    let args = [
        "sandbox",
        "exec",
        "--sandbox",
        "docker",
        "--repo",
        repo_s,
        "--image",
        &tag,
        "--workdir",
        "/testbed",
        "--activate",
        "false",
        "--",
        "echo",
        "ran",
    ];
    let out = reproagent(&args, &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the activation step failed"), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    // Prepared again with the same Dockerfile: reused.
    let out = reproagent(&["sandbox", "prepare", repo_s], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("up to date"), "{out:?}");
    let d = reproagent::sandbox::docker::connect().await.expect("docker");
    let _ = d.remove_image(&tag, None::<bollard::query_parameters::RemoveImageOptions>, None).await;
}

/// A bench case's `tests.python` is where the scorer runs its tests: the gold test is
/// fail-to-pass in a venv with pytest; in one without, it runs with unittest there (not
/// the system's pytest), cannot import pytest either way, and the case is invalid with
/// the fix in its reason; a bad one makes the case invalid too.
#[test]
fn bench_case_python() {
    use reproagent::bench::adapter;
    use reproagent::bench::run::{self, BenchOptions, ModelSource};
    use reproagent::bench::score::Scorer;
    use reproagent::bench::CaseStatus;
    let e = envs();
    let suite = tempfile::tempdir().expect("tmp");
    let from = crate::common::fixture("bench/py-median-even");
    for (id, python) in [
        ("with-pytest", format!("{}/bin/python", e.full.display())),
        ("without-pytest", e.bare.display().to_string()),
        ("bad", "/no/such/venv".into()),
    ] {
        let dir = suite.path().join(id);
        std::fs::create_dir_all(&dir).expect("mkdir");
        crate::common::copy_into(&from, &dir);
        let mut case: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("case.json")).expect("read")).expect("json");
        case["id"] = id.into();
        case["tests"]["python"] = python.into();
        std::fs::write(dir.join("case.json"), serde_json::to_string(&case).expect("json")).expect("write");
    }
    let out = tempfile::tempdir().expect("tmp");
    let opts = BenchOptions {
        suite: suite.path().to_path_buf(),
        out: out.path().to_path_buf(),
        jobs: 1,
        scorer: Scorer {
            sandbox: reproagent::sandbox::Choice::Local,
            image: None,
            timeout_secs: 120,
            env: EnvOptions::default(),
        },
        verify: false,
        only: Vec::new(),
        model: ModelSource::None,
    };
    let record = run::run(&adapter::Gold, &opts, &|_| {}).expect("bench");
    let get = |id: &str| record.cases.iter().find(|c| c.case_id == id).unwrap_or_else(|| panic!("no case {id}"));
    let ok = get("with-pytest");
    assert!(ok.fail_to_pass, "{ok:#?}");
    assert!(ok.environment.as_deref().unwrap_or("").contains(&format!("virtualenv {}", e.full.display())), "{ok:#?}");
    // The gold test imports pytest: without it the test cannot run either way, so the
    // case is invalid (not the gold adapter's failure), and the reason carries the fix.
    let bare = get("without-pytest");
    assert_eq!(bare.status, CaseStatus::Invalid, "{bare:#?}");
    assert!(!bare.pass_after, "{bare:#?}");
    let why = bare.reason.clone().unwrap_or_default();
    assert!(why.contains("pytest is not installed in") && why.contains("pip install pytest"), "{why}");
    let bad = get("bad");
    assert_eq!(bad.status, CaseStatus::Invalid, "{bad:#?}");
    assert!(
        bad.reason
            .as_deref()
            .unwrap_or("")
            .contains("the case's tests.python /no/such/venv: no such file or directory"),
        "{bad:#?}"
    );
    assert!(
        record.environment.as_deref().unwrap_or("").starts_with("python: a case's tests.python"),
        "{:?}",
        record.environment
    );
}

/// Without pytest, a pytest-style file (module-level test functions) still runs: each
/// function a unittest test, failures read as unittest's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pytest_runs_test_functions_with_unittest() {
    let e = envs();
    let repo = tempfile::tempdir().expect("tmp");
    write(&repo.path().join("calc.py"), "def mean(xs):\n    return sum(xs) // len(xs)\n");
    let sb = local(repo.path(), &e.bare);
    let test = "from calc import mean\n\n\ndef test_mean_of_pair():\n    assert mean([1, 2]) == 1.5\n\n\ndef test_mean_of_one():\n    assert mean([4]) == 4\n\n\ndef test_needs_a_fixture(tmp_path):\n    pass\n";
    sb.write_file("tests/test_calc.py", test.as_bytes()).await.expect("write");
    let args = RunTestArgs {
        file: "tests/test_calc.py".into(),
        test: None,
        framework: None,
        command: None,
        timeout_secs: 120,
    };
    let r = tools::run_test(&sb, repo.path(), &args).await.expect("run_test");
    assert_eq!((r.framework, r.status, r.passed, r.failed), (Framework::Unittest, TestStatus::Failed, 1, 1), "{r:#?}");
    assert_eq!(r.failures[0].name, "tests.test_calc.test_mean_of_pair", "{r:#?}");
    assert_eq!(r.failures[0].kind.as_deref(), Some("AssertionError"), "{r:#?}");
    assert_eq!(r.failures[0].message, "assert mean([1, 2]) == 1.5", "{r:#?}");
    assert!(r.note.as_deref().unwrap_or("").contains("pip install pytest"), "{r:#?}");
    // One test by name; an import error is an error, not a failure.
    let one = RunTestArgs { test: Some("test_mean_of_one".into()), ..args.clone() };
    let r = tools::run_test(&sb, repo.path(), &one).await.expect("run_test");
    assert_eq!((r.status, r.passed, r.failed), (TestStatus::Passed, 1, 0), "{r:#?}");
    sb.write_file("tests/test_broken.py", b"import no_such_module\n\n\ndef test_x():\n    pass\n")
        .await
        .expect("write");
    let broken = RunTestArgs { file: "tests/test_broken.py".into(), ..args };
    let r = tools::run_test(&sb, repo.path(), &broken).await.expect("run_test");
    assert_eq!(r.status, TestStatus::Errored, "{r:#?}");
    assert!(r.error.as_deref().unwrap_or("").contains("no_such_module"), "{r:#?}");
    sb.close().await.expect("close");
}
