//! The key-free reproduce mode on fixture bugs in Python, JavaScript and Java: the test it
//! writes fails before the fix and passes after it; an issue with nothing to run is
//! `not reproduced` with the reason; bad input ends with a clear outcome.

use std::path::Path;
use std::process::Command;

use reproagent::reproduce::{keyfree, Outcome, Status};
use reproagent::sandbox::tools::{run_test, RunTestArgs};
use reproagent::sandbox::{self, runners::TestStatus, Choice, SandboxConfig};

use crate::common::*;

fn reproduce_in(root: &Path, issue: &str, choice: Choice, image: Option<&str>, write: bool) -> Outcome {
    index_with(root, 2, false);
    let text = std::fs::read_to_string(issue).unwrap_or_else(|_| issue.to_string());
    keyfree::run(&keyfree::Request {
        sandbox: choice,
        image: image.map(str::to_string),
        write,
        ..keyfree_request(root, Path::new(issue), &text)
    })
    .unwrap()
}

/// Run a test file that exists in `root` with the local sandbox.
pub(crate) fn run_in(root: &Path, file: &str, code: &str, framework: &str) -> TestStatus {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let sb = sandbox::open(Choice::Local, SandboxConfig::new(root, "none")).await.unwrap().sandbox;
        sb.write_file(file, code.as_bytes()).await.unwrap();
        let r = run_test(
            sb.as_ref(),
            root,
            &RunTestArgs {
                file: file.into(),
                test: None,
                framework: Some(framework.into()),
                command: None,
                timeout_secs: 120,
            },
        )
        .await
        .unwrap();
        sb.close().await.unwrap();
        r.status
    })
}

pub(crate) fn apply_fix(root: &Path, patch: &Path) {
    let out = Command::new("git").arg("apply").arg("--unsafe-paths").arg(patch).current_dir(root).output().unwrap();
    assert!(out.status.success(), "fix does not apply: {}", String::from_utf8_lossy(&out.stderr));
}

fn fail_before_pass_after(bug: &str, expected_kind: &str, framework: &str) {
    let repo = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
    let issue = fixture(&format!("bugs/{bug}/issue.md"));
    let o = reproduce_in(repo.path(), issue.to_str().unwrap(), Choice::Local, None, false);
    assert_eq!(o.status, Status::Reproduced, "{bug}: {}", o.reason);
    assert!(o.failure.as_deref().unwrap().contains(expected_kind), "{bug}: {:?}", o.failure);
    let run_dir = Path::new(&o.run_dir);
    for a in [
        "localization.json",
        "root_cause.json",
        "test_plan.json",
        "generation.json",
        "outcome.json",
        "run.json",
        "report.md",
    ] {
        assert!(run_dir.join(a).exists(), "{bug}: {a} missing");
    }
    // One run record for both modes: the key-free run.json reads as the pipeline's.
    let record: reproagent::reproduce::RunRecord =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!((record.mode.as_str(), record.model.model.as_str()), ("keyfree", "none"));
    assert!(record.model_calls.is_empty() && record.cost_usd == Some(0.0));
    let names: Vec<&str> = record.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["localize", "run_test"], "{bug}");
    assert!(record.sandbox.starts_with("local"), "{bug}: {}", record.sandbox);
    let command = o.command.as_deref().unwrap();
    // What a user types: no report plumbing (Java compiles into `.reproagent-run/`).
    assert!(!command.starts_with("rm -rf") && !command.contains("--junitxml"), "{bug}: {command}");
    let generation: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("generation.json")).unwrap()).unwrap();
    assert_eq!(generation["reviews"].as_array().unwrap().len(), 3);
    assert!(generation["reviews"].as_array().unwrap().iter().all(|r| r["passed"] == true));
    // Not written without --write: the user's tree holds no new file.
    let path = o.test_path.clone().unwrap();
    assert!(!repo.path().join(&path).exists());

    // The same test, after the fix, passes.
    let fixed = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
    apply_fix(fixed.path(), &fixture(&format!("bugs/{bug}/fix.patch")));
    assert_eq!(
        run_in(fixed.path(), &path, o.test_code.as_deref().unwrap(), framework),
        TestStatus::Passed,
        "{bug}: the test must pass after the fix"
    );
    // And before it, run alone, it fails.
    let buggy = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
    assert_eq!(run_in(buggy.path(), &path, o.test_code.as_deref().unwrap(), framework), TestStatus::Failed);
}

#[test]
fn python_code_block_with_traceback() {
    fail_before_pass_after("py-slug", "IndexError", "pytest");
}

#[test]
fn python_doctest_session() {
    fail_before_pass_after("py-doctest", "ValueError", "pytest");
}

#[test]
fn javascript_code_block_with_assertion() {
    fail_before_pass_after("js-chunk", "AssertionError", "node-test");
}

#[test]
fn java_snippet_with_stack_trace() {
    fail_before_pass_after("java-percent", "NumberFormatException", "junit4");
}

#[test]
fn an_issue_with_nothing_to_run_is_not_reproduced_with_the_reason() {
    let repo = copy_tree(&fixture("bugs/py-symptom/repo"));
    let o =
        reproduce_in(repo.path(), fixture("bugs/py-symptom/issue.md").to_str().unwrap(), Choice::Local, None, false);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("neither runnable code nor an error"), "{}", o.reason);
    // The stages before the test still left their artifacts and the report.
    assert!(Path::new(&o.run_dir).join("localization.json").exists());
    assert!(std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap().contains("not reproduced"));
}

#[test]
fn the_docker_sandbox_reproduces_too_and_write_puts_the_test_in_place() {
    if std::env::var("REPROAGENT_SKIP_DOCKER").is_ok() {
        eprintln!("REPROAGENT_SKIP_DOCKER set: skipped by hand");
        return;
    }
    // `sandbox clean` (another test) removes every sandbox container: not while we run.
    let _engine = crate::sandbox::ENGINE.blocking_read();
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = reproduce_in(
        repo.path(),
        fixture("bugs/py-slug/issue.md").to_str().unwrap(),
        Choice::Docker,
        Some("reproagent-test:bookworm"),
        true,
    );
    assert_eq!(o.status, Status::Reproduced, "{} (is the image built? bash .ci/build-images.sh)", o.reason);
    assert!(o.written);
    let written = std::fs::read_to_string(repo.path().join(o.test_path.unwrap())).unwrap();
    assert_eq!(written, o.test_code.unwrap());
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(&o.run_dir).join("run.json")).unwrap()).unwrap();
    assert!(run["sandbox"].as_str().unwrap().starts_with("docker"), "{run}");
    assert_eq!(run["model"]["model"], "none");
    assert!(run["sandbox"].as_str().unwrap().contains("disk quota"), "the sandbox line says the disk quota: {run}");
}

#[test]
fn bad_input_ends_with_a_clear_outcome() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = reproduce_in(repo.path(), "  \n", Choice::Local, None, false);
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("does not read as an issue"), "{}", o.reason);

    let java_issue = "Crash in Percent\n\n```java\nint p = Percent.parse(\" 7%\");\n```\n";
    let o = reproduce_in(repo.path(), java_issue, Choice::Local, None, false);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("the issue's code is java but the repository has python"), "{}", o.reason);

    // Code that runs fine today: not reproduced, and the finding says so.
    let fine = "slugify works\n\n```python\nfrom textkit.slug import slugify\nassert slugify('a b') == 'a-b'\n```\n";
    let o = reproduce_in(repo.path(), fine, Choice::Local, None, false);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("runs without the reported error"), "{}", o.reason);

    // A snippet that fails for another reason than the one reported.
    let wrong = "slugify raises KeyError\n\n```python\nfrom textkit.slug import slugify\nslugify(None)\n```\n\nKeyError: 'title'\n";
    let o = reproduce_in(repo.path(), wrong, Choice::Local, None, false);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("fails with AttributeError but the issue reports KeyError"), "{}", o.reason);
}

fn git(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `.reproagent/` carries its own `.gitignore` (`*`): after `index` and `reproduce`, `git
/// status` shows nothing of it, and the user's `.gitignore` is not touched. An existing
/// `.reproagent/` without one gets it on the next run.
#[test]
fn git_status_shows_nothing_of_the_state_dir() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let root = repo.path();
    std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "init"]);
    let status = || git(root, &["status", "--porcelain", "--untracked-files=all", "--ignored=no"]);

    index_with(root, 1, false);
    assert!(root.join(".reproagent/graph.db").exists());
    assert_eq!(status(), "", "git sees the index");
    assert_eq!(std::fs::read_to_string(root.join(".reproagent/.gitignore")).unwrap().lines().last(), Some("*"));
    assert_eq!(
        std::fs::read_to_string(root.join(".gitignore")).unwrap(),
        "*.log\n",
        "the user's .gitignore was changed"
    );

    let o = reproduce_in(root, fixture("bugs/py-slug/issue.md").to_str().unwrap(), Choice::Local, None, false);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert!(Path::new(&o.run_dir).join("report.md").exists());
    assert_eq!(status(), "", "git sees the run");

    // A state dir from before: the next run gives it its .gitignore.
    std::fs::remove_file(root.join(".reproagent/.gitignore")).unwrap();
    assert!(status().contains(".reproagent/graph.db"), "{}", status());
    index_with(root, 1, false);
    assert_eq!(status(), "");
}

/// A reproduce that stops before its first stage (here: no index) leaves nothing behind:
/// no run directory, and no `.reproagent/` where there was none; the error says what to do.
#[test]
fn a_reproduce_with_no_index_leaves_no_run_dir() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let root = repo.path();
    let issue = fixture("bugs/py-slug/issue.md");
    let req = keyfree_request(root, &issue, &std::fs::read_to_string(&issue).unwrap());
    let e = keyfree::run(&req).unwrap_err();
    assert!(e.to_string().contains("no index"), "{e}");
    assert!(!root.join(".reproagent").exists(), "a run with no index left .reproagent/");

    // The CLI: one line with a hint, exit 1, nothing left.
    let out = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["reproduce", "--sandbox", "local", "--issue"])
        .arg(&issue)
        .arg("-C")
        .arg(root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no index") && err.contains("hint:") && err.trim().lines().count() == 1, "{err}");
    assert!(!root.join(".reproagent").exists());

    // An existing state dir whose index is gone: still no run directory.
    index_with(root, 1, false);
    std::fs::remove_file(root.join(".reproagent/graph.db")).unwrap();
    assert!(keyfree::run(&req).is_err());
    let runs = root.join(".reproagent/runs");
    assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(), "an empty run directory was left");
}
