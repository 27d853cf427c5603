//! Cozo's storage engine for the graph: an immutable base table file (see `table`) and
//! a small delta table beside it.
//!
//! Readers take a snapshot (base and delta) and never lock. A write transaction keeps
//! its puts and deletes in memory. Its commit writes the delta again, the old delta's
//! changes with the transaction's laid over them, as a new file renamed over the old
//! one: an incremental run writes kilobytes, not the graph. The delta names the base it
//! applies to (its [`Table::identity`]); a delta that names another base is not read.
//! When the delta outgrows a sixteenth of the base, the commit folds it into a new base
//! instead (the old base's untouched blocks copied as they are) and removes the delta.
//! A killed commit leaves the old files whole (and a temp file that `remove_dead_temps`
//! removes): renaming a new base over the old one makes the old delta name a base that
//! no longer exists. Readers in other processes keep the files they opened. Writers are
//! serialized by a lock here and across processes by the index lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use cozo::{decode_tuple_from_kv, DataValue, Storage, StoreTx, ValidityTs};
use miette::{miette, Result};

use super::table::{Table, TableError, TableIter, TableWriter};

type Tuple = Vec<DataValue>;

struct Inner {
    path: PathBuf,
    snap: RwLock<Snapshot>,
    writer: Mutex<()>,
}

/// What a reader reads: a base table and the delta laid over it.
#[derive(Clone)]
struct Snapshot {
    base: Arc<Table>,
    delta: Option<Arc<Table>>,
}

/// The delta's key for the identity of the base it applies to (no Cozo key is empty).
const BASE_KEY: &[u8] = b"";
/// A delta value's first byte: a put (the value follows) or a delete.
const PUT: u8 = 1;
const DEL: u8 = 0;
/// A delta of fewer pairs than this is never folded into the base.
const FOLD_MIN: u64 = 4096;

/// The delta file beside the base table at `path` (`graph.db.delta`).
pub fn delta_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".delta");
    path.with_file_name(name)
}

/// The delta of `base`, if there is one that applies to it.
fn open_delta(path: &Path, base: &Table) -> Result<Option<Arc<Table>>, TableError> {
    let dpath = delta_path(path);
    let delta = match Table::open(&dpath) {
        Ok(t) => t,
        Err(TableError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(TableError::Foreign) => {
            return Err(TableError::Damaged(format!("{} is not a graph delta", dpath.display())))
        }
        Err(e) => return Err(e),
    };
    Ok((delta.get(BASE_KEY)?.as_deref() == Some(base.identity()?.as_slice())).then(|| Arc::new(delta)))
}

/// A delta value: `Some` put, `None` delete.
fn untag<'v>(path: &Path, v: &'v [u8]) -> std::result::Result<Option<&'v [u8]>, TableError> {
    match v.split_first() {
        Some((&PUT, rest)) => Ok(Some(rest)),
        Some((&DEL, [])) => Ok(None),
        _ => Err(TableError::Damaged(format!("{}: a delta value with no tag", delta_path(path).display()))),
    }
}

/// The graph's storage: cheap to clone, all clones share the open table.
#[derive(Clone)]
pub struct GraphStorage(Arc<Inner>);

/// A table error as Cozo carries it: the message names the file and says it is damaged,
/// which the store turns back into `StoreError::Damaged`.
pub fn table_err(path: &Path, e: TableError) -> miette::Error {
    match e {
        TableError::Io(e) => miette!("{}: {e}", path.display()),
        e => miette!("{} is damaged: {e}", path.display()),
    }
}

/// Write a new table beside `path` with `write` (given the temp path,
/// `graph.db.tmp-PID` for `graph.db`), then rename it over `path` and fsync the directory so the
/// rename survives a crash (the writer fsyncs the file itself). On failure the temp file
/// is removed and `path` is untouched.
pub fn replace_with<E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!("{name}.tmp-{}", std::process::id()));
    // An earlier run of this process that failed half-way.
    if std::fs::symlink_metadata(&tmp).is_ok() {
        std::fs::remove_file(&tmp)?;
    }
    let result = write(&tmp).and_then(|_| {
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl GraphStorage {
    pub fn open(path: &Path) -> Result<GraphStorage, TableError> {
        let base = Table::open(path)?;
        let delta = open_delta(path, &base)?;
        Ok(GraphStorage(Arc::new(Inner {
            path: path.to_path_buf(),
            snap: RwLock::new(Snapshot { base: Arc::new(base), delta }),
            writer: Mutex::new(()),
        })))
    }

    fn snapshot(&self) -> Snapshot {
        self.0.snap.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The base table.
    pub fn table(&self) -> Arc<Table> {
        self.snapshot().base
    }

    /// The delta over the base, if any.
    pub fn delta(&self) -> Option<Arc<Table>> {
        self.snapshot().delta
    }

    /// Check every block's checksum, the base's and the delta's.
    pub fn check_sums(&self) -> Result<(), TableError> {
        let snap = self.snapshot();
        snap.base.check_sums()?;
        snap.delta.as_ref().map_or(Ok(()), |d| d.check_sums())
    }

    /// Commit `writes` (None deletes) over `snap`: a new delta, or, when it would
    /// outgrow the base's sixteenth (or `fold`), a new base with everything folded in.
    fn commit(
        &self,
        snap: &Snapshot,
        writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        fold: bool,
    ) -> Result<(), TableError> {
        let path = &self.0.path;
        let mut all: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        if let Some(d) = &snap.delta {
            for pair in d.range(&[0], None) {
                let (k, v) = pair?;
                let v = untag(path, &v)?.map(<[u8]>::to_vec);
                all.insert(k, v);
            }
        }
        all.extend(writes);
        let dpath = delta_path(path);
        if fold || all.len() as u64 > FOLD_MIN.max(snap.base.pairs() / 16) {
            replace_with(path, |tmp| merge_into(&snap.base, &all, tmp))?;
            // The old delta names the old base: never read again, removed.
            if let Err(e) = std::fs::remove_file(&dpath) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(e.into());
                }
            }
        } else {
            replace_with(&dpath, |tmp| {
                let mut w = TableWriter::create(tmp)?;
                w.add(BASE_KEY, &snap.base.identity()?)?;
                let mut buf = Vec::new();
                for (k, v) in &all {
                    buf.clear();
                    match v {
                        Some(v) => {
                            buf.push(PUT);
                            buf.extend_from_slice(v);
                        }
                        None => buf.push(DEL),
                    }
                    w.add(k, &buf)?;
                }
                w.finish().map(drop)
            })?;
        }
        let base = Table::open(path)?;
        let delta = open_delta(path, &base)?;
        *self.0.snap.write().unwrap_or_else(|e| e.into_inner()) = Snapshot { base: Arc::new(base), delta };
        Ok(())
    }

    /// Fold the delta into a new base (tests; a commit folds by itself when the delta grows).
    pub fn fold(&self) -> Result<(), TableError> {
        let _guard = self.0.writer.lock().unwrap_or_else(|e| e.into_inner());
        let snap = self.snapshot();
        if snap.delta.is_none() {
            return Ok(());
        }
        self.commit(&snap, BTreeMap::new(), true)
    }
}

fn merge_into(base: &Arc<Table>, writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>, tmp: &Path) -> Result<(), TableError> {
    let mut w = TableWriter::create(tmp)?;
    let mut over = writes.iter().peekable();
    // Untouched blocks waiting to be copied as they are, in one go.
    let mut run = 0..0;
    for (i, b) in base.blocks().iter().enumerate() {
        if over.peek().is_some_and(|(k, _)| k.as_slice() < b.first.as_slice()) {
            w.copy_blocks(base, std::mem::replace(&mut run, i..i))?;
            while let Some((k, v)) = over.next_if(|(k, _)| k.as_slice() < b.first.as_slice()) {
                if let Some(v) = v {
                    w.add(k, v)?;
                }
            }
        }
        if over.peek().is_none_or(|(k, _)| k.as_slice() > b.last.as_slice()) {
            if run.end != i {
                w.copy_blocks(base, std::mem::replace(&mut run, i..i))?;
            }
            run.end = i + 1;
            continue;
        }
        w.copy_blocks(base, std::mem::replace(&mut run, i + 1..i + 1))?;
        let pairs = base.block(i)?;
        let mut old = pairs.iter().peekable();
        loop {
            let o = old.peek().copied();
            let n = over.peek().copied().filter(|(k, _)| k.as_slice() <= b.last.as_slice());
            match (o, n) {
                (None, None) => break,
                (Some((ko, vo)), Some((kn, _))) if ko < kn => {
                    w.add(ko, vo)?;
                    old.next();
                }
                (Some((ko, vo)), None) => {
                    w.add(ko, vo)?;
                    old.next();
                }
                (o, Some((kn, vn))) => {
                    // The transaction's change replaces the old pair of the same key.
                    if o.is_some_and(|(ko, _)| ko == kn) {
                        old.next();
                    }
                    if let Some(v) = vn {
                        w.add(kn, v)?;
                    }
                    over.next();
                }
            }
        }
    }
    w.copy_blocks(base, run)?;
    for (k, v) in over {
        if let Some(v) = v {
            w.add(k, v)?;
        }
    }
    w.finish()?;
    Ok(())
}

impl<'s> Storage<'s> for GraphStorage {
    type Tx = GraphTx<'s>;

    fn storage_kind(&self) -> &'static str {
        "reproagent-table"
    }

    fn transact(&'s self, write: bool) -> Result<Self::Tx> {
        // A writer takes the lock before its snapshot: it sees every earlier commit.
        let guard = write.then(|| self.0.writer.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(GraphTx { storage: self, snap: self.snapshot(), writes: write.then(BTreeMap::new), _guard: guard })
    }

    fn range_compact(&'s self, _lower: &[u8], _upper: &[u8]) -> Result<()> {
        Ok(())
    }

    fn batch_put<'a>(&'a self, _data: Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 'a>) -> Result<()> {
        Err(miette!("the graph store takes writes through transactions only"))
    }
}

pub struct GraphTx<'s> {
    storage: &'s GraphStorage,
    snap: Snapshot,
    /// A write transaction's changes: `None` deletes.
    writes: Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    _guard: Option<MutexGuard<'s, ()>>,
}

impl GraphTx<'_> {
    fn err(&self, e: TableError) -> miette::Error {
        table_err(&self.storage.0.path, e)
    }

    fn writes(&mut self) -> Result<&mut BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        self.writes.as_mut().ok_or_else(|| miette!("write in a read transaction"))
    }

    fn merged<'a>(&'a self, lower: &[u8], upper: &[u8]) -> Merged<'a> {
        let base = self.layered(lower, upper).peekable();
        let over = self.writes.as_ref().map(|w| w.range(lower.to_vec()..upper.to_vec()).peekable());
        Merged { tx_path: &self.storage.0.path, base, over }
    }
}

impl GraphTx<'_> {
    /// The snapshot's pairs in a range: the base's, with the delta's laid over them.
    fn layered(&self, lower: &[u8], upper: &[u8]) -> Layered<'_> {
        // The delta's first key (the base it applies to) is empty: never in a range.
        let lower_d: &[u8] = if lower.is_empty() { &[0] } else { lower };
        Layered {
            path: &self.storage.0.path,
            base: self.snap.base.range(lower, Some(upper)).peekable(),
            delta: self.snap.delta.as_ref().map(|d| d.range(lower_d, Some(upper)).peekable()),
        }
    }
}

/// A base table's pairs with its delta's puts and deletes laid over them.
struct Layered<'a> {
    path: &'a Path,
    base: std::iter::Peekable<TableIter>,
    delta: Option<std::iter::Peekable<TableIter>>,
}

impl Iterator for Layered<'_> {
    type Item = std::result::Result<(Vec<u8>, Vec<u8>), TableError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(delta) = self.delta.as_mut() else { return self.base.next() };
            // 0: the base's pair comes first; 1: the delta's; 2: the delta's replaces it.
            let which = match (self.base.peek(), delta.peek()) {
                (Some(Err(_)), _) | (Some(_), None) => 0,
                (_, Some(Err(_))) | (None, Some(_)) => 1,
                (None, None) => return None,
                (Some(Ok((kb, _))), Some(Ok((kd, _)))) => match kb.as_slice().cmp(kd.as_slice()) {
                    std::cmp::Ordering::Less => 0,
                    std::cmp::Ordering::Greater => 1,
                    std::cmp::Ordering::Equal => 2,
                },
            };
            if which == 0 {
                return self.base.next();
            }
            if which == 2 {
                self.base.next();
            }
            match delta.next()? {
                Err(e) => return Some(Err(e)),
                Ok((k, v)) => match untag(self.path, &v) {
                    Err(e) => return Some(Err(e)),
                    Ok(Some(v)) => return Some(Ok((k, v.to_vec()))),
                    Ok(None) => continue,
                },
            }
        }
    }
}

/// A transaction's puts (`Some`) and deletes (`None`) in a key range.
type Changes<'a> = std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>;

/// The table's pairs with the transaction's own changes laid over them.
struct Merged<'a> {
    tx_path: &'a Path,
    base: std::iter::Peekable<Layered<'a>>,
    over: Option<std::iter::Peekable<Changes<'a>>>,
}

impl Iterator for Merged<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(over) = self.over.as_mut() else {
                return self.base.next().map(|r| r.map_err(|e| table_err(self.tx_path, e)));
            };
            // 0: the table's pair comes first; 1: the change's; 2: the change replaces it.
            let which = match (self.base.peek(), over.peek()) {
                (_, None) | (Some(Err(_)), _) => 0,
                (None, Some(_)) => 1,
                (Some(Ok((kb, _))), Some((ko, _))) => match kb.as_slice().cmp(ko.as_slice()) {
                    std::cmp::Ordering::Less => 0,
                    std::cmp::Ordering::Greater => 1,
                    std::cmp::Ordering::Equal => 2,
                },
            };
            if which == 0 {
                return self.base.next().map(|r| r.map_err(|e| table_err(self.tx_path, e)));
            }
            if which == 2 {
                self.base.next();
            }
            let (k, v) = over.next()?;
            if let Some(v) = v {
                return Some(Ok((k.clone(), v.clone())));
            }
        }
    }
}

impl<'s> StoreTx<'s> for GraphTx<'s> {
    fn get(&self, key: &[u8], _for_update: bool) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.writes.as_ref().and_then(|w| w.get(key)) {
            return Ok(v.clone());
        }
        if let Some(d) = &self.snap.delta {
            if let Some(v) = d.get(key).map_err(|e| self.err(e))? {
                return Ok(untag(&self.storage.0.path, &v).map_err(|e| self.err(e))?.map(<[u8]>::to_vec));
            }
        }
        self.snap.base.get(key).map_err(|e| self.err(e))
    }

    fn put(&mut self, key: &[u8], val: &[u8]) -> Result<()> {
        self.writes()?.insert(key.to_vec(), Some(val.to_vec()));
        Ok(())
    }

    fn supports_par_put(&self) -> bool {
        false
    }

    fn del(&mut self, key: &[u8]) -> Result<()> {
        self.writes()?.insert(key.to_vec(), None);
        Ok(())
    }

    fn del_range_from_persisted(&mut self, lower: &[u8], upper: &[u8]) -> Result<()> {
        let keys: Vec<Vec<u8>> =
            self.layered(lower, upper).map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>().map_err(|e| self.err(e))?;
        let w = self.writes()?;
        for k in keys {
            w.entry(k).or_insert(None);
        }
        Ok(())
    }

    fn exists(&self, key: &[u8], for_update: bool) -> Result<bool> {
        Ok(self.get(key, for_update)?.is_some())
    }

    fn commit(&mut self) -> Result<()> {
        let Some(writes) = self.writes.as_mut() else { return Ok(()) };
        if writes.is_empty() {
            return Ok(());
        }
        let writes = std::mem::take(writes);
        self.storage.commit(&self.snap, writes, false).map_err(|e| table_err(&self.storage.0.path, e))?;
        self.snap = self.storage.snapshot();
        Ok(())
    }

    fn range_skip_scan_tuple<'a>(
        &'a self,
        _lower: &[u8],
        _upper: &[u8],
        _valid_at: ValidityTs,
    ) -> Box<dyn Iterator<Item = Result<Tuple>> + 'a> {
        Box::new(std::iter::once(Err(miette!(
            "time travel (`@` validity queries) is not supported by reproagent's graph store: the graph keeps no history"
        ))))
    }

    fn range_scan<'a>(&'a self, lower: &[u8], upper: &[u8]) -> Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 'a>
    where
        's: 'a,
    {
        Box::new(self.merged(lower, upper))
    }

    fn range_scan_tuple<'a>(&'a self, lower: &[u8], upper: &[u8]) -> Box<dyn Iterator<Item = Result<Tuple>> + 'a>
    where
        's: 'a,
    {
        Box::new(self.merged(lower, upper).map(|r| r.map(|(k, v)| decode_tuple_from_kv(&k, &v, None))))
    }

    fn range_count<'a>(&'a self, lower: &[u8], upper: &[u8]) -> Result<usize>
    where
        's: 'a,
    {
        let mut n = 0;
        for r in self.merged(lower, upper) {
            r?;
            n += 1;
        }
        Ok(n)
    }

    fn total_scan<'a>(&'a self) -> Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>> + 'a>
    where
        's: 'a,
    {
        Box::new(self.merged(&[], &[0xff; 16]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        format!("k{i:05}").into_bytes()
    }

    #[test]
    fn a_commit_equals_the_changes_applied_to_a_model_and_readers_keep_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.db");
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> =
            (0..4000).map(|i| (key(i * 2), vec![b'v'; (i % 13) as usize])).collect();
        let mut w = TableWriter::create(&path).unwrap();
        for (k, v) in &model {
            w.add(k, v).unwrap();
        }
        w.finish().unwrap();
        let storage = GraphStorage::open(&path).unwrap();
        let reader = storage.transact(false).unwrap();
        let before: Vec<_> = reader.range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        // Deletes, overwrites and inserts spread over the table (and past its ends).
        let mut tx = storage.transact(true).unwrap();
        for i in (0..8200).step_by(37) {
            let k = key(i);
            if i % 3 == 0 {
                tx.del(&k).unwrap();
                model.remove(&k);
            } else {
                tx.put(&k, b"new").unwrap();
                model.insert(k, b"new".to_vec());
            }
        }
        tx.del_range_from_persisted(&key(100), &key(140)).unwrap();
        model.retain(|k, _| !(k.as_slice() >= key(100).as_slice() && k.as_slice() < key(140).as_slice()));
        let seen: Vec<_> = tx.range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        assert_eq!(seen, model.clone().into_iter().collect::<Vec<_>>(), "a transaction reads its own writes");
        tx.commit().unwrap();
        drop(tx);
        let after: Vec<_> = storage.transact(false).unwrap().range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        assert_eq!(after, model.clone().into_iter().collect::<Vec<_>>());
        // The reader that began before the commit still reads what it began with.
        let again: Vec<_> = reader.range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        assert_eq!(again, before);
        storage.table().verify().unwrap();
        let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["graph.db", "graph.db.delta"].map(std::ffi::OsString::from), "no temp file is left");
        // The commit went to the delta: the base is the file it was.
        assert_eq!(storage.table().all(), before);
        let expected: Vec<_> = model.into_iter().collect();
        // Another process opening the files reads the base with the delta over it.
        let reopened = GraphStorage::open(&path).unwrap();
        let seen: Vec<_> = reopened.transact(false).unwrap().range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        assert_eq!(seen, expected);
        for (k, v) in expected.iter().step_by(97) {
            assert_eq!(reopened.transact(false).unwrap().get(k, false).unwrap().as_ref(), Some(v));
        }
        assert_eq!(reopened.transact(false).unwrap().get(&key(0), false).unwrap(), None, "deleted");
        // Folded: one base file holds it all, and the delta is gone.
        reopened.fold().unwrap();
        reopened.table().verify().unwrap();
        assert_eq!(reopened.table().all(), expected);
        assert!(reopened.delta().is_none() && !delta_path(&path).exists());
    }

    #[test]
    fn a_delta_is_read_only_over_the_base_it_was_written_for_and_folds_once_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.db");
        let write_base = |n: u32, tag: &[u8]| {
            let mut w = TableWriter::create(&path).unwrap();
            for i in 0..n {
                w.add(&key(i), tag).unwrap();
            }
            w.finish().unwrap();
        };
        write_base(100, b"a");
        let storage = GraphStorage::open(&path).unwrap();
        let mut tx = storage.transact(true).unwrap();
        tx.put(&key(5), b"changed").unwrap();
        tx.commit().unwrap();
        drop(tx);
        assert!(delta_path(&path).exists());
        let get = |s: &GraphStorage, k: u32| s.transact(false).unwrap().get(&key(k), false).unwrap();
        assert_eq!(get(&GraphStorage::open(&path).unwrap(), 5), Some(b"changed".to_vec()));
        // Another base written in its place (a full rebuild that left the delta, or a
        // killed fold): the delta names the old base and is not read.
        write_base(100, b"b");
        let other = GraphStorage::open(&path).unwrap();
        assert!(other.delta().is_none());
        assert_eq!(get(&other, 5), Some(b"b".to_vec()));
        // A delta past a sixteenth of the base (and FOLD_MIN pairs) is folded by the commit.
        let mut tx = other.transact(true).unwrap();
        for i in 0..FOLD_MIN as u32 + 1 {
            tx.put(&key(1000 + i), b"n").unwrap();
        }
        tx.commit().unwrap();
        drop(tx);
        assert!(other.delta().is_none() && !delta_path(&path).exists());
        assert_eq!(other.table().pairs(), 100 + FOLD_MIN + 1);
        assert_eq!(get(&other, 1000), Some(b"n".to_vec()));
        // A damaged delta is reported, not skipped: its changes would be lost.
        let mut tx = other.transact(true).unwrap();
        tx.del(&key(7)).unwrap();
        tx.commit().unwrap();
        drop(tx);
        let d = std::fs::read(delta_path(&path)).unwrap();
        std::fs::write(delta_path(&path), &d[..d.len() - 3]).unwrap();
        assert!(matches!(GraphStorage::open(&path), Err(TableError::Damaged(_))));
    }

    #[test]
    fn a_commit_that_touches_few_blocks_copies_the_others_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graph.db");
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> =
            (0..120_000).map(|i| (key(i * 2 + 1), format!("value {i}").into_bytes())).collect();
        let mut w = TableWriter::create(&path).unwrap();
        for (k, v) in &model {
            w.add(k, v).unwrap();
        }
        w.finish().unwrap();
        let storage = GraphStorage::open(&path).unwrap();
        let blocks = storage.table().blocks().len();
        assert!(blocks > 8, "{blocks} blocks");
        // Before the first key, in one block in the middle, between two blocks, after the last.
        let mut tx = storage.transact(true).unwrap();
        let mid = storage.table().blocks()[blocks / 2].clone();
        let next_first = storage.table().blocks()[blocks / 2 + 1].first.clone();
        let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = vec![
            (key(0), Some(b"first".to_vec())),
            (mid.first.clone(), None),
            (mid.last.clone(), Some(b"changed".to_vec())),
            (key(240_002), Some(b"last".to_vec())),
        ];
        // A key after `mid`'s last and before the next block's first, when there is room.
        let mut between = mid.last.clone();
        between.push(0);
        if between < next_first {
            changes.push((between, Some(b"between".to_vec())));
        }
        for (k, v) in &changes {
            match v {
                Some(v) => {
                    tx.put(k, v).unwrap();
                    model.insert(k.clone(), v.clone());
                }
                None => {
                    tx.del(k).unwrap();
                    model.remove(k);
                }
            }
        }
        let old_blocks = storage.table().blocks().to_vec();
        tx.commit().unwrap();
        drop(tx);
        storage.fold().unwrap();
        let t = storage.table();
        t.verify().unwrap();
        // The blocks no change fell in are carried over as they were (same bounds, count
        // and compressed length), not decoded and written again.
        let same = |a: &crate::store::table::BlockRef, b: &crate::store::table::BlockRef| {
            (a.len, a.count, &a.first, &a.last) == (b.len, b.count, &b.first, &b.last)
        };
        let kept = t.blocks().iter().filter(|n| old_blocks.iter().any(|o| same(o, n))).count();
        assert!(kept >= blocks - 2, "{kept} of {blocks} blocks kept as they were");
        assert!(kept < t.blocks().len(), "the changed block was written anew");
        let after: Vec<_> = storage.transact(false).unwrap().range_scan(&[], &[0xff]).map(Result::unwrap).collect();
        assert_eq!(after, model.into_iter().collect::<Vec<_>>());
        assert_eq!(t.pairs(), after.len() as u64);
        // A second commit over the file the first one wrote (copied blocks at new offsets).
        let mut tx = storage.transact(true).unwrap();
        tx.put(&key(3), b"again").unwrap();
        tx.commit().unwrap();
        drop(tx);
        storage.table().verify().unwrap();
        assert_eq!(storage.transact(false).unwrap().get(&key(3), false).unwrap(), Some(b"again".to_vec()));
    }
}
