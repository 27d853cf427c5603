//! Issue 15, part 1: what a hostile repository can do, and what stops it. One test per
//! finding, each written to fail on the code before the fix: symlinks out of the root
//! (index, search, snippets, sandbox writes, `--write`), the local sandbox's file system
//! (`/proc/$PPID/cwd`, the Docker socket), FIFOs, `.git/`, SIGTERM of `sandbox exec`
//! and `serve` (local and Docker), leftovers of killed runs, a truncated `graph.db`,
//! concurrent `index` runs, non-UTF-8 names and limits.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use reproagent::confine;
use reproagent::index::{self, Options};
use reproagent::sandbox::{self, local::LocalSandbox, owner, Sandbox, SandboxConfig};

use crate::common::*;
use crate::sandbox::{skip_docker, ENGINE, IMAGE};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reproagent"))
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin().args(args).current_dir(dir).stdin(Stdio::null()).output().expect("run reproagent")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// A repository and, beside it (outside), a directory of secrets.
struct Evil {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    outside: PathBuf,
}

fn evil() -> Evil {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let outside = tmp.path().join("outside");
    crate::common::copy_into(&fixture("evil"), {
        std::fs::create_dir_all(&repo).unwrap();
        &repo
    });
    write(&outside, "secret.py", "def leaked_secret_fn():\n    return \"TOPSECRETWORD root:x:0:0\"\n");
    Evil { _tmp: tmp, repo, outside }
}

// ------------------------------------------------------------------ High 1: symlinks out

#[test]
fn index_skips_symlinks_out_and_search_and_find_entity_never_show_their_content() {
    let e = evil();
    std::os::unix::fs::symlink(e.outside.join("secret.py"), e.repo.join("passwd.py")).unwrap();
    std::os::unix::fs::symlink(&e.outside, e.repo.join("outdir")).unwrap();
    // A symlink that stays inside is still followed.
    std::os::unix::fs::symlink("good.py", e.repo.join("alias.py")).unwrap();
    let s = index::run(&Options::new(&e.repo)).expect("index");
    let reason = |p: &str| s.skipped.iter().find(|k| k.path == p).map(|k| k.reason.clone()).unwrap_or_default();
    assert!(reason("passwd.py").contains("symlink out of the repository"), "{:?}", s.skipped);
    assert!(reason("outdir").contains("symlink out of the repository"), "{:?}", s.skipped);
    let store = reproagent::store::open(&reproagent::store::db_path(&e.repo.canonicalize().unwrap())).unwrap();
    let files = store.export("file").unwrap();
    let paths: Vec<String> = files.rows.iter().map(|r| r[0].get_str().unwrap().to_string()).collect();
    assert!(paths.contains(&"alias.py".to_string()), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("passwd") || p.starts_with("outdir")), "{paths:?}");

    let o = run_in(&e.repo, &["search", "TOPSECRETWORD"]);
    assert!(!text(&o).contains("root:x:0:0") && !text(&o).contains("leaked_secret_fn"), "{}", text(&o));
    let o = run_in(&e.repo, &["tool", "find_entity", r#"{"name":"leaked_secret_fn"}"#]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["entities"], serde_json::json!([]), "{v}");
}

/// The indexer, the tools' walk and the sandbox copy apply one rule: a symlink that stays
/// inside is followed (index, tools) or kept as a link that stays in the copy; one leading
/// out, or dangling, is left out, and each of the three reports the same paths for the
/// same reasons.
#[test]
fn the_indexer_the_tools_and_the_sandbox_copy_skip_and_report_the_same_symlinks() {
    let e = evil();
    std::fs::create_dir_all(e.repo.join("pkg")).unwrap();
    write(&e.repo, "pkg/inner.py", "def inner():\n    return 1\n");
    std::os::unix::fs::symlink(e.outside.join("secret.py"), e.repo.join("passwd.py")).unwrap();
    std::os::unix::fs::symlink(&e.outside, e.repo.join("outdir")).unwrap();
    std::os::unix::fs::symlink("../../outside/secret.py", e.repo.join("pkg/up.py")).unwrap();
    std::os::unix::fs::symlink("good.py", e.repo.join("alias.py")).unwrap();
    std::os::unix::fs::symlink(e.repo.join("pkg"), e.repo.join("pkg_abs")).unwrap();
    // The fixture's own links (copy_into copies files only).
    std::os::unix::fs::symlink("missing_target.py", e.repo.join("dangling.py")).unwrap();
    std::os::unix::fs::symlink("..", e.repo.join("loop/back")).unwrap();

    // The indexer.
    let s = index::run(&Options::new(&e.repo)).expect("index");
    let links = |v: Vec<(String, String)>| -> Vec<(String, String)> {
        v.into_iter().filter(|(_, why)| why.contains("symlink")).collect()
    };
    let by_index = links(s.skipped.iter().map(|k| (k.path.clone(), k.reason.clone())).collect());
    let paths: Vec<&str> = by_index.iter().map(|(p, _)| p.as_str()).collect();
    // pkg_abs leads inside, so it is followed, and pkg/up.py is met through it too.
    assert_eq!(
        paths,
        ["dangling.py", "loop/back", "outdir", "passwd.py", "pkg/up.py", "pkg_abs/up.py"],
        "{by_index:?}"
    );

    // The tools' walk (find, grep, ls) reports the same, for the same reasons.
    let reg = reproagent::tools::all();
    let ctx = reproagent::tools::ToolContext::new(&e.repo).unwrap();
    let skipped_of = |tool: &str, args: serde_json::Value| -> Vec<(String, String)> {
        let out = reg.call(&ctx, tool, args);
        assert!(!out.is_error, "{tool}: {}", out.value);
        let list = out.value["skipped"].as_array().cloned().unwrap_or_default();
        links(
            list.iter()
                .map(|k| (k["path"].as_str().unwrap().to_string(), k["reason"].as_str().unwrap().to_string()))
                .collect(),
        )
    };
    assert_eq!(skipped_of("find", serde_json::json!({"pattern": "*.py"})), by_index);
    assert_eq!(skipped_of("grep", serde_json::json!({"pattern": "TOPSECRETWORD"})), by_index);
    let out = reg.call(&ctx, "find", serde_json::json!({"pattern": "*.py", "limit": 1000}));
    let found: Vec<String> =
        out.value["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
    let store = reproagent::store::open(&reproagent::store::db_path(&e.repo.canonicalize().unwrap())).unwrap();
    let indexed: Vec<String> =
        store.export("file").unwrap().rows.iter().map(|r| r[0].get_str().unwrap().to_string()).collect();
    // What the walk gave the indexer: the files it stored and those it read and skipped
    // for their content (binary, not UTF-8).
    let mut walked = indexed.clone();
    walked.extend(s.skipped.iter().filter(|k| !k.reason.contains("symlink")).map(|k| k.path.clone()));
    walked.sort();
    let mut found_py = found;
    found_py.sort();
    assert_eq!(found_py, walked, "find and the index walk see the same Python files");
    assert!(
        indexed.contains(&"alias.py".to_string()) && indexed.contains(&"pkg_abs/inner.py".to_string()),
        "{indexed:?}"
    );
    let out = reg.call(&ctx, "grep", serde_json::json!({"pattern": "TOPSECRETWORD"}));
    assert_eq!(out.value["total"], 0, "{}", out.value);

    // The sandbox copy: links inside kept (the absolute one made relative, into the copy),
    // the rest left out with the same reasons.
    let dst = tempfile::tempdir().unwrap();
    let stats = reproagent::sandbox::copy::copy_tree(&e.repo, dst.path()).unwrap();
    let by_copy: Vec<(String, String)> = stats.skipped.iter().map(|k| (k.path.clone(), k.reason.clone())).collect();
    let expected: Vec<(String, String)> =
        by_index.iter().filter(|(p, _)| p != "loop/back" && p != "pkg_abs/up.py").cloned().collect();
    assert_eq!(by_copy, expected, "the copy keeps loop/back (-> ..) and pkg_abs as links inside, not followed");
    assert_eq!(std::fs::read_link(dst.path().join("pkg_abs")).unwrap(), Path::new("pkg"));
    assert_eq!(std::fs::read_link(dst.path().join("alias.py")).unwrap(), Path::new("good.py"));
    for gone in ["passwd.py", "outdir", "pkg/up.py", "dangling.py"] {
        assert!(std::fs::symlink_metadata(dst.path().join(gone)).is_err(), "{gone} was copied");
    }
    assert!(dst
        .path()
        .join("pkg_abs/inner.py")
        .canonicalize()
        .unwrap()
        .starts_with(dst.path().canonicalize().unwrap()));
}

#[test]
fn a_search_snippet_is_not_read_through_a_symlink_swapped_in_after_index() {
    let e = evil();
    write(&e.repo, "swap.py", "def snippetword_fn():\n    return 'snippetword here'\n");
    index::run(&Options::new(&e.repo)).expect("index");
    std::fs::remove_file(e.repo.join("swap.py")).unwrap();
    write(&e.outside, "swap.py", "def snippetword_fn():\n    return 'snippetword SECRET_LINE'\n");
    std::os::unix::fs::symlink(e.outside.join("swap.py"), e.repo.join("swap.py")).unwrap();
    let o = run_in(&e.repo, &["search", "snippetword", "--json"]);
    assert!(!text(&o).contains("SECRET_LINE"), "{}", text(&o));
}

// ------------------------------------------------------------------ Medium 5: FIFOs, .git

#[test]
fn a_fifo_is_refused_by_type_by_read_file_grep_and_index_without_blocking() {
    let e = evil();
    let fifo = e.repo.join("pipe.py");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let s = index::run(&Options::new(&e.repo)).expect("index");
    assert!(s.skipped.iter().any(|k| k.path == "pipe.py" && k.reason.contains("FIFO")), "{:?}", s.skipped);
    for (tool, args) in [("read_file", r#"{"path":"pipe.py"}"#), ("grep", r#"{"pattern":"def"}"#)] {
        let mut child = bin()
            .args(["tool", tool, args])
            .current_dir(&e.repo)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{tool} blocked on the FIFO");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = child.wait_with_output().unwrap();
        if tool == "read_file" {
            assert!(!o.status.success() && text(&o).contains("FIFO, not a regular file"), "{}", text(&o));
        } else {
            assert!(o.status.success(), "{}", text(&o));
        }
    }
}

/// The files `reproduce` reads to choose a runner and a configuration (`pytest.ini`,
/// `pyproject.toml`, `manage.py`, `reproagent.toml`) go through the checked reader: a FIFO
/// does not block and a symlink out of the repository is not read.
#[test]
fn runner_and_config_files_are_read_through_the_checked_reader() {
    let e = evil();
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    };
    mkfifo(&e.repo.join("pytest.ini"));
    mkfifo(&e.repo.join("reproagent.toml"));
    write(&e.outside, "manage.py", "import django\n");
    write(&e.outside, "pyproject.toml", "[tool.pytest.ini_options]\ntestpaths = [\"outside\"]\n");
    std::os::unix::fs::symlink(e.outside.join("manage.py"), e.repo.join("manage.py")).unwrap();
    std::os::unix::fs::symlink(e.outside.join("pyproject.toml"), e.repo.join("pyproject.toml")).unwrap();
    let repo = e.repo.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pytest = sandbox::runners::PytestConfig::read(&repo);
        let django = sandbox::runners::is_django_project(&repo);
        let model = reproagent::model::config::FileConfig::load(&repo).map(|_| ()).map_err(|e| e.to_string());
        let env = sandbox::env::load_toml(&repo).map(|_| ()).map_err(|e| e.to_string());
        let _ = tx.send((pytest.map(|c| c.testpaths), django, model, env));
    });
    let (pytest, django, model, env) =
        rx.recv_timeout(Duration::from_secs(20)).expect("a read blocked on a FIFO in the repository");
    assert_eq!(pytest, None, "pytest.ini (a FIFO) or pyproject.toml (a symlink out) was read");
    assert!(!django, "manage.py, a symlink out of the repository, was read");
    for r in [model, env] {
        let why = r.expect_err("a FIFO named reproagent.toml is refused");
        assert!(why.contains("FIFO"), "{why}");
    }
}

#[test]
fn dot_git_is_not_readable_through_the_tools() {
    let e = evil();
    write(&e.repo, ".git/config", "[remote \"origin\"]\n\turl = https://token@example.invalid/x\n");
    let o = run_in(&e.repo, &["tool", "read_file", r#"{"path":".git/config"}"#]);
    assert!(!o.status.success() && text(&o).contains("never read") && !text(&o).contains("token@"), "{}", text(&o));
}

// ------------------------------------------------------------------ Medium 3: writes

#[test]
fn sandbox_writes_and_write_never_follow_a_symlink_out() {
    let e = evil();
    std::os::unix::fs::symlink(&e.outside, e.repo.join("tests")).unwrap();
    std::os::unix::fs::symlink(e.outside.join("created.py"), e.repo.join("dangling_out.py")).unwrap();
    let sb = LocalSandbox::open(SandboxConfig::new(&e.repo, "unused")).expect("open");
    // The copy leaves both links out (the one walk rule), so a write of tests/... lands in
    // a real directory of the copy.
    let copy = PathBuf::from(sb.workdir());
    assert!(
        std::fs::symlink_metadata(copy.join("tests")).is_err()
            && std::fs::symlink_metadata(copy.join("dangling_out.py")).is_err()
    );
    // Links a test run could make in the copy are never written through either.
    std::os::unix::fs::symlink(&e.outside, copy.join("made_by_a_run")).unwrap();
    std::os::unix::fs::symlink(e.outside.join("created.py"), copy.join("dangling_made.py")).unwrap();
    block_on(async {
        sb.write_file("tests/test_repro.py", b"def test_x(): pass\n")
            .await
            .expect("a write into the copy's own tests/");
        let r = sb.write_file("made_by_a_run/test_repro.py", b"def test_x(): pass\n").await;
        assert!(r.is_err(), "the write followed made_by_a_run -> outside");
        let r = sb.write_file("dangling_made.py", b"x = 1\n").await;
        assert!(r.is_err(), "the write followed a dangling symlink");
        sb.write_file("newdir/test_ok.py", b"x = 1\n").await.expect("a plain write inside the copy");
        sb.close().await.unwrap();
    });
    assert!(!e.outside.join("test_repro.py").exists() && !e.outside.join("created.py").exists());
    // `reproduce --write`'s path: never through a symlink, never over a file.
    let r = confine::write_inside(&e.repo, "dangling_out.py", b"x", false);
    assert!(matches!(r, Err(confine::WriteError::Symlink(_))), "{r:?}");
    let r = confine::write_inside(&e.repo, "tests/test_new.py", b"x", false);
    assert!(matches!(r, Err(confine::WriteError::Symlink(_))), "{r:?}");
    let r = confine::write_inside(&e.repo, "good.py", b"x", false);
    assert!(matches!(r, Err(confine::WriteError::Exists(_))), "{r:?}");
    assert!(!e.outside.join("created.py").exists() && !e.outside.join("test_new.py").exists());
    confine::write_inside(&e.repo, "deep/new/test_a.py", b"x", false).expect("a plain new file");
}

// ------------------------------------------------------------------ High 2: the local sandbox's file system

#[test]
fn a_local_sandboxed_command_cannot_write_the_users_tree_through_proc_ppid_cwd() {
    let e = evil();
    let code = include_str!("../../fixtures/evil/escape_proc_cwd.txt");
    let repo = e.repo.to_str().unwrap();
    let o = run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--", "python3", "-c", code, repo]);
    let t = text(&o);
    assert!(!e.repo.join("PWNED").exists(), "the sandboxed command wrote into the user's tree: {t}");
    // Through its own processes' cwd links it reaches only its own copy (the file check
    // above); no path into the user's tree takes a write.
    assert!(o.status.success() && !t.lines().any(|l| l.starts_with("WROTE") && l.contains(repo)), "{t}");
    assert!(t.contains("refused Read-only file system"), "{t}");
    assert!(!e.repo.join("in_copy.txt").exists());
    // Its own PID namespace: the host's processes (this test, the CLI) are not in /proc.
    let seen: usize = t
        .lines()
        .find_map(|l| l.rsplit_once("pids seen: ").map(|(_, n)| n.trim().parse().unwrap()))
        .expect("the count line");
    assert!(seen < 10, "the sandbox sees {seen} processes: {t}");
}

/// Shared memory: `/dev/shm` inside is a private 64 MB tmpfs, so filling it stops there
/// and leaves nothing in the host's `/dev/shm`.
#[test]
fn a_local_sandboxed_command_gets_a_private_bounded_dev_shm() {
    let e = evil();
    let name = format!("reproagent-shm-test-{}", std::process::id());
    let code = format!(
        "import os\np = '/dev/shm/{name}'\nf = open(p, 'wb')\ntry:\n    for _ in range(200): f.write(b'x' * (1 << 20)); f.flush()\n    print('wrote 200 MB')\nexcept OSError as e:\n    print('stopped:', e.strerror)\nprint('size', os.path.getsize(p))\n"
    );
    let o = run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--", "python3", "-c", &code]);
    let t = text(&o);
    assert!(t.contains("stopped: No space left on device"), "200 MB went into /dev/shm: {t}");
    let size: u64 = t.lines().find_map(|l| l.strip_prefix("size ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    assert!(size > 0 && size <= 64 << 20, "{size} bytes: {t}");
    assert!(!Path::new("/dev/shm").join(&name).exists(), "the write reached the host's /dev/shm");
}

#[test]
fn a_local_sandboxed_command_cannot_connect_to_the_docker_socket_but_has_loopback() {
    let e = evil();
    // Only a connect is tried: nothing is ever sent to the engine.
    let code = include_str!("../../fixtures/evil/docker_socket_probe.txt");
    let o = run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--", "python3", "-c", code]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("CONNECTED"), "the Docker socket answered inside the sandbox: {t}");
    assert!(t.contains("loopback ok"), "{t}");
    if Path::new("/var/run/docker.sock").exists() {
        assert!(t.contains("refused /var/run/docker.sock"), "{t}");
    }
}

// ------------------------------------------------------------------ Medium 4: signals and leftovers

fn wait_exit(child: &mut std::process::Child, secs: u64) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            panic!("did not exit within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_of_serve_removes_its_local_copy() {
    let e = evil();
    let mut child = bin()
        .args(["serve", "--sandbox", "local", "-C"])
        .arg(&e.repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while local_sandboxes_of(child.id()).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "serve never opened its sandbox");
        std::thread::sleep(Duration::from_millis(50));
    }
    let dirs = local_sandboxes_of(child.id());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_exit(&mut child, 15), Some(143));
    for d in dirs {
        assert!(!d.exists(), "serve left its copy {}", d.display());
    }
}

fn containers_owned_by(pid: u32) -> Vec<String> {
    block_on(async {
        let d = sandbox::docker::connect().await.expect("docker");
        let filters =
            std::collections::HashMap::from([("label".to_string(), vec![sandbox::CONTAINER_LABEL.to_string()])]);
        let opts = bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let prefix = format!("{pid}:");
        d.list_containers(Some(opts))
            .await
            .expect("list")
            .into_iter()
            .filter(|c| {
                c.labels.as_ref().and_then(|l| l.get(owner::OWNER_LABEL)).is_some_and(|s| s.starts_with(&prefix))
            })
            .filter_map(|c| c.id)
            .collect()
    })
}

fn sigterm_removes_the_container(args: &[&str], repo: &Path) {
    let mut child = bin()
        .args(args)
        .current_dir(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while containers_owned_by(child.id()).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "{args:?} exited before its container appeared");
        assert!(start.elapsed() < Duration::from_secs(60), "{args:?} never made its container");
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_exit(&mut child, 30), Some(143), "{args:?}");
    assert!(containers_owned_by(child.id()).is_empty(), "{args:?} left its container");
}

#[test]
fn sigterm_of_sandbox_exec_and_serve_removes_their_docker_container() {
    if skip_docker() {
        return;
    }
    let _engine = ENGINE.blocking_read();
    let e = evil();
    sigterm_removes_the_container(
        &["sandbox", "exec", "--sandbox", "docker", "--image", IMAGE, "--", "sleep", "120"],
        &e.repo,
    );
    sigterm_removes_the_container(&["serve", "--sandbox", "docker", "--image", IMAGE], &e.repo);
}

#[test]
fn sandbox_clean_removes_a_killed_runs_copy_and_what_runs_in_it_and_spares_a_live_one() {
    let repo = evil();
    // A private temp dir: the clean below must never touch other runs' copies.
    let tmp = tempfile::tempdir().unwrap();
    let mut child = bin()
        .env("TMPDIR", tmp.path())
        .args(["sandbox", "exec", "--sandbox", "local", "--", "sh", "-c", "sleep 120 & echo $! > pid; wait"])
        .current_dir(&repo.repo)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = wait_for_sandbox_file_in(tmp.path(), child.id(), "repo/pid", 30);
    let dead_dir = pid_file.parent().unwrap().parent().unwrap().to_path_buf();
    // Its pid on the host (the file has the pid in the sandbox's own PID namespace).
    let sleepers = processes_in(&dead_dir, "sleep");
    assert_eq!(sleepers.len(), 1, "{sleepers:?}");
    let sleeper = sleepers[0];
    child.kill().unwrap(); // SIGKILL: no cleanup of its own
    child.wait().unwrap();
    assert!(dead_dir.exists(), "kill -9 leaves the copy (the case `sandbox clean` is for)");
    // A live run's copy: owned by this test process.
    let live = tempfile::Builder::new().prefix(owner::LOCAL_PREFIX).tempdir_in(tmp.path()).unwrap();
    std::fs::write(live.path().join(owner::OWNER_FILE), owner::this_process()).unwrap();
    // One made by an older reproagent (no owner file): it may be in use, so it stays.
    let legacy = tmp.path().join(format!("{}legacy", owner::LOCAL_PREFIX));
    std::fs::create_dir(&legacy).unwrap();

    let (removed, errors) = owner::clean_local(tmp.path());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(removed.iter().any(|l| l.dir == dead_dir), "{removed:?}");
    assert!(!dead_dir.exists());
    assert!(live.path().exists(), "a live run's copy was removed");
    assert!(legacy.exists(), "a copy without an owner file was removed");
    assert!(!alive(sleeper), "the killed run's background process {sleeper} still runs");
}

// ------------------------------------------------------------------ Medium 8: a damaged graph.db

#[test]
fn a_truncated_graph_db_is_reported_by_readers_and_rebuilt_by_plain_index() {
    let e = evil();
    for i in 0..300 {
        write(
            &e.repo,
            &format!("pkg/m{i}.py"),
            &format!("def f{i}():\n    return g{i}()\n\ndef g{i}():\n    return {i}\n"),
        );
    }
    index::run(&Options::new(&e.repo)).expect("index");
    let db = e.repo.join(".reproagent/graph.db");
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(8192).unwrap();
    drop(f);
    let o = run_in(&e.repo, &["query", "?[p] := *file{path: p}"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("damaged") && text(&o).contains("run `reproagent index`"), "{}", text(&o));
    let o = run_in(&e.repo, &["tool", "find_entity", r#"{"name":"f1"}"#]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("damaged"), "{}", text(&o));
    let o = run_in(&e.repo, &["index", "."]);
    assert!(o.status.success() && text(&o).contains("rebuilt from scratch"), "{}", text(&o));
    let o = run_in(&e.repo, &["tool", "find_entity", r#"{"name":"f1"}"#]);
    assert!(o.status.success() && text(&o).contains("pkg/m1.py:f1"), "{}", text(&o));
}

// ------------------------------------------------------------------ Low

#[test]
fn a_second_index_run_waits_for_the_first_and_names_it() {
    let e = evil();
    let root = e.repo.canonicalize().unwrap();
    let lock = index::IndexLock::take(&root).expect("lock");
    let mut child =
        bin().args(["index", "."]).current_dir(&e.repo).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "index ran while another held the lock");
    drop(lock);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "waiting for another `reproagent index` of this repository (pid {})",
            std::process::id()
        )),
        "{}",
        text(&o)
    );
    // Two at once: both succeed.
    let kids: Vec<_> = (0..2)
        .map(|_| {
            bin()
                .args(["index", "--full", "."])
                .current_dir(&e.repo)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let o = k.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
}

#[test]
fn a_dead_runs_temp_graph_is_removed_and_a_live_ones_kept() {
    let e = evil();
    index::run(&Options::new(&e.repo)).expect("index");
    let dir = e.repo.join(".reproagent");
    std::fs::write(dir.join("graph.db.tmp-4194304"), b"left by a killed run").unwrap();
    std::fs::create_dir_all(dir.join("search.tmp-4194305")).unwrap();
    std::fs::write(dir.join("search.tmp-4194305/meta.json"), b"{").unwrap();
    // A plain, incremental run (nothing changed) removes them too.
    let s = index::run(&Options::new(&e.repo)).expect("index");
    assert!(s.mode != "full" && s.parsed == 0, "nothing changed: not a full run: {}", s.mode);
    assert!(!dir.join("graph.db.tmp-4194304").exists(), "a dead run's temp graph was kept");
    assert!(!dir.join("search.tmp-4194305").exists(), "a dead run's temp keyword index was kept");
    let mut opts = Options::new(&e.repo);
    opts.full = true;
    // Another live process's temp file is its own.
    let other = Command::new("sleep").arg("30").spawn().unwrap();
    let other_tmp = dir.join(format!("graph.db.tmp-{}", other.id()));
    std::fs::write(&other_tmp, b"a live run's").unwrap();
    index::run(&opts).expect("index --full");
    assert!(other_tmp.exists(), "a live run's temp file was removed");
    let mut other = other;
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn a_non_utf8_file_name_is_skipped_with_a_reason_and_does_not_make_the_index_stale() {
    let e = evil();
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(b"bad\xff.py");
    std::fs::write(e.repo.join(name), "def weird():\n    pass\n").unwrap();
    let s = index::run(&Options::new(&e.repo)).expect("index");
    assert!(s.skipped.iter().any(|k| k.reason.contains("not UTF-8") && k.path.starts_with("bad")), "{:?}", s.skipped);
    let o = run_in(&e.repo, &["tool", "find_entity", r#"{"name":"weird"}"#]);
    assert!(!text(&o).contains("stale"), "{}", text(&o));
}

#[test]
fn limits_of_zero_or_unbounded_are_refused() {
    let e = evil();
    let o = run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--memory-mb", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--memory-mb"), "{}", text(&o));
    let o =
        run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--timeout", "18446744073709551615", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = run_in(&e.repo, &["sandbox", "exec", "--sandbox", "local", "--disk-mb", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let mut config = SandboxConfig::new(&e.repo, "unused");
    config.limits.memory_bytes = 0;
    assert!(LocalSandbox::open(config).is_err(), "a 0 memory limit was accepted");
    let mut config = SandboxConfig::new(&e.repo, "unused");
    config.limits.disk_bytes = 0;
    let r = LocalSandbox::open(config);
    assert!(r.as_ref().is_err_and(|e| e.to_string().contains("disk limit")), "a 0 disk limit was accepted");
    let sb = LocalSandbox::open(SandboxConfig::new(&e.repo, "unused")).expect("open");
    block_on(async {
        for t in [0, u64::MAX] {
            let args = sandbox::tools::RunCommandArgs { command: "true".into(), cwd: None, timeout_secs: t };
            let r = sandbox::tools::run_command(&sb, &args).await;
            assert!(
                r.as_ref().is_err_and(|e| e.to_string().contains("out of range")),
                "timeout {t}: {:?}",
                r.map(|o| o.exit_code)
            );
        }
        sb.close().await.unwrap();
    });
}

#[test]
fn manifests_read_for_the_image_tag_and_the_framework_never_come_through_a_symlink_out() {
    let e = evil();
    let before = reproagent::sandbox::image::tag_for(&e.repo, "base");
    write(&e.outside, "requirements.txt", "secret-package==1\n");
    std::os::unix::fs::symlink(e.outside.join("requirements.txt"), e.repo.join("requirements.txt")).unwrap();
    assert_eq!(
        reproagent::sandbox::image::tag_for(&e.repo, "base"),
        before,
        "a manifest outside the repository was read"
    );
    assert!(confine::read_text(&e.repo, "requirements.txt").is_none());
    assert_eq!(
        confine::read_text(&e.repo, "good.py").as_deref(),
        std::fs::read_to_string(e.repo.join("good.py")).ok().as_deref()
    );
}
