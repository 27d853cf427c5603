//! The keyword index: tantivy at `.reproagent/search/`, one document per entity and per
//! file, tokenized so that code identifiers match by their parts and as a whole.
//!
//! This module owns the schema, the tokenizer, the documents' content and the reader
//! side; the writer lives in `store::text` (only `store` touches a writer).

mod tokenizer;

use std::path::{Path, PathBuf};

use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, DisjunctionMaxQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED, STRING};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term};
use thiserror::Error;

pub use tokenizer::CodeTokenizer;

use crate::extract::{FileFacts, Kind};

/// The name the code tokenizer is registered under.
pub const CODE_TOKENIZER: &str = "code";

/// Bodies longer than this are cut before indexing: a generated 1 MB table says little.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

#[derive(Debug, Error)]
pub enum SearchError {
    /// No keyword index yet: `reproagent index` builds it.
    #[error("no keyword index at {0}")]
    Missing(PathBuf),
    /// The keyword index does not match the graph (an interrupted run): re-index.
    #[error("the keyword index at {0} is out of date with the graph")]
    Stale(PathBuf),
    #[error("keyword index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("path glob {0:?}: {1}")]
    Glob(String, String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl SearchError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SearchError::Missing(_) | SearchError::Stale(_) => Some("run `reproagent index` in the repository"),
            SearchError::Glob(..) => Some("use a glob such as 'src/**/*.py'"),
            _ => None,
        }
    }
}

/// Where the keyword index lives under a repository root.
pub fn search_dir(root: &Path) -> PathBuf {
    root.join(".reproagent").join("search")
}

/// The fields of the schema.
#[derive(Clone, Copy)]
pub struct Fields {
    pub id: Field,
    pub kind: Field,
    pub path: Field,
    pub path_text: Field,
    pub name: Field,
    pub qname: Field,
    pub signature: Field,
    pub doc: Field,
    /// Signature and doc together, indexed: a doc-only field would be empty for most
    /// entities, and BM25's length normalization then buries every docstring match.
    pub summary: Field,
    pub body: Field,
    pub start_line: Field,
    pub end_line: Field,
}

/// The schema, and its fields.
pub fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let code = |stored: bool| {
        let idx = TextFieldIndexing::default()
            .set_tokenizer(CODE_TOKENIZER)
            // BM25 needs term frequencies; no query is a phrase, so no positions are kept
            // (they were a third of the index).
            .set_index_option(IndexRecordOption::WithFreqs);
        let o = TextOptions::default().set_indexing_options(idx);
        if stored {
            o.set_stored()
        } else {
            o
        }
    };
    let f = Fields {
        // Read back from hits, never looked up by term: stored, not indexed.
        id: b.add_text_field("id", STORED),
        kind: b.add_text_field("kind", STRING | STORED),
        path: b.add_text_field("path", STRING | STORED),
        path_text: b.add_text_field("path_text", code(false)),
        name: b.add_text_field("name", code(true)),
        qname: b.add_text_field("qname", code(false)),
        signature: b.add_text_field("signature", STORED),
        doc: b.add_text_field("doc", STORED),
        summary: b.add_text_field("summary", code(false)),
        body: b.add_text_field("body", code(false)),
        start_line: b.add_u64_field("start_line", STORED),
        end_line: b.add_u64_field("end_line", STORED),
    };
    (b.build(), f)
}

/// Register our tokenizer on an index (it is not persisted by tantivy).
pub fn register_tokenizers(index: &Index) {
    index.tokenizers().register(CODE_TOKENIZER, CodeTokenizer::default());
}

/// A document to index, before it becomes a tantivy document.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchDoc {
    pub id: String,
    pub kind: String,
    pub path: String,
    pub name: String,
    pub qname: String,
    pub signature: String,
    pub doc: String,
    pub body: String,
    pub start_line: u64,
    pub end_line: u64,
}

impl SearchDoc {
    pub fn to_tantivy(&self, f: &Fields) -> TantivyDocument {
        let mut d = TantivyDocument::default();
        d.add_text(f.id, &self.id);
        d.add_text(f.kind, &self.kind);
        d.add_text(f.path, &self.path);
        d.add_text(f.path_text, &self.path);
        d.add_text(f.name, &self.name);
        d.add_text(f.qname, &self.qname);
        d.add_text(f.signature, &self.signature);
        d.add_text(f.doc, &self.doc);
        d.add_text(f.summary, format!("{}\n{}", self.signature, self.doc));
        d.add_text(f.body, &self.body);
        d.add_u64(f.start_line, self.start_line);
        d.add_u64(f.end_line, self.end_line);
        d
    }
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The documents of one file: one for the file, one per entity (modules are the file).
pub fn docs_for(facts: &FileFacts, text: &str) -> Vec<SearchDoc> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(facts.entities.len());
    let module_doc = facts.entities.first().map(|m| m.doc.clone()).unwrap_or_default();
    out.push(SearchDoc {
        id: facts.path.clone(),
        kind: "file".into(),
        path: facts.path.clone(),
        name: facts.path.rsplit('/').next().unwrap_or(&facts.path).to_string(),
        qname: facts.entities.first().map(|m| m.qname.clone()).unwrap_or_default(),
        signature: String::new(),
        doc: module_doc,
        body: cut(text, MAX_BODY_BYTES).to_string(),
        start_line: 1,
        end_line: facts.lines.max(1) as u64,
    });
    // An entity's body is its own lines: a nested entity (a class's method, a closure)
    // stands in its parent's body by its first line only (its `def` or signature line), so
    // each line of code is in the index about twice (the file and its innermost entity),
    // not once per nesting level. A term of a method's body finds the method and the file,
    // no longer every enclosing class.
    let mut nested: Vec<Vec<(usize, usize)>> = vec![Vec::new(); facts.entities.len()];
    for e in &facts.entities {
        if let Some(p) = e.parent.and_then(|p| nested.get_mut(p as usize)) {
            p.push((e.start_line as usize, e.end_line as usize));
        }
    }
    // The bodies of one file's entities, in all: eight times the file. Even own lines
    // overlap where a grammar nests entities on one line; past it, entities are found by
    // name, signature and doc, not body.
    let mut body_budget = text.len().saturating_mul(8).saturating_add(MAX_BODY_BYTES);
    for (ei, e) in facts.entities.iter().enumerate().filter(|(_, e)| e.kind != Kind::Module) {
        let (s, t) = ((e.start_line as usize).saturating_sub(1), (e.end_line as usize).min(lines.len()));
        let kids = &mut nested[ei];
        kids.sort_unstable();
        let mut kid = 0;
        // Joined only up to the cut: a deeply nested entity spans most of the file, and
        // joining every entity's whole span was quadratic.
        let mut body = String::new();
        for (i, l) in lines.iter().enumerate().take(t).skip(s) {
            if body.len() > MAX_BODY_BYTES.min(body_budget) {
                break;
            }
            // Line numbers are 1-based: line `i + 1` is inside a nested entity past its
            // first line when start < i + 1 <= end.
            let n = i + 1;
            while kid < kids.len() && kids[kid].1 < n {
                kid += 1;
            }
            if kids[kid..].iter().take_while(|k| k.0 < n).any(|k| n <= k.1) {
                continue;
            }
            if !body.is_empty() {
                body.push('\n');
            }
            body.push_str(l);
        }
        out.push(SearchDoc {
            id: e.id.clone(),
            kind: e.kind.as_str().into(),
            path: facts.path.clone(),
            name: e.name.clone(),
            qname: e.qname.clone(),
            signature: e.signature.clone(),
            doc: e.doc.clone(),
            body: {
                let b = cut(&body, MAX_BODY_BYTES.min(body_budget)).to_string();
                body_budget -= b.len();
                b
            },
            start_line: e.start_line as u64,
            end_line: e.end_line as u64,
        });
    }
    out
}

/// One ranked hit.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct SearchHit {
    /// The entity kind, or `file`.
    pub kind: String,
    pub id: String,
    pub path: String,
    pub start_line: i64,
    pub end_line: i64,
    pub score: f32,
    /// The signature, the first doc line, or the first line that matches a query term.
    pub snippet: String,
}

/// An open keyword index.
pub struct SearchIndex {
    root: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
}

/// Field boosts: names over qualified names over signatures over docs over bodies.
const BOOSTS: [(&str, f32); 5] = [("name", 3.0), ("qname", 2.0), ("summary", 2.0), ("path_text", 1.0), ("body", 1.0)];

/// Words dropped from queries of three words or more: in prose they only add noise
/// (`of` would match `Money.of`); in a one- or two-word query they may be the name sought.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is", "it", "its", "of", "on",
    "or", "that", "the", "this", "to", "was", "when", "which", "with",
];

/// The query text tantivy sees: prose loses its stop words.
fn prepare_query(q: &str) -> String {
    let words: Vec<&str> = q.split_whitespace().collect();
    if words.len() < 3 {
        return q.to_string();
    }
    let kept: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !STOP_WORDS.contains(&w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase().as_str()))
        .collect();
    if kept.is_empty() {
        q.to_string()
    } else {
        kept.join(" ")
    }
}

/// A query reads at most this many bytes...
pub const MAX_QUERY_BYTES: usize = 4096;
/// ...searches at most this many distinct words...
pub const MAX_QUERY_WORDS: usize = 64;
/// ...each at most this long (a longer one is left out: no identifier is that long).
pub const MAX_WORD_BYTES: usize = 64;

/// The words a query searches, in order, and a note saying what was left out when the
/// query was over the bounds (each word costs a query clause over five fields).
pub fn query_words(query: &str) -> (Vec<String>, Option<String>) {
    let mut cut: Vec<String> = Vec::new();
    let text = if query.len() > MAX_QUERY_BYTES {
        let mut end = MAX_QUERY_BYTES;
        while !query.is_char_boundary(end) {
            end -= 1;
        }
        cut.push(format!("read the first {MAX_QUERY_BYTES} of its {} bytes", query.len()));
        &query[..end]
    } else {
        query
    };
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut words: Vec<String> = Vec::new();
    let (mut long, mut more) = (0usize, false);
    tokenizer::split(&prepare_query(text), &mut |_, _, t| {
        if t.len() > MAX_WORD_BYTES {
            long += 1;
        } else if !seen.contains(t) {
            if words.len() < MAX_QUERY_WORDS {
                seen.insert(t.to_string());
                words.push(t.to_string());
            } else {
                more = true;
            }
        }
    });
    if more {
        cut.push(format!("searched its first {MAX_QUERY_WORDS} distinct words"));
    }
    if long > 0 {
        cut.push(format!("left out {long} word{} over {MAX_WORD_BYTES} bytes", if long == 1 { "" } else { "s" }));
    }
    let note = (!cut.is_empty()).then(|| format!("the query was cut: {}", cut.join(", ")));
    (words, note)
}

impl SearchIndex {
    /// Open the keyword index of a repository.
    pub fn open(root: &Path) -> Result<SearchIndex, SearchError> {
        let dir = search_dir(root);
        if !dir.join("meta.json").exists() {
            return Err(SearchError::Missing(dir));
        }
        let index = Index::open_in_dir(&dir)?;
        register_tokenizers(&index);
        let (expected, fields) = schema();
        // Written by a build with another schema: its field numbers mean other things.
        if index.schema() != expected {
            return Err(SearchError::Stale(dir));
        }
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(SearchIndex { root: root.to_path_buf(), index, reader, fields })
    }

    /// The payload the index was last committed with (the graph's tree digest).
    pub fn payload(&self) -> Result<Option<String>, SearchError> {
        Ok(self.index.load_metas()?.payload)
    }

    /// Check the index against the graph's tree digest.
    pub fn check_fresh(&self, graph_digest: Option<&str>) -> Result<(), SearchError> {
        if self.payload()?.as_deref() != graph_digest {
            return Err(SearchError::Stale(search_dir(&self.root)));
        }
        Ok(())
    }

    /// Ranked hits for free text. `kind` keeps one entity kind (or `file`); `path_glob`
    /// keeps paths matching a glob.
    pub fn search(
        &self,
        query: &str,
        kind: Option<&str>,
        path_glob: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let f = self.fields;
        let (words, _) = query_words(query);
        let q = self.text_query(&words);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, q)];
        if let Some(k) = kind {
            let t = Term::from_field_text(f.kind, k);
            clauses.push((Occur::Must, Box::new(TermQuery::new(t, IndexRecordOption::Basic))));
        }
        let terms = tokenizer::query_terms(&words);
        let query = BooleanQuery::new(clauses);
        let glob = match path_glob {
            Some(g) => Some(
                globset::Glob::new(g).map_err(|e| SearchError::Glob(g.to_string(), e.to_string()))?.compile_matcher(),
            ),
            None => None,
        };
        let searcher = self.reader.searcher();
        // A glob filters after ranking: fetch more to fill the page.
        let fetch = if glob.is_some() { (limit * 20).max(200) } else { limit };
        let top = searcher.search(&query, &TopDocs::with_limit(fetch.max(1)))?;
        let mut hits = Vec::new();
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr)?;
            let text = |fl: Field| doc.get_first(fl).and_then(|v| v.as_str()).unwrap_or("").to_string();
            let num = |fl: Field| doc.get_first(fl).and_then(|v| v.as_u64()).unwrap_or(0) as i64;
            let path = text(f.path);
            if let Some(g) = &glob {
                if !g.is_match(&path) {
                    continue;
                }
            }
            let (start, end) = (num(f.start_line), num(f.end_line));
            let snippet = self.snippet(&path, start, end, &text(f.signature), &text(f.doc), &terms);
            hits.push(SearchHit {
                kind: text(f.kind),
                id: text(f.id),
                path,
                start_line: start,
                end_line: end,
                score,
                snippet,
            });
            if hits.len() >= limit {
                break;
            }
        }
        Ok(hits)
    }

    /// Each query token scores by the field it matches best (plus a little for the
    /// others), summed over tokens: a document matching many of the words beats one
    /// matching one word in every field. Code and error messages are full of `:`, `(` and
    /// quotes, so no query syntax is read: the text is tokenized like the documents, and
    /// bounded by [`query_words`].
    fn text_query(&self, tokens: &[String]) -> Box<dyn Query> {
        let f = self.fields;
        let fields = [f.name, f.qname, f.summary, f.path_text, f.body];
        let per_token: Vec<(Occur, Box<dyn Query>)> = tokens
            .iter()
            .map(|t| {
                let alts: Vec<Box<dyn Query>> = fields
                    .iter()
                    .zip(BOOSTS)
                    .map(|(field, (_, boost))| {
                        let tq = TermQuery::new(Term::from_field_text(*field, t), IndexRecordOption::WithFreqs);
                        Box::new(BoostQuery::new(Box::new(tq), boost)) as Box<dyn Query>
                    })
                    .collect();
                (Occur::Should, Box::new(DisjunctionMaxQuery::with_tie_breaker(alts, 0.2)) as Box<dyn Query>)
            })
            .collect();
        Box::new(BooleanQuery::new(per_token))
    }

    /// The first line of the hit that holds a query term; else its signature or doc.
    fn snippet(&self, path: &str, start: i64, end: i64, signature: &str, doc: &str, terms: &[String]) -> String {
        // Through the confinement rule: a file swapped for a symlink out since `index` is not read.
        let canon = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
        let read = crate::confine::read_regular(&canon, &canon.join(path))
            .ok()
            .and_then(|b| crate::extract::decode_source(&b).ok().map(|t| t.into_owned()));
        if let Some(text) = read {
            for (i, line) in
                text.lines().enumerate().skip((start.max(1) - 1) as usize).take((end - start + 1).max(1) as usize)
            {
                let low = line.to_lowercase();
                if terms.iter().any(|t| low.contains(t.as_str())) {
                    return format!("{}: {}", i + 1, crate::extract::truncate(line.trim().to_string(), 200));
                }
            }
        }
        let first_doc = doc.lines().next().unwrap_or("");
        crate::extract::truncate(if signature.is_empty() { first_doc.to_string() } else { signature.to_string() }, 200)
    }
}
