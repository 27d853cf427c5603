//! The keyword index: ranking on the fixtures, filters, incremental updates, staleness.

use std::path::Path;

use reproagent::search::{SearchError, SearchIndex};
use reproagent::store;

use crate::common::*;

fn indexed(lang_project: &str) -> tempfile::TempDir {
    let dir = copy_tree(&fixture(lang_project));
    index_with(dir.path(), 2, false);
    dir
}

fn top(root: &Path, q: &str, kind: Option<&str>, limit: usize) -> Vec<String> {
    let i = SearchIndex::open(root).unwrap();
    i.search(q, kind, None, limit).unwrap().into_iter().map(|h| h.id).collect()
}

#[test]
fn a_name_query_finds_the_entity_first() {
    let py = indexed("python/shop");
    assert_eq!(top(py.path(), "round_money", None, 3)[0], "core/pricing.py:round_money");
    // Parts of a snake_case name find it too, and a camelCase spelling of it.
    assert_eq!(top(py.path(), "round money", Some("function"), 3)[0], "core/pricing.py:round_money");
    let ts = indexed("typescript/tasks");
    assert_eq!(top(ts.path(), "slugify", None, 3)[0], "src/util/slug.js:slugify");
    let java = indexed("java/bank");
    let hits = top(java.path(), "AccountType", Some("enum"), 3);
    assert_eq!(hits[0], "src/main/java/com/acme/bank/model/AccountType.java:AccountType");
}

#[test]
fn a_query_in_words_finds_the_docstring() {
    let py = indexed("python/shop");
    assert_eq!(
        top(py.path(), "coordinates inventory pricing and events", None, 3)[0],
        "orders/service.py:CheckoutService"
    );
    assert_eq!(
        top(py.path(), "take stock from the first warehouse that has enough", Some("method"), 3)[0],
        "inventory/stock.py:Inventory.reserve"
    );
    let java = indexed("java/bank");
    assert_eq!(
        top(java.path(), "one booked movement of money", None, 3)[0],
        "src/main/java/com/acme/bank/model/Transaction.java:Transaction"
    );
}

#[test]
fn filters_and_snippets() {
    let py = indexed("python/shop");
    let i = SearchIndex::open(py.path()).unwrap();
    let hits = i.search("stock", None, Some("inventory/**"), 10).unwrap();
    assert!(!hits.is_empty() && hits.iter().all(|h| h.path.starts_with("inventory/")));
    let files = i.search("stock", Some("file"), None, 10).unwrap();
    assert!(files.iter().all(|h| h.kind == "file"));
    let h = &i.search("round_money", None, None, 1).unwrap()[0];
    assert_eq!(h.snippet, "8: def round_money(amount):");
    // Query syntax in free text does not fail.
    assert!(i.search("KeyError: 'sku' (line 3)", None, None, 5).is_ok());
    assert!(matches!(i.search("x", None, Some("[unclosed"), 5), Err(SearchError::Glob(..))));
}

#[test]
fn incremental_updates_keep_the_keyword_index_equal_to_a_fresh_one() {
    let dir = indexed("python/shop");
    let root = dir.path();
    std::fs::write(
        root.join("core/extra.py"),
        "def brand_new_helper():\n    \"\"\"Compute the frobnication factor.\"\"\"\n    return 1\n",
    )
    .unwrap();
    std::fs::remove_file(root.join("inventory/reports.py")).unwrap();
    let s = index_with(root, 2, false);
    assert_eq!(s.mode, "incremental");
    assert_eq!(top(root, "frobnication factor", None, 1), ["core/extra.py:brand_new_helper"]);
    assert!(!top(root, "stock_summary", None, 20).iter().any(|id| id.starts_with("inventory/reports.py")));

    let fresh = tempfile::tempdir().unwrap();
    copy_into(root, fresh.path());
    index_with(fresh.path(), 2, true);
    // Every match, not a top-k: an updated index still counts deleted documents in its
    // term statistics until its segments merge, so scores (and a cut-off) may differ
    // slightly from a fresh index's; the documents that match must not.
    for q in ["stock", "order discount", "round_money", "frobnication", "warehouse"] {
        let a = SearchIndex::open(root).unwrap().search(q, None, None, 10_000).unwrap();
        let b = SearchIndex::open(fresh.path()).unwrap().search(q, None, None, 10_000).unwrap();
        assert!(a.len() < 10_000, "query {q:?}: the limit must not cut");
        let ids = |v: &[reproagent::search::SearchHit]| {
            v.iter().map(|h| h.id.clone()).collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(ids(&a), ids(&b), "query {q:?}");
    }
}

#[test]
fn a_keyword_index_that_does_not_match_the_graph_is_stale_until_reindexed() {
    let dir = indexed("python/shop");
    let root = dir.path();
    let graph = store::open(&store::db_path(root)).unwrap();
    let digest = graph.meta("tree_digest").unwrap();
    let i = SearchIndex::open(root).unwrap();
    assert!(i.check_fresh(digest.as_deref()).is_ok());
    assert!(matches!(i.check_fresh(Some("something else")), Err(SearchError::Stale(_))));
    // A run interrupted between the graph and the keyword index: the search dir is gone.
    std::fs::remove_dir_all(reproagent::search::search_dir(root)).unwrap();
    assert!(matches!(SearchIndex::open(root), Err(SearchError::Missing(_))));
    let s = index_with(root, 2, false);
    assert_eq!(s.mode, "unchanged");
    assert_eq!(top(root, "round_money", None, 1), ["core/pricing.py:round_money"]);
}

#[test]
fn an_entity_body_holds_its_own_lines_and_its_children_by_their_first_line() {
    use reproagent::extract::{Extractor, Limits};
    use reproagent::lang::Lang;
    let src = "class Cart:\n    \"\"\"A cart.\"\"\"\n    size = 3\n\n    def total(self):\n        return apply_discount(self)\n\n    def empty(self):\n        def inner():\n            return clear_everything()\n        return inner\n";
    let facts =
        Extractor::new(Limits::default()).extract_bytes("cart.py", Lang::Python, src.as_bytes(), "h".into()).unwrap();
    let docs = reproagent::search::docs_for(&facts, src);
    let body = |id: &str| docs.iter().find(|d| d.id == id).unwrap_or_else(|| panic!("no doc {id}")).body.clone();
    // The file's document is the whole file.
    assert_eq!(body("cart.py"), src);
    // The class: its own lines and each method's `def` line, not the methods' bodies.
    let class = body("cart.py:Cart");
    assert!(
        class.contains("size = 3") && class.contains("def total(self):") && class.contains("def empty(self):"),
        "{class}"
    );
    assert!(!class.contains("apply_discount") && !class.contains("clear_everything"), "{class}");
    // A method: its own lines; a function nested in it by its first line only.
    let empty = body("cart.py:Cart.empty");
    assert!(empty.contains("def inner():") && empty.contains("return inner"), "{empty}");
    assert!(!empty.contains("clear_everything"), "{empty}");
    assert!(body("cart.py:Cart.empty.inner").contains("clear_everything"));
    assert!(body("cart.py:Cart.total").contains("apply_discount"));
}

/// A full build feeds the keyword index while the parse runs (workers fill per-file slots,
/// a feeder hands them to tantivy in path order). What it builds must be what a build
/// after the parse gives: the same documents in the same order, so every hit and score is
/// the same. A tree of many files of very different sizes (so the workers finish out of
/// order), with files skipped for size and for content among them.
#[test]
fn a_keyword_index_fed_during_the_parse_equals_one_built_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for i in 0..240 {
        let pkg = root.join(format!("pkg{}", i % 7));
        std::fs::create_dir_all(&pkg).unwrap();
        let mut src = format!("\"\"\"Module {i}: ledger entries and totals.\"\"\"\n\n");
        // Sizes from a few lines to a few thousand, so a worker on a big file falls behind.
        for j in 0..(1 + (i * 37) % 150) {
            src.push_str(&format!(
                "def entry_{i}_{j}(amount, rate):\n    \"\"\"Book a ledger entry with rate {j}.\"\"\"\n    return round_total(amount * rate + {j})\n\n"
            ));
        }
        std::fs::write(pkg.join(format!("m{i:03}.py")), src).unwrap();
        if i % 11 == 0 {
            let ts = format!("export function settle{i}(ledger: number[]): number {{\n  return ledger.reduce((a, b) => a + b, {i});\n}}\n");
            std::fs::write(pkg.join(format!("s{i:03}.ts")), ts).unwrap();
        }
    }
    std::fs::write(root.join("pkg0/binary.py"), b"\x00\x01\x02 not text").unwrap();
    std::fs::write(root.join("pkg1/huge.py"), "x = 1\n".repeat(40_000)).unwrap();
    let mut o = reproagent::index::Options::new(root);
    o.threads = Some(2);
    o.full = true;
    o.limits.max_bytes = 200_000;
    let s = reproagent::index::run(&o).unwrap();
    assert_eq!(s.mode, "full");
    let skipped: Vec<&str> = s.skipped.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(skipped, ["pkg0/binary.py", "pkg1/huge.py"], "{:?}", s.skipped);
    let queries = ["ledger entry", "round_total amount", "settle reduce", "entry_17_3", "totals", "rate 12"];
    let all = |root: &Path| -> Vec<Vec<(String, String)>> {
        let i = SearchIndex::open(root).unwrap();
        queries
            .iter()
            .map(|q| {
                let hits = i.search(q, None, None, 100_000).unwrap();
                assert!(!hits.is_empty() && hits.len() < 100_000, "{q}: {}", hits.len());
                hits.into_iter().map(|h| (h.id, format!("{:.6}", h.score))).collect()
            })
            .collect()
    };
    let fed = all(root);
    // Rebuilt from the stored facts after the fact: the keyword index gone, an unchanged
    // tree makes `index` build it again, from the files in path order.
    std::fs::remove_dir_all(reproagent::search::search_dir(root)).unwrap();
    let mut o = reproagent::index::Options::new(root);
    o.threads = Some(2);
    o.limits.max_bytes = 200_000;
    assert_eq!(reproagent::index::run(&o).unwrap().mode, "unchanged");
    assert!(all(root) == fed, "the rebuilt keyword index answers otherwise");
}
