//! Shared test helpers: temp-dir repositories, indexing, dumping relations.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cozo::DataValue;
use reproagent::index::{self, Options, Summary};
use reproagent::store;

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(rel)
}

/// Copy a directory tree (files and directories only) into a fresh temp dir.
pub fn copy_tree(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_into(from, dir.path());
    dir
}

pub fn copy_into(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".reproagent" {
            continue;
        }
        let t = entry.file_type().unwrap();
        let dest = to.join(&name);
        if t.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_into(&entry.path(), &dest);
        } else if t.is_file() {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

pub fn index_with(root: &Path, threads: usize, full: bool) -> Summary {
    let mut o = Options::new(root);
    o.threads = Some(threads);
    o.full = full;
    index::run(&o).unwrap()
}

fn cell(v: &DataValue) -> String {
    match v {
        DataValue::Null => "-".into(),
        DataValue::Str(s) if s.is_empty() => "-".into(),
        DataValue::Str(s) => s.to_string(),
        DataValue::Num(n) => match n {
            cozo::Num::Int(i) => i.to_string(),
            cozo::Num::Float(f) => format!("{f}"),
        },
        DataValue::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every row of every public relation, as `relation col col ...` lines.
pub fn dump_all(root: &Path) -> BTreeSet<String> {
    let s = store::open(&store::db_path(root)).unwrap();
    let mut out = BTreeSet::new();
    for (rel, _, _) in store::RELATIONS {
        for row in s.export(rel).unwrap().rows {
            let cells: Vec<String> = row.iter().map(cell).collect();
            out.insert(format!("{rel} {}", cells.join(" ")));
        }
    }
    out
}

/// The facts in the format of `fixtures/<lang>/<name>.expected`.
pub fn dump_expected_format(root: &Path) -> BTreeSet<String> {
    let s = store::open(&store::db_path(root)).unwrap();
    let q = |script: &str| -> Vec<Vec<String>> {
        s.query(script, Default::default()).unwrap().rows.iter().map(|r| r.iter().map(cell).collect()).collect()
    };
    let mut out = BTreeSet::new();
    for r in q("?[id, kind] := *entity{id, kind}") {
        out.insert(format!("entity {} {}", r[0], r[1]));
    }
    for r in q("?[caller, callee, line, how] := *calls{caller, callee, line, how}") {
        out.insert(format!("calls {} {} {} {}", r[0], r[1], r[2], r[3]));
    }
    for r in q("?[child, base_name, base] := *inherits{child, base_name, base}") {
        out.insert(format!("inherits {} {} {}", r[0], r[1], r[2]));
    }
    for r in q("?[file, line, module, name, alias, target] := *imports{file, line, module, name, alias, target}") {
        out.insert(format!("imports {} {} {} {} {} {}", r[0], r[1], r[2], r[3], r[4], r[5]));
    }
    out
}

/// Read an expected file: one fact a line; `#` starts a comment line.
pub fn read_expected(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The local sandbox dirs (`$TMPDIR/reproagent-sandbox-*`) whose owner file names `pid`.
/// A sandboxed command cannot write outside its copy, so tests find its probes here.
pub fn local_sandboxes_of(pid: u32) -> Vec<PathBuf> {
    local_sandboxes_in(&std::env::temp_dir(), pid)
}

/// The local sandbox dirs under `tmp` whose owner file names `pid`.
pub fn local_sandboxes_in(tmp: &Path, pid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        if !e.file_name().to_string_lossy().starts_with(reproagent::sandbox::owner::LOCAL_PREFIX) {
            continue;
        }
        let owner = std::fs::read_to_string(e.path().join(reproagent::sandbox::owner::OWNER_FILE)).unwrap_or_default();
        if owner.split(':').next() == Some(pid.to_string().as_str()) {
            out.push(e.path());
        }
    }
    out
}

/// The first file `rel` that appears in a local sandbox of `pid` within `secs`.
pub fn wait_for_sandbox_file(pid: u32, rel: &str, secs: u64) -> PathBuf {
    wait_for_sandbox_file_in(&std::env::temp_dir(), pid, rel, secs)
}

/// [`wait_for_sandbox_file`] for sandboxes made under `tmp`.
pub fn wait_for_sandbox_file_in(tmp: &Path, pid: u32, rel: &str, secs: u64) -> PathBuf {
    let start = std::time::Instant::now();
    loop {
        for d in local_sandboxes_in(tmp, pid) {
            let p = d.join(rel);
            if std::fs::read_to_string(&p).is_ok_and(|s| s.ends_with('\n')) {
                return p;
            }
        }
        assert!(start.elapsed().as_secs() < secs, "no {rel} in a local sandbox of {pid} within {secs} s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The host pids of the processes named `comm` (any name: `""`) whose working directory
/// is under `dir`: a local sandbox's command runs in its own PID namespace, so the pid it
/// prints (`$!`, `os.getpid()`) is not the host's.
pub fn processes_in(dir: &Path, comm: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let in_dir = std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c.starts_with(dir));
        if in_dir && (comm.is_empty() || std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == comm))
        {
            v.push(pid);
        }
    }
    v
}

/// Is `pid` alive (not gone, not a zombie)?
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|s| !s.lines().any(|l| l.starts_with("State:") && l.contains('Z')))
}

/// A key-free request in the local sandbox with the defaults the tests share (120 s a run,
/// no write, no resume, the environment resolved by the run); vary a field with
/// `Request { timeout_secs: 300, ..keyfree_request(...) }`.
pub fn keyfree_request(root: &Path, issue_file: &Path, issue_text: &str) -> reproagent::reproduce::keyfree::Request {
    reproagent::reproduce::keyfree::Request {
        root: root.to_path_buf(),
        issue_file: issue_file.to_path_buf(),
        issue_text: issue_text.to_string(),
        sandbox: reproagent::sandbox::Choice::Local,
        image: None,
        write: false,
        timeout_secs: 120,
        resume: None,
        env: Default::default(),
        environment: None,
    }
}
