//! Ctrl-C, and a sandbox that dies mid-run, during `reproagent reproduce`: each ends with
//! a clear outcome and reason, the artifacts made so far are kept, and nothing of the
//! sandbox is left behind (no container, no temporary copy, no process).
//!
//! The issue is py-slug's with a `time.sleep(60)` before the failing call, so the test
//! is still running in the sandbox when the signal (or the `docker rm -f`) comes. The
//! model pipeline runs the same checks with the scripted server playing the model, and
//! one more: Ctrl-C while a model call blocks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use reproagent::sandbox::{docker as dk, CONTAINER_LABEL};
use serde_json::Value;

use crate::common::*;
use crate::pipeline::{cause, loc, plan, write_test};
use crate::sandbox::{skip_docker, ENGINE, IMAGE};
use crate::support::scripted_server::{Reply, ScriptedServer};

/// py-slug's issue, its snippet sleeping first; `extra` goes before the sleep.
fn sleepy_issue(extra: &str) -> String {
    format!(
        "# slugify crashes on a blank title\n\nCalling `slugify` with a title made only of spaces crashes:\n\n\
         ```python\nimport time\nfrom textkit.slug import slugify\n{extra}time.sleep(60)\nassert slugify(\"   \") == \"\"\n```\n\n\
         ```\nTraceback (most recent call last):\n  File \"<stdin>\", line 5, in <module>\n  \
         File \"/src/textkit/textkit/slug.py\", line 11, in slugify\n    first = words[0]\nIndexError: list index out of range\n```\n"
    )
}

struct Run {
    child: Child,
    repo: tempfile::TempDir,
    _issue: tempfile::TempDir,
}

/// Start `reproduce --model none` on a copy of py-slug with the sleepy issue.
fn start(sandbox: &str, extra: &str) -> Run {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    index_with(repo.path(), 2, false);
    let issue = tempfile::tempdir().unwrap();
    let file = issue.path().join("sleepy.md");
    std::fs::write(&file, sleepy_issue(extra)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reproagent"));
    cmd.args(["reproduce", "--model", "none", "--json", "--sandbox", sandbox, "--issue"])
        .arg(&file)
        .arg("-C")
        .arg(repo.path());
    if sandbox == "docker" {
        cmd.args(["--image", IMAGE]);
    }
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    Run { child, repo, _issue: issue }
}

fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The run's directory, once it exists.
fn run_dir(repo: &Path) -> Option<PathBuf> {
    std::fs::read_dir(repo.join(".reproagent/runs")).ok()?.flatten().map(|e| e.path()).next()
}

/// Wait for the process to exit, at most `secs`; its exit code and stderr.
fn finish(run: &mut Run, secs: u64) -> (Option<i32>, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = run.child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = run.child.kill();
            panic!("reproduce did not exit within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(run.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), err)
}

fn read_json(dir: &Path, name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))).unwrap()
}

/// The earlier stages' artifacts are all there, with the outcome.
fn assert_kept(dir: &Path) {
    for a in ["localization.json", "root_cause.json", "test_plan.json", "outcome.json", "report.md"] {
        assert!(dir.join(a).exists(), "{a} missing from {}", dir.display());
    }
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// The sandbox containers a process made (their session id starts with its pid).
fn containers_of(pid: u32) -> Vec<String> {
    block_on(async {
        let d = dk::connect().await.expect("docker");
        let filters = std::collections::HashMap::from([("label".to_string(), vec![CONTAINER_LABEL.to_string()])]);
        let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let prefix = format!("{pid}-");
        d.list_containers(Some(opts))
            .await
            .expect("list")
            .into_iter()
            .filter(|c| {
                c.labels.as_ref().and_then(|l| l.get(dk::SESSION_LABEL)).is_some_and(|s| s.starts_with(&prefix))
            })
            .filter_map(|c| c.id)
            .collect()
    })
}

/// Whether pytest runs in the container (the test has started and sleeps).
fn pytest_runs(id: &str) -> bool {
    block_on(async {
        let d = dk::connect().await.expect("docker");
        let top = d.top_processes(id, None::<bollard::query_parameters::TopOptions>).await;
        top.ok().and_then(|t| t.processes).is_some_and(|ps| ps.iter().flatten().any(|c| c.contains("pytest")))
    })
}

/// Wait for the container of `run` and for its test to be running; the container id.
fn wait_for_test_in_container(run: &Run) -> String {
    let pid = run.child.id();
    let mut id = String::new();
    wait_until("the sandbox container", 60, || {
        id = containers_of(pid).into_iter().next().unwrap_or_default();
        !id.is_empty()
    });
    wait_until("pytest in the container", 60, || pytest_runs(&id));
    id
}

#[test]
fn ctrl_c_during_a_docker_run_removes_the_container_and_records_the_interrupt() {
    if skip_docker() {
        return;
    }
    let _engine = ENGINE.blocking_read();
    let mut run = start("docker", "");
    let pid = run.child.id();
    wait_for_test_in_container(&run);
    let sent = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let (code, err) = finish(&mut run, 10);
    assert_eq!(code, Some(130), "{err}");
    assert!(sent.elapsed() < Duration::from_secs(10));
    assert!(err.contains("interrupted (Ctrl-C)"), "{err}");
    assert!(containers_of(pid).is_empty(), "a container of the run is left");
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert_kept(&dir);
    let o = read_json(&dir, "outcome.json");
    assert_eq!(o["status"], "error", "{o}");
    assert_eq!(o["reason"], "interrupted (Ctrl-C) during generation", "{o}");
    assert!(std::fs::read_to_string(dir.join("report.md")).unwrap().contains("interrupted (Ctrl-C) during generation"));
}

#[test]
fn ctrl_c_during_a_local_run_kills_the_group_and_removes_the_copy() {
    // The test cannot write outside its copy: it leaves its probe in the copy's root.
    let extra =
        "import os\nopen(\"probe\", \"w\").write(str(os.getpid()) + \" \" + os.getcwd() + \"\\n\")\n".to_string();
    let mut run = start("local", &extra);
    let probe_file = wait_for_sandbox_file(run.child.id(), "repo/probe", 60);
    let text = std::fs::read_to_string(&probe_file).unwrap();
    let (_, cwd) = text.trim_end().split_once(' ').unwrap();
    let cwd = PathBuf::from(cwd);
    assert!(cwd.exists());
    // The pid in the probe is the test's pid in the sandbox's own PID namespace: the
    // host's pids of what runs in the copy.
    let test_pids = processes_in(&cwd, "");
    assert!(!test_pids.is_empty(), "nothing runs in the copy");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGINT) };
    let (code, err) = finish(&mut run, 10);
    assert_eq!(code, Some(130), "{err}");
    let left: Vec<i32> = test_pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "the sleeping test {left:?} survived Ctrl-C");
    assert!(!cwd.exists(), "the sandbox copy {} was left behind", cwd.display());
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert_kept(&dir);
    let o = read_json(&dir, "outcome.json");
    assert_eq!(o["status"], "error", "{o}");
    assert_eq!(o["reason"], "interrupted (Ctrl-C) during generation", "{o}");
}

#[test]
fn a_container_removed_mid_run_ends_in_an_error_that_names_the_sandbox() {
    if skip_docker() {
        return;
    }
    let _engine = ENGINE.blocking_read();
    let mut run = start("docker", "");
    let pid = run.child.id();
    let id = wait_for_test_in_container(&run);
    block_on(async {
        let d = dk::connect().await.expect("docker");
        d.remove_container(&id, Some(RemoveContainerOptions { force: true, ..Default::default() }))
            .await
            .expect("docker rm -f");
    });
    let (code, err) = finish(&mut run, 30);
    let mut out = String::new();
    std::io::Read::read_to_string(run.child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(code, Some(1), "{out}{err}");
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert_kept(&dir);
    let o = read_json(&dir, "outcome.json");
    assert_eq!(o["status"], "error", "{o}");
    let reason = o["reason"].as_str().unwrap();
    assert!(reason.contains("sandbox container") && reason.contains(&id[..12]) && reason.contains("gone"), "{reason}");
    assert!(containers_of(pid).is_empty(), "a container of the run is left");
}

// ---- The model pipeline, with the scripted server on 127.0.0.1 playing the model ----

/// Start `reproduce --model test-model` on py-slug, the model being `script` on the
/// scripted server.
fn start_pipeline(sandbox: &str, script: Vec<Reply>) -> (Run, ScriptedServer) {
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    index_with(repo.path(), 2, false);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reproagent"));
    cmd.env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL").env_remove("REPROAGENT_MODEL");
    cmd.args([
        "reproduce",
        "--model",
        "test-model",
        "--base-url",
        &server.base_url(),
        "--json",
        "--sandbox",
        sandbox,
        "--issue",
    ])
    .arg(fixture("bugs/py-slug/issue.md"))
    .arg("-C")
    .arg(repo.path());
    if sandbox == "docker" {
        cmd.args(["--image", IMAGE]);
    }
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    (Run { child, repo, _issue: tempfile::tempdir().unwrap() }, server)
}

/// The analysis stages' artifacts, then a test that sleeps before the failing call.
fn sleepy_pipeline_script() -> Vec<Reply> {
    vec![
        loc("textkit/slug.py", "slugify", "words[0] on an empty list"),
        cause("slugify indexes words[0] without checking for no words", "textkit/slug.py", "slugify"),
        plan("pytest", "tests/test_issue_blank_slug.py", "IndexError", Some("list index out of range")),
        write_test("import time\nfrom textkit.slug import slugify\n\n\ndef test_blank():\n    time.sleep(60)\n    assert slugify(\"   \") == \"\"\n"),
    ]
}

/// The model call blocks (the endpoint answers in a minute): the signal still ends the
/// run at once, and the outcome names the stage that was waiting.
fn signal_during_a_blocking_model_call(sig: libc::c_int, code: i32, name: &str) {
    let script = vec![
        loc("textkit/slug.py", "slugify", "words[0] on an empty list"),
        cause("never sent in time", "textkit/slug.py", "slugify").delay(Duration::from_secs(60)),
    ];
    let (mut run, server) = start_pipeline("local", script);
    wait_until("the root-cause call", 60, || server.requests().len() >= 2);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(run.child.id() as i32, sig) };
    let (got, err) = finish(&mut run, 10);
    assert_eq!(got, Some(code), "{err}");
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert!(dir.join("localization.json").exists());
    let o = read_json(&dir, "outcome.json");
    assert_eq!(o["status"], "error", "{o}");
    assert_eq!(o["reason"], format!("interrupted ({name}) during root_cause"), "{o}");
}

#[test]
fn ctrl_c_during_a_blocking_model_call_ends_the_pipeline_run() {
    signal_during_a_blocking_model_call(libc::SIGINT, 130, "Ctrl-C");
}

#[test]
fn sigterm_during_a_blocking_model_call_ends_the_pipeline_run() {
    signal_during_a_blocking_model_call(libc::SIGTERM, 143, "SIGTERM");
}

#[test]
fn ctrl_c_during_pipeline_generation_in_docker_removes_the_container() {
    if skip_docker() {
        return;
    }
    let _engine = ENGINE.blocking_read();
    let (mut run, _server) = start_pipeline("docker", sleepy_pipeline_script());
    let pid = run.child.id();
    wait_for_test_in_container(&run);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let (code, err) = finish(&mut run, 10);
    assert_eq!(code, Some(130), "{err}");
    assert!(containers_of(pid).is_empty(), "a container of the run is left");
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert_kept(&dir);
    assert_eq!(read_json(&dir, "outcome.json")["reason"], "interrupted (Ctrl-C) during generation");
}

#[test]
fn a_container_removed_mid_pipeline_run_ends_in_an_error_that_names_the_sandbox() {
    if skip_docker() {
        return;
    }
    let _engine = ENGINE.blocking_read();
    let (mut run, server) = start_pipeline("docker", sleepy_pipeline_script());
    let pid = run.child.id();
    let id = wait_for_test_in_container(&run);
    block_on(async {
        let d = dk::connect().await.expect("docker");
        d.remove_container(&id, Some(RemoveContainerOptions { force: true, ..Default::default() }))
            .await
            .expect("docker rm -f");
    });
    let (code, err) = finish(&mut run, 30);
    assert_eq!(code, Some(1), "{err}");
    let dir = run_dir(run.repo.path()).expect("run dir");
    assert_kept(&dir);
    let o = read_json(&dir, "outcome.json");
    assert_eq!(o["status"], "error", "{o}");
    let reason = o["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("generation stage") && reason.contains("sandbox container") && reason.contains(&id[..12]),
        "{reason}"
    );
    // The run stopped there: no model call after the sandbox broke.
    assert_eq!(server.requests().len(), 4);
    assert!(containers_of(pid).is_empty(), "a container of the run is left");
}

// ---- bench run ----

/// Ctrl-C on `bench run` while an external reproducer runs: its process group is
/// killed, the case's temporary tree deleted, and the process exits 130.
#[test]
fn ctrl_c_during_bench_run_kills_the_command_and_deletes_the_tree() {
    let probe = tempfile::tempdir().unwrap();
    let file = probe.path().join("probe");
    let out = tempfile::tempdir().unwrap();
    let command = format!("sleep 60 & echo $! $(pwd) > {}; wait", file.display());
    let child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args([
            "bench",
            "run",
            "--adapter",
            "command",
            "--command",
            &command,
            "--no-verify",
            "--sandbox",
            "local",
            "--case",
            "py-median-even",
            "--suite",
        ])
        .arg(fixture("bench"))
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the reproducer command", 60, || std::fs::read_to_string(&file).is_ok_and(|s| s.trim().contains(' ')));
    let text = std::fs::read_to_string(&file).unwrap();
    let (sleep_pid, cwd) = text.trim().split_once(' ').unwrap();
    let sleep_pid: i32 = sleep_pid.parse().unwrap();
    let cwd = PathBuf::from(cwd);
    assert!(cwd.exists() && cwd.display().to_string().contains("reproagent-bench-"), "{}", cwd.display());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut run = Run { child, repo: tempfile::tempdir().unwrap(), _issue: probe };
    let (code, err) = finish(&mut run, 10);
    assert_eq!(code, Some(130), "{err}");
    let alive = std::fs::read_to_string(format!("/proc/{sleep_pid}/status"))
        .is_ok_and(|s| !s.lines().any(|l| l.starts_with("State:") && l.contains('Z')));
    assert!(!alive, "the reproducer's sleep {sleep_pid} survived Ctrl-C");
    assert!(!cwd.exists(), "the case tree {} was left behind", cwd.display());
}
