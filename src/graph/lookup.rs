//! Typed lookups for the key-free stages (localize, the conventions, the snippet's
//! imports) and the tools' freshness check: the Datalog they need lives here, so
//! callers outside `graph/` and `store/` never write a query.

use std::collections::BTreeMap;

use cozo::DataValue;

use super::{entities, int_of, params, str_of, EntityInfo, GraphError, ENTITY_COLS};
use crate::store::Store;

/// A file of the index.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    pub path: String,
    pub lang: String,
    pub lines: i64,
    pub is_test: bool,
    /// The content digest the index was built from.
    pub hash: String,
}

/// Every file of the index, by path.
pub fn files(store: &Store) -> Result<Vec<FileInfo>, GraphError> {
    let r = store
        .query("?[path, lang, lines, is_test, hash] := *file{path, lang, lines, is_test, hash}", BTreeMap::new())?;
    Ok(r.rows
        .iter()
        .map(|x| FileInfo {
            path: str_of(&x[0]),
            lang: str_of(&x[1]),
            lines: int_of(&x[2]),
            is_test: x[3].get_bool().unwrap_or(false),
            hash: str_of(&x[4]),
        })
        .collect())
}

/// The entities of `file` (modules left out) whose lines hold `line`, innermost first.
pub fn entities_at(store: &Store, file: &str, line: i64) -> Result<Vec<EntityInfo>, GraphError> {
    let r = store.query(
        &format!(
            "?[{ENTITY_COLS}] := *entity:by_file{{file: $f, id}}, *entity{{{ENTITY_COLS}}},
                 kind != 'module', start_line <= $l, end_line >= $l"
        ),
        params(&[("f", DataValue::from(file)), ("l", DataValue::from(line))]),
    )?;
    let mut out = entities(&r);
    out.sort_by(|a, b| (a.end_line - a.start_line, &a.id).cmp(&(b.end_line - b.start_line, &b.id)));
    Ok(out)
}

/// What `caller` calls on `line` through edges at least `min_conf` sure.
pub fn callees_on_line(store: &Store, caller: &str, line: i64, min_conf: f64) -> Result<Vec<EntityInfo>, GraphError> {
    let r = store.query(
        &format!(
            "?[{ENTITY_COLS}] := *calls{{caller: $c, line: $l, callee: id, confidence}}, confidence >= $m,
                 *entity{{{ENTITY_COLS}}}"
        ),
        params(&[("c", DataValue::from(caller)), ("l", DataValue::from(line)), ("m", DataValue::from(min_conf))]),
    )?;
    Ok(entities(&r))
}

/// The entities whose (last) name is `name`: one indexed lookup.
pub fn entities_named(store: &Store, name: &str) -> Result<Vec<EntityInfo>, GraphError> {
    let r = store.query(
        &format!("?[{ENTITY_COLS}] := *entity:by_name{{name: $n, id}}, *entity{{{ENTITY_COLS}}}"),
        params(&[("n", DataValue::from(name))]),
    )?;
    Ok(entities(&r))
}

/// The file that defines the type with qualified name `qname` (a Java class in a stack
/// frame), looked up by its last name.
pub fn file_of_type(store: &Store, qname: &str) -> Result<Option<String>, GraphError> {
    let last = qname.rsplit('.').next().unwrap_or(qname);
    Ok(entities_named(store, last)?.into_iter().find(|e| e.qname == qname).map(|e| e.file))
}

/// Per file, how many functions or methods carry a name starting with `prefix` (the
/// language's test prefix).
pub fn test_function_counts(store: &Store, prefix: &str) -> Result<BTreeMap<String, usize>, GraphError> {
    let r = store.query(
        "?[file, count(id)] := *entity{id, file, kind, name}, is_in(kind, ['function', 'method']), starts_with(name, $p)",
        params(&[("p", DataValue::from(prefix))]),
    )?;
    Ok(r.rows.iter().map(|x| (str_of(&x[0]), int_of(&x[1]).max(0) as usize)).collect())
}

/// The tests (`test_of`) that reach any entity of `file`, sorted.
pub fn tests_reaching_file(store: &Store, file: &str) -> Result<Vec<String>, GraphError> {
    let r = store.query("?[id] := *entity:by_file{file: $f, id}", params(&[("f", DataValue::from(file))]))?;
    let ids: Vec<String> = r.rows.iter().map(|x| str_of(&x[0])).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut tests: Vec<String> = store.tests_reaching(&ids)?.into_iter().map(|(test, _)| test).collect();
    tests.sort();
    tests.dedup();
    Ok(tests)
}

/// How often the repository imports one of `names` (as a module, a name or an alias):
/// (module, name, alias, number of files).
pub fn import_counts(store: &Store, names: &[String]) -> Result<Vec<(String, String, String, i64)>, GraphError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let list = DataValue::List(names.iter().map(|n| DataValue::from(n.as_str())).collect());
    let r = store.query(
        "?[module, name, alias, count(file)] := *imports{file, module, name, alias}, is_in(alias, $names)
         ?[module, name, alias, count(file)] := *imports{file, module, name, alias}, is_in(name, $names)
         ?[module, name, alias, count(file)] := *imports{file, module, name, alias}, name = '', alias = '', is_in(module, $names)",
        params(&[("names", list)]),
    )?;
    Ok(r.rows.iter().map(|x| (str_of(&x[0]), str_of(&x[1]), str_of(&x[2]), int_of(&x[3]))).collect())
}

/// Top-level classes and functions of non-test files named one of `names`:
/// (name, file).
pub fn top_level_definitions(store: &Store, names: &[String]) -> Result<Vec<(String, String)>, GraphError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let list = DataValue::List(names.iter().map(|n| DataValue::from(n.as_str())).collect());
    let r = store.query(
        "?[name, file] := *entity:by_name{name, id}, is_in(name, $names), *entity{id, kind, file},
             is_in(kind, ['class', 'function']), *contains:by_child{child: id, parent}, parent == file,
             *file{path: file, is_test}, is_test == false",
        params(&[("names", list)]),
    )?;
    Ok(r.rows.iter().map(|x| (str_of(&x[0]), str_of(&x[1]))).collect())
}
