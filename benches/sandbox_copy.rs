//! Sandbox copy benchmark: what opening a sandbox costs on a real checkout, before and
//! after the copy rule of `sandbox::copy` (no `.git`, `.reproagent`, caches, virtualenvs;
//! files cloned where the file system can, on several threads).
//!
//! REPROAGENT_BENCH_CORPUS=/tmp/django cargo bench --bench sandbox_copy
//!
//! The corpus should be a git checkout (`git clone https://github.com/django/django`) so
//! that `.git` is there as in a user's tree. Copies go to `$TMPDIR` (set it to a directory
//! on XFS or btrfs to measure clones). For each mode, alternating, `REPROAGENT_BENCH_RUNS`
//! runs (default 5): the copy's wall time, the process's CPU time (user + system, all
//! threads), the removal of the copy (what closing the sandbox costs), and the tar the
//! Docker sandbox builds in memory and uploads.
//!
//! - `before`: the copy as it was (every entry but the root's `.reproagent/`, one thread,
//!   `std::fs::copy`), reimplemented here;
//! - `after, 1 thread`: `copy_tree_with(.., 1)`;
//! - `after`: `copy_tree` (`COPY_THREADS` threads).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reproagent::sandbox::copy::{copy_tree, copy_tree_with, repo_entries, COPY_THREADS};

/// The old rule: everything but the root's `.reproagent/`.
fn old_entries(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let mut names: Vec<_> =
            std::fs::read_dir(root.join(rel)).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            if rel.as_os_str().is_empty() && name == ".reproagent" {
                continue;
            }
            let r = rel.join(&name);
            let ft = std::fs::symlink_metadata(root.join(&r)).unwrap().file_type();
            out.push(r.clone());
            if ft.is_dir() {
                walk(root, &r, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// The old copy: one thread, `std::fs::copy` per file.
fn old_copy(src: &Path, dst: &Path) -> (u64, u64) {
    std::fs::create_dir_all(dst).unwrap();
    let (mut files, mut bytes) = (0, 0);
    for rel in old_entries(src) {
        let (from, to) = (src.join(&rel), dst.join(&rel));
        let meta = std::fs::symlink_metadata(&from).unwrap();
        if meta.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from).unwrap(), &to).unwrap();
        } else if meta.is_file() {
            bytes += std::fs::copy(&from, &to).unwrap();
            files += 1;
        }
    }
    (files, bytes)
}

/// The tar the Docker sandbox uploads, built in memory as `docker::repo_archive` does.
fn tar_of(root: &Path, entries: &[PathBuf]) -> usize {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    for rel in entries {
        b.append_path_with_name(root.join(rel), Path::new("sandbox/repo").join(rel)).unwrap();
    }
    b.into_inner().unwrap().len()
}

fn cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn fmt(v: &[f64]) -> String {
    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ")
}

struct Mode {
    name: &'static str,
    copy: fn(&Path, &Path) -> (u64, u64, u64),
    wall: Vec<f64>,
    cpu: Vec<f64>,
    remove: Vec<f64>,
    files: u64,
    bytes: u64,
    cloned: u64,
}

fn main() {
    let Some(corpus) = std::env::var_os("REPROAGENT_BENCH_CORPUS").map(PathBuf::from) else {
        eprintln!("set REPROAGENT_BENCH_CORPUS to a git checkout (e.g. git clone https://github.com/django/django /tmp/django)");
        return;
    };
    let runs: usize = std::env::var("REPROAGENT_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let tmp = std::env::temp_dir();
    println!(
        "corpus {} ({}), copies under {}, {runs} runs each, alternating",
        corpus.display(),
        if corpus.join(".git").exists() { "with .git" } else { "no .git" },
        tmp.display()
    );
    let mut modes = vec![
        Mode {
            name: "before",
            copy: |s, d| {
                let (f, b) = old_copy(s, d);
                (f, b, 0)
            },
            wall: vec![],
            cpu: vec![],
            remove: vec![],
            files: 0,
            bytes: 0,
            cloned: 0,
        },
        Mode {
            name: "after, 1 thread",
            copy: |s, d| {
                let st = copy_tree_with(s, d, 1).unwrap();
                (st.files, st.bytes, st.reflinked)
            },
            wall: vec![],
            cpu: vec![],
            remove: vec![],
            files: 0,
            bytes: 0,
            cloned: 0,
        },
        Mode {
            name: "after",
            copy: |s, d| {
                let st = copy_tree(s, d).unwrap();
                (st.files, st.bytes, st.reflinked)
            },
            wall: vec![],
            cpu: vec![],
            remove: vec![],
            files: 0,
            bytes: 0,
            cloned: 0,
        },
    ];
    for _ in 0..runs {
        for m in modes.iter_mut() {
            let dir = tempfile::Builder::new().prefix("reproagent-copybench-").tempdir_in(&tmp).unwrap();
            let dst = dir.path().join("repo");
            let (t, c) = (Instant::now(), cpu());
            let (files, bytes, cloned) = (m.copy)(&corpus, &dst);
            m.wall.push(t.elapsed().as_secs_f64());
            m.cpu.push((cpu() - c).as_secs_f64());
            (m.files, m.bytes, m.cloned) = (files, bytes, cloned);
            let t = Instant::now();
            dir.close().unwrap();
            m.remove.push(t.elapsed().as_secs_f64());
        }
    }
    println!("\n| mode | files | MB copied | cloned | copy s (median) | CPU s (median) | remove s (median) | copy s, every run |");
    println!("|---|---|---|---|---|---|---|---|");
    for m in &modes {
        println!(
            "| {} | {} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {} |",
            if m.name == "after" { format!("after, {COPY_THREADS} threads") } else { m.name.to_string() },
            m.files,
            m.bytes as f64 / 1e6,
            m.cloned,
            median(m.wall.clone()),
            median(m.cpu.clone()),
            median(m.remove.clone()),
            fmt(&m.wall)
        );
    }
    let t = Instant::now();
    let old_tar = tar_of(&corpus, &old_entries(&corpus));
    let old_t = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let new_tar = tar_of(&corpus, &repo_entries(&corpus).unwrap());
    let new_t = t.elapsed().as_secs_f64();
    println!(
        "\nDocker upload (tar built in memory): before {:.1} MB in {old_t:.2} s, after {:.1} MB in {new_t:.2} s",
        old_tar as f64 / 1e6,
        new_tar as f64 / 1e6
    );
}
