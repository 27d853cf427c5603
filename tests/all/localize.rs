//! Key-free localization on fixture issues: with a traceback the faulty file ranks
//! first; with a symptom only, in the top 3.

use serde::Deserialize;

use reproagent::localize;
use reproagent::search::SearchIndex;
use reproagent::store;

use crate::common::*;

#[derive(Deserialize)]
struct Cases {
    case: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    issue: String,
    repo: String,
    faulty: String,
    kind: String,
}

#[test]
fn the_faulty_file_ranks_first_with_a_traceback_and_top_3_without() {
    let cases: Cases = toml::from_str(&std::fs::read_to_string(fixture("localize/cases.toml")).unwrap()).unwrap();
    assert!(cases.case.len() >= 6);
    let mut report = Vec::new();
    for c in &cases.case {
        let dir = copy_tree(&fixture(&c.repo));
        index_with(dir.path(), 2, false);
        let graph = store::open(&store::db_path(dir.path())).unwrap();
        let search = SearchIndex::open(dir.path()).unwrap();
        let text = std::fs::read_to_string(fixture(&format!("localize/{}", c.issue))).unwrap();
        let loc = localize::localize(&graph, Some(&search), &text, 10).unwrap();
        let rank = loc.files.iter().position(|f| f.file == c.faulty).map(|r| r + 1);
        let ok = match c.kind.as_str() {
            "traceback" => rank == Some(1),
            _ => rank.is_some_and(|r| r <= 3),
        };
        if !ok {
            report.push(format!(
                "{} ({}): {} at rank {rank:?}; ranking: {:?}",
                c.issue,
                c.kind,
                c.faulty,
                loc.files.iter().map(|f| &f.file).collect::<Vec<_>>()
            ));
        }
        assert!(loc.files.iter().all(|f| !f.reason.is_empty()), "every suspect says why");
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn an_empty_issue_is_a_clear_error() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 2, false);
    let graph = store::open(&store::db_path(dir.path())).unwrap();
    let e = localize::localize(&graph, None, "  \n", 10).unwrap_err();
    assert_eq!(e.to_string(), "the issue text is empty");
}
