//! A full build's pairs, encoded the way Cozo encodes them, straight from the rows.
//!
//! Cozo stores a relation's row as one pair: the key is the relation's number (8 bytes,
//! big-endian) followed by the key columns in Cozo's order-preserving ("memcmp") encoding;
//! the value is the number again followed by the other columns as a MessagePack array.
//! Each index is a relation of its own whose key is the indexed columns and whose value
//! is empty. Importing rows through Cozo builds all that in an in-memory B-tree of
//! `DataValue`s first (two thirds of a full build's graph store); here the pairs are made
//! directly, one relation (or index) at a time, sorted, and handed to the table writer.
//!
//! Nothing is assumed about the numbers or the encoding that is not checked: the numbers
//! come from importing probe rows of every relation into an in-memory Cozo with the
//! schema, and the same probe rows encoded here must equal, byte for byte, the pairs Cozo
//! wrote for them (a Cozo whose encoding changed fails the build instead of writing an
//! index Cozo would misread).

use std::collections::BTreeMap;

use cozo::{DataValue, Num};

use super::rows::Rows;
use super::table::Pair;
use super::StoreError;
use crate::extract::FileFacts;

/// One column's value, borrowed from the rows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Col<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
}

impl Col<'_> {
    pub(crate) fn to_value(self) -> DataValue {
        match self {
            Col::Null => DataValue::Null,
            Col::Bool(b) => DataValue::Bool(b),
            Col::Int(i) => DataValue::Num(Num::Int(i)),
            Col::Float(f) => DataValue::Num(Num::Float(f)),
            Col::Str(s) => DataValue::from(s),
            Col::Bytes(b) => DataValue::Bytes(b.to_vec()),
        }
    }
}

fn opt<'a>(v: &'a Option<super::rows::Text<'_>>) -> Col<'a> {
    v.as_deref().map_or(Col::Null, Col::Str)
}

// Cozo's key encoding (`data/memcmp.rs` in cozo 0.7): a tag per value, numbers as the
// order-preserving bits of their float value plus a marker, strings and bytes in groups
// of eight followed by a marker that says how many of the eight are padding.
const NULL_TAG: u8 = 0x01;
const FALSE_TAG: u8 = 0x02;
const TRUE_TAG: u8 = 0x03;
const NUM_TAG: u8 = 0x05;
const STR_TAG: u8 = 0x06;
const BYTES_TAG: u8 = 0x07;
const IS_FLOAT: u8 = 0b0001_0000;
const IS_APPROX_INT: u8 = 0b0000_0100;
const IS_EXACT_INT: u8 = 0;
const EXACT_INT_BOUND: i64 = 0x20_0000_0000_0000;
const SIGN_MARK: u64 = 0x8000_0000_0000_0000;
const GROUP: usize = 8;
const MARKER: u8 = 0xff;

fn order_f64(v: f64) -> u64 {
    let u = v.to_bits();
    if v.is_sign_positive() {
        u | SIGN_MARK
    } else {
        !u
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Each group of GROUP bytes and its marker goes in as one fixed-size copy (a push per
    // marker and a copy per group was 1.5% of a full build's time).
    out.reserve((b.len() / GROUP + 1) * (GROUP + 1));
    let mut groups = b.chunks_exact(GROUP);
    let mut g = [MARKER; GROUP + 1];
    for c in &mut groups {
        g[..GROUP].copy_from_slice(c);
        out.extend_from_slice(&g);
    }
    let rest = groups.remainder();
    let mut last = [0u8; GROUP + 1];
    last[..rest.len()].copy_from_slice(rest);
    last[GROUP] = MARKER - (GROUP - rest.len()) as u8;
    out.extend_from_slice(&last);
}

fn put_key_col(out: &mut Vec<u8>, c: Col) {
    match c {
        Col::Null => out.push(NULL_TAG),
        Col::Bool(false) => out.push(FALSE_TAG),
        Col::Bool(true) => out.push(TRUE_TAG),
        Col::Int(i) => {
            out.push(NUM_TAG);
            out.extend_from_slice(&order_f64(i as f64).to_be_bytes());
            if i > -EXACT_INT_BOUND && i < EXACT_INT_BOUND {
                out.push(IS_EXACT_INT);
            } else {
                out.push(IS_APPROX_INT);
                out.extend_from_slice(&((i as u64) ^ SIGN_MARK).to_be_bytes());
            }
        }
        Col::Float(f) => {
            out.push(NUM_TAG);
            out.extend_from_slice(&order_f64(f).to_be_bytes());
            out.push(IS_FLOAT);
        }
        Col::Str(s) => {
            out.push(STR_TAG);
            put_bytes(out, s.as_bytes());
        }
        Col::Bytes(b) => {
            out.push(BYTES_TAG);
            put_bytes(out, b);
        }
    }
}

/// The key of a row of relation `id` into `out` (cleared first): its number and the
/// columns `cols` in memcmp order.
fn key_into(out: &mut Vec<u8>, id: u64, row: &[Col], cols: &[usize]) {
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    for &c in cols {
        put_key_col(out, row[c]);
    }
}

/// The value of a row into `out` (cleared first): the number again, then the value
/// columns as MessagePack, as `rmp_serde` writes a `Vec<DataValue>` (an array; each value
/// an enum variant by name: `"Null"`, else a one-entry map from the variant's name to its
/// data, `Num` holding another such map), written straight from the columns (making the
/// `DataValue`s first, a string and a byte copy each, was most of the cost).
fn value_into(out: &mut Vec<u8>, id: u64, vals: &[Col]) -> Result<(), StoreError> {
    use rmp::encode as mp;
    fn bad(e: impl std::fmt::Display) -> StoreError {
        StoreError::Db(format!("encoding a stored value: {e}"))
    }
    /// The head of a variant with data: a one-entry map from its name.
    fn variant(out: &mut Vec<u8>, name: &str) -> Result<(), StoreError> {
        mp::write_map_len(out, 1).map_err(bad)?;
        mp::write_str(out, name).map_err(bad)
    }
    out.clear();
    out.extend_from_slice(&id.to_be_bytes());
    let len = u32::try_from(vals.len()).map_err(|_| StoreError::Db("a row of over 2^32 columns".into()))?;
    mp::write_array_len(out, len).map_err(bad)?;
    for c in vals {
        match *c {
            Col::Null => mp::write_str(out, "Null").map_err(bad)?,
            Col::Bool(b) => {
                variant(out, "Bool")?;
                mp::write_bool(out, b).map_err(bad)?;
            }
            Col::Int(i) => {
                variant(out, "Num")?;
                variant(out, "Int")?;
                mp::write_sint(out, i).map_err(bad)?;
            }
            Col::Float(f) => {
                variant(out, "Num")?;
                variant(out, "Float")?;
                mp::write_f64(out, f).map_err(bad)?;
            }
            Col::Str(s) => {
                variant(out, "Str")?;
                mp::write_str(out, s).map_err(bad)?;
            }
            Col::Bytes(b) => {
                variant(out, "Bytes")?;
                mp::write_bin(out, b).map_err(bad)?;
            }
        }
    }
    Ok(())
}

/// Takes a file's path and its encoded facts.
pub(crate) type FactsSink<'s> = dyn FnMut(&str, &[u8]) -> Result<(), StoreError> + 's;
/// Takes a key and a value, in key order.
pub(crate) type BytesSink<'s> = dyn FnMut(&[u8], &[u8]) -> Result<(), StoreError> + 's;

/// The per-file facts blobs of `index_facts`: already encoded (an incremental run's
/// changes), or the parsed facts, encoded one file at a time as the rows are written (a
/// full build does not hold every file's blob at once).
#[derive(Clone, Copy)]
pub enum Facts<'a> {
    Encoded(&'a [(String, Vec<u8>)]),
    Parsed(&'a [&'a FileFacts]),
}

impl Facts<'_> {
    pub(crate) fn each(self, f: &mut FactsSink) -> Result<(), StoreError> {
        match self {
            Facts::Encoded(all) => all.iter().try_for_each(|(p, d)| f(p, d)),
            Facts::Parsed(all) => {
                let mut buf = Vec::new();
                for x in all {
                    buf.clear();
                    super::facts_into(&mut buf, x)?;
                    f(&x.path, &buf)?;
                }
                Ok(())
            }
        }
    }
}

/// What the table writer needs of one relation: its number, its key columns, and each
/// index's number and columns (positions in the relation's column order).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    pub name: &'static str,
    pub id: u64,
    pub keys: usize,
    pub indices: Vec<(u64, Vec<usize>)>,
}

/// Call `f` with every row of relation `rel`, its columns in the schema's order.
pub(crate) fn each_row(
    rel: &str,
    rows: &Rows,
    facts: Facts,
    meta: &[(String, String)],
    f: &mut dyn FnMut(&[Col]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    use Col::{Bool, Bytes, Float, Int, Str};
    match rel {
        "file" => {
            for (p, (l, h, n, t, e)) in &rows.file {
                f(&[Str(p), Str(l), Str(h), Int(*n), Bool(*t), Int(*e)])?;
            }
        }
        "entity" => {
            for (id, e) in &rows.entity {
                f(&[
                    Str(id),
                    Str(&e.kind),
                    Str(&e.name),
                    Str(&e.qname),
                    Str(&e.file),
                    Int(e.start_line),
                    Int(e.end_line),
                    Str(&e.signature),
                    Str(&e.doc),
                    Bool(e.is_test),
                ])?;
            }
        }
        "contains" => {
            for (p, c) in &rows.contains {
                f(&[Str(p), Str(c)])?;
            }
        }
        "calls" => {
            for ((a, b, l), (h, c)) in &rows.calls {
                f(&[Str(a), Str(b), Int(*l), Str(h), Float(*c)])?;
            }
        }
        "call_site" => {
            for (c, l, n, r) in &rows.call_site {
                f(&[Str(c), Int(*l), Str(n), Str(r)])?;
            }
        }
        "unresolved" => {
            for (n, c, l, r) in &rows.unresolved {
                f(&[Str(n), Str(c), Int(*l), Str(r)])?;
            }
        }
        "imports" => {
            for ((file, l, m, n), (a, t)) in &rows.imports {
                f(&[Str(file), Int(*l), Str(m), Str(n), Str(a), opt(t)])?;
            }
        }
        "inherits" => {
            for ((c, n), b) in &rows.inherits {
                f(&[Str(c), Str(n), opt(b)])?;
            }
        }
        "index_facts" => facts.each(&mut |p, d| f(&[Str(p), Bytes(d)]))?,
        "index_meta" => {
            for (k, v) in meta {
                f(&[Str(k), Str(v)])?;
            }
        }
        other => return Err(StoreError::Db(format!("no rows for relation {other} (a store bug)"))),
    }
    Ok(())
}

/// Hand unit `id` of `l` (the relation's own run, or one of its indices') to `sink` in key
/// order. The relation's own run goes straight from the rows, one pair at a time: the rows
/// are sorted and the encoding keeps their order (the table writer refuses a pair out of
/// order or twice, so a mistake there is an error, never a misread index). An index's
/// keys are collected in one buffer and sorted first.
pub(crate) fn write_unit(l: &Layout, id: u64, rows: &mut RowSource, sink: &mut BytesSink) -> Result<(), StoreError> {
    if id == l.id {
        let all: Vec<usize> = (0..l.keys).collect();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        return rows(&mut |row| {
            key_into(&mut k, id, row, &all);
            value_into(&mut v, id, &row[l.keys..])?;
            sink(&k, &v)
        });
    }
    let Some((_, cols)) = l.indices.iter().find(|(i, _)| *i == id) else {
        return Err(StoreError::Db(format!("relation {} has no index number {id} (a store bug)", l.name)));
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut k = Vec::new();
    rows(&mut |row| {
        key_into(&mut k, id, row, cols);
        spans.push((buf.len(), buf.len() + k.len()));
        buf.extend_from_slice(&k);
        Ok(())
    })?;
    let at = |s: &(usize, usize)| &buf[s.0..s.1];
    spans.sort_unstable_by(|a, b| at(a).cmp(at(b)));
    for s in &spans {
        sink(at(s), &[])?;
    }
    Ok(())
}

/// The pairs of unit `id` of `l` for the probe rows, as a full build writes them (through
/// [`write_unit`], so what is checked against Cozo is the code that writes the file).
pub(crate) fn probe_pairs(l: &Layout, id: u64, probes: &[Vec<DataValue>; 2]) -> Result<Vec<Pair>, StoreError> {
    let mut out: Vec<Pair> = Vec::new();
    write_unit(l, id, &mut |f| probes.iter().try_for_each(|p| f(&probe_cols(p))), &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok(out)
}

/// Calls its argument with every row of one relation, columns in the schema's order.
pub(crate) type RowSource<'r> =
    dyn FnMut(&mut dyn FnMut(&[Col]) -> Result<(), StoreError>) -> Result<(), StoreError> + 'r;

/// Probe rows for a relation of columns `types` (Cozo type names): one of short values
/// and nulls (a string of exactly one eight-byte group), one of long values (several
/// groups, non-ASCII) and large numbers.
/// Every column's value differs from every other's, so a column out of place shows.
pub(crate) fn probe_rows(types: &[&str]) -> [Vec<DataValue>; 2] {
    let one = |i: usize, t: &str, long: bool| -> DataValue {
        let nullable = t.ends_with('?');
        let n = i as i64;
        match t.trim_end_matches('?') {
            _ if nullable && !long => DataValue::Null,
            "Int" if long => DataValue::Num(Num::Int(-(1 << 60) - 3 - n)),
            "Int" => DataValue::Num(Num::Int(7 + n)),
            "Float" if long => DataValue::Num(Num::Float(-0.25 - n as f64)),
            "Float" => DataValue::Num(Num::Float(0.5 + n as f64)),
            "Bool" => DataValue::Bool(long),
            "Bytes" if long => DataValue::Bytes((0u8..=40).chain([i as u8]).collect()),
            "Bytes" => DataValue::Bytes(vec![0, i as u8]),
            _ if long => DataValue::from(format!("a/long.py:Name.with\u{e9}_\u{1F600}_sixteen+bytes{i}")),
            _ => DataValue::from(format!("{i:08}")),
        }
    };
    [
        types.iter().enumerate().map(|(i, t)| one(i, t, false)).collect(),
        types.iter().enumerate().map(|(i, t)| one(i, t, true)).collect(),
    ]
}

/// A probe row's columns as `Col`s.
pub(crate) fn probe_cols(row: &[DataValue]) -> Vec<Col<'_>> {
    row.iter()
        .map(|v| match v {
            DataValue::Null => Col::Null,
            DataValue::Bool(b) => Col::Bool(*b),
            DataValue::Num(Num::Int(i)) => Col::Int(*i),
            DataValue::Num(Num::Float(f)) => Col::Float(*f),
            DataValue::Str(s) => Col::Str(s.as_str()),
            DataValue::Bytes(b) => Col::Bytes(b),
            _ => Col::Null,
        })
        .collect()
}

/// Group pairs by their relation number.
pub(crate) fn by_id(pairs: Vec<Pair>) -> BTreeMap<u64, Vec<Pair>> {
    let mut out: BTreeMap<u64, Vec<Pair>> = BTreeMap::new();
    for (k, v) in pairs {
        let id = k.get(..8).map(|b| u64::from_be_bytes(b.try_into().unwrap_or_default())).unwrap_or(0);
        out.entry(id).or_default().push((k, v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// What `rmp_serde` writes for the columns made into `DataValue`s (what Cozo writes).
    fn by_serde(id: u64, vals: &[Col]) -> Vec<u8> {
        let mut out = id.to_be_bytes().to_vec();
        let vals: Vec<DataValue> = vals.iter().map(|c| c.to_value()).collect();
        vals.serialize(&mut rmp_serde::Serializer::new(&mut out)).unwrap();
        out
    }

    /// The values written straight from the columns are `rmp_serde`'s bytes for every
    /// kind of column, at every edge of MessagePack's integer, string, binary and array
    /// sizes.
    #[test]
    fn values_are_written_as_rmp_serde_writes_them() {
        let mut ints: Vec<i64> = vec![i64::MIN, i64::MAX, 0, 1, -1];
        for edge in [31i64, 32, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 1 << 31, 1 << 32, 1 << 53] {
            ints.extend([edge - 1, edge, edge + 1, -edge - 1, -edge, -edge + 1]);
        }
        let texts: Vec<String> = [0usize, 1, 31, 32, 255, 256, 65535, 65536]
            .iter()
            .map(|&n| "é".repeat(n / 2) + "x".repeat(n % 2).as_str())
            .collect();
        let blobs: Vec<Vec<u8>> = [0usize, 1, 255, 256, 65535, 65536].iter().map(|&n| vec![0xC1; n]).collect();
        let mut cols: Vec<Col> = vec![Col::Null, Col::Bool(false), Col::Bool(true)];
        cols.extend(ints.iter().map(|&i| Col::Int(i)));
        cols.extend([0.0, -0.0, 0.5, -1e300, f64::MAX, f64::INFINITY, f64::NAN].map(Col::Float));
        cols.extend(texts.iter().map(|t| Col::Str(t)));
        cols.extend(blobs.iter().map(|b| Col::Bytes(b)));
        let mut out = Vec::new();
        for c in &cols {
            value_into(&mut out, 7, std::slice::from_ref(c)).unwrap();
            assert_eq!(out, by_serde(7, std::slice::from_ref(c)), "{c:?}");
        }
        // Rows of 0, 15, 16 and every column at once (fixarray, then array16).
        for n in [0, 15, 16, cols.len()] {
            value_into(&mut out, u64::MAX, &cols[..n]).unwrap();
            assert_eq!(out, by_serde(u64::MAX, &cols[..n]), "{n} columns");
        }
    }
}
