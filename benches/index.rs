//! The index benchmark: real code from the registries (see benches/README.md).
//!
//! `cargo bench --bench index [-- CORPUS...]` indexes each corpus fetched by
//! `benches/fetch.sh` into benches/data/ and prints Markdown tables. Each corpus is measured
//! in a child process (this binary re-executed with `--child NAME`), so each gets its own
//! peak RSS; the child copies the corpus to a temporary directory first, so no
//! `.reproagent/` is left in benches/data/.
//!
//! Per corpus, in one run: parse-only time (tree-sitter alone, `index::parse_only`) and
//! full index time (`full = true`) with the same threads, alternating, each repeated and
//! reported as the median; then incremental re-indexes after appending a comment line to
//! one file, and no-op re-indexes. Only the public API is used (`index::run`,
//! `index::parse_only`, `index::walk`); where the time goes inside `run` is for
//! `benches/profile.sh` (perf) to say.
//!
//! Environment:
//!   REPROAGENT_BENCH_RUNS=3            repetitions of each timed step (median reported)
//!   REPROAGENT_BENCH_THREADS=2,1       thread counts (default: all cores, then 1)
//!   REPROAGENT_BENCH_DEFAULT_LIMITS=1  index with the default per-file limits instead of
//!                                      lifting the size limit (see README: same files)

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rayon::prelude::*;
use reproagent::extract::Limits;
use reproagent::index::{self, Options, Summary};
use reproagent::lang::{is_test_path, Lang};
use serde::{Deserialize, Serialize};

struct Corpus {
    name: &'static str,
    what: &'static str,
    /// The file an incremental run touches (relative to the corpus root).
    touch: &'static str,
    comment: &'static str,
}

const CORPORA: &[Corpus] = &[
    Corpus { name: "django", what: "Django 4.2.16, PyPI sdist", touch: "django/db/models/query.py", comment: "#" },
    Corpus {
        name: "typescript",
        what: "TypeScript 4.8.4, Debian node-typescript 4.8.4+ds1-2",
        touch: "src/compiler/utilities.ts",
        comment: "//",
    },
    Corpus {
        name: "guava",
        what: "Guava 31.1, Debian guava-libraries 31.1-1",
        touch: "guava/src/com/google/common/collect/ImmutableList.java",
        comment: "//",
    },
];

const RESULT_TAG: &str = "BENCH-RESULT ";

#[derive(Debug, Default, Serialize, Deserialize)]
struct ThreadRun {
    threads: usize,
    parse_files: usize,
    parse_s: Vec<f64>,
    full_s: Vec<f64>,
    /// CPU seconds (user + system, all threads) of each run: less sensitive than wall
    /// time to other processes on the machine.
    parse_cpu: Vec<f64>,
    full_cpu: Vec<f64>,
    parse_peak_kb: u64,
    full_peak_kb: u64,
    /// Peak RSS of `reproagent index --full` run as its own process (what a user's
    /// command holds; the in-process figure also holds what earlier steps of this process
    /// left with the allocator).
    #[serde(default)]
    cli_peak_kb: Vec<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CorpusResult {
    name: String,
    what: String,
    limits: String,
    files_walked: usize,
    files_indexed: usize,
    lines: u64,
    bytes: u64,
    entities: usize,
    edges: usize,
    edges_by_how: BTreeMap<String, usize>,
    syntax_error_files: usize,
    /// Non-test files with syntax errors: path, first error (line:col, text).
    syntax_error_paths: Vec<(String, String)>,
    syntax_error_test_files: usize,
    syntax_error_test_examples: Vec<String>,
    skipped: Vec<(String, String)>,
    over_default_size_limit: Vec<(String, u64)>,
    index_bytes: u64,
    index_files: Vec<String>,
    runs: Vec<ThreadRun>,
    touched: String,
    incr_threads: usize,
    incremental_s: Vec<f64>,
    incremental_notes: Vec<String>,
    incr_peak_kb: u64,
    unchanged_s: Vec<f64>,
    process_peak_kb: u64,
    loadavg: Vec<String>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let Some(name) = args.get(1) else {
            eprintln!("--child needs a corpus name");
            std::process::exit(2);
        };
        let Some(corpus) = CORPORA.iter().find(|c| c.name == name) else {
            eprintln!("unknown corpus {name}");
            std::process::exit(2);
        };
        match child(corpus) {
            Ok(r) => {
                let json = serde_json::to_string(&r).unwrap_or_default();
                println!("{RESULT_TAG}{json}");
            }
            Err(e) => {
                eprintln!("{}: {e:#}", corpus.name);
                std::process::exit(1);
            }
        }
        return;
    }
    // Cargo passes `--bench`; anything not a flag selects corpora.
    let wanted: Vec<&str> = args.iter().filter(|a| !a.starts_with('-')).map(String::as_str).collect();
    let mut results = Vec::new();
    for c in CORPORA {
        if !wanted.is_empty() && !wanted.contains(&c.name) {
            continue;
        }
        let dir = data_dir().join(c.name);
        if !dir.is_dir() {
            eprintln!(
                "skipping {}: {} not found; fetch it with `benches/fetch.sh` (needs pip and apt-get)",
                c.name,
                dir.display()
            );
            continue;
        }
        eprintln!("== {} ({})", c.name, c.what);
        match run_child(c) {
            Ok(r) => results.push(r),
            Err(e) => eprintln!("{}: child failed: {e}", c.name),
        }
    }
    if results.is_empty() {
        eprintln!("no corpus measured; run benches/fetch.sh first");
        return;
    }
    print_report(&results);
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches").join("data")
}

fn run_child(c: &Corpus) -> Result<CorpusResult, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--child", c.name])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut result = None;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(|e| e.to_string())?;
            match line.strip_prefix(RESULT_TAG) {
                Some(json) => result = Some(serde_json::from_str(json).map_err(|e| e.to_string())?),
                None => println!("{line}"),
            }
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    match result {
        Some(r) if status.success() => Ok(r),
        _ => Err(format!("exit status {status}")),
    }
}

// ---------------------------------------------------------------------------------------
// The child: one corpus.

fn env_usize_list(key: &str) -> Option<Vec<usize>> {
    let v = std::env::var(key).ok()?;
    let list: Vec<usize> = v.split(',').filter_map(|s| s.trim().parse().ok()).filter(|n| *n > 0).collect();
    (!list.is_empty()).then_some(list)
}

fn child(c: &Corpus) -> anyhow::Result<CorpusResult> {
    let runs = env_usize_list("REPROAGENT_BENCH_RUNS").and_then(|v| v.first().copied()).unwrap_or(3);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut thread_counts = env_usize_list("REPROAGENT_BENCH_THREADS").unwrap_or_else(|| vec![cores, 1]);
    thread_counts.dedup();
    let default_limits = std::env::var("REPROAGENT_BENCH_DEFAULT_LIMITS").is_ok_and(|v| v == "1");
    let limits = if default_limits { Limits::default() } else { Limits { max_bytes: u64::MAX, ..Limits::default() } };

    let tmp = tempfile::Builder::new().prefix("reproagent-bench-").tempdir()?;
    let root = tmp.path().join(c.name);
    let t = Instant::now();
    copy_tree(&data_dir().join(c.name), &root)?;
    eprintln!("  copied to {} in {:.1}s", root.display(), t.elapsed().as_secs_f64());
    let root = root.canonicalize()?;

    let mut r = CorpusResult {
        name: c.name.into(),
        what: c.what.into(),
        limits: if default_limits {
            "default limits".into()
        } else {
            "size limit lifted (same files as parse-only)".into()
        },
        touched: c.touch.into(),
        ..Default::default()
    };

    r.loadavg.push(loadavg());
    // Timed: parse-only and full index, same threads, alternating.
    let mut last: Option<Summary> = None;
    for &threads in &thread_counts {
        let mut tr = ThreadRun { threads, ..Default::default() };
        for rep in 0..runs {
            reset_peak();
            let c0 = cpu_s();
            let (n, d) = index::parse_only(&root, Some(threads))?;
            tr.parse_cpu.push(cpu_s() - c0);
            tr.parse_peak_kb = tr.parse_peak_kb.max(peak_kb());
            tr.parse_files = n;
            tr.parse_s.push(d.as_secs_f64());

            let mut opts = Options::new(&root);
            opts.threads = Some(threads);
            opts.full = true;
            opts.limits = limits;
            reset_peak();
            let c0 = cpu_s();
            let t = Instant::now();
            let s = index::run(&opts)?;
            let full = t.elapsed();
            tr.full_cpu.push(cpu_s() - c0);
            tr.full_peak_kb = tr.full_peak_kb.max(peak_kb());
            tr.full_s.push(full.as_secs_f64());
            eprintln!(
                "  threads {threads} run {}/{runs}: parse-only {:.2}s ({n} files), full index {:.2}s: {}",
                rep + 1,
                d.as_secs_f64(),
                full.as_secs_f64(),
                s.line()
            );
            last = Some(s);
            tr.cli_peak_kb.push(cli_full_peak_kb(&root, threads, limits.max_bytes)?);
        }
        r.runs.push(tr);
    }
    let Some(summary) = last else { anyhow::bail!("no run") };
    r.files_indexed = summary.files;
    r.entities = summary.entities;
    r.edges = summary.edges;
    r.edges_by_how = summary.edges_by_how.clone();
    r.syntax_error_files = summary.files_with_syntax_errors;
    r.skipped = summary.skipped.iter().map(|s| (s.path.clone(), s.reason.clone())).collect();
    r.index_bytes = dir_size(&root.join(".reproagent"));
    r.index_files = list_sizes(&root.join(".reproagent"));

    // Files and lines of what was indexed (the walk minus the skipped files).
    let (files, _) = index::walk(&root, false);
    r.files_walked = files.len();
    let skipped_list = r.skipped.clone();
    let skipped: std::collections::HashSet<&str> = skipped_list.iter().map(|(p, _)| p.as_str()).collect();
    let default_max = Limits::default().max_bytes;
    for sf in &files {
        let Ok(bytes) = std::fs::read(&sf.abs) else { continue };
        if bytes.len() as u64 > default_max {
            r.over_default_size_limit.push((sf.rel.clone(), bytes.len() as u64));
        }
        if skipped.contains(sf.rel.as_str()) {
            continue;
        }
        r.bytes += bytes.len() as u64;
        r.lines += count_lines(&bytes);
    }

    // Incremental: append a comment line to one file, re-index; then re-index unchanged.
    let threads = thread_counts[0];
    r.incr_threads = threads;
    let touch = root.join(c.touch);
    let mut opts = Options::new(&root);
    opts.threads = Some(threads);
    opts.limits = limits;
    for rep in 0..runs {
        append_comment(&touch, c.comment, rep)?;
        reset_peak();
        let t = Instant::now();
        let s = index::run(&opts)?;
        let d = t.elapsed();
        r.incr_peak_kb = r.incr_peak_kb.max(peak_kb());
        r.incremental_s.push(d.as_secs_f64());
        if s.mode != "incremental" || s.parsed != 1 {
            r.incremental_notes.push(format!("run {}: mode {}, {} parsed", rep + 1, s.mode, s.parsed));
        }
        eprintln!("  incremental {}/{runs} ({}): {:.3}s: {}", rep + 1, c.touch, d.as_secs_f64(), s.line());
    }
    for rep in 0..runs {
        let t = Instant::now();
        let s = index::run(&opts)?;
        let d = t.elapsed();
        r.unchanged_s.push(d.as_secs_f64());
        if s.mode != "unchanged" {
            r.incremental_notes.push(format!("no-op run {}: mode {}, {} parsed", rep + 1, s.mode, s.parsed));
        }
        eprintln!("  no-op {}/{runs}: {:.3}s ({})", rep + 1, d.as_secs_f64(), s.mode);
    }

    // Which files have syntax errors, and where the first one is (untimed).
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let errors: Vec<(String, bool, String)> = pool.install(|| {
        files
            .par_iter()
            .filter(|sf| !skipped.contains(sf.rel.as_str()))
            .filter_map(|sf| {
                let first = first_error(&sf.abs, sf.lang, &sf.rel)?;
                Some((sf.rel.clone(), is_test_path(&sf.lang.descriptor().tests, &sf.rel), first))
            })
            .collect()
    });
    for (path, is_test, first) in errors {
        if is_test {
            r.syntax_error_test_files += 1;
            if r.syntax_error_test_examples.len() < 10 {
                r.syntax_error_test_examples.push(path);
            }
        } else {
            r.syntax_error_paths.push((path, first));
        }
    }

    r.loadavg.push(loadavg());
    // VmHWM was reset before each step: the process peak is the largest step peak.
    r.process_peak_kb = status_kb("VmHWM")
        .max(r.incr_peak_kb)
        .max(r.runs.iter().map(|t| t.full_peak_kb.max(t.parse_peak_kb)).max().unwrap_or(0));
    Ok(r)
}

/// Where the first ERROR or MISSING node of a file is, and the line it is on.
fn first_error(abs: &Path, lang: Lang, rel: &str) -> Option<String> {
    let src = std::fs::read(abs).ok()?;
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&lang.ts_language(rel)).ok()?;
    let tree = parser.parse(&src, None)?;
    let mut cursor = tree.walk();
    let node = loop {
        let n = cursor.node();
        if n.is_error() || n.is_missing() {
            break n;
        }
        if n.has_error() && cursor.goto_first_child() {
            continue;
        }
        // Next sibling, or up until there is one.
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return None;
            }
        }
    };
    let p = node.start_position();
    let line = String::from_utf8_lossy(&src).lines().nth(p.row).unwrap_or("").trim().to_string();
    let line: String = line.chars().take(100).collect();
    let what = if node.is_missing() { format!("MISSING {}", node.kind()) } else { "ERROR".to_string() };
    Some(format!("{}:{} {what}: `{}`", p.row + 1, p.column + 1, line.replace('`', "'")))
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if ty.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else if ty.is_file() {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

fn list_sizes(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<String> = rd
        .flatten()
        .map(|e| {
            let size = if e.path().is_dir() { dir_size(&e.path()) } else { e.metadata().map(|m| m.len()).unwrap_or(0) };
            format!("{} {:.1} MiB", e.file_name().to_string_lossy(), size as f64 / 1048576.0)
        })
        .collect();
    v.sort();
    v
}

fn count_lines(bytes: &[u8]) -> u64 {
    let n = memchr::memchr_iter(b'\n', bytes).count() as u64;
    n + u64::from(!bytes.is_empty() && bytes.last() != Some(&b'\n'))
}

fn append_comment(path: &Path, comment: &str, n: usize) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    writeln!(f, "\n{comment} reproagent bench: touched {n}")
}

/// A line of /proc/self/status in kB.
fn status_kb(key: &str) -> u64 {
    proc_status_kb("self", key).unwrap_or(0)
}

/// A line of /proc/PID/status in kB (none once the process has gone).
fn proc_status_kb(pid: &str, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
}

/// Peak RSS (KiB) of `reproagent index --full` on `root` as a process of its own: its
/// VmHWM, read every few milliseconds until it exits (the peak is a high-water mark; the
/// last read misses only the exit). Not wait4's `ru_maxrss`: Linux folds the spawning
/// process's own high-water mark into it at exec, and this process is large.
fn cli_full_peak_kb(root: &Path, threads: usize, max_bytes: u64) -> anyhow::Result<u64> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .arg("index")
        .arg(root)
        .args(["--full", "--json", "--threads", &threads.to_string(), "--max-file-bytes", &max_bytes.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id().to_string();
    let mut peak = 0;
    loop {
        if let Some(kb) = proc_status_kb(&pid, "VmHWM") {
            peak = peak.max(kb);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "reproagent index --full failed: {status}");
            return Ok(peak);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Return freed memory to the system and reset the peak (VmHWM) to the current RSS, so
/// the peak read after a step is that step's.
fn reset_peak() {
    // SAFETY: malloc_trim only releases free memory held by the allocator.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// User + system CPU seconds of this process so far, all threads.
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn peak_kb() -> u64 {
    status_kb("VmHWM")
}

// ---------------------------------------------------------------------------------------
// The report.

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

fn mib(kb: u64) -> String {
    format!("{:.0}", kb as f64 / 1024.0)
}

fn all_runs(v: &[f64]) -> String {
    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" / ")
}

fn print_report(results: &[CorpusResult]) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!();
    println!("## Index benchmark");
    println!();
    println!(
        "Machine: {cores} cores ({cpu}). Times: median of {} runs.",
        results[0].runs.first().map_or(0, |r| r.full_s.len())
    );
    println!();
    println!("| corpus | files | lines | entities | edges | threads | parse-only s | full index s | full / parse | CPU-s parse / full (ratio) | peak RSS full MiB (in-process) | peak RSS `index --full` process MiB (max) | index MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        for t in &r.runs {
            let (p, f) = (median(&t.parse_s), median(&t.full_s));
            let (pc, fc) = (median(&t.parse_cpu), median(&t.full_cpu));
            println!(
                "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2}x | {:.2} / {:.2} ({:.2}x) | {} | {} | {:.1} |",
                r.name,
                r.files_indexed,
                r.lines,
                r.entities,
                r.edges,
                t.threads,
                p,
                f,
                f / p,
                pc,
                fc,
                fc / pc,
                mib(t.full_peak_kb),
                mib(t.cli_peak_kb.iter().copied().max().unwrap_or(0)),
                r.index_bytes as f64 / 1048576.0
            );
        }
    }
    println!();
    println!("| corpus | 1-file incremental s | no-op re-index s | threads | peak RSS incr. MiB | peak RSS process MiB | syntax-error files | skipped |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        println!(
            "| {} | {:.3} | {:.3} | {} | {} | {} | {} | {} |",
            r.name,
            median(&r.incremental_s),
            median(&r.unchanged_s),
            r.incr_threads,
            mib(r.incr_peak_kb),
            mib(r.process_peak_kb),
            r.syntax_error_files,
            r.skipped.len()
        );
    }
    println!();
    println!("| corpus | edges by how |");
    println!("|---|---|");
    for r in results {
        let how: Vec<String> = r.edges_by_how.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("| {} | {} |", r.name, how.join(", "));
    }
    for r in results {
        println!();
        println!("### {} ({})", r.name, r.what);
        println!();
        println!(
            "{} files walked, {} indexed, {} lines, {:.1} MiB of source; {}.",
            r.files_walked,
            r.files_indexed,
            r.lines,
            r.bytes as f64 / 1048576.0,
            r.limits
        );
        for t in &r.runs {
            println!(
                "- {} threads: parse-only {} s (CPU {} s; {} files, peak RSS {} MiB); full index {} s (CPU {} s)",
                t.threads,
                all_runs(&t.parse_s),
                all_runs(&t.parse_cpu),
                t.parse_files,
                mib(t.parse_peak_kb),
                all_runs(&t.full_s),
                all_runs(&t.full_cpu)
            );
        }
        println!(
            "- incremental after appending a line to `{}`: {} s; no-op: {} s",
            r.touched,
            r.incremental_s.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" / "),
            r.unchanged_s.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(" / ")
        );
        println!("- index on disk {:.1} MiB ({})", r.index_bytes as f64 / 1048576.0, r.index_files.join(", "));
        println!("- load average (1/5/15 min) at start / end: {}", r.loadavg.join(" / "));
        for n in &r.incremental_notes {
            println!("- NOTE: {n}");
        }
        println!();
        if r.skipped.is_empty() {
            println!("Skipped: none.");
        } else {
            println!("Skipped ({}):", r.skipped.len());
            for (p, why) in &r.skipped {
                println!("- `{p}`: {why}");
            }
        }
        if !r.over_default_size_limit.is_empty() {
            println!();
            println!(
                "Over the default {} MiB size limit (skipped by a plain `reproagent index`): {}",
                Limits::default().max_bytes / 1048576,
                r.over_default_size_limit
                    .iter()
                    .map(|(p, n)| format!("`{p}` ({:.1} MiB)", *n as f64 / 1048576.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        println!();
        let shown = 25;
        println!(
            "Files with syntax errors: {} by tree-sitter, {} by the index ({} test files, {} others)",
            r.syntax_error_paths.len() + r.syntax_error_test_files,
            r.syntax_error_files,
            r.syntax_error_test_files,
            r.syntax_error_paths.len()
        );
        // By directory (two levels), then the files, those outside any test-looking
        // directory first: errors there are more likely grammar or indexer bugs.
        let mut by_dir: BTreeMap<String, usize> = BTreeMap::new();
        for (p, _) in &r.syntax_error_paths {
            let parts: Vec<&str> = p.split('/').collect();
            let dir = if parts.len() > 2 { parts[..2].join("/") } else { parts[..parts.len() - 1].join("/") };
            *by_dir.entry(if dir.is_empty() { ".".into() } else { dir }).or_insert(0) += 1;
        }
        if by_dir.len() > 1 {
            println!(
                "- by directory: {}",
                by_dir.iter().map(|(d, n)| format!("`{d}/` {n}")).collect::<Vec<_>>().join(", ")
            );
        }
        let testish = |p: &str| p.split('/').rev().skip(1).any(|d| d.contains("test") || d == "baselines");
        let mut listed: Vec<&(String, String)> = r.syntax_error_paths.iter().collect();
        listed.sort_by_key(|(p, _)| (testish(p), p.clone()));
        for (p, first) in listed.into_iter().take(shown) {
            println!("- `{p}`: first at {first}");
        }
        if r.syntax_error_paths.len() > shown {
            println!("- ... and {} more non-test files", r.syntax_error_paths.len() - shown);
        }
        if r.syntax_error_test_files > 0 {
            println!(
                "- test files, e.g.: {}",
                r.syntax_error_test_examples.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            );
        }
    }
}
