//! Row versions on the PostgreSQL side: turning a slot into a version
//! (`orioledb_engine::version` format), a version back into a `HeapTuple`
//! in a slot, and visibility under every snapshot type — here; beside it in
//! the room, each re-exported here: the transaction oracle and snapshots
//! (`oracle`), this backend's handles on tables' trees (`handles`), the
//! pruner and the sweep of dead versions (`pruner`), row ids as TIDs
//! (`tids`); and, by their own paths, predicate locks for SERIALIZABLE
//! (`ssi`) and the visibility map index-only scans read (`vismap`).
//!
//! It may call `toast`, `storage`, the keyed layout, the engine and `pg`.

mod handles;
mod oracle;
mod pruner;
pub mod ssi;
mod tids;
pub mod vismap;

pub use handles::*;
pub use oracle::*;
pub use pruner::*;
pub use tids::*;

use orioledb_engine::btree::{Prune, Pruner};
use crate::am::layout::table::Table;
use orioledb_engine::version::{self, bits, tid, DirtyInfo, Header, Hints, VacuumState, Xid};
use orioledb_engine::{IdHash, Tree, TreeId};
use crate::pg::error::raise;
use crate::pg::{is_toast, rel_name};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// This module's part of a transaction's end (`pg::xact`): the work left
/// queued outside latches is done at pre-commit ([`at_pre_commit`]), while
/// the transaction can still run statements; at its end (commit, abort,
/// prepare) the oracle's commit cache is forgotten and the superseded
/// counts go to the engine. (The queues of `table` and `toast` settle
/// themselves, registered after this one.)
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    match e {
        PreCommit => at_pre_commit(),
        Prepare | Commit | Abort => {
            forget_committed();
            flush_superseded();
        }
        _ => {}
    }
}













/// What a scan adds to a relation's statistics, as heap's and the index
/// AMs' `pgstat_count_*` macros (not callable) do: a scan started, a row
/// returned, a row fetched through an index, a block of the row-id space
/// read (`pg_statio_*_tables.heap_blks_hit`; the engine's buffers are not
/// PostgreSQL's, so every block counts as a hit).
#[derive(Clone, Copy)]
pub enum ScanStat {
    Scan,
    Returned,
    Fetched,
    Block,
}

/// Adds one to `rel`'s pending counter for `what` (nothing when statistics
/// are off for the relation).
///
/// # Safety
/// `rel` is an open relation.
pub unsafe fn count_scan_stat(rel: pg_sys::Relation, what: ScanStat) {
    // SAFETY: per the contract; pgstat_assoc_relation attaches the pending
    // entry the counters live in, as pgstat_should_count_relation does.
    unsafe {
        if !(*rel).pgstat_enabled {
            return;
        }
        if (*rel).pgstat_info.is_null() {
            pg_sys::pgstat_assoc_relation(rel);
        }
        let info = (*rel).pgstat_info;
        if info.is_null() {
            return;
        }
        let c = &mut (*info).t_counts;
        match what {
            ScanStat::Scan => c.t_numscans += 1,
            ScanStat::Returned => c.t_tuples_returned += 1,
            ScanStat::Fetched => c.t_tuples_fetched += 1,
            ScanStat::Block => {
                c.t_blocks_fetched += 1;
                c.t_blocks_hit += 1;
            }
        }
    }
}








/// Reads the version with row id `id`.
pub fn get_version(table: &Table, id: u64) -> Option<Vec<u8>> {
    table.get(id)
}

/// Whether version `h` is visible under `snapshot` (any type); a dirty
/// snapshot learns the running transactions, as heap's does.
///
/// # Safety
/// `snapshot` must be a valid snapshot; `rel` a valid open relation.
pub unsafe fn satisfies(h: &Header, snapshot: pg_sys::Snapshot, rel: pg_sys::Relation) -> bool {
    let mut hints = Hints::default();
    // SAFETY: caller guarantees a valid snapshot.
    let kind = unsafe { (*snapshot).snapshot_type };
    match kind {
        pg_sys::SnapshotType::SNAPSHOT_MVCC => {
            version::visible_mvcc(h, &PgXacts, &PgSnapshot(snapshot), &mut hints)
        }
        pg_sys::SnapshotType::SNAPSHOT_SELF => version::visible_self(h, &PgXacts, &mut hints),
        pg_sys::SnapshotType::SNAPSHOT_ANY => true,
        pg_sys::SnapshotType::SNAPSHOT_DIRTY => {
            let mut info = DirtyInfo::default();
            let v = version::visible_dirty(h, &PgXacts, &mut info, &mut hints);
            // SAFETY: a dirty snapshot is caller-owned and writable.
            unsafe {
                (*snapshot).xmin = info.xmin.into();
                (*snapshot).xmax = info.xmax.into();
                (*snapshot).speculativeToken = info.spec;
            }
            v
        }
        pg_sys::SnapshotType::SNAPSHOT_NON_VACUUMABLE => {
            // SAFETY: the snapshot type was just checked.
            let horizon = unsafe { Horizon::of_snapshot(snapshot) };
            let removable = |x: Xid| horizon.removable(x);
            version::vacuum_state(h, &PgXacts, &removable, &mut hints) != VacuumState::Dead
        }
        _ => {
            // SAFETY: caller guarantees an open relation.
            let name = unsafe { rel_name(rel) };
            raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb: snapshot type {kind} on table \"{name}\" is not supported"),
            )
        }
    }
}

/// Whether the version can be seen by nobody any more.
///
/// # Safety
/// `rel` must be a valid open relation.
pub unsafe fn surely_dead(h: &Header, rel: pg_sys::Relation) -> bool {
    // SAFETY: caller guarantees an open relation.
    let horizon = unsafe { Horizon::of(rel) };
    let removable = |x: Xid| horizon.removable(x);
    version::vacuum_state(h, &PgXacts, &removable, &mut Hints::default()) == VacuumState::Dead
}

/// Encodes the slot's row as a version of `table`: `hdr` supplies the
/// transaction fields, the tuple's data bits are added. External (toasted
/// elsewhere) values are fetched and stored inline, so a version never
/// points into another relation's toast table. Returns the version and its
/// key prefix (primary-key layout; empty otherwise).
///
/// # Safety
/// `rel` must be a valid open relation, `slot` a valid slot of its row type.
pub unsafe fn form_version(
    rel: pg_sys::Relation,
    table: &Table,
    slot: *mut pg_sys::TupleTableSlot,
    mut hdr: Header,
) -> (Vec<u8>, Vec<u8>) {
    // SAFETY: caller guarantees valid pointers; the slot's values arrays
    // have natts entries after slot_getallattrs.
    unsafe {
        pg_sys::slot_getallattrs(slot);
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
        let isnull = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
        let mut vals: Vec<pg_sys::Datum> = values.to_vec();
        let attrs = (*desc).attrs.as_slice(natts);
        for i in 0..natts {
            if isnull[i] || attrs[i].attlen != -1 || attrs[i].attisdropped {
                continue;
            }
            let p = vals[i].cast_mut_ptr::<u8>();
            // VARATT_IS_EXTERNAL: a 1-byte header of exactly 0x01.
            if *p == 0x01 {
                vals[i] = pg_sys::Datum::from(pg_sys::detoast_external_attr(p.cast()));
            }
        }
        let mut nulls = isnull.to_vec();
        let prefix = match table.desc() {
            Some(d) => d.prefix(&vals, &nulls, || rel_name(rel)),
            None => Vec::new(),
        };
        let max_value = table.max_value(&prefix);
        let (owned, size) = crate::am::toast::toast_row(rel, &mut vals, &mut nulls, max_value);
        let mut v = fill_version(desc, &mut vals, &mut nulls, &mut hdr, size);
        if !owned.is_empty() {
            version::push_toast_list(&mut v, &owned);
        }
        // Counted with the full header: any version may get it later (a
        // deleter, a lock) and must still fit then.
        let full = version::full_len(&v);
        if full > max_value {
            // Heap's tuple length, with the padding the version leaves out.
            let size = full - version::HEADER + version::HEAP_FIXED + version::elided_pad(&hdr);
            // Too big for heap as well: heap's own message. Otherwise the
            // limit is ours (a third of a page), and the message says so.
            let message = if size > crate::am::toast::MAX_HEAP_TUPLE_SIZE {
                format!(
                    "row is too big: size {size}, maximum size {}",
                    crate::am::toast::MAX_HEAP_TUPLE_SIZE
                )
            } else {
                format!(
                    "row is too big: size {size}, maximum size {} (table \"{}\")",
                    max_value - version::HEADER + version::HEAP_FIXED,
                    rel_name(rel)
                )
            };
            raise(PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED, message);
        }
        (v, prefix)
    }
}

/// The most [`FILL`] keeps between rows (64 kB; rows are at most 2.6 kB
/// when stored).
const FILL_KEPT_WORDS: usize = 8192;

thread_local! {
    /// Where [`fill_version`] has `heap_fill_tuple` write a row.
    static FILL: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The version of a row: `hdr` with the row's data bits, natts and hoff,
/// then the tuple tail `heap_fill_tuple` writes straight into the value
/// (no heap tuple formed and copied).
///
/// # Safety
/// `vals`/`nulls` hold `desc`'s natts entries, of which `size` is the
/// size (`toast::tuple_size`).
unsafe fn fill_version(
    desc: pg_sys::TupleDesc,
    vals: &mut [pg_sys::Datum],
    nulls: &mut [bool],
    hdr: &mut Header,
    size: crate::am::toast::TupleSize,
) -> Vec<u8> {
    let natts = vals.len() as u16;
    let hoff = size.hoff();
    hdr.hoff = hoff as u8;
    hdr.infomask2 = (hdr.infomask2 & !bits::NATTS_MASK) | (natts & bits::NATTS_MASK);
    hdr.infomask &= !bits::DATA_MASK;
    if size.has_null() {
        hdr.infomask |= bits::HASNULL;
    }
    // The header's form does not depend on the bits the fill sets (only
    // on HASNULL, set above), so its length is known before.
    let (_, n) = hdr.encode();
    let mut infomask: u16 = 0;
    // heap_fill_tuple pads each value to its alignment by address: the
    // row is filled as a whole tuple at a MAXALIGNed start (as palloc'd
    // ones are), zeroed first, in a buffer kept for the purpose; the
    // version takes the tuple's bitmap and data (the hoff is natural, so
    // the padding between them is not stored: `version::elided_pad`).
    let mut v = FILL.with(|f| {
        let mut f = f.borrow_mut();
        f.clear();
        f.resize((hoff + size.data).div_ceil(8), 0);
        let td = f.as_mut_ptr().cast::<u8>();
        // SAFETY: per the contract; `td` is 8-byte aligned and holds the
        // fixed header, the bitmap (when there are nulls), the padding to
        // `hoff` and exactly the data size from there.
        unsafe {
            pg_sys::heap_fill_tuple(
                desc,
                vals.as_mut_ptr(),
                nulls.as_mut_ptr(),
                td.add(hoff).cast(),
                size.data,
                &mut infomask,
                if size.has_null() {
                    td.add(version::HEAP_FIXED)
                } else {
                    std::ptr::null_mut()
                },
            );
            let stored = size.bitmap + size.data;
            let mut v = Vec::with_capacity(n + stored + crate::am::toast::TRAILER);
            v.resize(n, 0);
            v.extend_from_slice(std::slice::from_raw_parts(td.add(version::HEAP_FIXED), size.bitmap));
            v.extend_from_slice(std::slice::from_raw_parts(td.add(hoff), size.data));
            // A huge row (too big to store, or a PLAIN column) must not
            // keep its buffer for the rest of the backend's life.
            if f.capacity() > FILL_KEPT_WORDS {
                *f = Vec::new();
            }
            v
        }
    });
    hdr.infomask = (hdr.infomask & !bits::DATA_MASK) | (infomask & bits::DATA_MASK);
    let (b, m) = hdr.encode();
    debug_assert_eq!(m, n, "the fill changed the header's form");
    if m == n {
        v[..n].copy_from_slice(&b[..n]);
    } else {
        v.splice(0..n, b[..m].iter().copied());
    }
    v
}

/// Records the command id heap's tuple header would carry once `h` has
/// just been given a deleter or updater (`cmax`): a combo command id
/// standing for `cmin` and `cmax` when the deleting transaction also
/// inserted it (heap's `HeapTupleHeaderAdjustCmax`), else `cmax`.
///
/// # Safety
/// Called in a transaction, outside parallel mode (as every write is).
pub unsafe fn set_raw_cid(h: &mut Header) {
    if h.flags & version::SPECULATIVE != 0 {
        // The token is still needed; heap's would be overwritten, but a
        // speculative insertion is confirmed or withdrawn at once.
        return;
    }
    // SAFETY: a zeroed header with xmin, cmin and the xmin hint bits is
    // all HeapTupleHeaderAdjustCmax reads; it allocates the combo id in
    // the transaction's combo table.
    unsafe {
        let mut data: pg_sys::HeapTupleHeaderData = std::mem::zeroed();
        data.t_choice.t_heap.t_xmin = h.xmin.into();
        data.t_choice.t_heap.t_field3.t_cid = h.cmin;
        data.t_infomask = h.infomask & (bits::XMIN_COMMITTED | bits::XMIN_INVALID);
        let (mut cid, mut combo) = (h.cmax, false);
        pg_sys::HeapTupleHeaderAdjustCmax(&mut data, &mut cid, &mut combo);
        h.flags = (h.flags & !version::COMBO) | version::RAW_CID;
        if combo {
            h.flags |= version::COMBO;
        }
        h.spec = cid;
    }
}

/// Bytes of the `HeapTupleData` in front of a built tuple (MAXALIGNed).
const TUPLE_STRUCT: usize = size_of::<pg_sys::HeapTupleData>().next_multiple_of(8);

/// Builds a `HeapTuple` from version bytes, allocated in `cxt`.
///
/// # Safety
/// `value` must be a version that `Header::decode` accepts.
pub unsafe fn build_tuple(
    value: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    cxt: pg_sys::MemoryContext,
) -> pg_sys::HeapTuple {
    let h = Header::decode(value, id).expect("caller decoded it");
    let (tail, _) = version::tail_and_toast(&h, value);
    // SAFETY: the allocation holds the struct and the tuple.
    unsafe {
        let mem = pg_sys::MemoryContextAlloc(cxt, TUPLE_STRUCT + version::tuple_len(&h, tail));
        fill_tuple(&h, tail, id, relid, mem.cast())
    }
}

/// Builds the `HeapTuple` of version `value` (header `h`) in `buf`, which
/// it owns: valid until `buf` changes. For a slot that only borrows the
/// tuple (ANALYZE's, which copies the rows it keeps), without an
/// allocation per row.
///
/// # Safety
/// `h` is `value`'s decoded header.
pub unsafe fn build_tuple_in(
    h: &Header,
    value: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    buf: &mut Vec<u64>,
) -> pg_sys::HeapTuple {
    let (tail, _) = version::tail_and_toast(h, value);
    let words = (TUPLE_STRUCT + version::tuple_len(h, tail)).div_ceil(8);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    // SAFETY: `buf` holds the struct and the tuple, 8-byte aligned.
    unsafe { fill_tuple(h, tail, id, relid, buf.as_mut_ptr().cast()) }
}

/// Writes the `HeapTupleData` and the tuple of a version (header `h`,
/// tuple tail `tail`) at `mem`.
///
/// # Safety
/// `mem` is MAXALIGNed and holds `TUPLE_STRUCT + version::tuple_len(h,
/// tail)` bytes.
unsafe fn fill_tuple(
    h: &Header,
    tail: &[u8],
    id: u64,
    relid: pg_sys::Oid,
    mem: *mut u8,
) -> pg_sys::HeapTuple {
    let len = version::tuple_len(h, tail);
    // SAFETY: per the contract; every byte of the struct and the tuple
    // header is zeroed or written below, the tail copied.
    unsafe {
        std::ptr::write_bytes(mem, 0, TUPLE_STRUCT + version::HEAP_FIXED);
        let tup = mem.cast::<pg_sys::HeapTupleData>();
        let data = mem.add(TUPLE_STRUCT).cast::<pg_sys::HeapTupleHeaderData>();
        (*tup).t_len = len as u32;
        to_item_pointer(id, &mut (*tup).t_self);
        (*tup).t_tableOid = relid;
        (*tup).t_data = data;
        (*data).t_choice.t_heap.t_xmin = h.xmin.into();
        (*data).t_choice.t_heap.t_xmax = h.xmax.into();
        // Heap keeps one command id: cmax once deleted, else cmin; a row
        // this transaction inserted and deleted (or updated) gets a combo
        // command id standing for both, as heap_delete gives it, so the
        // cmin/cmax system columns read as on heap.
        (*data).t_choice.t_heap.t_field3.t_cid = h.cmin;
        (*data).t_infomask = h.infomask & !(pg_sys::HEAP_COMBOCID as u16);
        (*data).t_infomask2 = h.infomask2;
        (*data).t_hoff = h.hoff;
        if h.flags & version::RAW_CID != 0 {
            (*data).t_choice.t_heap.t_field3.t_cid = h.spec;
            if h.flags & version::COMBO != 0 {
                (*data).t_infomask |= pg_sys::HEAP_COMBOCID as u16;
            }
        } else if !(h.xmax_invalid() || h.lock_only()) {
            let mut cid = h.cmax;
            let mut combo = false;
            // New combo ids cannot be made in parallel mode: cmax there.
            if !pg_sys::IsInParallelMode() {
                pg_sys::HeapTupleHeaderAdjustCmax(data, &mut cid, &mut combo);
            }
            (*data).t_choice.t_heap.t_field3.t_cid = cid;
            if combo {
                (*data).t_infomask |= pg_sys::HEAP_COMBOCID as u16;
            }
        }
        to_item_pointer(h.ctid, &mut (*data).t_ctid);
        // The bitmap, heap's zero padding the version leaves out, the data.
        let (before, pad, after) = version::tail_parts(h, tail);
        let at = mem.add(TUPLE_STRUCT + version::HEAP_FIXED);
        std::ptr::copy_nonoverlapping(before.as_ptr(), at, before.len());
        std::ptr::write_bytes(at.add(before.len()), 0, pad);
        std::ptr::copy_nonoverlapping(after.as_ptr(), at.add(before.len() + pad), after.len());
        tup
    }
}

/// Puts version `value` (row id `id`) of `rel` into `slot`.
///
/// # Safety
/// `slot` must be a valid slot of `rel`'s row type; `value` decodable.
pub unsafe fn store_version(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    id: u64,
    value: &[u8],
) {
    // SAFETY: caller guarantees valid pointers; the tuple lives in the
    // slot's memory context and the slot frees it when cleared.
    unsafe {
        let relid = (*rel).rd_id;
        let tup = build_tuple(value, id, relid, (*slot).tts_mcxt);
        pg_sys::ExecForceStoreHeapTuple(tup, slot, true);
        (*slot).tts_tableOid = relid;
        to_item_pointer(id, &mut (*slot).tts_tid);
    }
}

/// Decodes a version or raises a corruption error naming the table.
///
/// # Safety
/// `rel` must be a valid open relation.
pub unsafe fn decode(rel: pg_sys::Relation, id: u64, value: &[u8]) -> Header {
    Header::decode(value, id).unwrap_or_else(|| {
        // SAFETY: caller guarantees an open relation.
        let name = unsafe { rel_name(rel) };
        raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("orioledb: malformed row version {id} in table \"{name}\""),
        )
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn xid_order_is_transaction_id_precedes() {
        assert!(xid_precedes(3, 4) && !xid_precedes(4, 3) && !xid_precedes(5, 5));
        // Modulo 2^32 for normal ids: just past the wrap still follows.
        assert!(xid_precedes(u32::MAX - 5, 10));
        assert!(!xid_precedes(10, u32::MAX - 5));
        // Permanent ids (bootstrap 1, frozen 2) precede every normal id.
        assert!(xid_precedes(2, u32::MAX) && xid_precedes(1, 3) && !xid_precedes(3, 2));
        assert!(xid_precedes(0, 2) && !xid_precedes(2, 0));
    }

    #[test]
    fn tid_range_bounds_map_to_row_ids() {
        // A row's own TID is included at either end.
        for id in [0u64, 1, 290, 291, 292, 1000, 12345] {
            let (b, o) = tid::to_pointer(id);
            assert_eq!(first_id_at_or_after(b, o), id);
            assert_eq!(end_id_through(b, o), id + 1);
        }
        // ctid >= '(1,0)' starts at block 1's first row; ctid < '(5,0)' is
        // normalized by the executor to ctid <= '(4,65535)'.
        assert_eq!(first_id_at_or_after(1, 0), 291);
        assert_eq!(end_id_through(4, u16::MAX), 5 * 291);
        // Offsets past 291 are after the block's last row.
        assert_eq!(first_id_at_or_after(2, 292), 3 * 291);
        assert_eq!(first_id_at_or_after(2, 2048), 3 * 291);
        assert_eq!(end_id_through(2, 292), 3 * 291);
        // Offset 0 as an upper bound is before the block's first row.
        assert_eq!(end_id_through(3, 0), 3 * 291);
        assert_eq!(end_id_through(0, 0), 0);
        // The executor's unbounded ends.
        assert_eq!(first_id_at_or_after(0, 0), 0);
        assert_eq!(
            end_id_through(pg_sys::InvalidBlockNumber, u16::MAX),
            (pg_sys::InvalidBlockNumber as u64 + 1) * 291
        );
    }
}
