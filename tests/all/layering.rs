//! The architecture's layering rules (ARCHITECTURE.md, "Invariants"), checked on the
//! source tree itself so that a change that breaks one fails here.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (path relative to the crate, text) of every source file under `src/`.
fn src_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    files.sort();
    assert!(files.len() > 50, "the source tree was not found: {}", root.display());
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// `file:line: text` of each line of the files outside `allowed` that `bad` flags.
fn offenders(allowed: &[&str], bad: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in src_files() {
        if allowed.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if bad(line) {
                out.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    out
}

#[test]
fn datalog_is_written_only_in_graph_and_store() {
    // `cli/query.rs` hands the user's own script to the store; `cli/schema.rs` prints the
    // schema's example queries.
    let allowed = ["src/graph/", "src/store/", "src/cli/query.rs", "src/cli/schema.rs"];
    let found = offenders(&allowed, |l| {
        l.contains(".query(") || l.contains(".query_bounded(") || l.contains(":= *") || l.contains("use cozo")
    });
    assert!(
        found.is_empty(),
        "Datalog outside graph/ and store/ (add a typed function to graph/):\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_cli_knows_clap() {
    let found = offenders(&["src/cli/", "src/main.rs"], |l| l.contains("clap::") || l.contains("use clap"));
    assert!(found.is_empty(), "clap outside cli/:\n{}", found.join("\n"));
}

#[test]
fn extract_knows_nothing_of_cozo_and_resolve_does_no_io() {
    let all = src_files();
    let mut found = Vec::new();
    for (rel, text) in &all {
        for (i, l) in text.lines().enumerate() {
            let cozo = rel.starts_with("src/extract/") && l.contains("cozo");
            let io = rel.starts_with("src/resolve/")
                && (l.contains("std::fs")
                    || l.contains("std::net")
                    || l.contains("File::")
                    || l.contains("Command::new"));
            if cozo || io {
                found.push(format!("{rel}:{}: {}", i + 1, l.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
