//! The rows of every stored relation, as the resolver produces them and the store writes
//! them: the store owns its row types; `resolve` fills them.

use std::collections::{BTreeMap, BTreeSet};

/// The key of an `imports` row: (file, line, module, name).
pub type ImportKey = (String, i64, String, String);

/// The rows of every stored relation, sorted and free of duplicates.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rows {
    /// path => lang, hash, lines, is_test, syntax_errors
    pub file: BTreeMap<String, (String, String, i64, bool, i64)>,
    /// id => kind, name, qname, file, start_line, end_line, signature, doc
    pub entity: BTreeMap<String, EntityRow>,
    pub contains: BTreeSet<(String, String)>,
    /// (caller, callee, line) => how, confidence
    pub calls: BTreeMap<(String, String, i64), (String, f64)>,
    pub call_site: BTreeSet<(String, i64, String, String)>,
    /// The call sites that got no edge: (name, caller, line, receiver).
    pub unresolved: BTreeSet<(String, String, i64, String)>,
    /// (file, line, module, name) => alias, target
    pub imports: BTreeMap<ImportKey, (String, Option<String>)>,
    /// (child, base_name) => base
    pub inherits: BTreeMap<(String, String), Option<String>>,
    pub test_of: BTreeSet<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EntityRow {
    pub kind: String,
    pub name: String,
    pub qname: String,
    pub file: String,
    pub start_line: i64,
    pub end_line: i64,
    pub signature: String,
    pub doc: String,
}
