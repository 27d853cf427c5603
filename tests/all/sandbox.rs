//! The sandbox suite, run alike against the real Docker engine and the local sandbox.
//!
//! Docker tests need `reproagent-test:bookworm`, built by `bash .ci/build-images.sh`;
//! without it they fail and say so. `REPROAGENT_SKIP_DOCKER=1` (set by hand by a
//! developer, never by CI) skips them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use reproagent::sandbox::runners::TestStatus;
use reproagent::sandbox::tools::{self, RunCommandArgs, RunPythonArgs, RunTestArgs};
use reproagent::sandbox::{docker as dk, ExecRequest, Sandbox, SandboxConfig, SandboxError, SandboxKind};

pub(crate) const IMAGE: &str = "reproagent-test:bookworm";

/// Docker tests share the engine; `sandbox clean` removes every sandbox container, so it
/// takes this lock for writing while the others hold it for reading.
pub(crate) static ENGINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub(crate) fn skip_docker() -> bool {
    std::env::var("REPROAGENT_SKIP_DOCKER").is_ok_and(|v| v == "1")
}

/// A small repository in three languages, each with a known bug.
fn make_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let files: &[(&str, &str)] = &[
        ("calc.py", "def mean(xs):\n    return sum(xs) // len(xs)  # bug: floor division\n\ndef add(a, b):\n    return a + b\n"),
        ("tests/__init__.py", ""),
        ("tests/test_ok.py", "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"),
        ("conftest.py", ""),
        ("lib.mjs", "export function slugify(s) {\n  return s.toLowerCase().replace(/[^a-z]+/g, '-');\n}\n"),
        ("src/main/java/demo/Calc.java", "package demo;\n\npublic class Calc {\n    public static int add(int a, int b) {\n        return a - b;\n    }\n}\n"),
        ("README.md", "demo\n"),
    ];
    for (path, body) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
    }
    dir
}

async fn open(kind: SandboxKind, repo: &Path, memory: Option<u64>) -> Box<dyn Sandbox> {
    let mut config = SandboxConfig::new(repo, IMAGE);
    if let Some(m) = memory {
        config.limits.memory_bytes = m;
    }
    config.limits.cpus = 2.0;
    match kind {
        SandboxKind::Local => Box::new(reproagent::sandbox::local::LocalSandbox::open(config).expect("local sandbox")),
        SandboxKind::Docker => match dk::DockerSandbox::open(config).await {
            Ok(sb) => Box::new(sb),
            Err(SandboxError::ImageMissing { .. }) => {
                panic!("Docker image {IMAGE} is missing: run `bash .ci/build-images.sh` (or set REPROAGENT_SKIP_DOCKER=1 by hand to skip)")
            }
            Err(e) => panic!("cannot open the Docker sandbox: {e} (is the engine running? `docker info`)"),
        },
    }
}

async fn sh(sb: &dyn Sandbox, line: &str) -> reproagent::sandbox::ExecOutput {
    sb.exec(&ExecRequest::shell(line).timeout(Duration::from_secs(60))).await.expect("exec")
}

/// Every file of a tree with its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(root).expect("prefix").to_path_buf(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

async fn test_file(
    sb: &dyn Sandbox,
    repo: &Path,
    file: &str,
    body: &str,
    framework: Option<&str>,
) -> reproagent::sandbox::runners::TestResult {
    sb.write_file(file, body.as_bytes()).await.expect("write test");
    let args = RunTestArgs {
        file: file.into(),
        test: None,
        framework: framework.map(Into::into),
        command: None,
        timeout_secs: 240,
    };
    tools::run_test(sb, repo, &args).await.expect("run_test")
}

// ---- the shared suite: each takes any sandbox ----

async fn pytest_passes(sb: &dyn Sandbox, repo: &Path) {
    let args =
        RunTestArgs { file: "tests/test_ok.py".into(), test: None, framework: None, command: None, timeout_secs: 120 };
    let r = tools::run_test(sb, repo, &args).await.expect("run_test");
    assert_eq!(r.status, TestStatus::Passed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (1, 0));
}

async fn pytest_fails_with_assertion(sb: &dyn Sandbox, repo: &Path) {
    let body = "from calc import mean\n\n\ndef test_mean_of_two():\n    assert mean([1, 2]) == 1.5\n\n\ndef test_mean_of_same():\n    assert mean([2, 2]) == 2\n";
    let r = test_file(sb, repo, "tests/test_repro.py", body, None).await;
    assert_eq!(r.status, TestStatus::Failed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (1, 1));
    let f = &r.failures[0];
    assert!(f.name.ends_with("test_mean_of_two"), "{f:?}");
    assert_eq!(f.kind.as_deref(), Some("AssertionError"), "{f:?}");
    assert!(f.message.contains("assert 1 == 1.5"), "{f:?}");
    // One test of the file, by name.
    let one = RunTestArgs {
        file: "tests/test_repro.py".into(),
        test: Some("test_mean_of_same".into()),
        framework: None,
        command: None,
        timeout_secs: 120,
    };
    let r = tools::run_test(sb, repo, &one).await.expect("run_test");
    assert_eq!((r.status, r.passed, r.failed), (TestStatus::Passed, 1, 0), "{r:#?}");
}

async fn pytest_import_error_is_errored(sb: &dyn Sandbox, repo: &Path) {
    let r = test_file(
        sb,
        repo,
        "tests/test_broken.py",
        "from calc import median\n\ndef test_x():\n    assert median([1]) == 1\n",
        None,
    )
    .await;
    assert_eq!(r.status, TestStatus::Errored, "{r:#?}");
    assert!(r.error.as_deref().unwrap_or("").contains("ImportError"), "{r:#?}");
}

async fn unittest_fails(sb: &dyn Sandbox, repo: &Path) {
    let body = "import unittest\nfrom calc import mean\n\n\nclass MeanTest(unittest.TestCase):\n    def test_two(self):\n        self.assertEqual(mean([1, 2]), 1.5)\n\n    def test_same(self):\n        self.assertEqual(mean([3, 3]), 3)\n";
    let r = test_file(sb, repo, "tests/test_unit.py", body, Some("unittest")).await;
    assert_eq!(r.status, TestStatus::Failed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (1, 1));
    assert!(r.failures[0].name.ends_with("MeanTest.test_two"), "{r:#?}");
    assert_eq!(r.failures[0].kind.as_deref(), Some("AssertionError"));
    assert_eq!(r.failures[0].message, "1 != 1.5");
}

async fn node_test_fails(sb: &dyn Sandbox, repo: &Path) {
    let body = "import { test } from 'node:test';\nimport assert from 'node:assert/strict';\nimport { slugify } from '../lib.mjs';\n\ntest('keeps words', () => {\n  assert.equal(slugify('a b'), 'a-b');\n});\n\ntest('keeps digits', () => {\n  assert.equal(slugify('a1 b2'), 'a1-b2');\n});\n";
    let r = test_file(sb, repo, "test/slug.test.mjs", body, None).await;
    assert_eq!(r.status, TestStatus::Failed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (1, 1), "{r:#?}");
    assert_eq!(r.failures[0].name, "keeps digits");
    assert_eq!(r.failures[0].kind.as_deref(), Some("AssertionError"));
    assert!(r.failures[0].message.contains("Expected values to be strictly equal"), "{r:#?}");
    assert!(r.failures[0].message.contains("actual: a-b-, expected: a1-b2"), "{r:#?}");
}

async fn junit5_fails(sb: &dyn Sandbox, repo: &Path) {
    let body = "package demo;\n\nimport static org.junit.jupiter.api.Assertions.assertEquals;\nimport org.junit.jupiter.api.Test;\n\nclass CalcTest {\n    @Test\n    void addsSmallNumbers() {\n        assertEquals(3, Calc.add(1, 2));\n    }\n\n    @Test\n    void addsZero() {\n        assertEquals(5, Calc.add(5, 0));\n    }\n}\n";
    let r = test_file(sb, repo, "src/test/java/demo/CalcTest.java", body, None).await;
    assert_eq!(r.status, TestStatus::Failed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (1, 1), "{r:#?}");
    assert!(r.failures[0].name.contains("addsSmallNumbers"), "{r:#?}");
    assert_eq!(r.failures[0].kind.as_deref(), Some("org.opentest4j.AssertionFailedError"));
    assert_eq!(r.failures[0].message, "expected: <3> but was: <-1>");
}

async fn junit4_fails(sb: &dyn Sandbox, repo: &Path) {
    let body = "package demo;\n\nimport static org.junit.Assert.assertEquals;\nimport org.junit.Test;\n\npublic class Calc4Test {\n    @Test\n    public void addsSmallNumbers() {\n        assertEquals(3, Calc.add(1, 2));\n    }\n}\n";
    let r = test_file(sb, repo, "src/test/java/demo/Calc4Test.java", body, None).await;
    assert_eq!(r.status, TestStatus::Failed, "{r:#?}");
    assert_eq!((r.passed, r.failed), (0, 1), "{r:#?}");
    assert_eq!(r.failures[0].kind.as_deref(), Some("java.lang.AssertionError"));
    assert_eq!(r.failures[0].message, "expected:<3> but was:<-1>");
}

async fn timeout_kills_the_tree(sb: &dyn Sandbox, _repo: &Path) {
    let start = Instant::now();
    let req = ExecRequest::shell("sleep 300 & echo $! > child.pid; sleep 300").timeout(Duration::from_secs(2));
    let out = sb.exec(&req).await.expect("exec");
    assert!(out.timed_out, "{out:?}");
    assert!(!out.success());
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    // The background child (a grandchild of the sandbox) is gone too, not just the shell.
    let check = sh(sb, "pid=$(cat child.pid); test -n \"$pid\" || exit 3; if [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status; then echo alive; else echo dead; fi").await;
    assert_eq!(check.stdout.trim(), "dead", "{check:?}");
}

async fn memory_limit_is_hit(sb: &dyn Sandbox, _repo: &Path) {
    let out = sh(sb, "python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'").await;
    assert!(out.memory_exceeded, "{out:?}");
    assert!(!out.success());
    assert!(!out.stdout.contains("1073741824"));
    // The sandbox survives its command's OOM.
    assert_eq!(sh(sb, "echo still here").await.stdout.trim(), "still here");
}

async fn no_network_in_a_test_run(sb: &dyn Sandbox, _repo: &Path) {
    assert!(sb.network_isolated());
    // A listener in this test process, on loopback only; the sandbox must not reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let code = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\nexcept OSError as e:\n    print('blocked', type(e).__name__)\n"
    );
    let out = tools::run_python(sb, &RunPythonArgs { code, timeout_secs: 30 }).await.expect("run_python");
    assert!(out.stdout.starts_with("blocked"), "{out:?}");
    assert!(listener.accept().is_err(), "the sandbox reached the host's loopback listener");
    // No interface but loopback.
    let ifaces = sh(sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(ifaces.stdout.split_whitespace().collect::<Vec<_>>(), vec!["lo"], "{ifaces:?}");
}

async fn user_tree_untouched(sb: &dyn Sandbox, repo: &Path) {
    let before = snapshot(repo);
    sb.write_file("tests/test_new.py", b"def test_new(): pass\n").await.expect("write");
    let out =
        sh(sb, "rm calc.py && echo appended >> README.md && mkdir -p build && echo x > build/out.txt && ls").await;
    assert!(out.success(), "{out:?}");
    assert!(!out.stdout.contains("calc.py"), "the copy should have lost calc.py: {out:?}");
    assert_eq!(sb.read_file("build/out.txt").await.expect("read"), b"x\n");
    assert_eq!(sb.read_file("README.md").await.expect("read"), b"demo\nappended\n");
    sb.close().await.expect("close");
    assert_eq!(snapshot(repo), before, "the user's tree changed");
}

async fn refuses_dangerous_commands(sb: &dyn Sandbox, _repo: &Path) {
    for (cmd, rule) in [
        ("touch marker && rm -rf /", "destructive"),
        ("touch marker; :(){ :|:& };:", "fork-bomb"),
        ("touch marker; curl http://127.0.0.1:9/", "network"),
        ("touch marker; pip install requests", "install"),
        ("touch marker; echo pwned > /etc/motd", "outside-workdir"),
    ] {
        let args = RunCommandArgs { command: cmd.into(), cwd: None, timeout_secs: 10 };
        match tools::run_command(sb, &args).await {
            Err(SandboxError::Refused(r)) => assert_eq!(r.rule, rule, "{cmd}: {r}"),
            other => panic!("{cmd} was not refused: {other:?}"),
        }
    }
    // Refused before it ran: not even the harmless first half happened.
    assert!(sb.read_file("marker").await.is_err(), "a refused command ran");
    let ok = tools::run_command(
        sb,
        &RunCommandArgs { command: "touch marker && echo ok".into(), cwd: None, timeout_secs: 10 },
    )
    .await
    .expect("run");
    assert_eq!(ok.stdout.trim(), "ok");
}

async fn run_python_imports_the_repo(sb: &dyn Sandbox, _repo: &Path) {
    let out = tools::run_python(
        sb,
        &RunPythonArgs { code: "from calc import mean\nprint(mean([1, 2]))\n".into(), timeout_secs: 30 },
    )
    .await
    .expect("run_python");
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.trim(), "1");
}

async fn output_is_bounded(sb: &dyn Sandbox, _repo: &Path) {
    let out = sh(sb, "python3 -c \"import sys; sys.stdout.write('x' * 5000000); sys.stderr.write('e' * 10)\"").await;
    assert!(out.success(), "{:?}", out.exit_code);
    assert!(out.truncated);
    assert_eq!(out.stdout_bytes, 5_000_000);
    assert_eq!(out.stdout.len(), 256 << 10);
    assert_eq!(out.stderr, "e".repeat(10));
}

/// A process that leaves the command's process group (`setsid`) and keeps its stdout
/// open: the output read until then is kept, the run ends with the command, and (in the
/// local sandbox, where the group kill cannot reach it, the command's PID namespace ends
/// with it) the escaped process is killed.
async fn an_escaped_process_holding_the_output_loses_nothing(sb: &dyn Sandbox, _repo: &Path) {
    // The parent waits until the child has left the group, or the group kill at its exit
    // would take the child too. The child marks, a second later, that it still lives.
    let out = sh(
        sb,
        "t=${TMPDIR:-/tmp}/escaped; rm -f $t $t.late; echo before; \
         setsid sh -c \"touch $t; sleep 1; touch $t.late; exec sleep 60\" & \
         while [ ! -e $t ]; do sleep 0.05; done; echo after; exit 3",
    )
    .await;
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert!(!out.timed_out, "{out:?}");
    assert!(out.stdout.contains("before") && out.stdout.contains("after"), "the output was lost: {out:?}");
    if sb.kind() == SandboxKind::Local {
        let later = sh(sb, "sleep 1.5; t=${TMPDIR:-/tmp}/escaped; [ -e $t.late ] && echo LIVED || echo gone").await;
        assert_eq!(later.stdout.trim(), "gone", "the escaped process outlived the command: {later:?}");
    }
}

macro_rules! suite {
    ($($name:ident $(memory = $mem:expr)?),* $(,)?) => {
        mod local {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let repo = make_repo();
                    #[allow(unused_mut, unused_assignments)]
                    let mut mem = None;
                    $( mem = Some($mem); )?
                    let sb = open(SandboxKind::Local, repo.path(), mem).await;
                    let root = PathBuf::from(sb.workdir()).parent().expect("root").to_path_buf();
                    super::$name(sb.as_ref(), repo.path()).await;
                    sb.close().await.expect("close");
                    assert!(!root.exists(), "the sandbox temp dir {} is left behind", root.display());
                }
            )*
        }
        mod docker {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if skip_docker() { eprintln!("REPROAGENT_SKIP_DOCKER=1: skipped"); return; }
                    let _engine = ENGINE.read().await;
                    let repo = make_repo();
                    #[allow(unused_mut, unused_assignments)]
                    let mut mem = None;
                    $( mem = Some($mem); )?
                    let sb = open(SandboxKind::Docker, repo.path(), mem).await;
                    super::$name(sb.as_ref(), repo.path()).await;
                    sb.close().await.expect("close");
                }
            )*
        }
    };
}

suite! {
    pytest_passes,
    pytest_fails_with_assertion,
    pytest_import_error_is_errored,
    unittest_fails,
    node_test_fails,
    junit5_fails,
    junit4_fails,
    timeout_kills_the_tree,
    memory_limit_is_hit memory = 256 << 20,
    no_network_in_a_test_run,
    user_tree_untouched,
    refuses_dangerous_commands,
    run_python_imports_the_repo,
    output_is_bounded,
    an_escaped_process_holding_the_output_loses_nothing,
}

// ---- Docker only: cleanup on every exit path, clean, prepare, the auto choice ----

mod docker_lifecycle {
    use super::*;

    async fn left(session: &str) -> Vec<String> {
        let d = dk::connect().await.expect("docker");
        dk::session_containers(&d, session).await.expect("list")
    }

    async fn open_session(repo: &Path) -> (Box<dyn Sandbox>, String) {
        let config = SandboxConfig::new(repo, IMAGE);
        let session = config.session.clone();
        let sb: Box<dyn Sandbox> = match dk::DockerSandbox::open(config).await {
            Ok(sb) => Box::new(sb),
            Err(e) => {
                panic!("cannot open the Docker sandbox ({e}); if the image is missing run `bash .ci/build-images.sh`")
            }
        };
        assert_eq!(left(&session).await.len(), 1, "the container should exist while open");
        (sb, session)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_container_left_after_success_error_and_timeout() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.read().await;
        let repo = make_repo();
        // Success, closed explicitly.
        let (sb, s1) = open_session(repo.path()).await;
        assert!(sh(sb.as_ref(), "true").await.success());
        sb.close().await.expect("close");
        assert!(left(&s1).await.is_empty(), "left after success");
        // Error: an operation fails and the caller bails out with `?`, dropping the sandbox.
        let (sb, s2) = open_session(repo.path()).await;
        let r: Result<(), SandboxError> = async {
            sb.read_file("no/such/file").await?;
            Ok(())
        }
        .await;
        assert!(r.is_err());
        drop(sb);
        assert!(left(&s2).await.is_empty(), "left after error");
        // Timeout, then dropped.
        let (sb, s3) = open_session(repo.path()).await;
        let out = sb.exec(&ExecRequest::shell("sleep 100").timeout(Duration::from_secs(1))).await.expect("exec");
        assert!(out.timed_out);
        drop(sb);
        assert!(left(&s3).await.is_empty(), "left after timeout");
        // A panic while the sandbox is alive.
        let config = SandboxConfig::new(repo.path(), IMAGE);
        let s4 = config.session.clone();
        let h = tokio::spawn(async move {
            let _sb = dk::DockerSandbox::open(config).await.expect("open");
            panic!("boom");
        });
        assert!(h.await.is_err());
        assert!(left(&s4).await.is_empty(), "left after a panic");
    }

    /// The container's writable layer gets a disk quota where the storage driver has one
    /// (then writing past it fails); where it has none, the sandbox says so with the
    /// engine's reason, in the reason `open` returns (printed and recorded in run.json).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_disk_quota_is_applied_or_its_absence_said() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.read().await;
        let repo = make_repo();
        // Does this engine take a quota at all? Ask it directly.
        let d = dk::connect().await.expect("docker");
        let probe = bollard::models::ContainerCreateBody {
            image: Some(IMAGE.into()),
            cmd: Some(vec!["true".into()]),
            host_config: Some(bollard::models::HostConfig {
                storage_opt: Some([("size".to_string(), "1G".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let supported = match d.create_container(None::<bollard::query_parameters::CreateContainerOptions>, probe).await
        {
            Ok(c) => {
                let _ = d
                    .remove_container(
                        &c.id,
                        Some(bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() }),
                    )
                    .await;
                true
            }
            Err(_) => false,
        };
        let mut config = SandboxConfig::new(repo.path(), IMAGE);
        config.limits.disk_bytes = 128 << 20;
        let opened = reproagent::sandbox::open(reproagent::sandbox::Choice::Docker, config).await.expect("open");
        if supported {
            assert!(opened.reason.contains("disk quota 128 MiB"), "{}", opened.reason);
            let out = sh(opened.sandbox.as_ref(), "dd if=/dev/zero of=/tmp/fill bs=1M count=256").await;
            assert!(!out.success(), "256 MiB were written under a 128 MiB quota: {out:?}");
        } else {
            assert!(
                opened.reason.contains("no disk quota: the storage driver does not support one (")
                    && opened.reason.contains("storage-opt"),
                "{}",
                opened.reason
            );
            assert!(sh(opened.sandbox.as_ref(), "true").await.success(), "the sandbox still runs without a quota");
        }
        opened.sandbox.close().await.expect("close");
    }

    /// Ctrl-C on `reproagent sandbox exec`: the CLI removes its container before exiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_container_left_after_interrupt() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.read().await;
        let repo = make_repo();
        let session = format!("interrupt-{}", std::process::id());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["sandbox", "exec", "--sandbox", "docker", "--image", IMAGE, "--session", &session, "--repo"])
            .arg(repo.path())
            .args(["--", "sleep", "120"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let start = Instant::now();
        while left(&session).await.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(30), "the container never appeared");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await; // let the exec start
                                                               // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().expect("wait");
        assert!(!status.success());
        assert!(start.elapsed() < Duration::from_secs(60));
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().expect("stderr"), &mut err).expect("read");
        assert!(err.contains("interrupted"), "{err}");
        assert!(left(&session).await.is_empty(), "left after Ctrl-C");
    }

    /// `reproagent sandbox clean` removes containers a killed process left behind, and
    /// spares those of a live one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clean_removes_leftovers_and_spares_live_owners() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.write().await;
        let repo = make_repo();
        // A live run's container: this process owns it.
        let (sb, live) = open_session(repo.path()).await;
        // A killed run's: `sandbox exec`, then SIGKILL, so nothing of it cleans up.
        let killed = format!("{live}-killed");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["sandbox", "exec", "--sandbox", "docker", "--image", IMAGE, "--session", &killed, "--repo"])
            .arg(repo.path())
            .args(["--", "sleep", "120"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let start = Instant::now();
        while left(&killed).await.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(60), "the killed run never made its container");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert_eq!(left(&killed).await.len(), 1);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["sandbox", "clean", "--json"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let removed = v["removed"].as_array().expect("array");
        assert!(removed.iter().any(|n| n.as_str().is_some_and(|n| n.ends_with(&killed))), "{v}");
        assert!(
            !removed.iter().any(|n| n.as_str().is_some_and(|n| n.ends_with(&live))),
            "a live run's container was removed: {v}"
        );
        assert!(left(&killed).await.is_empty());
        assert_eq!(left(&live).await.len(), 1, "a live run's container was removed");
        sb.close().await.expect("close");
    }

    /// `sandbox prepare` builds an image from the manifests (here: compiling Java
    /// offline), tags it by their hash, and reuses it until they change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prepare_builds_then_reuses() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.read().await;
        let repo = make_repo();
        std::fs::write(repo.path().join("pom.xml"), format!("<project><!-- {} --></project>\n", std::process::id()))
            .expect("pom");
        let d = dk::connect().await.expect("docker");
        let run = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
                .args(args)
                .arg(repo.path())
                .output()
                .expect("run")
        };
        let first = run(&["sandbox", "prepare", "--json", "--base-image", IMAGE]);
        assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
        let p: serde_json::Value = serde_json::from_slice(&first.stdout).expect("json");
        let tag = p["image"].as_str().expect("image").to_string();
        assert_eq!(p["reused"], false, "{p}");
        assert_eq!(p["steps"][0]["step"]["because"], "pom.xml");
        assert!(p["steps"][0]["step"]["command"].as_str().unwrap_or("").contains("javac"));
        // The compiled classes are in the image, and the sandbox opens on it.
        let mut config = SandboxConfig::new(repo.path(), tag.clone());
        config.limits.cpus = 2.0;
        let sb = dk::DockerSandbox::open(config).await.expect("open on the prepared image");
        let out = sh(&sb, "ls target/classes/demo").await;
        assert_eq!(out.stdout.trim(), "Calc.class", "{out:?}");
        sb.close().await.expect("close");
        let second = run(&["sandbox", "prepare", "--base-image", IMAGE]);
        assert!(second.status.success());
        assert!(String::from_utf8_lossy(&second.stdout).contains("up to date"), "{second:?}");
        assert_eq!(std::fs::read_to_string(repo.path().join(".reproagent/sandbox-image")).expect("record").trim(), tag);
        let _ = d.remove_image(&tag, None::<bollard::query_parameters::RemoveImageOptions>, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auto_choice_says_why() {
        if skip_docker() {
            return;
        }
        let _engine = ENGINE.read().await;
        let repo = make_repo();
        use reproagent::sandbox::{open, Choice};
        let o = open(Choice::Auto, SandboxConfig::new(repo.path(), IMAGE)).await.expect("open");
        assert_eq!(o.sandbox.kind(), SandboxKind::Docker, "{}", o.reason);
        assert!(o.reason.contains("is ready"), "{}", o.reason);
        o.sandbox.close().await.expect("close");
        let o =
            open(Choice::Auto, SandboxConfig::new(repo.path(), "reproagent-env:does-not-exist")).await.expect("open");
        assert_eq!(o.sandbox.kind(), SandboxKind::Local);
        assert!(o.reason.contains("not built"), "{}", o.reason);
        o.sandbox.close().await.expect("close");
    }
}

/// A process that leaves the command's group (`setsid`) and keeps its stdout and stderr
/// open: the run still returns at once, with all the output the command printed, and the
/// escaped process does not outlive it (the command's PID namespace ends with it, so it
/// never holds the pipes past the command's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_output_is_kept_when_an_escaped_process_holds_the_pipe() {
    let repo = make_repo();
    let sb = open(SandboxKind::Local, repo.path(), None).await;
    // The command exits once the sleep has left its group (a new session); the sleep
    // holds both pipes.
    let start = Instant::now();
    let req =
        ExecRequest::shell("echo before; setsid sh -c 'echo $$ > esc.pid; exec sleep 8' & while [ ! -s esc.pid ]; do sleep 0.05; done; rm esc.pid; echo after; echo err >&2").timeout(Duration::from_secs(60));
    let out = sb.exec(&req).await.expect("exec");
    assert!(start.elapsed() < Duration::from_secs(7), "took {:?}", start.elapsed());
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "before\nafter\n", "{out:?}");
    assert_eq!(out.stderr, "err\n", "{out:?}");
    // A glob, so the shell itself lists /proc: its init and itself, nothing else.
    let ps = sb.exec(&ExecRequest::shell("cd /proc && echo [0-9]*")).await.expect("exec");
    assert_eq!(ps.stdout.trim(), "1 2", "the escaped process or the host's are visible: {ps:?}");
    // The timeout kills the group; the escaped process dies with the namespace.
    let start = Instant::now();
    let req = ExecRequest::shell("echo started; setsid sh -c 'echo $$ > esc.pid; exec sleep 8' & while [ ! -s esc.pid ]; do sleep 0.05; done; rm esc.pid; sleep 100").timeout(Duration::from_secs(2));
    let out = sb.exec(&req).await.expect("exec");
    assert!(start.elapsed() < Duration::from_secs(7), "took {:?}", start.elapsed());
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.stdout, "started\n", "{out:?}");
    sb.close().await.expect("close");
}

/// Ctrl-C on `reproagent sandbox exec --sandbox local`: the process group dies and the
/// temporary copy is removed.
#[test]
fn local_interrupt_kills_the_group_and_removes_the_copy() {
    local_signal_kills_the_group_and_removes_the_copy(libc::SIGINT, 130);
}

#[test]
fn local_sigterm_kills_the_group_and_removes_the_copy() {
    local_signal_kills_the_group_and_removes_the_copy(libc::SIGTERM, 143);
}

fn local_signal_kills_the_group_and_removes_the_copy(sig: i32, want: i32) {
    let repo = make_repo();
    // The command cannot write outside its copy: its probes go into the copy.
    let line = "sleep 120 & pwd > wd; wait";
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["sandbox", "exec", "--sandbox", "local", "--repo"])
        .arg(repo.path())
        .args(["--", "sh", "-c", line])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let wd_file = crate::common::wait_for_sandbox_file(child.id(), "repo/wd", 30);
    let wd = PathBuf::from(std::fs::read_to_string(&wd_file).expect("wd").trim());
    assert!(wd.exists());
    // The sleep's pid there is its pid in the sandbox's own PID namespace: find it here
    // by its working directory (the copy) and its name.
    let pids = crate::common::processes_in(&wd, "sleep");
    assert_eq!(pids.len(), 1, "one sandboxed sleep: {pids:?}");
    let pid = pids[0];
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(child.wait().expect("wait").code(), Some(want));
    // SIGKILL is delivered when the process next runs: give a loaded machine a moment.
    let alive = || crate::common::alive(pid);
    let start = Instant::now();
    while alive() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(), "the sandboxed sleep {pid} survived signal {sig}");
    assert!(!wd.exists(), "the copy {} was left behind", wd.display());
}
