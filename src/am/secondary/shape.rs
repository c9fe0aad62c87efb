//! How an `orioledb_btree` index lays its entries out in its engine tree.
//!
//! An entry's key is `VERSION_TAG ‖ column ‖ … ‖ TID`: per key column a tag
//! byte and the column's encoding (`layout::key_desc`, the encodings that
//! key primary trees, so every column sorts in its btree order), then the
//! table TID the entry names (block u32 and offset u16, big-endian), which
//! makes equal keys distinct and orders them by TID as btree does. A
//! NULL's tag is 0 for NULLS FIRST and 2 for NULLS LAST (a value's is 1);
//! a DESC column's encoding is stored with every byte inverted (the
//! encodings are prefix-free, so that reverses their order). The value is
//! empty when every column can be read back from the key ([`decodable`]:
//! integers, date/time types stored as integers, bool, "char", oid, uuid,
//! pg_lsn, macaddr, and text, varchar and bytea) and the index has no
//! INCLUDE columns; otherwise it is the entry's `IndexTuple` (key and
//! INCLUDE columns) as `index_form_tuple` makes it. Readers tell the two
//! apart by the empty value; index-only scans and scan keys see the
//! columns either way.
//!
//! The tree's descriptor item (`layout::table::DESC_KEY`) holds the key
//! columns' descriptor (descending columns marked), so that replay and the
//! tree checker compare libc-collated text by its locale, as for primary
//! trees (`collated_order::ColumnOrder`, which reads the NULL tags and
//! inverted columns too).

use crate::am::layout::key_desc::{KeyDesc, Kind};
use crate::pg::engine::{engine, report, tree_id};
use orioledb_engine::key_format::VERSION_TAG;
use orioledb_engine::{EngineError, Tree};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Bytes of the TID that ends every entry key.
pub const TID_LEN: usize = 6;

/// One index's tree and key layout. Invariant: `tree` compares keys in the
/// order `desc` gives (its locale for libc-collated columns; a column's
/// `descending` says whether its encodings are inverted), `nulls_first`
/// has one flag per column of `desc`, and `key_only` holds exactly when
/// the index has no INCLUDE columns and every column is [`decodable`].
pub struct Shape {
    pub tree: Tree,
    pub desc: KeyDesc,
    pub nulls_first: Vec<bool>,
    pub key_only: bool,
}

/// How a column's encoding is laid out, for reading it back.
#[derive(Clone, Copy)]
enum Width {
    /// A by-value datum of this many bytes.
    Value(usize),
    /// A by-reference datum of this many bytes.
    Fixed(usize),
    /// An escaped byte string: a varlena's contents.
    Escaped,
}

/// How a column of `kind` reads back from its encoding, if it does exactly
/// (not floats, which fold -0 and NaNs, numeric and interval, which fold
/// equal values, char(n), whose trailing spaces are stripped, or text under
/// ICU, whose sort key comes first).
fn decodable(kind: Kind) -> Option<Width> {
    Some(match kind {
        Kind::Bool | Kind::Char => Width::Value(1),
        Kind::Int2 => Width::Value(2),
        Kind::Int4 | Kind::Oid => Width::Value(4),
        Kind::Int8 | Kind::Lsn => Width::Value(8),
        Kind::Mac6 => Width::Fixed(6),
        Kind::Mac8 => Width::Fixed(8),
        Kind::Uuid => Width::Fixed(16),
        Kind::Bytes | Kind::LibcText => Width::Escaped,
        _ => return None,
    })
}

thread_local! {
    /// Shapes of the indexes this backend used, by relation file (a new
    /// file is a new tree), each with the generation its index's relcache
    /// entry was stamped with ([`ShapeStamp`]): an entry whose stamp is
    /// gone (any invalidation of the index frees it) is made again.
    static SHAPES: RefCell<HashMap<(u32, u32), (u64, Rc<Shape>)>> = RefCell::new(HashMap::new());
    static GENERATION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Shapes kept at most (those of dropped indexes are never asked for).
/// Each holds its index's tree resident, as a table handle does
/// (`rows::handles::TREES_MAX`).
const SHAPES_MAX: usize = 256;

/// An index's `rd_amcache`: which shape of [`SHAPES`] is current for it.
/// Invariant: allocated in the index's `rd_indexcxt`, which PostgreSQL
/// frees (and the pointer clears) on every invalidation of the index.
#[repr(C)]
struct ShapeStamp {
    db: u32,
    rel: u32,
    generation: u64,
}

/// Whether each of `index`'s key columns puts NULLs first (its
/// descending flag is in the descriptor, `KeyDesc::for_secondary`).
///
/// # Safety
/// `index` is an open index relation.
unsafe fn nulls_first(index: pg_sys::Relation) -> Vec<bool> {
    // SAFETY: rd_indoption has indnkeyatts entries.
    unsafe {
        let n = (*(*index).rd_index).indnkeyatts as usize;
        (0..n)
            .map(|i| *(*index).rd_indoption.add(i) as u32 & pg_sys::INDOPTION_NULLS_FIRST != 0)
            .collect()
    }
}

/// Whether index column `n`'s operator family orders its values as the
/// type's default btree operator class does — the order the column's
/// encoding keeps (a user's own class with another `<` would get rows in
/// the wrong order and ranges that miss rows).
///
/// # Safety
/// `index` is an open index relation with more than `n` key columns.
unsafe fn default_order(index: pg_sys::Relation, n: usize) -> bool {
    // SAFETY: per the contract; catalog and type-cache lookups.
    unsafe {
        let family = *(*index).rd_opfamily.add(n);
        let ty = *(*index).rd_opcintype.add(n);
        let lt = pg_sys::get_opfamily_member(family, ty, ty, pg_sys::BTLessStrategyNumber as i16);
        let tc = pg_sys::lookup_type_cache(ty, pg_sys::TYPECACHE_LT_OPR as i32);
        lt != pg_sys::InvalidOid && !tc.is_null() && (*tc).lt_opr == lt
    }
}

/// The key layout of `index`, or an ERROR (0A000) naming what the engine
/// cannot keep in the order the index asks for.
///
/// # Safety
/// `index` is an open index relation.
pub unsafe fn layout_of(index: pg_sys::Relation) -> (KeyDesc, Vec<bool>) {
    // SAFETY: per the contract.
    unsafe {
        let name = crate::pg::rel_name(index);
        let desc = KeyDesc::for_secondary(index).unwrap_or_else(|why| {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb_btree index \"{name}\": {why}"),
            )
        });
        if let Some(n) = (0..desc.cols.len()).find(|&n| !default_order(index, n)) {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!(
                    "orioledb_btree index \"{name}\": the operator class of column {} does not order as its type's default btree class",
                    n + 1
                ),
            );
        }
        (desc, nulls_first(index))
    }
}

/// The shape of open index `index` (whose tree exists), made once per
/// backend and relcache entry.
///
/// # Safety
/// `index` is an open `orioledb_btree` index.
pub unsafe fn shape_of(index: pg_sys::Relation) -> Rc<Shape> {
    crate::pg::require_preloaded();
    // SAFETY: an open relation has a valid rd_node; rd_amcache of our
    // indexes is null or a ShapeStamp.
    let (node, stamp) = unsafe { ((*index).rd_node, (*index).rd_amcache as *const ShapeStamp) };
    let key = (node.dbNode.to_u32(), node.relNode.to_u32());
    // SAFETY: as above.
    if let Some(st) = unsafe { stamp.as_ref() }.filter(|st| (st.db, st.rel) == key) {
        let hit = SHAPES.with(|s| s.borrow().get(&key).filter(|(g, _)| *g == st.generation).map(|(_, s)| s.clone()));
        if let Some(s) = hit {
            return s;
        }
    }
    // SAFETY: per the contract.
    let shape = Rc::new(unsafe { make_shape(index) });
    let generation = GENERATION.get() + 1;
    GENERATION.set(generation);
    SHAPES.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() >= SHAPES_MAX {
            s.clear();
        }
        s.insert(key, (generation, shape.clone()));
    });
    // SAFETY: read again (making the shape may have processed
    // invalidations, which free it); allocated where PostgreSQL frees it.
    unsafe {
        let mut st = (*index).rd_amcache as *mut ShapeStamp;
        if st.is_null() {
            st = pg_sys::MemoryContextAlloc((*index).rd_indexcxt, std::mem::size_of::<ShapeStamp>()) as *mut ShapeStamp;
            (*index).rd_amcache = st.cast();
        }
        *st = ShapeStamp { db: key.0, rel: key.1, generation };
    }
    shape
}

/// Makes the shape of open index `index` from its tree and catalog rows.
///
/// # Safety
/// `index` is an open `orioledb_btree` index.
unsafe fn make_shape(index: pg_sys::Relation) -> Shape {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*index).rd_node };
    let tree = match engine().tree(tree_id(node.dbNode, node.relNode)) {
        Ok(t) => t,
        Err(EngineError::NoSuchTree(_)) => crate::pg::error::raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            // SAFETY: per the contract.
            format!("orioledb: index \"{}\" has no tree", unsafe { crate::pg::rel_name(index) }),
        ),
        Err(e) => report(e),
    };
    // SAFETY: per the contract.
    let (desc, nulls_first) = unsafe { layout_of(index) };
    let tree = crate::am::layout::table::ordered_by(tree, &desc);
    // SAFETY: an open index has its pg_index row and tuple descriptor.
    let include = unsafe { (*(*index).rd_index).indnkeyatts != (*(*index).rd_att).natts as i16 };
    let key_only = !include && desc.cols.iter().all(|c| decodable(c.kind).is_some());
    Shape { tree, desc, nulls_first, key_only }
}

/// The 6 bytes of `tid` that end an entry key.
pub fn tid_bytes(tid: &pg_sys::ItemPointerData) -> [u8; TID_LEN] {
    let block = ((tid.ip_blkid.bi_hi as u32) << 16) | tid.ip_blkid.bi_lo as u32;
    let mut out = [0u8; TID_LEN];
    out[..4].copy_from_slice(&block.to_be_bytes());
    out[4..].copy_from_slice(&tid.ip_posid.to_be_bytes());
    out
}

/// The TID an entry key ends with.
pub fn key_tid(key: &[u8]) -> pg_sys::ItemPointerData {
    let t = &key[key.len() - TID_LEN..];
    let block = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData {
            bi_hi: (block >> 16) as u16,
            bi_lo: block as u16,
        },
        ip_posid: u16::from_be_bytes([t[4], t[5]]),
    }
}

impl Shape {
    /// Whether the tree compares keys as bytes (no column is text compared
    /// by a libc locale).
    pub fn bytewise(&self) -> bool {
        !self.desc.cols.iter().any(|c| matches!(c.kind, Kind::LibcText | Kind::LibcBpchar))
    }

    /// Appends column `n`'s tag and encoding of `d` (None: NULL).
    ///
    /// # Safety
    /// `d` is a datum of the column's type.
    pub unsafe fn push_column(&self, n: usize, d: Option<pg_sys::Datum>, out: &mut Vec<u8>) {
        let start = out.len();
        // SAFETY: per the contract.
        unsafe { KeyDesc::push_datum(&self.desc.cols[n], d, out) };
        let (descending, nulls_first) = (self.desc.cols[n].descending, self.nulls_first[n]);
        if d.is_none() {
            out[start] = if nulls_first { 0 } else { 2 };
        } else if descending {
            for b in &mut out[start + 1..] {
                *b = !*b;
            }
        }
    }

    /// The key of the entry for a row's key columns (`values`/`nulls`,
    /// one per index column) naming `tid`.
    ///
    /// # Safety
    /// The arrays hold at least the key columns, datums of their types.
    pub unsafe fn entry_key(&self, values: *const pg_sys::Datum, nulls: *const bool, tid: &pg_sys::ItemPointerData) -> Vec<u8> {
        let mut key = Vec::with_capacity(32);
        key.push(VERSION_TAG);
        for n in 0..self.desc.cols.len() {
            // SAFETY: per the contract.
            let d = unsafe { (!*nulls.add(n)).then(|| *values.add(n)) };
            // SAFETY: as above.
            unsafe { self.push_column(n, d, &mut key) };
        }
        key.extend_from_slice(&tid_bytes(tid));
        key
    }

    /// Reads an entry's key columns back from `key` into `values`/`nulls`
    /// (one per column; by-reference datums palloc'd in the current memory
    /// context). Only for an index whose entries are `key_only`.
    ///
    /// # Safety
    /// `key` is an entry key of this index.
    pub unsafe fn decode_key(&self, key: &[u8], values: &mut [pg_sys::Datum], nulls: &mut [bool]) {
        let mut at = 1;
        for (n, col) in self.desc.cols.iter().enumerate() {
            let descending = self.desc.cols[n].descending;
            nulls[n] = key[at] != 1;
            at += 1;
            if nulls[n] {
                continue;
            }
            let byte = |i: usize| if descending { !key[i] } else { key[i] };
            let width = decodable(col.kind).expect("a key-only index has decodable columns");
            let (d, used) = match width {
                Width::Value(w) | Width::Fixed(w) => {
                    let mut b = [0u8; 16];
                    for (i, x) in b[..w].iter_mut().enumerate() {
                        *x = byte(at + i);
                    }
                    // SAFETY: a palloc'd copy for a by-reference datum.
                    (unsafe { fixed_datum(col.kind, &b[..w], matches!(width, Width::Fixed(_))) }, w)
                }
                Width::Escaped => {
                    let mut v = Vec::new();
                    let mut i = at;
                    loop {
                        let c = byte(i);
                        i += 1;
                        if c != 0 {
                            v.push(c);
                        } else if byte(i) == 0xFF {
                            v.push(0);
                            i += 1;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    // SAFETY: a palloc'd varlena.
                    (unsafe { varlena_datum(&v) }, i - at)
                }
            };
            values[n] = d;
            at += used;
        }
    }
}

/// The datum of a fixed-width encoding `b` of `kind` (by reference when
/// `by_ref`: a palloc'd copy of the bytes).
///
/// # Safety
/// In a memory context that outlives the datum's use.
unsafe fn fixed_datum(kind: Kind, b: &[u8], by_ref: bool) -> pg_sys::Datum {
    if by_ref {
        // SAFETY: a palloc'd copy of the bytes.
        unsafe {
            let p = pg_sys::palloc(b.len()) as *mut u8;
            std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
            return pg_sys::Datum::from(p);
        }
    }
    let mut be = [0u8; 8];
    be[8 - b.len()..].copy_from_slice(b);
    let x = u64::from_be_bytes(be);
    match kind {
        Kind::Int2 => pg_sys::Datum::from((x as u16 ^ 0x8000) as i16),
        Kind::Int4 => pg_sys::Datum::from((x as u32 ^ 0x8000_0000) as i32),
        Kind::Int8 => pg_sys::Datum::from((x ^ (1 << 63)) as i64),
        _ => pg_sys::Datum::from(x as usize),
    }
}

/// A palloc'd varlena holding `v` (text, varchar or bytea).
///
/// # Safety
/// In a memory context that outlives the datum's use.
unsafe fn varlena_datum(v: &[u8]) -> pg_sys::Datum {
    // SAFETY: VARHDRSZ + len bytes, the header written first.
    unsafe {
        let size = pg_sys::VARHDRSZ + v.len();
        let p = pg_sys::palloc(size) as *mut u8;
        pgrx::varlena::set_varsize_4b(p.cast(), size as i32);
        std::ptr::copy_nonoverlapping(v.as_ptr(), p.add(pg_sys::VARHDRSZ), v.len());
        pg_sys::Datum::from(p)
    }
}
