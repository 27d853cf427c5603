//! `bench mine`, `bench import` and `bench export`: cases from a git history built
//! here, and an SWT-bench instance round-trip, scored with the local sandbox (Python
//! tests run with the system python3 and its pytest).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn reproagent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reproagent")).args(args).output().expect("run reproagent")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(repo: &Path, files: &[(&str, &str)]) {
    for (path, body) in files {
        let p = repo.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
    }
}

/// Write the files and commit them; returns the commit's sha.
fn commit(repo: &Path, files: &[(&str, &str)], message: &str) -> String {
    write(repo, files);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
    git(repo, &["rev-parse", "HEAD"])
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .expect("json")
}

const STATS_BUGGY: &str =
    "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef median(xs):\n    s = sorted(xs)\n    return s[len(s) // 2]\n";
const STATS_FIXED: &str = "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef median(xs):\n    s = sorted(xs)\n    n = len(s)\n    if n % 2 == 0:\n        return (s[n // 2 - 1] + s[n // 2]) / 2\n    return s[n // 2]\n";

/// A Python package whose history holds one good case and one commit of each kind the
/// stages drop.
fn history(repo: &Path) {
    git(repo, &["init", "-q", "-b", "main"]);
    commit(
        repo,
        &[
            ("conftest.py", ""),
            ("pkg/__init__.py", ""),
            ("pkg/stats.py", STATS_BUGGY),
            (
                "tests/test_mean.py",
                "from pkg.stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n",
            ),
        ],
        "Initial commit",
    );
    commit(
        repo,
        &[
            ("pkg/stats.py", STATS_FIXED),
            (
                "tests/test_median.py",
                "from pkg.stats import median\n\n\ndef test_median_even():\n    assert median([4, 1, 3, 2]) == 2.5\n",
            ),
        ],
        "Fix median of even-length lists\n\nFixes #12.",
    );
    commit(
        repo,
        &[("tests/test_more.py", "from pkg.stats import mean\n\n\ndef test_mean_one():\n    assert mean([5]) == 5\n")],
        "More tests",
    );
    commit(
        repo,
        &[("pkg/stats.py", &format!("\"\"\"Small statistics.\"\"\"\n\n{STATS_FIXED}"))],
        "Document the module",
    );
    let big: String = (0..30).map(|i| format!("def f{i}(x):\n    return x + {i}\n\n\n")).collect();
    commit(
        repo,
        &[
            ("pkg/big.py", &big),
            ("tests/test_big.py", "from pkg.big import f1\n\n\ndef test_f1():\n    assert f1(1) == 2\n"),
        ],
        "Add many helpers",
    );
    commit(repo, &[("README.md", "Small statistics.\n")], "Add a README");
    // A code change whose test already passes before it: no bug shown.
    let refactored = format!(
        "\"\"\"Small statistics.\"\"\"\n\n{}",
        STATS_FIXED.replace("sum(xs) / len(xs)", "float(sum(xs)) / len(xs)")
    );
    commit(
        repo,
        &[
            ("pkg/stats.py", &refactored),
            (
                "tests/test_mean_float.py",
                "from pkg.stats import mean\n\n\ndef test_mean_float():\n    assert mean([2, 3]) == 2.5\n",
            ),
        ],
        "Refactor mean",
    );
}

#[test]
fn mine_keeps_the_fail_to_pass_fix_and_gold_scores_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    history(&repo);
    let issues = tmp.path().join("issues");
    write(&issues, &[("12.md", "median([1, 2, 3, 4]) returns 3 instead of 2.5\n")]);
    let out = tmp.path().join("mined");
    let o = reproagent(&[
        "bench",
        "mine",
        repo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--max-lines",
        "20",
        "--issues",
        issues.to_str().unwrap(),
        "--sandbox",
        "local",
        "--timeout",
        "120",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("gold test fail-to-pass") && stdout.contains("1 cases in"), "{}", text(&o));

    let record = read_json(&out.join("mine.json"));
    let stages: Vec<(String, u64)> = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s["kept"].as_u64().unwrap()))
        .collect();
    let want = [
        ("commits scanned", 7),
        ("has a parent", 6),
        ("touches supported source", 5),
        ("changes code and tests", 3),
        ("not too large", 2),
        ("gold test fail-to-pass", 1),
    ];
    assert_eq!(stages, want.iter().map(|(n, k)| (n.to_string(), *k)).collect::<Vec<_>>(), "{record:#}");
    let reason_of = |subject: &str| -> (String, String) {
        let d = record["dropped"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["subject"] == subject)
            .unwrap_or_else(|| panic!("{subject} not dropped: {record:#}"));
        (d["stage"].as_str().unwrap().to_string(), d["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(reason_of("Initial commit").0, "has a parent");
    assert_eq!(reason_of("Add a README").0, "touches supported source");
    assert_eq!(reason_of("More tests"), ("changes code and tests".into(), "only tests changed".into()));
    assert_eq!(reason_of("Document the module"), ("changes code and tests".into(), "only code changed".into()));
    let (stage, why) = reason_of("Add many helpers");
    assert_eq!(stage, "not too large");
    assert!(why.contains("code lines changed (at most 20)"), "{why}");
    let (stage, why) = reason_of("Refactor mean");
    assert_eq!(stage, "gold test fail-to-pass");
    assert!(why.contains("passes on the buggy tree"), "{why}");
    assert_eq!(record["dropped"].as_array().unwrap().len(), 6);

    // The one case: the fix, over its parent.
    let cases = record["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1);
    let id = cases[0].as_str().unwrap();
    let fix = git(&repo, &["rev-parse", "HEAD~5"]);
    assert_eq!(id, format!("{}-fix-median-of-even-length-lists", &fix[..7]));
    let dirs: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs, vec![id.to_string()], "dropped cases are removed");
    let case = read_json(&out.join(id).join("case.json"));
    assert_eq!(case["language"], "python");
    assert_eq!(case["base_commit"].as_str().unwrap(), git(&repo, &["rev-parse", "HEAD~6"]));
    assert_eq!(case["repo"].as_str().unwrap(), std::fs::canonicalize(&repo).unwrap().to_str().unwrap());
    let gold = std::fs::read_to_string(out.join(id).join("gold.patch")).unwrap();
    let test = std::fs::read_to_string(out.join(id).join("test.patch")).unwrap();
    assert!(gold.contains("+++ b/pkg/stats.py") && !gold.contains("tests/"), "{gold}");
    assert!(test.contains("+++ b/tests/test_median.py") && !test.contains("pkg/stats.py"), "{test}");
    let issue = std::fs::read_to_string(out.join(id).join("issue.md")).unwrap();
    assert!(issue.starts_with("# Fix median of even-length lists\n\nFixes #12.\n"), "{issue}");
    assert!(issue.contains("## Issue #12") && issue.contains("returns 3 instead of 2.5"), "{issue}");

    // The gold adapter scores the mined suite 100%.
    let run = tmp.path().join("run");
    let o = reproagent(&[
        "bench",
        "run",
        "--adapter",
        "gold",
        "--suite",
        out.to_str().unwrap(),
        "--sandbox",
        "local",
        "--out",
        run.to_str().unwrap(),
        "--timeout",
        "120",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rec = read_json(&run.join("run.json"));
    let results = rec["cases"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["fail_to_pass"], true, "{rec:#}");
}

#[test]
fn mine_without_verify_keeps_every_candidate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    history(&repo);
    let out = tmp.path().join("mined");
    let o = reproagent(&[
        "bench",
        "mine",
        repo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--max-lines",
        "20",
        "--no-verify",
        "--max-commits",
        "6",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let record = read_json(&out.join("mine.json"));
    let kept: Vec<u64> = record["stages"].as_array().unwrap().iter().map(|s| s["kept"].as_u64().unwrap()).collect();
    // The six newest commits (not the initial one); the verify stage is left out.
    assert_eq!(kept, vec![6, 6, 5, 3, 2]);
    assert_eq!(record["cases"].as_array().unwrap().len(), 2);

    // A re-run into the same OUT over fewer commits: the case it no longer writes is
    // gone from OUT, and what else is there stays.
    let case_dirs = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&out)
            .expect("out")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("case.json").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(case_dirs().len(), 2);
    std::fs::create_dir_all(out.join("notes")).expect("mkdir");
    std::fs::write(out.join("notes/keep.md"), "mine").expect("write");
    let o = reproagent(&[
        "bench",
        "mine",
        repo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--max-lines",
        "20",
        "--no-verify",
        "--max-commits",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let record = read_json(&out.join("mine.json"));
    let cases: Vec<String> =
        record["cases"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    assert_eq!(cases.len(), 1);
    assert_eq!(case_dirs(), cases, "a case of the previous run was left in OUT");
    assert!(out.join("notes/keep.md").exists());
}

/// A repository with a buggy commit (the base) and the fix with its test after it;
/// returns (base, fix).
fn swt_repo(repo: &Path) -> (String, String) {
    git(repo, &["init", "-q", "-b", "main"]);
    let base =
        commit(repo, &[("conftest.py", ""), ("pkg/__init__.py", ""), ("pkg/stats.py", STATS_BUGGY)], "Statistics");
    let fix = commit(
        repo,
        &[
            ("pkg/stats.py", STATS_FIXED),
            (
                "tests/test_median.py",
                "from pkg.stats import median\n\n\ndef test_median_even():\n    assert median([4, 1, 3, 2]) == 2.5\n",
            ),
        ],
        "Fix median",
    );
    (base, fix)
}

fn instance(repo: &Path, base: &str, fix: &str, id: &str) -> Value {
    serde_json::json!({
        "repo": "acme/stats",
        "instance_id": id,
        "base_commit": base,
        "patch": git(repo, &["diff", base, fix, "--", "pkg"]) + "\n",
        "test_patch": git(repo, &["diff", base, fix, "--", "tests"]) + "\n",
        "problem_statement": "median of an even-length list is wrong\n\nmedian([4, 1, 3, 2]) returns 3, expected 2.5.\n",
        "hints_text": "",
        "created_at": "2024-01-02T03:04:05Z",
        "version": "1.0",
        "FAIL_TO_PASS": "[\"tests/test_median.py::test_median_even\"]",
        "PASS_TO_PASS": "[]",
    })
}

#[test]
fn swt_import_run_export_round_trip() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("stats");
    std::fs::create_dir_all(&repo).expect("mkdir");
    let (base, fix) = swt_repo(&repo);
    let file = tmp.path().join("instances.jsonl");
    std::fs::write(&file, serde_json::to_string(&instance(&repo, &base, &fix, "acme__stats-1")).unwrap() + "\n")
        .unwrap();
    let suite = tmp.path().join("suite");
    let o = reproagent(&[
        "bench",
        "import",
        file.to_str().unwrap(),
        "--checkout",
        repo.to_str().unwrap(),
        "--out",
        suite.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 of 1 instances imported"), "{}", text(&o));

    let case = read_json(&suite.join("acme__stats-1").join("case.json"));
    assert_eq!(case["id"], "acme__stats-1");
    assert_eq!(case["language"], "python");
    assert_eq!(case["repo"].as_str().unwrap(), std::fs::canonicalize(&repo).unwrap().to_str().unwrap());
    assert_eq!(case["base_commit"].as_str().unwrap(), base);
    assert_eq!(case["issue_file"], "issue.md");
    assert_eq!(case["gold_patch"], "gold.patch");
    assert_eq!(case["gold_test_patch"], "test.patch");
    assert_eq!(case["fail_to_pass"], serde_json::json!(["tests/test_median.py::test_median_even"]));
    assert_eq!(case["source"]["instance_id"], "acme__stats-1");
    assert_eq!(case["source"]["repo"], "acme/stats");
    assert_eq!(case["source"]["version"], "1.0");
    let issue = std::fs::read_to_string(suite.join("acme__stats-1").join("issue.md")).unwrap();
    assert!(issue.contains("returns 3, expected 2.5"), "{issue}");

    let run = tmp.path().join("run");
    let o = reproagent(&[
        "bench",
        "run",
        "--adapter",
        "gold",
        "--suite",
        suite.to_str().unwrap(),
        "--sandbox",
        "local",
        "--out",
        run.to_str().unwrap(),
        "--timeout",
        "120",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rec = read_json(&run.join("run.json"));
    assert_eq!(rec["cases"][0]["fail_to_pass"], true, "{rec:#}");

    let preds = tmp.path().join("preds.jsonl");
    let o = reproagent(&[
        "bench",
        "export",
        run.to_str().unwrap(),
        "--model-name",
        "gold-test",
        "--out",
        preds.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<Value> =
        std::fs::read_to_string(&preds).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1);
    let p = &lines[0];
    assert_eq!(p["instance_id"], "acme__stats-1");
    assert_eq!(p["model_name_or_path"], "gold-test");
    let patch = p["model_patch"].as_str().unwrap();
    assert!(patch.contains("+++ b/tests/test_median.py") && patch.contains("+def test_median_even"), "{patch}");

    // The patch applies to the base commit and adds the test.
    let check = tmp.path().join("check");
    git(tmp.path(), &["clone", "-q", repo.to_str().unwrap(), check.to_str().unwrap()]);
    git(&check, &["checkout", "-q", &base]);
    std::fs::write(tmp.path().join("model.patch"), patch).unwrap();
    git(&check, &["apply", "--check", tmp.path().join("model.patch").to_str().unwrap()]);
    git(&check, &["apply", tmp.path().join("model.patch").to_str().unwrap()]);
    assert!(check.join("tests/test_median.py").is_file());

    // Without a name: the adapter's; as a JSON array.
    let o = reproagent(&["bench", "export", run.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", text(&o));
    let arr: Value = serde_json::from_slice(&o.stdout).expect("a JSON array");
    assert_eq!(arr[0]["model_name_or_path"], "reproagent-gold");
    assert_eq!(arr[0]["instance_id"], "acme__stats-1");
}

#[test]
fn swt_import_skips_bad_instances_with_the_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repos = tmp.path().join("repos");
    let repo = repos.join("acme__stats");
    std::fs::create_dir_all(&repo).expect("mkdir");
    let (base, fix) = swt_repo(&repo);
    let good = instance(&repo, &base, &fix, "acme__stats-1");
    let mut absent = instance(&repo, &base, &fix, "acme__stats-2");
    absent["base_commit"] = Value::from("0123456789abcdef0123456789abcdef01234567");
    let mut no_patch = instance(&repo, &base, &fix, "acme__stats-3");
    no_patch.as_object_mut().unwrap().remove("patch");
    let mut elsewhere = instance(&repo, &base, &fix, "other__lib-4");
    elsewhere["repo"] = Value::from("other/lib");
    let file = tmp.path().join("instances.json");
    std::fs::write(&file, serde_json::to_string(&vec![good, absent, no_patch, elsewhere]).unwrap()).unwrap();
    let suite = tmp.path().join("suite");
    let o = reproagent(&[
        "bench",
        "import",
        file.to_str().unwrap(),
        "--repos",
        repos.to_str().unwrap(),
        "--out",
        suite.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(
            "skipped acme__stats-2: base commit 0123456789abcdef0123456789abcdef01234567 is not in the checkout"
        ),
        "{}",
        text(&o)
    );
    assert!(stderr.contains("skipped acme__stats-3: missing field `patch`"), "{}", text(&o));
    assert!(stderr.contains("skipped other__lib-4: no checkout of other/lib"), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 of 4 instances imported"), "{}", text(&o));
    assert!(suite.join("acme__stats-1").join("case.json").is_file());
    for skipped in ["acme__stats-2", "acme__stats-3", "other__lib-4"] {
        assert!(!suite.join(skipped).exists(), "{skipped}");
    }
    let report = read_json(&suite.join("import.json"));
    assert_eq!(report["skipped"].as_array().unwrap().len(), 3);

    // Nothing importable: an error with a hint.
    let only_bad = tmp.path().join("bad.jsonl");
    std::fs::write(&only_bad, "{\"instance_id\": \"x\"}\n").unwrap();
    let o = reproagent(&[
        "bench",
        "import",
        only_bad.to_str().unwrap(),
        "--repos",
        repos.to_str().unwrap(),
        "--out",
        suite.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("skipped x: missing field `repo`")
            && stderr.contains("error: no instance")
            && stderr.contains("hint:"),
        "{}",
        text(&o)
    );
}

#[test]
fn bench_mine_and_export_errors_are_one_line_with_a_hint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let plain = tmp.path().to_str().unwrap();
    for args in [vec!["bench", "mine", plain, "--out", plain], vec!["bench", "export", plain]] {
        let o = reproagent(&args);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{}", text(&o));
        assert!(stderr.starts_with("error: ") && stderr.contains("(hint: "), "{}", text(&o));
    }
}
