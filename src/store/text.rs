//! The keyword index's writer side: full builds into a fresh directory swapped into
//! place, and incremental updates (delete a changed file's documents by path, add the new
//! ones) committed with the graph's tree digest as payload, so a reader can tell a keyword
//! index that matches the graph from one an interrupted run left behind.

use std::borrow::Borrow;
use std::path::{Path, PathBuf};

use tantivy::{Index, IndexWriter, Term};

use super::StoreError;
use crate::search::{register_tokenizers, schema, search_dir, SearchDoc};

/// Memory for tantivy's indexing buffers.
const WRITER_HEAP: usize = 128 * 1024 * 1024;

fn tv(e: tantivy::TantivyError) -> StoreError {
    StoreError::Db(format!("keyword index: {e}"))
}

fn add_all(writer: &IndexWriter, docs: impl IntoIterator<Item = impl Borrow<SearchDoc>>) -> Result<(), StoreError> {
    let (_, f) = schema();
    for d in docs {
        writer.add_document(d.borrow().to_tantivy(&f)).map_err(tv)?;
    }
    Ok(())
}

fn commit(mut writer: IndexWriter, digest: &str) -> Result<(), StoreError> {
    let mut prepared = writer.prepare_commit().map_err(tv)?;
    prepared.set_payload(digest);
    prepared.commit().map_err(tv)?;
    writer.wait_merging_threads().map_err(tv)?;
    Ok(())
}

/// Build the keyword index from scratch and swap it in for the old one. Each document is
/// dropped once tantivy has its copy: a full build does not hold every body twice.
pub fn write_full(
    root: &Path,
    docs: impl IntoIterator<Item = SearchDoc>,
    digest: &str,
    threads: usize,
) -> Result<(), StoreError> {
    let build = FullBuild::begin(root, threads)?;
    build.add(docs)?;
    build.finish(digest)
}

/// A keyword index being built from scratch in a directory of its own: documents go in
/// as they come (a full index feeds it during the parse, before the tree digest is known),
/// and [`FullBuild::finish`] commits it with the digest and swaps it in for the old one.
/// Dropped unfinished, it leaves the live index as it was (its directory is removed by a
/// later run's sweep of dead temporaries, or at once by [`FullBuild::abandon`]).
pub struct FullBuild {
    index: Index,
    writer: IndexWriter,
    tmp: PathBuf,
    live: PathBuf,
}

impl FullBuild {
    pub fn begin(root: &Path, threads: usize) -> Result<FullBuild, StoreError> {
        let live = search_dir(root);
        let parent = live.parent().unwrap_or(root);
        std::fs::create_dir_all(parent)?;
        super::remove_dead_temps(parent);
        let tmp = parent.join(format!("search.tmp-{}", std::process::id()));
        // An earlier run of this process that failed half-way (the graph writer never
        // removes this process's files: they may be being written).
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        let (schema, _) = schema();
        let index = Index::create_in_dir(&tmp, schema).map_err(tv)?;
        register_tokenizers(&index);
        let writer: IndexWriter = index.writer_with_num_threads(threads.clamp(1, 8), WRITER_HEAP).map_err(tv)?;
        Ok(FullBuild { index, writer, tmp, live })
    }

    /// Hand documents to tantivy's indexing threads, in order.
    pub fn add(&self, docs: impl IntoIterator<Item = SearchDoc>) -> Result<(), StoreError> {
        add_all(&self.writer, docs)
    }

    /// Commit with the tree digest and put the new index in the old one's place.
    pub fn finish(self, digest: &str) -> Result<(), StoreError> {
        let FullBuild { index, writer, tmp, live } = self;
        commit(writer, digest)?;
        drop(index);
        let parent = live.parent().unwrap_or(&live);
        let old = parent.join(format!("search.old-{}", std::process::id()));
        if live.exists() {
            std::fs::rename(&live, &old)?;
        }
        std::fs::rename(&tmp, &live)?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    }

    /// Stop without committing: the live index stays, this build's directory goes.
    pub fn abandon(self) {
        let FullBuild { index, writer, tmp, .. } = self;
        // Dropping the writer joins tantivy's indexing threads, which hold files in the
        // directory.
        drop(writer);
        drop(index);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

/// Replace the documents of `paths` (changed and removed files) by `docs`.
pub fn update(
    root: &Path,
    paths: &[String],
    docs: impl IntoIterator<Item = impl Borrow<SearchDoc>>,
    digest: &str,
) -> Result<(), StoreError> {
    let index = Index::open_in_dir(search_dir(root)).map_err(tv)?;
    register_tokenizers(&index);
    let (_, f) = schema();
    let writer: IndexWriter = index.writer_with_num_threads(1, 32 * 1024 * 1024).map_err(tv)?;
    for p in paths {
        writer.delete_term(Term::from_field_text(f.path, p));
    }
    add_all(&writer, docs)?;
    commit(writer, digest)
}
