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
//! the entry's `IndexTuple` (key and INCLUDE columns) as
//! `index_form_tuple` makes it, which index-only scans return and scan
//! keys are checked against.
//!
//! The tree's descriptor item (`layout::table::DESC_KEY`) holds the key
//! columns' descriptor, so that replay and the tree checker compare
//! libc-collated text by its locale, as for primary trees. Columns up to
//! the last such column must be ascending with NULLs last: the tree's
//! comparator (`collated_order::ColumnOrder`) reads them that way.

use crate::am::layout::key_desc::KeyDesc;
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
/// order `desc` gives (its locale for libc-collated columns), and `order`
/// has one (descending, nulls first) pair per column of `desc`.
pub struct Shape {
    pub tree: Tree,
    pub desc: KeyDesc,
    pub order: Vec<(bool, bool)>,
}

thread_local! {
    /// Shapes of the indexes this transaction used, by relation file
    /// (a new file is a new tree). Invariant: empty between transactions,
    /// so a dropped tree's handle never outlives the DROP's transaction.
    static SHAPES: RefCell<HashMap<(u32, u32), Rc<Shape>>> = RefCell::new(HashMap::new());
}

/// Forgets the cached shapes at the end of every transaction (`pg::xact`).
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    if matches!(e, Commit | Abort | Prepare) {
        SHAPES.with(|s| s.borrow_mut().clear());
    }
}

/// The (descending, nulls first) option pairs of `index`'s key columns.
///
/// # Safety
/// `index` is an open index relation.
unsafe fn column_order(index: pg_sys::Relation) -> Vec<(bool, bool)> {
    // SAFETY: rd_indoption has indnkeyatts entries.
    unsafe {
        let n = (*(*index).rd_index).indnkeyatts as usize;
        (0..n)
            .map(|i| {
                let o = *(*index).rd_indoption.add(i) as u32;
                (o & pg_sys::INDOPTION_DESC != 0, o & pg_sys::INDOPTION_NULLS_FIRST != 0)
            })
            .collect()
    }
}

/// The key layout of `index`, or an ERROR (0A000) naming what the engine
/// cannot keep in the order the index asks for.
///
/// # Safety
/// `index` is an open index relation.
pub unsafe fn layout_of(index: pg_sys::Relation) -> (KeyDesc, Vec<(bool, bool)>) {
    // SAFETY: per the contract.
    unsafe {
        let name = crate::pg::rel_name(index);
        let desc = KeyDesc::for_secondary(index).unwrap_or_else(|why| {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb_btree index \"{name}\": {why}"),
            )
        });
        let order = column_order(index);
        if let Some(n) = (0..order.len()).find(|&n| order[n] != (false, false) && desc.collated_through(n)) {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!(
                    "orioledb_btree index \"{name}\": column {} must be ascending with NULLS LAST, as it comes before text under a libc collation",
                    n + 1
                ),
            );
        }
        (desc, order)
    }
}

/// The shape of open index `index` (whose tree exists).
///
/// # Safety
/// `index` is an open `orioledb_btree` index.
pub unsafe fn shape_of(index: pg_sys::Relation) -> Rc<Shape> {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*index).rd_node };
    let key = (node.dbNode.to_u32(), node.relNode.to_u32());
    if let Some(s) = SHAPES.with(|s| s.borrow().get(&key).cloned()) {
        return s;
    }
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
    let (desc, order) = unsafe { layout_of(index) };
    let tree = crate::am::layout::table::ordered_by(tree, &desc);
    let shape = Rc::new(Shape { tree, desc, order });
    SHAPES.with(|s| s.borrow_mut().insert(key, shape.clone()));
    shape
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
    /// Appends column `n`'s tag and encoding of `d` (None: NULL).
    ///
    /// # Safety
    /// `d` is a datum of the column's type.
    pub unsafe fn push_column(&self, n: usize, d: Option<pg_sys::Datum>, out: &mut Vec<u8>) {
        let start = out.len();
        // SAFETY: per the contract.
        unsafe { KeyDesc::push_datum(&self.desc.cols[n], d, out) };
        let (descending, nulls_first) = self.order[n];
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
}
