//! `reproagent bench localize`: how well the key-free localizer finds the file a case's
//! gold patch changes, next to a plain BM25 baseline over the same index (the keyword
//! index's file documents, queried with the whole issue text), in the same run.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::case::{load_suite, patch_files, Case};
use crate::localize;
use crate::search::SearchIndex;
use crate::store;

/// How deep the ranks are read: a gold file below this is "not found".
pub const DEPTH: usize = 200;

/// One case's ranks (1-based; None: not in the first `DEPTH`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseRanks {
    pub case_id: String,
    /// The non-test files of the gold patch.
    pub gold_files: Vec<String>,
    pub localize_rank: Option<usize>,
    pub bm25_rank: Option<usize>,
    /// The localizer's first file, for reading a miss.
    pub localize_top: Option<String>,
    pub bm25_top: Option<String>,
    pub index_secs: f64,
    pub localize_secs: f64,
    /// Why the case could not be measured (no gold patch, the tree did not index...).
    pub error: Option<String>,
}

/// Rank-1, top-5 and top-10 counts over the measured cases.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RankCounts {
    pub top1: usize,
    pub top5: usize,
    pub top10: usize,
}

impl RankCounts {
    fn add(&mut self, r: Option<usize>) {
        if let Some(r) = r {
            self.top1 += (r <= 1) as usize;
            self.top5 += (r <= 5) as usize;
            self.top10 += (r <= 10) as usize;
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LocalizeSummary {
    pub cases: usize,
    /// Cases with a gold file and an index: the counts' denominator.
    pub measured: usize,
    pub localize: RankCounts,
    pub bm25: RankCounts,
    /// The slowest localization, seconds.
    pub max_localize_secs: f64,
}

pub fn summarize(ranks: &[CaseRanks]) -> LocalizeSummary {
    let mut s = LocalizeSummary { cases: ranks.len(), ..Default::default() };
    for r in ranks.iter().filter(|r| r.error.is_none()) {
        s.measured += 1;
        s.localize.add(r.localize_rank);
        s.bm25.add(r.bm25_rank);
        s.max_localize_secs = s.max_localize_secs.max(r.localize_secs);
    }
    s
}

/// The best (smallest) 1-based rank of any gold file in a ranked list of paths.
pub fn gold_rank<'a>(ranked: impl IntoIterator<Item = &'a str>, gold: &[String]) -> Option<usize> {
    ranked.into_iter().position(|p| gold.iter().any(|g| g == p)).map(|i| i + 1)
}

/// The gold patch's files that are code, not tests (a test file is never what a
/// localizer should put first for a bug in the code); all of them when every file is a test.
fn gold_files(case: &Case) -> Result<Vec<String>, String> {
    let patch = case.gold_patch_text().map_err(|e| e.to_string())?.ok_or("the case has no gold_patch")?;
    let all = patch_files(&patch);
    if all.is_empty() {
        return Err("the gold patch touches no file".into());
    }
    let code: Vec<String> = all.iter().filter(|p| !looks_like_test(p)).cloned().collect();
    Ok(if code.is_empty() { all } else { code })
}

fn looks_like_test(p: &str) -> bool {
    let name = p.rsplit('/').next().unwrap_or(p);
    p.split('/').any(|c| matches!(c, "tests" | "test" | "testing" | "__tests__"))
        || name.starts_with("test_")
        || name.ends_with("_test.py")
}

/// Measure one case on an indexed tree at `root`.
pub fn measure(case_id: &str, root: &Path, issue: &str, gold: Vec<String>) -> CaseRanks {
    let mut r = CaseRanks {
        case_id: case_id.to_string(),
        gold_files: gold,
        localize_rank: None,
        bm25_rank: None,
        localize_top: None,
        bm25_top: None,
        index_secs: 0.0,
        localize_secs: 0.0,
        error: None,
    };
    let graph = match store::open(&store::db_path(root)) {
        Ok(g) => g,
        Err(e) => {
            r.error = Some(format!("opening the index: {e}"));
            return r;
        }
    };
    let search = match SearchIndex::open(root) {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(format!("opening the keyword index: {e}"));
            return r;
        }
    };
    let t = Instant::now();
    match localize::localize(&graph, Some(&search), issue, DEPTH) {
        Ok(loc) => {
            r.localize_secs = t.elapsed().as_secs_f64();
            r.localize_rank = gold_rank(loc.files.iter().map(|f| f.file.as_str()), &r.gold_files);
            r.localize_top = loc.files.first().map(|f| f.file.clone());
        }
        Err(e) => r.error = Some(format!("localize: {e}")),
    }
    match search.search(issue, Some("file"), None, DEPTH) {
        Ok(hits) => {
            r.bm25_rank = gold_rank(hits.iter().map(|h| h.path.as_str()), &r.gold_files);
            r.bm25_top = hits.first().map(|h| h.path.clone());
        }
        Err(e) => r.error = Some(format!("search: {e}")),
    }
    r
}

/// Every case of a suite (or those in `only`): materialize the buggy tree, index it,
/// measure. `on_case` sees each result as it is made.
pub fn run(suite: &Path, only: &[String], on_case: &dyn Fn(&CaseRanks)) -> std::io::Result<Vec<CaseRanks>> {
    let mut out = Vec::new();
    for (dir, case) in load_suite(suite)? {
        let case = match case {
            Ok(c) => c,
            Err(e) => {
                let id = dir.file_name().and_then(|s| s.to_str()).unwrap_or("?").to_string();
                if only.is_empty() || only.contains(&id) {
                    let r = failed(&id, format!("case.json: {e}"));
                    on_case(&r);
                    out.push(r);
                }
                continue;
            }
        };
        if !only.is_empty() && !only.contains(&case.id) {
            continue;
        }
        let r = one(&case);
        on_case(&r);
        out.push(r);
    }
    Ok(out)
}

fn failed(id: &str, why: String) -> CaseRanks {
    CaseRanks {
        case_id: id.to_string(),
        gold_files: Vec::new(),
        localize_rank: None,
        bm25_rank: None,
        localize_top: None,
        bm25_top: None,
        index_secs: 0.0,
        localize_secs: 0.0,
        error: Some(why),
    }
}

fn one(case: &Case) -> CaseRanks {
    let gold = match gold_files(case) {
        Ok(g) => g,
        Err(e) => return failed(&case.id, e),
    };
    let issue = match case.issue() {
        Ok(i) => i,
        Err(e) => return failed(&case.id, e.to_string()),
    };
    let dir = match tempfile::Builder::new().prefix("reproagent-loc-").tempdir() {
        Ok(d) => d,
        Err(e) => return failed(&case.id, format!("temp dir: {e}")),
    };
    let _interrupt = crate::sandbox::interrupt::register_dir(dir.path());
    if let Err(e) = case.materialize(dir.path()) {
        return failed(&case.id, e.to_string());
    }
    let t = Instant::now();
    // Under the fill gate: the index's state dir made after an interrupt deleted the tree
    // would bring the tree back.
    let indexed = {
        let _fill = crate::sandbox::interrupt::filling();
        crate::index::run(&crate::index::Options::new(dir.path()))
    };
    if let Err(e) = indexed {
        return failed(&case.id, format!("indexing the tree failed: {e}"));
    }
    let index_secs = t.elapsed().as_secs_f64();
    CaseRanks { index_secs, ..measure(&case.id, dir.path(), &issue, gold) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_counts() {
        let gold = vec!["pkg/b.py".to_string()];
        assert_eq!(gold_rank(["pkg/a.py", "pkg/b.py"], &gold), Some(2));
        assert_eq!(gold_rank(["pkg/a.py"], &gold), None);
        let mk = |l: Option<usize>, b: Option<usize>| CaseRanks {
            localize_rank: l,
            bm25_rank: b,
            ..failed("x", String::new())
        };
        let mut rs = vec![mk(Some(1), Some(3)), mk(Some(7), None), mk(None, Some(1))];
        for r in &mut rs {
            r.error = None;
        }
        rs.push(failed("broken", "no gold".into()));
        let s = summarize(&rs);
        assert_eq!((s.cases, s.measured), (4, 3));
        assert_eq!(s.localize, RankCounts { top1: 1, top5: 1, top10: 2 });
        assert_eq!(s.bm25, RankCounts { top1: 1, top5: 2, top10: 2 });
        assert!(
            looks_like_test("tests/utils/test_x.py")
                && looks_like_test("testing/a.py")
                && !looks_like_test("src/pkg/x.py")
        );
    }
}
