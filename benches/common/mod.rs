//! What the benchmarks over the Django corpus share: where the corpus is, copying it,
//! percentiles, reading a query's rows as strings.

#![allow(dead_code)] // each benchmark uses its own part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reproagent::store;

pub fn corpus() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("REPROAGENT_BENCH_CORPUS") {
        return Some(PathBuf::from(p));
    }
    // fetch.sh unpacks the Django sdist into benches/data/django/.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/django");
    data.join("django").is_dir().then_some(data)
}

pub fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = e.file_type().unwrap();
        let dest = to.join(e.file_name());
        if e.file_name() == ".reproagent" {
            continue;
        }
        if t.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&e.path(), &dest);
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

pub fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

pub fn strings(store: &store::Store, q: &str) -> Vec<Vec<String>> {
    store
        .query(q, BTreeMap::new())
        .unwrap()
        .rows
        .iter()
        .map(|r| r.iter().map(|v| v.get_str().map(str::to_string).unwrap_or_else(|| format!("{v:?}"))).collect())
        .collect()
}
