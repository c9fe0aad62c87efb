//! Our own toaster (design decision 9). PostgreSQL's helpers store toast
//! chunks with `heap_insert` and delete them with `simple_heap_delete`, so
//! they cannot serve a non-heap toast relation; this module does the same
//! job on the toast relation's engine tree:
//!
//! * A row whose version exceeds the item limit first has its largest
//!   compressible values (`attstorage` 'x'/'m') compressed with the
//!   column's method; if it is still too large, its largest 'x'/'e' values
//!   move out of line into the toast tree, replaced by standard on-disk
//!   toast pointers (so PostgreSQL's detoasting finds them through
//!   `relation_fetch_toast_slice`).
//! * Toast tree items: key `value id u32 BE | chunk number u32 BE`, value =
//!   up to [`CHUNK`] bytes of the stored datum. Not versioned: a value lives
//!   exactly as long as the one version that owns it (every version owns
//!   its own copies — an UPDATE re-stores unchanged large values), and is
//!   deleted when that version is pruned.
//! * The toast tree is created with the first value stored in it
//!   (`storage::create_toast_tree`); until then readers find no tree and
//!   nothing to delete.
// The `pub unsafe fn`s here implement `TableAmRoutine` callbacks (called from
// `routine.rs`): their safety contract is PostgreSQL's for that callback
// (valid, open relations, slots and snapshots), and their argument lists
// are the callbacks'.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use crate::pg::rel_name;
use crate::pg::error::raise;
use orioledb_engine::btree::Change;
use orioledb_engine::Direction;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::ops::Bound;

/// Bytes of datum per toast chunk (heap's TOAST_MAX_CHUNK_SIZE is 1996).
pub const CHUNK: usize = 2000;

const TOAST_POINTER_SIZE: usize = 2 + size_of::<pg_sys::varatt_external>();

extern "C-unwind" {
    fn toast_compress_datum(value: pg_sys::Datum, cmethod: c_char) -> pg_sys::Datum;
    static default_toast_compression: c_int;
}

fn chunk_key(valueid: u32, chunk: u32) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..4].copy_from_slice(&valueid.to_be_bytes());
    k[4..].copy_from_slice(&chunk.to_be_bytes());
    k
}

/// Total size of a varlena, whatever its header kind.
///
/// # Safety
/// `p` must point to a valid varlena.
pub unsafe fn varsize_any(p: *const u8) -> usize {
    // SAFETY: caller guarantees a valid varlena header.
    unsafe {
        let b0 = *p;
        if b0 == 0x01 {
            // External: 2-byte header plus the pointer for its tag.
            let tag = *p.add(1);
            return if tag as u32 == pg_sys::vartag_external::VARTAG_ONDISK {
                TOAST_POINTER_SIZE
            } else {
                2 + 8
            };
        }
        if b0 & 0x01 == 0x01 {
            return (b0 >> 1) as usize;
        }
        (std::ptr::read_unaligned(p.cast::<u32>()) >> 2) as usize
    }
}

/// A 4-byte-header varlena holding compressed data.
unsafe fn is_compressed(p: *const u8) -> bool {
    // SAFETY: caller guarantees a valid varlena header.
    unsafe { *p & 0x03 == 0x02 }
}

/// heap's largest tuple (`MaxHeapTupleSize`): a page less its header and
/// one line pointer.
pub const MAX_HEAP_TUPLE_SIZE: usize = pg_sys::BLCKSZ as usize - (24usize + 4).next_multiple_of(8);

/// Bytes of an empty toast trailer (the list of a row's toast values).
pub const TRAILER: usize = 4;

/// The size of a heap tuple's parts (`heap_form_tuple`'s arithmetic).
/// Invariant: `bitmap` is the null bitmap's length, 0 when no value is
/// null (a null makes it at least one byte).
#[derive(Clone, Copy)]
pub struct TupleSize {
    pub data: usize,
    pub bitmap: usize,
}

impl TupleSize {
    /// Whether a value is null (the tuple has a bitmap).
    pub fn has_null(&self) -> bool {
        self.bitmap > 0
    }

    /// Heap's `t_hoff`: the fixed header and the bitmap, MAXALIGNed.
    pub fn hoff(&self) -> usize {
        (orioledb_engine::version::HEAP_FIXED + self.bitmap).next_multiple_of(8)
    }

    /// Bytes of the heap tuple after its fixed header: bitmap, padding and
    /// data (what size limits count; a version stores no padding).
    pub fn tail(&self) -> usize {
        self.hoff() - orioledb_engine::version::HEAP_FIXED + self.data
    }
}

/// # Safety
/// `vals`/`isnull` hold `desc`'s natts entries (in memory or toast
/// pointers, as `heap_compute_data_size` takes them).
pub unsafe fn tuple_size(
    desc: pg_sys::TupleDesc,
    vals: &mut [pg_sys::Datum],
    isnull: &mut [bool],
) -> TupleSize {
    // SAFETY: per the contract.
    let data =
        unsafe { pg_sys::heap_compute_data_size(desc, vals.as_mut_ptr(), isnull.as_mut_ptr()) };
    let bitmap = if isnull.iter().any(|&n| n) { vals.len().div_ceil(8) } else { 0 };
    TupleSize { data, bitmap }
}

/// Size of the row as `heap_form_tuple` would build it, minus the 23
/// fixed header bytes, plus our version header: the version's value size.
unsafe fn version_size(
    desc: pg_sys::TupleDesc,
    vals: &mut [pg_sys::Datum],
    isnull: &mut [bool],
) -> usize {
    // SAFETY: caller passes natts values of desc's row type.
    orioledb_engine::version::HEADER + unsafe { tuple_size(desc, vals, isnull) }.tail()
}

/// Shrinks the row until its version fits in `limit` bytes (leaving room
/// for the toast trailer); returns the toast values now owned by the row
/// and the row's size as it now is (computed once for a row that fits).
///
/// # Safety
/// `rel` open; `vals`/`isnull` hold natts entries of its row type with no
/// external values (callers flatten those first).
pub unsafe fn toast_row(
    rel: pg_sys::Relation,
    vals: &mut [pg_sys::Datum],
    isnull: &mut [bool],
    limit: usize,
) -> (Vec<(u32, u32)>, TupleSize) {
    // SAFETY: as documented; attribute rows are valid for natts entries.
    unsafe {
        let desc = (*rel).rd_att;
        let natts = vals.len();
        let attrs = (*desc).attrs.as_slice(natts);
        let mut owned = Vec::new();
        let trailer = |n: usize| TRAILER + 8 * n;
        // Most rows fit: one size computation, not one per step below.
        let size = tuple_size(desc, vals, isnull);
        if orioledb_engine::version::HEADER + size.tail() + trailer(0) <= limit {
            return (owned, size);
        }
        let mut tried = vec![false; natts];
        // 1. Compress the largest compressible values, one at a time.
        while version_size(desc, vals, isnull) + trailer(0) > limit {
            let pick = (0..natts)
                .filter(|&i| {
                    !tried[i] && !isnull[i] && attrs[i].attlen == -1 && !attrs[i].attisdropped
                })
                .filter(|&i| matches!(attrs[i].attstorage as u8, b'x' | b'm'))
                .filter(|&i| !is_compressed(vals[i].cast_mut_ptr::<u8>()))
                .max_by_key(|&i| varsize_any(vals[i].cast_mut_ptr::<u8>()));
            let Some(i) = pick else { break };
            tried[i] = true;
            if varsize_any(vals[i].cast_mut_ptr::<u8>()) < 64 {
                break;
            }
            let method = if attrs[i].attcompression != 0 {
                attrs[i].attcompression
            } else {
                default_toast_compression as c_char
            };
            let c = toast_compress_datum(vals[i], method);
            if c.value() != 0 {
                vals[i] = c;
            }
        }
        // 2. Move the largest values out of line; 3. heap's last resort:
        // MAIN values too; 4. PLAIN values of a row that heap would still
        // store on one page (a third of a page is our limit, a whole page
        // heap's): moved rather than refused, since PLAIN only asks not to
        // spend time on compression and toasting.
        let heap_size = |vals: &mut [pg_sys::Datum], isnull: &mut [bool]| {
            version_size(desc, vals, isnull) + 23 - orioledb_engine::version::HEADER
        };
        let mut moved = vec![false; natts];
        for storages in [&b"xe"[..], &b"m"[..], &b"p"[..]] {
            if storages == b"p" && heap_size(vals, isnull) > MAX_HEAP_TUPLE_SIZE {
                break;
            }
            while version_size(desc, vals, isnull) + trailer(owned.len()) > limit {
                let pick = (0..natts)
                    .filter(|&i| {
                        !moved[i] && !isnull[i] && attrs[i].attlen == -1 && !attrs[i].attisdropped
                    })
                    .filter(|&i| storages.contains(&(attrs[i].attstorage as u8)))
                    // A type that is PLAIN itself cannot read toasted
                    // values; only columns set PLAIN on toastable types move.
                    .filter(|&i| {
                        storages != b"p"
                            || pg_sys::get_typstorage(attrs[i].atttypid) as u8 != b'p'
                    })
                    .filter(|&i| varsize_any(vals[i].cast_mut_ptr::<u8>()) > TOAST_POINTER_SIZE + 8)
                    .max_by_key(|&i| varsize_any(vals[i].cast_mut_ptr::<u8>()));
                let Some(i) = pick else { break };
                moved[i] = true;
                let (ptr, valueid, toastrelid) = save_value(rel, vals[i].cast_mut_ptr::<u8>());
                vals[i] = ptr;
                owned.push((toastrelid, valueid));
            }
        }
        (owned, tuple_size(desc, vals, isnull))
    }
}

/// Stores one datum in `rel`'s toast tree; returns the toast pointer datum
/// and the value's id and toast relation.
unsafe fn save_value(rel: pg_sys::Relation, dval: *const u8) -> (pg_sys::Datum, u32, u32) {
    // SAFETY: rel is open; dval is a valid, non-external varlena.
    unsafe {
        let toastoid = (*(*rel).rd_rel).reltoastrelid;
        if toastoid == pg_sys::InvalidOid {
            raise(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "orioledb: row of table \"{}\" is too big and the table has no toast relation",
                    rel_name(rel)
                ),
            );
        }
        let toastrel = pg_sys::table_open(toastoid, pg_sys::RowExclusiveLock as c_int);
        let tree = crate::am::storage::trees::create_toast_tree(toastrel);
        let b0 = *dval;
        let (data, rawsize, extinfo): (&[u8], i32, u32) = if b0 & 0x01 == 0x01 {
            let len = varsize_any(dval) - 1;
            (
                std::slice::from_raw_parts(dval.add(1), len),
                (len + 4) as i32,
                len as u32,
            )
        } else if is_compressed(dval) {
            let len = varsize_any(dval) - 4;
            let tcinfo = std::ptr::read_unaligned(dval.add(4).cast::<u32>());
            let raw = (tcinfo & 0x3FFF_FFFF) as i32 + 4;
            (
                std::slice::from_raw_parts(dval.add(4), len),
                raw,
                len as u32 | ((tcinfo >> 30) << 30),
            )
        } else {
            let len = varsize_any(dval) - 4;
            (
                std::slice::from_raw_parts(dval.add(4), len),
                (len + 4) as i32,
                len as u32,
            )
        };
        // A fresh value id nobody in this toast tree uses.
        let valueid = loop {
            let id = pg_sys::GetNewObjectId().to_u32();
            let used = tree
                .get(&chunk_key(id, 0))
                .unwrap_or_else(|e| crate::pg::engine::report(e))
                .is_some();
            if !used {
                break id;
            }
        };
        for (n, chunk) in data.chunks(CHUNK).enumerate() {
            tree.insert(&chunk_key(valueid, n as u32), chunk)
                .unwrap_or_else(|e| crate::pg::engine::report(e));
        }
        pg_sys::table_close(toastrel, pg_sys::NoLock as c_int);
        UNPLACED.with(|u| u.borrow_mut().push((toastoid.to_u32(), valueid)));
        let p = pg_sys::palloc(TOAST_POINTER_SIZE).cast::<u8>();
        *p = 0x01;
        *p.add(1) = pg_sys::vartag_external::VARTAG_ONDISK as u8;
        let ext = pg_sys::varatt_external {
            va_rawsize: rawsize,
            va_extinfo: extinfo,
            va_valueid: pg_sys::Oid::from(valueid),
            va_toastrelid: toastoid,
        };
        std::ptr::write_unaligned(p.add(2).cast::<pg_sys::varatt_external>(), ext);
        (pg_sys::Datum::from(p), valueid, toastoid.to_u32())
    }
}

/// `relation_fetch_toast_slice`: copies bytes `[off, off + len)` of value
/// `valueid` into `VARDATA(result)`, reading only the chunks that hold them.
pub unsafe fn fetch_slice(
    toastrel: pg_sys::Relation,
    valueid: pg_sys::Oid,
    attrsize: i32,
    off: i32,
    len: i32,
    result: *mut pg_sys::varlena,
) {
    if len <= 0 {
        return;
    }
    // SAFETY: the caller allocated result with room for len bytes of data.
    unsafe {
        let id = valueid.to_u32();
        let Some(tree) = crate::am::storage::trees::toast_tree(toastrel) else {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!(
                    "missing chunk number 0 for toast value {id} in {}",
                    rel_name(toastrel)
                ),
            );
        };
        let (off, len) = (off as usize, len as usize);
        let first = (off / CHUNK) as u32;
        let last = ((off + len - 1) / CHUNK) as u32;
        let out = std::slice::from_raw_parts_mut(result.cast::<u8>().add(4), len);
        let mut expect = first;
        let cursor = tree.range(
            Bound::Included(chunk_key(id, first).to_vec()),
            Bound::Included(chunk_key(id, last).to_vec()),
            Direction::Forward,
        );
        for item in cursor {
            let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
            let n = u32::from_be_bytes(k[4..8].try_into().unwrap());
            if n != expect {
                break;
            }
            let start = n as usize * CHUNK;
            let from = off.max(start);
            let to = (off + len).min(start + v.len());
            if from < to {
                out[from - off..to - off].copy_from_slice(&v[from - start..to - start]);
            }
            expect += 1;
        }
        if expect != last + 1 || (attrsize as usize) < off + len {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!(
                    "missing chunk number {expect} for toast value {id} in {}",
                    rel_name(toastrel)
                ),
            );
        }
    }
}

thread_local! {
    /// Toast values nothing refers to any more, to delete outside latches:
    /// those of versions pruned under a latch, and those stored for a new
    /// version that was never put in its tree (its UPDATE failed or its
    /// transaction aborted first). Each is (toast relation, value id,
    /// recovery-conflict horizon: see [`queue_deletion`]).
    static DOOMED: RefCell<Vec<(u32, u32, u32)>> = const { RefCell::new(Vec::new()) };
    /// Toast values stored for the new version this backend is about to
    /// put in a tree; moved to DOOMED when that does not happen.
    static UNPLACED: RefCell<Vec<(u32, u32)>> = const { RefCell::new(Vec::new()) };
}

/// Queues toast values of a pruned version (called under a leaf latch).
/// `horizon`: the newest transaction a snapshot that still sees the version
/// may count as running (its deleter or updater; 0 for a version no
/// snapshot ever saw). Pruning is not logged, so a hot standby keeps the
/// version, but the deletion of its values is: replay first cancels the
/// standby queries that might still read them (a conflict marker), as for
/// heap's pruning of toast tuples — instead of a "missing chunk" error.
pub fn queue_deletion(values: Vec<(u32, u32)>, horizon: u32) {
    DOOMED.with(|d| d.borrow_mut().extend(values.into_iter().map(|(r, v)| (r, v, horizon))));
}

thread_local! {
    static EXIT_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes sure values still queued when this backend exits (its last
/// change failed, or nothing changed after an abort) are deleted then: a
/// queue lives only in this process, and nothing else would ever find
/// them. Registered outside latches (registering can fail), after the
/// engine's own exit callback, so it runs before it (callbacks run
/// last-registered first).
fn delete_at_exit_too() {
    // SAFETY: reading a process global. Registered while exiting, the
    // callback would run after PostgreSQL's own (locks released).
    if unsafe { pg_sys::proc_exit_inprogress } || EXIT_CALLBACK.with(|c| c.replace(true)) {
        return;
    }
    // SAFETY: registering an exit callback with a plain function pointer.
    unsafe { pg_sys::before_shmem_exit(Some(delete_queued_at_exit), pg_sys::Datum::from(0usize)) };
}

/// At backend exit, as PostgreSQL's removal of temporary relations does:
/// any transaction left is aborted and a new one deletes the queued
/// values (a failure there ends the exit as a FATAL would; the values
/// then stay, as after a crash).
#[pg_guard]
unsafe extern "C-unwind" fn delete_queued_at_exit(_code: c_int, _arg: pg_sys::Datum) {
    doom_unplaced();
    let queued = DOOMED.with(|d| !d.borrow().is_empty());
    // SAFETY: reading a process global.
    if !queued || unsafe { pg_sys::MyDatabaseId } == pg_sys::InvalidOid {
        return;
    }
    // SAFETY: the sequence of `RemoveTempRelationsCallback`: this process
    // is connected to its database and runs no transaction after the abort.
    unsafe {
        pg_sys::AbortOutOfAnyTransaction();
        pg_sys::StartTransactionCommand();
        delete_doomed_now();
        pg_sys::CommitTransactionCommand();
    }
    let left = DOOMED.with(|d| d.borrow().len());
    if left > 0 {
        // Their toast relations were locked by another session (REINDEX,
        // say); nothing else knows these values, so say what stays.
        pgrx::log!("orioledb: {left} toast values left undeleted at exit (their toast relation was busy)");
    }
}

/// A new version is about to be formed: every toast value stored from now
/// on is recorded (by `save_value`, as soon as its chunks are in) until
/// [`placed`] confirms the version is in its tree; until then an ERROR
/// ("row is too big" after some values were stored, a deadlock), an abort
/// or [`unplaced`] dooms them. Heap leaves such chunks to VACUUM as dead
/// tuples; ours are unversioned, so nothing else would ever find them.
pub fn begin_version() {
    delete_at_exit_too();
    doom_unplaced();
}

/// Moves the values recorded since [`begin_version`] to the doomed ones.
fn doom_unplaced() {
    let work = UNPLACED.with(|u| std::mem::take(&mut *u.borrow_mut()));
    queue_deletion(work, 0);
}

/// The new version recorded since [`begin_version`] is in its tree.
pub fn placed() {
    UNPLACED.with(|u| u.borrow_mut().clear());
}

/// The new version recorded since [`begin_version`] will never be
/// stored: its values are deleted now.
pub fn unplaced() {
    doom_unplaced();
    delete_doomed_now();
}

/// This module's part of a transaction's (or subtransaction's) end
/// (`pg::xact`): see [`at_transaction_end`].
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    if matches!(e, Prepare | Commit | Abort | SubAbort { .. }) {
        at_transaction_end();
    }
}

/// Transaction end. At abort, values of a version that was never placed
/// join the doomed ones; doomed values stay queued for this backend's next
/// change, which deletes them with the toast relation locked (by OID: a
/// value id is not reused while any chunk of it exists), or for its exit.
pub fn at_transaction_end() {
    BACKED_OFF.with(|b| b.set(false));
    doom_unplaced();
    if DOOMED.with(|d| !d.borrow().is_empty()) {
        delete_at_exit_too();
    }
}

/// Deletes queued toast values. Runs outside every latch, in any
/// transaction: each toast relation is opened with a lock (and skipped if
/// it was dropped meanwhile), so its tree cannot go away under us. A toast
/// relation whose lock is not free at once keeps its values queued for this
/// backend's next change, its commit or its exit: the queue holds values of
/// any table this backend pruned, and a change of one table must not wait
/// for a REINDEX, TRUNCATE or VACUUM FULL of another table's toast relation
/// (nor fail under `lock_timeout`, nor deadlock with it); a SELECT's commit
/// neither. A rewrite drops the old toast tree, values and all, and a
/// REINDEX is over by the next try. Once a walk found a relation busy, the
/// changes after it leave the queue to the transaction's pre-commit
/// ([`delete_doomed_now`]): else every row of a long COPY would walk
/// (and put back) the whole queue.
pub fn delete_doomed() {
    if !BACKED_OFF.with(std::cell::Cell::get) {
        walk_doomed();
    }
}

/// [`delete_doomed`] without its back-off: at a transaction's pre-commit,
/// at exit, and for values of this backend's own unplaced version
/// ([`unplaced`]).
pub fn delete_doomed_now() {
    walk_doomed();
}

thread_local! {
    /// Set when a walk of the queue found a toast relation busy; cleared at
    /// transaction end (see [`delete_doomed`]).
    static BACKED_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One walk of the queue (see [`delete_doomed`]).
fn walk_doomed() {
    let work = DOOMED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    let mut taken = Taken { work, next: 0, deleting: false };
    let mut busy: Vec<u32> = Vec::new();
    let mut logged: Option<(orioledb_engine::TreeId, u32)> = None;
    while taken.next < taken.work.len() {
        let entry = taken.work[taken.next];
        // Once a relation's lock was busy, its other values are not tried
        // again in this walk (one lock-table probe per relation).
        if busy.contains(&entry.0) || !delete_value(entry, &mut logged, &mut taken.deleting) {
            if !busy.contains(&entry.0) {
                busy.push(entry.0);
            }
            // Straight back to the queue (taken, so not borrowed): an
            // ERROR later in the walk keeps it too.
            DOOMED.with(|d| d.borrow_mut().push(entry));
        }
        taken.deleting = false;
        taken.next += 1;
    }
    BACKED_OFF.with(|b| b.set(!busy.is_empty()));
}

/// The queue taken by [`delete_doomed`]: if an ERROR (an engine error, an
/// interrupt) ends the walk, the entries not yet tried go back to the
/// queue, and so does the current one unless its deletion had begun (an
/// entry whose delete fails again and again must not fail every later
/// change). Without this, the lost values would stay in their tree for
/// good: nothing else knows them.
struct Taken {
    work: Vec<(u32, u32, u32)>,
    next: usize,
    deleting: bool,
}

impl Drop for Taken {
    fn drop(&mut self) {
        let from = if self.deleting { self.next + 1 } else { self.next };
        if from < self.work.len() {
            let rest = self.work.split_off(from);
            DOOMED.with(|d| d.borrow_mut().extend(rest));
        }
    }
}

/// Deletes the chunks of one queued value; false when its toast relation's
/// lock was not free (the value stays queued). Sets `deleting` once the
/// relation is open and locked: an ERROR after that (a damaged tree, which
/// would fail again at every commit) gives the value up.
fn delete_value(
    (toastrelid, valueid, horizon): (u32, u32, u32),
    logged: &mut Option<(orioledb_engine::TreeId, u32)>,
    deleting: &mut bool,
) -> bool {
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    let oid = pg_sys::Oid::from(toastrelid);
    // SAFETY: a lock on an OID, dropped relation or not.
    if !unsafe { pg_sys::ConditionalLockRelationOid(oid, mode) } {
        return false;
    }
    // SAFETY: try_relation_open returns NULL for a dropped relation and
    // otherwise an open, locked one, closed below (the lock is kept to
    // transaction end, as for every relation a change touches).
    unsafe {
        let r = pg_sys::try_relation_open(oid, pg_sys::NoLock as pg_sys::LOCKMODE);
        if r.is_null() {
            // Dropped: no lock on an OID that names nothing.
            pg_sys::UnlockRelationOid(oid, mode);
            return true;
        }
        *deleting = true;
        let Some(tree) = crate::am::storage::trees::toast_tree(r) else {
            pg_sys::relation_close(r, pg_sys::NoLock as pg_sys::LOCKMODE);
            return true;
        };
        let keys: Vec<Vec<u8>> = tree
            .range(
                Bound::Included(chunk_key(valueid, 0).to_vec()),
                Bound::Included(chunk_key(valueid, u32::MAX).to_vec()),
                Direction::Forward,
            )
            .filter_map(|kv| kv.ok().map(|(k, _)| k))
            .collect();
        if horizon != 0 && !keys.is_empty() && *logged != Some((tree.id(), horizon)) {
            crate::pg::wal::log_conflict_for(r, horizon, tree.id());
            *logged = Some((tree.id(), horizon));
        }
        for k in keys {
            tree.modify(&k, |_| (Change::Delete, ()))
                .unwrap_or_else(|e| crate::pg::engine::report(e));
        }
        pg_sys::relation_close(r, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
    true
}

/// Copies the chunks of value `valueid` from toast tree `src` to `dst`
/// (VACUUM FULL / CLUSTER: the value keeps its id).
pub fn copy_value(src: &orioledb_engine::Tree, dst: &orioledb_engine::Tree, valueid: u32) {
    let cursor = src.range(
        Bound::Included(chunk_key(valueid, 0).to_vec()),
        Bound::Included(chunk_key(valueid, u32::MAX).to_vec()),
        Direction::Forward,
    );
    for item in cursor {
        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
        if u32::from_be_bytes(k[0..4].try_into().expect("chunk key")) != valueid {
            break;
        }
        dst.insert(&k, &v)
            .unwrap_or_else(|e| crate::pg::engine::report(e));
    }
}
