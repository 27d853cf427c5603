//! The rows of every stored relation, as the resolver produces them and the store writes
//! them: the store owns its row types; `resolve` fills them.
//!
//! Text is a [`Text`]: a full build's rows borrow every id, name and path from the
//! parsed facts they come from (a copy of each would be a third of the build's peak
//! memory on Django), while rows read back from a stored graph own theirs.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// A row's text: borrowed from the facts, or owned when read from the store.
pub type Text<'a> = Cow<'a, str>;

/// The key of an `imports` row: (file, line, module, name).
pub type ImportKey<'a> = (Text<'a>, i64, Text<'a>, Text<'a>);

/// The rows of every stored relation, sorted and free of duplicates.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rows<'a> {
    /// path => lang, hash, lines, is_test, syntax_errors
    pub file: BTreeMap<Text<'a>, (Text<'a>, Text<'a>, i64, bool, i64)>,
    /// id => kind, name, qname, file, start_line, end_line, signature, doc, is_test
    pub entity: BTreeMap<Text<'a>, EntityRow<'a>>,
    pub contains: BTreeSet<(Text<'a>, Text<'a>)>,
    /// (caller, callee, line) => how, confidence
    pub calls: BTreeMap<(Text<'a>, Text<'a>, i64), (Text<'a>, f64)>,
    pub call_site: BTreeSet<(Text<'a>, i64, Text<'a>, Text<'a>)>,
    /// The call sites that got no edge: (name, caller, line, receiver).
    pub unresolved: BTreeSet<(Text<'a>, Text<'a>, i64, Text<'a>)>,
    /// (file, line, module, name) => alias, target
    pub imports: BTreeMap<ImportKey<'a>, (Text<'a>, Option<Text<'a>>)>,
    /// (child, base_name) => base
    pub inherits: BTreeMap<(Text<'a>, Text<'a>), Option<Text<'a>>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EntityRow<'a> {
    pub kind: Text<'a>,
    pub name: Text<'a>,
    pub qname: Text<'a>,
    pub file: Text<'a>,
    pub start_line: i64,
    pub end_line: i64,
    pub signature: Text<'a>,
    pub doc: Text<'a>,
    /// A test (what `test_of` walks back to): Python functions and methods named `test*`
    /// in test files, Java `@Test` methods, ...; the extractor decides.
    pub is_test: bool,
}

impl Rows<'_> {
    /// Drop the rows of relation `rel` (a full build frees each relation once written).
    pub fn clear_relation(&mut self, rel: &str) {
        match rel {
            "file" => self.file = Default::default(),
            "entity" => self.entity = Default::default(),
            "contains" => self.contains = Default::default(),
            "calls" => self.calls = Default::default(),
            "call_site" => self.call_site = Default::default(),
            "unresolved" => self.unresolved = Default::default(),
            "imports" => self.imports = Default::default(),
            "inherits" => self.inherits = Default::default(),
            _ => {}
        }
    }
}
