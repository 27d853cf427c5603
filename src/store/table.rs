//! The graph's file: one immutable sorted table of Cozo's key-value pairs.
//!
//! Layout: `MAGIC` | blocks | block index | footer. A block holds about 64 KiB of pairs
//! in key order, each key stored as the length it shares with the key before it in the
//! block and the rest (Cozo's keys repeat a relation prefix and readable ids, so most of
//! a key is shared), compressed with LZ4 and followed by the CRC-32 of the compressed
//! bytes. The block index (offset, length, pair count, first and last key of every
//! block) is LZ4-compressed too; the 32-byte footer gives its offset, length and CRC, the
//! number of pairs and the magic again. A file without the closing magic (a killed
//! write, a truncated copy) or with a bad CRC is damaged, never misread.
//!
//! A table is never changed in place: a writer writes a whole new file beside it and
//! renames it over the old one (see `engine`), copying the blocks it did not touch as
//! they are, so readers that opened the old file keep reading it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The first and last 8 bytes of every table file.
pub const MAGIC: &[u8; 8] = b"RAGRAPH1";
/// Uncompressed bytes of pairs a block holds before the writer closes it.
const BLOCK_BYTES: usize = 64 * 1024;
const FOOTER: u64 = 32;
/// Decoded blocks kept for reuse by one open table.
const CACHE_BYTES: usize = 48 << 20;

#[derive(Debug)]
pub enum TableError {
    /// Not a table file at all.
    Foreign,
    /// A table file that cannot be read whole: why.
    Damaged(String),
    Io(std::io::Error),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::Foreign => write!(f, "not a reproagent graph file"),
            TableError::Damaged(why) => write!(f, "{why}"),
            TableError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<std::io::Error> for TableError {
    fn from(e: std::io::Error) -> Self {
        TableError::Io(e)
    }
}

fn damaged(why: impl Into<String>) -> TableError {
    TableError::Damaged(why.into())
}

/// Where a block lies and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockRef {
    /// Offset of the compressed bytes in the file.
    pub offset: u64,
    /// Length of the compressed bytes (the CRC's 4 bytes follow them).
    pub len: u32,
    pub count: u32,
    pub first: Vec<u8>,
    pub last: Vec<u8>,
}

/// A decoded block: its pairs in key order.
/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);
/// A decoded block's pairs, shared with the cache.
pub type Pairs = Arc<Vec<Pair>>;

#[derive(Default)]
struct Cache {
    blocks: HashMap<usize, Pairs>,
    bytes: usize,
}

/// An open table file. Reads go to the file it opened, even after a writer renamed a
/// new one over its path.
pub struct Table {
    file: File,
    blocks: Vec<BlockRef>,
    pairs: u64,
    /// The footer's first 24 bytes: the block index's offset, length and CRC and the
    /// pair count (see [`Table::identity`]).
    footer: [u8; 24],
    cache: Mutex<Cache>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, TableError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or_else(|| damaged("a block ends inside a number"))?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(damaged("a number of over 64 bits"))
}

fn get_bytes<'a>(buf: &'a [u8], pos: &mut usize, n: u64) -> Result<&'a [u8], TableError> {
    let end = pos
        .checked_add(n as usize)
        .filter(|e| *e <= buf.len())
        .ok_or_else(|| damaged("a block ends inside a key or value"))?;
    let s = &buf[*pos..end];
    *pos = end;
    Ok(s)
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl Table {
    /// Open a table file: its magic, footer and block index must be whole.
    pub fn open(path: &Path) -> Result<Table, TableError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut head = [0u8; 8];
        if len < 8 || file.read_exact_at(&mut head, 0).is_err() || &head != MAGIC {
            return Err(TableError::Foreign);
        }
        if len < 8 + FOOTER {
            return Err(damaged(format!("truncated: {len} bytes, no footer")));
        }
        let mut foot = [0u8; FOOTER as usize];
        file.read_exact_at(&mut foot, len - FOOTER)?;
        if &foot[24..32] != MAGIC {
            return Err(damaged(format!("truncated or overwritten: {len} bytes, no closing footer")));
        }
        let (index_off, index_len, index_crc, pairs) =
            (le_u64(&foot[0..8]), le_u32(&foot[8..12]), le_u32(&foot[12..16]), le_u64(&foot[16..24]));
        if index_off < 8 || index_off.saturating_add(u64::from(index_len)) > len - FOOTER {
            return Err(damaged("its footer points outside the file"));
        }
        let mut raw = vec![0u8; index_len as usize];
        file.read_exact_at(&mut raw, index_off)?;
        if crc32fast::hash(&raw) != index_crc {
            return Err(damaged("its block index fails its checksum"));
        }
        let index = lz4_flex::decompress_size_prepended(&raw).map_err(|e| damaged(format!("block index: {e}")))?;
        let mut blocks = Vec::new();
        let mut pos = 0;
        while pos < index.len() {
            let offset = get_varint(&index, &mut pos)?;
            let len = get_varint(&index, &mut pos)? as u32;
            let count = get_varint(&index, &mut pos)? as u32;
            let n = get_varint(&index, &mut pos)?;
            let first = get_bytes(&index, &mut pos, n)?.to_vec();
            let n = get_varint(&index, &mut pos)?;
            let last = get_bytes(&index, &mut pos, n)?.to_vec();
            if offset + u64::from(len) + 4 > index_off {
                return Err(damaged("a block lies outside the file's data"));
            }
            blocks.push(BlockRef { offset, len, count, first, last });
        }
        let mut footer = [0u8; 24];
        footer.copy_from_slice(&foot[..24]);
        Ok(Table { file, blocks, pairs, footer, cache: Mutex::new(Cache::default()) })
    }

    pub fn blocks(&self) -> &[BlockRef] {
        &self.blocks
    }

    /// What tells this table's content from another's: its footer (the CRC of a block
    /// index that holds every block's offset, length and first and last keys, and the
    /// pair count) and a CRC of every block's CRC (one small read per block).
    pub fn identity(&self) -> Result<Vec<u8>, TableError> {
        let mut h = crc32fast::Hasher::new();
        let mut crc = [0u8; 4];
        for b in &self.blocks {
            self.file.read_exact_at(&mut crc, b.offset + u64::from(b.len))?;
            h.update(&crc);
        }
        let mut out = self.footer.to_vec();
        out.extend_from_slice(&h.finalize().to_le_bytes());
        Ok(out)
    }

    /// How many pairs the footer says the table holds.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// Block `i`'s compressed bytes with their CRC, checked, as a writer copies them.
    fn raw_block(&self, i: usize) -> Result<Vec<u8>, TableError> {
        let b = &self.blocks[i];
        let mut raw = vec![0u8; b.len as usize + 4];
        self.file.read_exact_at(&mut raw, b.offset)?;
        let crc = le_u32(&raw[b.len as usize..]);
        if crc32fast::hash(&raw[..b.len as usize]) != crc {
            return Err(damaged(format!("block {i} fails its checksum")));
        }
        Ok(raw)
    }

    fn decode(&self, i: usize) -> Result<Vec<Pair>, TableError> {
        let raw = self.raw_block(i)?;
        let b = &self.blocks[i];
        let data = lz4_flex::decompress_size_prepended(&raw[..b.len as usize])
            .map_err(|e| damaged(format!("block {i}: {e}")))?;
        let mut out = Vec::with_capacity(b.count as usize);
        let mut pos = 0;
        let mut prev: Vec<u8> = Vec::new();
        while pos < data.len() {
            let shared = get_varint(&data, &mut pos)? as usize;
            let rest = get_varint(&data, &mut pos)?;
            let vlen = get_varint(&data, &mut pos)?;
            if shared > prev.len() {
                return Err(damaged(format!("block {i}: a key shares more than the key before it")));
            }
            let mut key = prev[..shared].to_vec();
            key.extend_from_slice(get_bytes(&data, &mut pos, rest)?);
            let val = get_bytes(&data, &mut pos, vlen)?.to_vec();
            prev.clone_from(&key);
            out.push((key, val));
        }
        if out.len() != b.count as usize {
            return Err(damaged(format!("block {i} holds {} pairs, its index says {}", out.len(), b.count)));
        }
        Ok(out)
    }

    /// Block `i`'s pairs, decoded once and cached.
    pub fn block(&self, i: usize) -> Result<Pairs, TableError> {
        if let Some(p) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).blocks.get(&i) {
            return Ok(p.clone());
        }
        let pairs = Arc::new(self.decode(i)?);
        let size: usize = pairs.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.bytes + size > CACHE_BYTES {
            cache.blocks.clear();
            cache.bytes = 0;
        }
        cache.bytes += size;
        cache.blocks.insert(i, pairs.clone());
        Ok(pairs)
    }

    /// The first block whose last key is at least `key`.
    pub fn block_for(&self, key: &[u8]) -> usize {
        self.blocks.partition_point(|b| b.last.as_slice() < key)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TableError> {
        let i = self.block_for(key);
        if i >= self.blocks.len() || self.blocks[i].first.as_slice() > key {
            return Ok(None);
        }
        let pairs = self.block(i)?;
        Ok(pairs.binary_search_by(|(k, _)| k.as_slice().cmp(key)).ok().map(|j| pairs[j].1.clone()))
    }

    /// The pairs with `lower <= key < upper` (no upper: to the end), in key order.
    pub fn range(self: &Arc<Self>, lower: &[u8], upper: Option<&[u8]>) -> TableIter {
        TableIter {
            table: self.clone(),
            block: self.block_for(lower),
            pairs: None,
            pos: 0,
            lower: lower.to_vec(),
            upper: upper.map(<[u8]>::to_vec),
            done: false,
        }
    }

    /// Check every block's checksum, without decoding: what an incremental run checks
    /// before it builds on the file (a few milliseconds for Django's graph).
    pub fn check_sums(&self) -> Result<(), TableError> {
        (0..self.blocks.len()).try_for_each(|i| self.raw_block(i).map(drop))
    }

    /// Read every block: checksums, key order within and across blocks, and the counts
    /// and bounds the index gives (the tests' check of what a writer wrote).
    #[cfg(test)]
    pub fn verify(&self) -> Result<(), TableError> {
        let mut prev: Option<Vec<u8>> = None;
        let mut total = 0u64;
        for (i, b) in self.blocks.iter().enumerate() {
            let pairs = self.decode(i)?;
            for (k, _) in &pairs {
                if prev.as_ref().is_some_and(|p| p.as_slice() >= k.as_slice()) {
                    return Err(damaged(format!("block {i}: keys out of order")));
                }
                prev = Some(k.clone());
            }
            if pairs.first().map(|p| &p.0) != Some(&b.first) || pairs.last().map(|p| &p.0) != Some(&b.last) {
                return Err(damaged(format!("block {i}: its keys are not the bounds its index gives")));
            }
            total += pairs.len() as u64;
        }
        if total != self.pairs {
            return Err(damaged(format!("{total} pairs, its footer says {}", self.pairs)));
        }
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn all(self: &Arc<Self>) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.range(&[], None).map(Result::unwrap).collect()
    }
}

/// A range of a table, read block by block.
pub struct TableIter {
    table: Arc<Table>,
    block: usize,
    pairs: Option<Pairs>,
    pos: usize,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    done: bool,
}

impl Iterator for TableIter {
    type Item = Result<(Vec<u8>, Vec<u8>), TableError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if self.pairs.is_none() {
                if self.block >= self.table.blocks.len() {
                    self.done = true;
                    return None;
                }
                match self.table.block(self.block) {
                    Ok(p) => {
                        self.pos = p.partition_point(|(k, _)| k.as_slice() < self.lower.as_slice());
                        self.pairs = Some(p);
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            let Some(pairs) = self.pairs.as_ref() else { continue };
            if let Some((k, v)) = pairs.get(self.pos) {
                if self.upper.as_ref().is_some_and(|u| k.as_slice() >= u.as_slice()) {
                    self.done = true;
                    return None;
                }
                self.pos += 1;
                return Some(Ok((k.clone(), v.clone())));
            }
            self.pairs = None;
            self.block += 1;
        }
    }
}

/// How many bytes `a` and `b` share at their start: eight at a time, then the rest.
fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let (Ok(x), Ok(y)) = (<[u8; 8]>::try_from(&a[i..i + 8]), <[u8; 8]>::try_from(&b[i..i + 8])) else { break };
        let (x, y) = (u64::from_le_bytes(x), u64::from_le_bytes(y));
        if x != y {
            // The first differing byte is the lowest differing one of the little-endian words.
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + a[i..n].iter().zip(&b[i..n]).take_while(|(x, y)| x == y).count()
}

/// Writes a new table file, pairs in strictly ascending key order.
pub struct TableWriter {
    out: BufWriter<File>,
    path: PathBuf,
    offset: u64,
    raw: Vec<u8>,
    count: u32,
    first: Vec<u8>,
    /// The last key written, in this block or before it (the base of the next key's
    /// shared prefix while the block is open): one buffer, refilled per pair.
    last: Vec<u8>,
    /// Whether any key was written (`last` is meaningful).
    has_last: bool,
    blocks: Vec<BlockRef>,
    pairs: u64,
}

impl TableWriter {
    pub fn create(path: &Path) -> Result<TableWriter, TableError> {
        let file = File::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(MAGIC)?;
        Ok(TableWriter {
            out,
            path: path.to_path_buf(),
            offset: MAGIC.len() as u64,
            raw: Vec::with_capacity(BLOCK_BYTES + 4096),
            count: 0,
            first: Vec::new(),
            last: Vec::new(),
            has_last: false,
            blocks: Vec::new(),
            pairs: 0,
        })
    }

    fn check_order(&self, key: &[u8]) -> Result<(), TableError> {
        match self.has_last.then_some(&self.last) {
            Some(l) if l.as_slice() >= key => Err(self.out_of_order()),
            _ => Ok(()),
        }
    }

    fn out_of_order(&self) -> TableError {
        damaged(format!("{}: pairs written out of order (a store bug)", self.path.display()))
    }

    pub fn add(&mut self, key: &[u8], val: &[u8]) -> Result<(), TableError> {
        // The shared prefix with the last key also says the order: what follows it decides
        // (its first byte, or which key ends there), so only that is compared.
        let common = shared_prefix(&self.last, key);
        if self.has_last && self.last[common..] >= key[common..] {
            return Err(self.out_of_order());
        }
        let shared = if self.count == 0 {
            self.first = key.to_vec();
            0
        } else {
            common
        };
        put_varint(&mut self.raw, shared as u64);
        put_varint(&mut self.raw, (key.len() - shared) as u64);
        put_varint(&mut self.raw, val.len() as u64);
        self.raw.extend_from_slice(&key[shared..]);
        self.raw.extend_from_slice(val);
        self.last.clear();
        self.last.extend_from_slice(key);
        self.has_last = true;
        self.count += 1;
        self.pairs += 1;
        if self.raw.len() >= BLOCK_BYTES {
            self.close_block()?;
        }
        Ok(())
    }

    fn emit(&mut self, bytes: &[u8], crc_follows: bool) -> Result<(), TableError> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        if !crc_follows {
            let crc = crc32fast::hash(bytes).to_le_bytes();
            self.out.write_all(&crc)?;
            self.offset += 4;
        }
        Ok(())
    }

    fn close_block(&mut self) -> Result<(), TableError> {
        if self.count == 0 {
            return Ok(());
        }
        let packed = lz4_flex::compress_prepend_size(&self.raw);
        let offset = self.offset;
        self.emit(&packed, false)?;
        self.blocks.push(BlockRef {
            offset,
            len: packed.len() as u32,
            count: self.count,
            first: std::mem::take(&mut self.first),
            last: self.last.clone(),
        });
        self.raw.clear();
        self.count = 0;
        Ok(())
    }

    /// Copy the blocks `run` of `src` as they are (compressed bytes and CRC): by the kernel
    /// (`copy_file_range`) where they lie one after another in `src`'s file, so an
    /// incremental commit does not read and re-write the untouched file through memory. A
    /// damaged block stays detectable: its CRC is copied with it.
    pub fn copy_blocks(&mut self, src: &Table, run: std::ops::Range<usize>) -> Result<(), TableError> {
        use std::io::{Read, Seek, SeekFrom};
        let blocks = &src.blocks[run];
        let mut i = 0;
        while i < blocks.len() {
            // The longest stretch of blocks laid end to end from `i`.
            let mut j = i + 1;
            while j < blocks.len() && blocks[j].offset == blocks[j - 1].offset + u64::from(blocks[j - 1].len) + 4 {
                j += 1;
            }
            self.close_block()?;
            self.check_order(&blocks[i].first)?;
            let start = blocks[i].offset;
            let end = blocks[j - 1].offset + u64::from(blocks[j - 1].len) + 4;
            let mut from = &src.file;
            from.seek(SeekFrom::Start(start))?;
            let copied = std::io::copy(&mut from.take(end - start), &mut self.out)?;
            if copied != end - start {
                return Err(damaged(format!("blocks {i}..{j} end before their index says ({copied} bytes)")));
            }
            for b in &blocks[i..j] {
                self.blocks.push(BlockRef { offset: self.offset + (b.offset - start), ..b.clone() });
                self.pairs += u64::from(b.count);
            }
            self.offset += end - start;
            self.last.clear();
            self.last.extend_from_slice(&blocks[j - 1].last);
            self.has_last = true;
            i = j;
        }
        Ok(())
    }

    /// Write the index and footer and flush the file to disk.
    pub fn finish(mut self) -> Result<u64, TableError> {
        self.close_block()?;
        let mut index = Vec::new();
        for b in &self.blocks {
            put_varint(&mut index, b.offset);
            put_varint(&mut index, u64::from(b.len));
            put_varint(&mut index, u64::from(b.count));
            put_varint(&mut index, b.first.len() as u64);
            index.extend_from_slice(&b.first);
            put_varint(&mut index, b.last.len() as u64);
            index.extend_from_slice(&b.last);
        }
        let packed = lz4_flex::compress_prepend_size(&index);
        let index_off = self.offset;
        self.out.write_all(&packed)?;
        let mut foot = Vec::with_capacity(FOOTER as usize);
        foot.extend_from_slice(&index_off.to_le_bytes());
        foot.extend_from_slice(&(packed.len() as u32).to_le_bytes());
        foot.extend_from_slice(&crc32fast::hash(&packed).to_le_bytes());
        foot.extend_from_slice(&self.pairs.to_le_bytes());
        foot.extend_from_slice(MAGIC);
        self.out.write_all(&foot)?;
        let file = self.out.into_inner().map_err(|e| TableError::Io(e.into_error()))?;
        file.sync_all()?;
        Ok(self.pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer takes a key only above the last one: equal, smaller, or a prefix of the
    /// last key is refused (within a block and at a block's start); a longer key that
    /// extends the last one is taken.
    #[test]
    fn the_writer_refuses_a_key_not_above_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = TableWriter::create(&dir.path().join("t")).unwrap();
        w.add(b"rel\0abcdefghij", b"1").unwrap();
        for bad in [&b"rel\0abcdefghij"[..], b"rel\0abcdefghi", b"rel\0abcdefghia", b"rel\0", b""] {
            assert!(w.add(bad, b"").is_err(), "{:?} after rel\\0abcdefghij", String::from_utf8_lossy(bad));
        }
        w.add(b"rel\0abcdefghij\0", b"2").unwrap();
        w.add(b"rel\0abcdefghik", b"3").unwrap();
        w.close_block().unwrap();
        assert!(w.add(b"rel\0abcdefghik", b"").is_err(), "the last key again, at a block's start");
        assert!(w.add(b"rel\0abc", b"").is_err(), "a smaller key at a block's start");
        w.add(b"rem", b"4").unwrap();
        assert_eq!(w.finish().unwrap(), 4);
    }

    /// The word-at-a-time count is the byte-at-a-time one, wherever the first difference
    /// falls (in a word, at its edge, in the tail) and whichever slice is shorter.
    #[test]
    fn shared_prefix_counts_what_a_byte_walk_counts() {
        let base: Vec<u8> = (0..40u8).map(|b| b.wrapping_mul(37)).collect();
        for len_a in [0, 1, 7, 8, 9, 16, 23, 40] {
            for len_b in [0, 5, 8, 17, 40] {
                for flip in 0..40 {
                    let a = &base[..len_a];
                    let mut b = base[..len_b].to_vec();
                    if let Some(x) = b.get_mut(flip) {
                        *x ^= 0x10;
                    }
                    let naive = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                    assert_eq!(shared_prefix(a, &b), naive, "a {len_a} b {len_b} flip {flip}");
                }
            }
        }
    }

    fn pairs(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| (format!("rel\0django/db/models/query.py:QuerySet.m{i:06}").into_bytes(), vec![i as u8; i % 7]))
            .collect()
    }

    fn write(path: &Path, p: &[(Vec<u8>, Vec<u8>)]) -> Arc<Table> {
        let mut w = TableWriter::create(path).unwrap();
        for (k, v) in p {
            w.add(k, v).unwrap();
        }
        assert_eq!(w.finish().unwrap(), p.len() as u64);
        Arc::new(Table::open(path).unwrap())
    }

    #[test]
    fn a_table_gives_back_its_pairs_by_key_and_by_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = pairs(60000);
        let t = write(&dir.path().join("t"), &p);
        assert!(t.blocks().len() > 3, "{} blocks", t.blocks().len());
        t.verify().unwrap();
        assert_eq!(t.all(), p);
        for i in [0, 1, 777, 4999, 59999] {
            assert_eq!(t.get(&p[i].0).unwrap(), Some(p[i].1.clone()));
        }
        assert_eq!(t.get(b"rel\0django/db/models/query.py:QuerySet.m000001x").unwrap(), None);
        assert_eq!(t.get(b"a").unwrap(), None);
        assert_eq!(t.get(b"z").unwrap(), None);
        let r: Vec<_> = t.range(&p[100].0, Some(&p[2100].0)).map(Result::unwrap).collect();
        assert_eq!(r, p[100..2100]);
        let r: Vec<_> = t.range(b"rel\0django/db/models/query.py:QuerySet.m0049", None).map(Result::unwrap).collect();
        assert_eq!(r, p[4900..]);
        // An empty table is a table.
        let e = write(&dir.path().join("e"), &[]);
        assert!(e.all().is_empty());
        e.verify().unwrap();
    }

    #[test]
    fn copied_blocks_and_new_pairs_make_one_table() {
        let dir = tempfile::tempdir().unwrap();
        let p = pairs(30000);
        let t = write(&dir.path().join("t"), &p);
        let mut w = TableWriter::create(&dir.path().join("u")).unwrap();
        w.add(b"a", b"first").unwrap();
        w.copy_blocks(&t, 0..t.blocks().len()).unwrap();
        assert!(w.add(&p[5].0, b"").is_err(), "a key before the last copied one is refused");
        w.add(b"z", b"last").unwrap();
        w.finish().unwrap();
        let u = Arc::new(Table::open(&dir.path().join("u")).unwrap());
        u.verify().unwrap();
        let mut want = vec![(b"a".to_vec(), b"first".to_vec())];
        want.extend(p);
        want.push((b"z".to_vec(), b"last".to_vec()));
        assert_eq!(u.all(), want);
    }

    #[test]
    fn a_truncated_or_flipped_file_is_damaged_and_another_file_is_foreign() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        write(&path, &pairs(3000));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        assert!(matches!(Table::open(&path), Err(TableError::Damaged(_))));
        let mut flipped = bytes.clone();
        flipped[40] ^= 0x55;
        std::fs::write(&path, &flipped).unwrap();
        let t = Table::open(&path).unwrap();
        assert!(matches!(t.verify(), Err(TableError::Damaged(_))));
        assert!(matches!(t.block(0), Err(TableError::Damaged(_))));
        std::fs::write(&path, b"SQLite format 3\0 and more bytes than a footer needs to hold").unwrap();
        assert!(matches!(Table::open(&path), Err(TableError::Foreign)));
    }
}
