//! The graph store's own engine (format 7): it holds exactly the rows the SQLite store
//! of format 6 held, refuses and rebuilds an old or damaged file, and an update never
//! disturbs a reader.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use reproagent::index::{self, Options};
use reproagent::store::{self, StoreError};

use crate::common::{copy_tree, dump_all, fixture, index_with};

/// Every row of every public relation as `benches/store_compare.py dump` writes it: one
/// JSON object a line, `{"rel": ..., "row": [...]}`, through `reproagent query --json`.
/// The rules (`test_of`) are dumped as the relations they were; `entity`'s `is_test`
/// (format 9) is left out, as the dumps predate it.
fn dump_rows(root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (rel, keys, vals, stored) in store::RELATIONS
        .iter()
        .map(|(r, k, v)| (r, k, v, true))
        .chain(store::RULES.iter().map(|(r, k, _)| (r, k, &"", false)))
    {
        let cols: Vec<&str> = keys
            .split(',')
            .chain(vals.split(','))
            .filter_map(|c| c.split(':').next().map(str::trim).filter(|c| !c.is_empty()))
            .filter(|c| !(*rel == "entity" && *c == "is_test"))
            .collect();
        let cols = cols.join(", ");
        let script =
            if stored { format!("?[{cols}] := *{rel}{{{cols}}}") } else { format!("?[{cols}] := {rel}[{cols}]") };
        let o = Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["query", &script, "--json", "-C"])
            .arg(root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for row in v["rows"].as_array().unwrap() {
            out.insert(serde_json::json!({"rel": rel, "row": row}).to_string());
        }
    }
    out
}

#[test]
fn the_fixtures_hold_row_for_row_what_the_sqlite_store_held() {
    for (fx, dump) in
        [("python/shop", "python-shop"), ("typescript/tasks", "typescript-tasks"), ("java/bank", "java-bank")]
    {
        let dir = copy_tree(&fixture(fx));
        index_with(dir.path(), 2, true);
        let now = dump_rows(dir.path());
        let path = fixture(&format!("old-index/{dump}.rows.jsonl"));
        let then: BTreeSet<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap().to_string())
            .collect();
        assert!(then.len() > 50, "{}: {} rows", path.display(), then.len());
        let lost: Vec<_> = then.difference(&now).collect();
        let gained: Vec<_> = now.difference(&then).collect();
        assert!(lost.is_empty() && gained.is_empty(), "{fx}: lost {lost:#?}\ngained {gained:#?}");

        // The walk back from the targets that the tools use (`Store::tests_reaching`) gives
        // the pairs the old store held too, asked for every entity at once.
        let s = store::open(&store::db_path(dir.path())).unwrap();
        let ids: Vec<String> = s
            .query("?[id] := *entity{id}", Default::default())
            .unwrap()
            .rows
            .iter()
            .map(|r| r[0].get_str().unwrap().to_string())
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let walked: BTreeSet<(String, String)> = s.tests_reaching(&ids).unwrap().into_iter().collect();
        let held: BTreeSet<(String, String)> = then
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["rel"] == "test_of")
            .map(|v| (v["row"][0].as_str().unwrap().to_string(), v["row"][1].as_str().unwrap().to_string()))
            .collect();
        assert!(held.len() >= 20, "{fx}: {} test_of rows", held.len());
        assert_eq!(walked, held, "{fx}");
    }
}

/// `test_of` is a rule every ad-hoc query may use; naming it as a stored relation says
/// what to write instead, in one line.
#[test]
fn test_of_is_a_rule_of_ad_hoc_queries() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 2, true);
    let query = |script: &str, param: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_reproagent"));
        c.args(["query", script, "--json", "-C"]).arg(dir.path());
        if let Some(p) = param {
            c.args(["--param", p]);
        }
        c.output().unwrap()
    };
    let o = query("?[test, target] := test_of[test, target]", None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = all["rows"].as_array().unwrap();
    assert!(rows.len() >= 20, "{rows:?}");
    // Bound to one target: the same tests as the tools' walk back from it.
    let target = rows[0][1].as_str().unwrap().to_string();
    let o = query("?[test] := test_of[test, $id] :order test", Some(&format!("id={target}")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let one: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let got: Vec<String> = one["rows"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap().to_string()).collect();
    let s = store::open(&store::db_path(dir.path())).unwrap();
    let want: Vec<String> = reproagent::graph::tests_for(&s, &target).unwrap();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    // A script that defines its own `test_of` keeps it.
    let o = query("test_of[a, b] := a = 1, b = 2\n?[a, b] := test_of[a, b]", None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["rows"], serde_json::json!([[1, 2]]));
    // The stored form of format 8 and before.
    let o = query("?[test] := *test_of{test}", None);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`*test_of` is not a stored relation") && err.contains("test_of[test, target]"), "{err}");
}

#[test]
fn a_format_6_sqlite_index_is_refused_by_readers_and_rebuilt_by_index() {
    let dir = copy_tree(&fixture("old-index/repo"));
    let root = dir.path();
    std::fs::create_dir_all(root.join(".reproagent")).unwrap();
    std::fs::copy(fixture("old-index/graph-v6-sqlite.db"), store::db_path(root)).unwrap();
    match store::open(&store::db_path(root)) {
        Err(e @ StoreError::Version { .. }) => {
            assert!(e.to_string().contains("6 or older (Cozo on SQLite)"), "{e}");
            assert_eq!(e.hint(), Some("run `reproagent index` to rebuild it"));
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an old index was opened"),
    }
    let bin = env!("CARGO_BIN_EXE_reproagent");
    let o = Command::new(bin).args(["query", "?[p] := *file{path: p}", "-C"]).arg(root).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("format version 6 or older") && err.contains("run `reproagent index`"), "{err}");
    let o = Command::new(bin).args(["index"]).arg(root).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && text.contains("rebuilt from scratch"), "{text}");
    let rows = dump_all(root);
    assert!(rows.contains("calls pkg/a.py:shout pkg/a.py:greet 5 local 1"), "{rows:#?}");
}

#[test]
fn a_flipped_byte_is_damage_and_index_rebuilds_the_graph() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path();
    index_with(root, 2, true);
    let before = dump_all(root);
    let db = store::db_path(root);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[40] ^= 0x55;
    std::fs::write(&db, &bytes).unwrap();
    // Readers of the flipped block say so; the checksum check finds it without a query.
    let s = store::open(&db);
    let damaged = match s {
        Err(StoreError::Damaged { .. }) => true,
        Ok(s) => matches!(s.verify(), Err(StoreError::Damaged { .. })),
        Err(e) => panic!("wrong error: {e}"),
    };
    assert!(damaged);
    let summary = index::run(&Options::new(root)).unwrap();
    assert!(summary.rebuilt_because.as_deref().is_some_and(|w| w.contains("damaged")), "{:?}", summary.rebuilt_because);
    assert_eq!(dump_all(root), before);
}

#[test]
fn an_update_writes_a_new_file_while_a_reader_keeps_the_old_one() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path();
    index_with(root, 2, true);
    let reader = store::open(&store::db_path(root)).unwrap();
    let before = reader.export("entity").unwrap().rows.len();
    let file =
        std::fs::read_dir(root).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|e| e == "py"));
    let target = file.unwrap_or_else(|| {
        let p = root.join("added.py");
        std::fs::write(&p, "").unwrap();
        p
    });
    let mut src = std::fs::read_to_string(&target).unwrap();
    src.push_str("\n\ndef added_by_the_test():\n    return added_by_the_test()\n");
    std::fs::write(&target, src).unwrap();
    let summary = index_with(root, 2, false);
    assert!(summary.rebuilt_because.is_none(), "{:?}", summary.rebuilt_because);
    // The reader opened before the update still reads its own file, whole.
    assert_eq!(reader.export("entity").unwrap().rows.len(), before);
    reader.verify().unwrap();
    let after = store::open(&store::db_path(root)).unwrap();
    assert_eq!(after.export("entity").unwrap().rows.len(), before + 1);
    // Incremental equals fresh.
    let incremental = dump_all(root);
    index_with(root, 2, true);
    assert_eq!(incremental, dump_all(root));
    let left: Vec<String> = std::fs::read_dir(root.join(".reproagent"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
