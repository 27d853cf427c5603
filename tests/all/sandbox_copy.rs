//! What a sandbox copy of the repository holds (local copy and Docker upload alike): no
//! `.git`, no `.reproagent`, no caches or virtualenvs, but the ignored files tests need
//! (`node_modules`, a built extension, `*.egg-info`, dependency jars); and a write in the
//! copy never reaches the user's file, cloned (reflinked) or copied.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use reproagent::sandbox::copy::{copy_tree, repo_entries};
use reproagent::sandbox::{docker as dk, local::LocalSandbox, ExecRequest, Sandbox, SandboxConfig};

use crate::sandbox::{skip_docker, ENGINE, IMAGE};

/// Files that must be in every copy: tracked code, and ignored files a test needs.
const KEPT: &[&str] = &[
    "calc.py",
    ".gitignore",
    "tests/test_calc.py",
    "node_modules/left-pad/index.js",
    "node_modules/left-pad/package.json",
    "calc_ext.cpython-311-x86_64-linux-gnu.so",
    "demo.egg-info/entry_points.txt",
    "target/dependency/dep.jar",
    "build/keep.txt",
];

/// Paths that must never be in a copy.
const LEFT_OUT: &[&str] = &[
    ".git",
    ".reproagent",
    "__pycache__",
    "tests/__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".tox",
    ".venv",
    "node_modules/.cache",
];

fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn git(root: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A repository as a developer's checkout looks after some work: a real `.git`, our
/// index, caches, a virtualenv, and ignored files its tests need.
fn lived_in_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "calc.py", "def add(a, b):\n    return a + b\n");
    write(root, "tests/test_calc.py", "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n");
    write(root, "build/keep.txt", "tracked, under a directory named build\n");
    write(
        root,
        ".gitignore",
        "node_modules/\n*.so\n*.egg-info/\ntarget/\n__pycache__/\n.venv/\n.pytest_cache/\n.mypy_cache/\n.tox/\n",
    );
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "init"]);
    write(root, ".reproagent/graph.db", "not really a database");
    write(root, "__pycache__/calc.cpython-311.pyc", "\0\0");
    write(root, "tests/__pycache__/test_calc.cpython-311.pyc", "\0\0");
    write(root, ".pytest_cache/v/cache/lastfailed", "{}");
    write(root, ".mypy_cache/3.11/calc.meta.json", "{}");
    write(root, ".tox/py311/pyvenv.cfg", "home = /usr/bin\n");
    write(root, ".venv/pyvenv.cfg", "home = /usr/bin\n");
    write(root, ".venv/lib/python3.11/site-packages/x.py", "");
    write(root, "node_modules/left-pad/index.js", "module.exports = (s, n) => String(s).padStart(n);\n");
    write(root, "node_modules/left-pad/package.json", "{\"name\": \"left-pad\", \"main\": \"index.js\"}\n");
    write(root, "node_modules/.cache/babel/entry.json", "{}");
    write(root, "calc_ext.cpython-311-x86_64-linux-gnu.so", "\x7fELF");
    write(root, "demo.egg-info/entry_points.txt", "[console_scripts]\ndemo = calc:add\n");
    write(root, "target/dependency/dep.jar", "PK");
    dir
}

fn check_listing(listing: &str) {
    let paths: Vec<&str> = listing.lines().map(|l| l.trim_start_matches("./")).collect();
    for k in KEPT {
        assert!(paths.contains(k), "{k} missing from the copy: {paths:?}");
    }
    for l in LEFT_OUT {
        assert!(!paths.iter().any(|p| p == l || p.starts_with(&format!("{l}/"))), "{l} is in the copy: {paths:?}");
    }
}

const LIST: &str = "find . -mindepth 1 | sort";

#[test]
fn the_rule_keeps_needed_ignored_files_and_leaves_out_state_and_caches() {
    let repo = lived_in_repo();
    let entries: Vec<String> = repo_entries(repo.path()).unwrap().iter().map(|p| p.display().to_string()).collect();
    check_listing(&entries.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_copy_follows_the_rule_and_tests_still_find_node_modules() {
    let repo = lived_in_repo();
    let sb = LocalSandbox::open(SandboxConfig::new(repo.path(), IMAGE)).unwrap();
    let out = sb.exec(&ExecRequest::shell(LIST).timeout(Duration::from_secs(30))).await.unwrap();
    assert!(out.success(), "{out:?}");
    check_listing(&out.stdout);
    // The kept node_modules is what `require` finds, inside the copy.
    let node = sb
        .exec(
            &ExecRequest::shell("node -e \"console.log(require.resolve('left-pad'), require('left-pad')(7, 3))\"")
                .timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(node.success(), "{node:?}");
    assert!(node.stdout.starts_with(sb.workdir()) && node.stdout.trim_end().ends_with("  7"), "{node:?}");
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_upload_follows_the_rule() {
    if skip_docker() {
        eprintln!("REPROAGENT_SKIP_DOCKER=1: skipped");
        return;
    }
    let _engine = ENGINE.read().await;
    let repo = lived_in_repo();
    let sb = dk::DockerSandbox::open(SandboxConfig::new(repo.path(), IMAGE)).await.unwrap_or_else(|e| {
        panic!("cannot open the Docker sandbox ({e}); if the image is missing run `bash .ci/build-images.sh`")
    });
    let out = sb.exec(&ExecRequest::shell(LIST).timeout(Duration::from_secs(30))).await.unwrap();
    assert!(out.success(), "{out:?}");
    check_listing(&out.stdout);
    sb.close().await.unwrap();
}

/// A test that rewrites, appends to, truncates or deletes files of the copy leaves the
/// user's files as they were: the copy shares no inode with them (no hard links).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_the_local_copy_never_reach_the_users_files() {
    let repo = lived_in_repo();
    let before: Vec<(String, Vec<u8>)> =
        KEPT.iter().map(|k| (k.to_string(), std::fs::read(repo.path().join(k)).unwrap())).collect();
    let sb = LocalSandbox::open(SandboxConfig::new(repo.path(), IMAGE)).unwrap();
    let copy = Path::new(sb.workdir()).to_path_buf();
    for k in KEPT {
        let (a, b) = (std::fs::metadata(repo.path().join(k)).unwrap(), std::fs::metadata(copy.join(k)).unwrap());
        assert_ne!((a.dev(), a.ino()), (b.dev(), b.ino()), "{k} is the user's own inode");
        assert_eq!(a.nlink(), 1, "{k} gained a hard link");
    }
    let line = "echo more >> calc.py && printf 'x' > tests/test_calc.py && : > node_modules/left-pad/index.js \
                && python3 -c \"open('demo.egg-info/entry_points.txt', 'r+b').write(b'XXXX')\" && rm target/dependency/dep.jar";
    let out = sb.exec(&ExecRequest::shell(line).timeout(Duration::from_secs(30))).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(copy.join("calc.py")).unwrap(), "def add(a, b):\n    return a + b\nmore\n");
    sb.close().await.unwrap();
    for (k, bytes) in before {
        assert_eq!(std::fs::read(repo.path().join(&k)).unwrap(), bytes, "{k} changed in the user's tree");
    }
}

/// The same at the file-system level, where the copy is cloned when it can be: run on a
/// file system that shares extents (XFS, btrfs) by pointing `REPROAGENT_TEST_REFLINK_DIR`
/// at a directory there; elsewhere (ext4, tmpfs) every file is copied and none cloned.
#[test]
fn a_clone_is_copy_on_write() {
    let base = std::env::var_os("REPROAGENT_TEST_REFLINK_DIR").map(std::path::PathBuf::from);
    let t = match &base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    let big: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    write(&src, "big.txt", &big);
    write(&src, "small.py", "x = 1\n");
    write(&src, "empty", "");
    let stats = copy_tree(&src, &dst).unwrap();
    assert_eq!(stats.files, 3);
    assert_eq!(stats.bytes, big.len() as u64 + 6);
    if base.is_some() {
        // Every non-empty file was cloned.
        assert_eq!(stats.reflinked, 2, "{stats:?}: REPROAGENT_TEST_REFLINK_DIR is not on a file system that clones");
    }
    eprintln!("{stats:?}");
    // Write into the middle of the clone, then truncate the other: the sources stay.
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(dst.join("big.txt")).unwrap();
    f.seek(SeekFrom::Start(4096)).unwrap();
    f.write_all(b"CHANGED").unwrap();
    drop(f);
    std::fs::write(dst.join("small.py"), "").unwrap();
    assert_eq!(std::fs::read_to_string(src.join("big.txt")).unwrap(), big);
    assert_eq!(std::fs::read_to_string(src.join("small.py")).unwrap(), "x = 1\n");
    assert!(std::fs::read_to_string(dst.join("big.txt")).unwrap().contains("CHANGED"));
}
