//! Logical decoding of orioledb tables: the row-change records and the
//! resource manager's `rm_decode`.
//!
//! The engine's own records are physical-ish ("tree T's key K gets value
//! V", patches and deltas against values only the tree holds), so an
//! output plugin cannot be fed from them. Under `wal_level = logical` the
//! access method therefore logs, beside each row change of a logically
//! logged table, one *row-change record* that carries what heap's records
//! carry for decoding: the relation's file node, the new row as a heap
//! tuple, and the old row's replica identity. Replay skips these records
//! (they change nothing); `rm_decode` turns them into reorder-buffer
//! changes exactly as PostgreSQL's `heap_decode` turns heap records into
//! them, so PostgreSQL's reorder buffer, snapshot builder and every output
//! plugin (test_decoding, pgoutput, wal2json) treat orioledb tables as
//! they treat heap tables. With `wal_level` below logical nothing is
//! logged and the cost is a comparison per change.
//!
//! A row-change record shares info kind 15 with the engine checkpoint's
//! redo-point marker (the engine uses the other fifteen): a marker's data
//! is exactly 8 bytes, a row change's at least [`FIXED`].
//!
//! ```text
//! 0 action u8 (1 insert, 2 update, 3 delete) | 1 flags u8 (NEW, OLD)
//! 2 tablespace u32 | 6 database u32 | 10 relfilenode u32
//! 14 [new tuple: len u32, HeapTupleHeader bytes] [old tuple: the same]
//! ```

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_char, c_int};

// snapbuild.h, which pgrx does not bind.
extern "C-unwind" {
    fn SnapBuildCurrentState(builder: *mut pg_sys::SnapBuild) -> c_int;
    fn SnapBuildProcessChange(
        builder: *mut pg_sys::SnapBuild,
        xid: pg_sys::TransactionId,
        lsn: pg_sys::XLogRecPtr,
    ) -> bool;
}

/// decode.h's `XLogRecordBuffer` (opaque in pgrx's bindings).
#[repr(C)]
struct RecordBuffer {
    origptr: pg_sys::XLogRecPtr,
    endptr: pg_sys::XLogRecPtr,
    record: *mut pg_sys::XLogReaderState,
}

/// `SNAPBUILD_FULL_SNAPSHOT` of snapbuild.h's `SnapBuildState`.
const SNAPBUILD_FULL_SNAPSHOT: c_int = 1;

/// What a row change did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    Insert = 1,
    Update = 2,
    Delete = 3,
}

const HAS_NEW: u8 = 1;
const HAS_OLD: u8 = 2;
/// Bytes before the tuples.
pub const FIXED: usize = 14;

/// A decoded row-change record. Invariant: `new` and `old` are whole
/// `HeapTupleHeader` images (header, null bitmap, data), as
/// `heap_form_tuple` lays them out.
#[derive(Debug, PartialEq, Eq)]
pub struct RowChange<'a> {
    pub action: Action,
    /// tablespace, database, relfilenode
    pub node: [u32; 3],
    pub new: Option<&'a [u8]>,
    pub old: Option<&'a [u8]>,
}

impl RowChange<'_> {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let len = FIXED + self.new.map_or(0, |t| 4 + t.len()) + self.old.map_or(0, |t| 4 + t.len());
        let mut b = Vec::with_capacity(len);
        let flags = if self.new.is_some() { HAS_NEW } else { 0 } | if self.old.is_some() { HAS_OLD } else { 0 };
        b.push(self.action as u8);
        b.push(flags);
        for n in self.node {
            b.extend_from_slice(&n.to_le_bytes());
        }
        for t in [self.new, self.old].into_iter().flatten() {
            b.extend_from_slice(&(t.len() as u32).to_le_bytes());
            b.extend_from_slice(t);
        }
        b
    }

    /// Reads a record written by [`RowChange::encode`]; None if `b` is not
    /// one (a redo-point marker, or damage).
    pub fn decode(b: &[u8]) -> Option<RowChange<'_>> {
        if b.len() < FIXED {
            return None;
        }
        let action = match b[0] {
            1 => Action::Insert,
            2 => Action::Update,
            3 => Action::Delete,
            _ => return None,
        };
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let node = [u32at(2), u32at(6), u32at(10)];
        let mut at = FIXED;
        let mut take = |present: bool| -> Option<Option<&[u8]>> {
            if !present {
                return Some(None);
            }
            let len = u32::from_le_bytes(b.get(at..at + 4)?.try_into().unwrap()) as usize;
            let t = b.get(at + 4..at + 4 + len)?;
            at += 4 + len;
            Some(Some(t))
        };
        let new = take(b[1] & HAS_NEW != 0)?;
        let old = take(b[1] & HAS_OLD != 0)?;
        (at == b.len()).then_some(RowChange { action, node, new, old })
    }

    /// One line for `pg_waldump`.
    pub fn describe(&self) -> String {
        let [spc, db, rel] = self.node;
        format!(
            "{:?} rel {spc}/{db}/{rel}{}{}",
            self.action,
            self.new.map_or(String::new(), |t| format!(" new {} bytes", t.len())),
            self.old.map_or(String::new(), |t| format!(" old {} bytes", t.len())),
        )
    }
}

/// Whether changes of `rel` must be logged for logical decoding
/// (`RelationIsLogicallyLogged`).
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn logically_logged(rel: pg_sys::Relation) -> bool {
    // SAFETY: per the contract.
    unsafe {
        pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_LOGICAL as i32
            && (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as c_char
            && !pg_sys::IsCatalogRelation(rel)
    }
}

/// The largest row-change record: WAL readers refuse records past
/// `MaxAllocSize` (1 GB), and PostgreSQL 16 caps them at 1020 MB.
const MAX_RECORD: usize = 1020 * 1024 * 1024;

/// Logs `change` (inside the changing transaction, after its row change).
/// A change too large for one WAL record (its rows, out-of-line values
/// inline, past 1020 MB) is an ERROR: written, no reader could read it.
pub fn log(change: &RowChange) {
    let bytes = change.encode();
    if bytes.len() > MAX_RECORD {
        crate::pg::error::error(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!(
                "orioledb: a row change of {} MB is too large to log for logical decoding (wal_level = logical)",
                bytes.len() >> 20
            ),
        )
        .detail("The limit is 1020 MB for the new row and the old row's replica identity together, with out-of-line values inline.")
        .raise();
    }
    // The origin is included as heap includes it, so a subscriber's own
    // changes can be filtered out downstream.
    crate::pg::wal::log_marker(&bytes, pg_sys::XLOG_INCLUDE_ORIGIN as u8);
}

/// `rm_decode`: every record of ours gets its transaction id noted (as for
/// a resource manager without decoding); row-change records of the slot's
/// database become reorder-buffer changes, as `heap_decode` makes them.
#[pg_guard]
pub unsafe extern "C-unwind" fn decode(
    ctx: *mut pg_sys::LogicalDecodingContext,
    buf: *mut pg_sys::XLogRecordBuffer,
) {
    // SAFETY: PostgreSQL passes its decoding context and the decoded
    // record; the reorder buffer owns the change and tuples we queue.
    unsafe {
        let buf = buf.cast::<RecordBuffer>();
        let reader = (*buf).record;
        let rec = (*reader).record;
        let xid = (*rec).header.xl_xid;
        pg_sys::ReorderBufferProcessXid((*ctx).reorder, xid, (*buf).origptr);
        if (*rec).header.xl_info >> 4 != crate::pg::wal::KIND_MARKER {
            return;
        }
        let data = crate::pg::wal::main_data(rec);
        let Some(change) = RowChange::decode(data) else {
            return;
        };
        let builder = (*ctx).snapshot_builder;
        if SnapBuildCurrentState(builder) < SNAPBUILD_FULL_SNAPSHOT || (*ctx).fast_forward {
            return;
        }
        if !SnapBuildProcessChange(builder, xid, (*buf).origptr) {
            return;
        }
        if change.node[1] != u32::from((*(*ctx).slot).data.database) {
            return;
        }
        let origin = (*rec).record_origin;
        if (*ctx).callbacks.filter_by_origin_cb.is_some() && pg_sys::filter_by_origin_cb_wrapper(ctx, origin) {
            return;
        }
        queue(ctx, &change, xid, (*buf).origptr, origin);
    }
}

/// Queues `change` in the reorder buffer.
///
/// # Safety
/// Inside `rm_decode`, with its context.
unsafe fn queue(
    ctx: *mut pg_sys::LogicalDecodingContext,
    change: &RowChange,
    xid: pg_sys::TransactionId,
    lsn: pg_sys::XLogRecPtr,
    origin: pg_sys::RepOriginId,
) {
    // SAFETY: per the contract; each tuple buffer is allocated with room
    // for its tuple, whose bytes are copied in whole.
    unsafe {
        let rb = (*ctx).reorder;
        let c = pg_sys::ReorderBufferGetChange(rb);
        (*c).action = match change.action {
            Action::Insert => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_INSERT,
            Action::Update => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_UPDATE,
            Action::Delete => pg_sys::ReorderBufferChangeType::REORDER_BUFFER_CHANGE_DELETE,
        };
        (*c).origin_id = origin;
        let tp = &mut (*c).data.tp;
        tp.relnode = pg_sys::RelFileNode {
            spcNode: change.node[0].into(),
            dbNode: change.node[1].into(),
            relNode: change.node[2].into(),
        };
        let tuple = |bytes: Option<&[u8]>| match bytes {
            None => std::ptr::null_mut(),
            Some(b) => tuple_buf(rb, b),
        };
        tp.newtuple = tuple(change.new);
        tp.oldtuple = tuple(change.old);
        tp.clear_toast_afterwards = true;
        pg_sys::ReorderBufferQueueChange(rb, xid, lsn, c, false);
    }
}

/// A reorder-buffer tuple holding the tuple image `b`, as
/// `DecodeXLogTuple` fills one (no TID, table unknown until commit).
///
/// # Safety
/// `rb` is the decoding context's reorder buffer.
unsafe fn tuple_buf(rb: *mut pg_sys::ReorderBuffer, b: &[u8]) -> *mut pg_sys::ReorderBufferTupleBuf {
    // SAFETY: per the contract; ReorderBufferGetTupleBuf makes t_data point
    // at room for `b.len()` bytes.
    unsafe {
        let t = pg_sys::ReorderBufferGetTupleBuf(rb, b.len());
        let tup = &mut (*t).tuple;
        std::ptr::copy_nonoverlapping(b.as_ptr(), tup.t_data.cast::<u8>(), b.len());
        tup.t_len = b.len() as u32;
        tup.t_self = pg_sys::ItemPointerData::default();
        tup.t_tableOid = pg_sys::InvalidOid;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_change_round_trips_and_is_never_a_marker() {
        let new = [1u8, 2, 3, 4, 5];
        let old = [9u8; 30];
        for (n, o) in [(Some(&new[..]), None), (None, Some(&old[..])), (Some(&new[..]), Some(&old[..])), (None, None)] {
            let c = RowChange {
                action: Action::Update,
                node: [1663, 5, 16384],
                new: n,
                old: o,
            };
            let b = c.encode();
            assert_ne!(b.len(), 8);
            assert_eq!(RowChange::decode(&b), Some(c));
            assert_eq!(RowChange::decode(&b[..b.len() - 1]), None);
        }
        assert_eq!(RowChange::decode(&42u64.to_le_bytes()), None);
    }
}
