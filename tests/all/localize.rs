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

/// A traceback that goes on from the repository into the standard library: the code the
/// innermost repository frame hands its arguments to on that line is lifted (through the
/// call graph) as a suspect too; a trace that ends in the repository lifts nothing.
#[test]
fn the_callee_of_the_innermost_repository_frame_is_lifted_when_the_trace_leaves_the_repository() {
    let repo = crate::keyfree_body::tree(&[
        ("app/__init__.py", ""),
        ("app/util.py", "def normalize(text):\n    return text.replace(\"'\", '\"')\n"),
        (
            "app/api.py",
            "import json\n\nfrom app.util import normalize\n\n\ndef handle(payload):\n    return json.loads(normalize(payload))\n",
        ),
    ]);
    index_with(repo.path(), 2, false);
    let graph = store::open(&store::db_path(repo.path())).unwrap();
    let lifted = |loc: &localize::Localization| {
        loc.entities.iter().find(|e| e.entity.as_deref() == Some("app/util.py:normalize")).map(|e| e.reason.clone())
    };
    let left = "handle fails on a payload\n\nTraceback (most recent call last):\n  File \"/srv/app/app/api.py\", line 7, in handle\n    return json.loads(normalize(payload))\n  File \"/usr/lib/python3.11/json/__init__.py\", line 346, in loads\n    return _default_decoder.decode(s)\n  File \"/usr/lib/python3.11/json/decoder.py\", line 355, in raw_decode\n    raise JSONDecodeError(\"Expecting value\", s, err.value) from None\njson.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n";
    let loc = localize::localize(&graph, None, left, 10).unwrap();
    assert_eq!(loc.entities[0].entity.as_deref(), Some("app/api.py:handle"), "{:?}", loc.entities);
    let why = lifted(&loc).unwrap_or_else(|| panic!("normalize was not lifted: {:?}", loc.entities));
    assert!(why.contains("called by app/api.py:handle at the traceback's line 7"), "{why}");
    assert!(loc.files.iter().any(|f| f.file == "app/util.py"), "{:?}", loc.files);
    // The same frame as the innermost of a trace that stops in the repository.
    let stays = "handle fails\n\nTraceback (most recent call last):\n  File \"/srv/app/app/api.py\", line 7, in handle\n    return json.loads(normalize(payload))\nValueError: bad\n";
    let loc = localize::localize(&graph, None, stays, 10).unwrap();
    assert!(lifted(&loc).is_none_or(|r| !r.contains("traceback's line")), "{:?}", loc.entities);
}
