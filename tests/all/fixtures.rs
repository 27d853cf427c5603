//! The fixture projects, checked fact by fact against the expected graph written next to
//! them: a missing fact and an extra fact both fail.

use crate::common::*;

fn check(lang: &str, project: &str) {
    let src = fixture(&format!("{lang}/{project}"));
    let dir = copy_tree(&src);
    index_with(dir.path(), 2, true);
    let actual = dump_expected_format(dir.path());
    let expected = read_expected(&fixture(&format!("{lang}/{project}.expected")));
    let missing: Vec<_> = expected.difference(&actual).collect();
    let extra: Vec<_> = actual.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{lang}/{project}: {} missing, {} extra\nmissing:\n  {}\nextra:\n  {}",
        missing.len(),
        extra.len(),
        missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
        extra.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
    );
}

#[test]
fn python_shop_graph_is_exact() {
    check("python", "shop");
}

#[test]
fn typescript_tasks_graph_is_exact() {
    check("typescript", "tasks");
}

#[test]
fn java_bank_graph_is_exact() {
    check("java", "bank");
}
