//! Writing an `orioledb_btree` index: its build, an entry per inserted row,
//! and VACUUM's removal of entries whose rows are gone.

use super::shape::{key_tid, shape_of, Shape};
use crate::pg::engine::report;
use orioledb_engine::page::{MAX_ITEM, MAX_KEY};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// Refuses what the index does not serve: a table of another access method,
/// another tablespace (tree ids know no tablespace, as for tables), and
/// temporary or unlogged tables (an unlogged index would have to be
/// emptied after a crash with its table, which only tables do here).
///
/// # Safety
/// Open relations.
unsafe fn check_target(heap: pg_sys::Relation, index: pg_sys::Relation) {
    crate::pg::require_preloaded();
    // SAFETY: per the contract.
    unsafe {
        let name = crate::pg::rel_name(index);
        if crate::pg::orioledb_relfile((*heap).rd_id).is_none() {
            crate::pg::error::error(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb_btree index \"{name}\" must be on an orioledb table"),
            )
            .hint("Use a btree index on tables of other access methods.")
            .raise();
        }
        if (*index).rd_node.spcNode != pg_sys::DEFAULTTABLESPACE_OID {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("orioledb_btree index \"{name}\" outside the default tablespace is not supported"),
            );
        }
        if (*(*index).rd_rel).relpersistence as u8 != pg_sys::RELPERSISTENCE_PERMANENT {
            not_permanent(index);
        }
    }
}

/// Raises 0A000 for an index of a temporary or unlogged table.
///
/// # Safety
/// `index` is an open relation.
unsafe fn not_permanent(index: pg_sys::Relation) -> ! {
    crate::pg::error::raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!(
            "orioledb_btree index \"{}\" on a temporary or unlogged table is not supported",
            // SAFETY: per the contract.
            unsafe { crate::pg::rel_name(index) }
        ),
    )
}

/// The value of an entry: the row's index tuple, as bytes.
///
/// # Safety
/// `values`/`nulls` hold one datum per index column, of their types.
unsafe fn entry_value(index: pg_sys::Relation, values: *mut pg_sys::Datum, nulls: *mut bool) -> Vec<u8> {
    // SAFETY: per the contract; the tuple is palloc'd and freed here.
    unsafe {
        let itup = pg_sys::index_form_tuple((*index).rd_att, values, nulls);
        let len = ((*itup).t_info as u32 & pg_sys::INDEX_SIZE_MASK) as usize;
        let v = std::slice::from_raw_parts(itup.cast::<u8>(), len).to_vec();
        pg_sys::pfree(itup.cast());
        v
    }
}

/// An ERROR (54000) for an entry the engine cannot store, as btree gives
/// for an index row larger than a third of a page.
///
/// # Safety
/// `index` is an open relation.
unsafe fn check_size(index: pg_sys::Relation, key: &[u8], value: &[u8]) {
    if key.len() <= MAX_KEY && key.len() + value.len() <= MAX_ITEM {
        return;
    }
    crate::pg::error::error(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "index row size {} exceeds orioledb_btree maximum {} for index \"{}\"",
            key.len() + value.len(),
            MAX_ITEM.min(MAX_KEY + value.len()),
            // SAFETY: per the contract.
            unsafe { crate::pg::rel_name(index) }
        ),
    )
    .detail(format!("Key columns take at most {MAX_KEY} bytes encoded; a row at most {MAX_ITEM}."))
    .hint("Values larger than 1/3 of a buffer page cannot be indexed.")
    .raise()
}

/// One entry of `index`: its key and value, size-checked.
///
/// # Safety
/// As [`entry_value`]; `tid` names the row.
unsafe fn entry(
    shape: &Shape,
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    nulls: *mut bool,
    tid: &pg_sys::ItemPointerData,
) -> (Vec<u8>, Vec<u8>) {
    // SAFETY: per the contract.
    unsafe {
        let key = shape.entry_key(values, nulls, tid);
        // Readers take the columns from the key when the value is empty.
        let value = if shape.key_only { Vec::new() } else { entry_value(index, values, nulls) };
        check_size(index, &key, &value);
        (key, value)
    }
}

/// A build's entries not yet in the tree. A tree in byte order sorts them
/// all with PostgreSQL's tuplesort (spilling to disk beyond
/// `maintenance_work_mem`) as bytea datums `key ‖ value ‖ key length`
/// (no key is a prefix of another: the column encodings are prefix-free
/// and a TID ends every key, so bytea order is key order), and then
/// appends them leaf after leaf; a tree compared by a locale sorts in
/// memory, in batches of `maintenance_work_mem`. Invariant: `sort` is
/// non-null exactly for a byte-order tree until [`Pending::finish`];
/// `bytes` is the sum of the batch's key and value lengths.
struct Pending {
    shape: std::rc::Rc<Shape>,
    sort: *mut pg_sys::Tuplesortstate,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: usize,
    budget: usize,
    tuples: f64,
}

/// Entries written to the tree at a time once sorted.
const RUN_BYTES: usize = 4 << 20;

impl Pending {
    fn new(shape: std::rc::Rc<Shape>) -> Pending {
        // SAFETY: reading a GUC of this backend.
        let budget_kb = unsafe { pg_sys::maintenance_work_mem };
        let sort = if shape.bytewise() {
            // SAFETY: the type cache holds bytea's btree `<`; the sort's
            // memory is a context of its own under the current one.
            unsafe {
                let tc = pg_sys::lookup_type_cache(pg_sys::BYTEAOID, pg_sys::TYPECACHE_LT_OPR as i32);
                pg_sys::tuplesort_begin_datum(
                    pg_sys::BYTEAOID,
                    (*tc).lt_opr,
                    pg_sys::InvalidOid,
                    false,
                    budget_kb,
                    std::ptr::null_mut(),
                    pg_sys::TUPLESORT_NONE as i32,
                )
            }
        } else {
            std::ptr::null_mut()
        };
        Pending {
            shape,
            sort,
            entries: Vec::new(),
            bytes: 0,
            budget: budget_kb as usize * 1024,
            tuples: 0.0,
        }
    }

    /// Takes one entry.
    fn push(&mut self, (key, value): (Vec<u8>, Vec<u8>)) {
        self.tuples += 1.0;
        if self.sort.is_null() {
            self.bytes += key.len() + value.len() + 64;
            self.entries.push((key, value));
            if self.bytes >= self.budget {
                self.write_sorted();
            }
            return;
        }
        let len = pg_sys::VARHDRSZ + key.len() + value.len() + 2;
        // SAFETY: a palloc'd varlena of `len` bytes, filled in full; the
        // sort copies it.
        unsafe {
            let p = pg_sys::palloc(len) as *mut u8;
            pgrx::varlena::set_varsize_4b(p.cast(), len as i32);
            let body = std::slice::from_raw_parts_mut(p.add(pg_sys::VARHDRSZ), len - pg_sys::VARHDRSZ);
            body[..key.len()].copy_from_slice(&key);
            body[key.len()..key.len() + value.len()].copy_from_slice(&value);
            body[key.len() + value.len()..].copy_from_slice(&(key.len() as u16).to_le_bytes());
            pg_sys::tuplesort_putdatum(self.sort, pg_sys::Datum::from(p), false);
            pg_sys::pfree(p.cast());
        }
    }

    /// Writes the batch in key order: each run of entries that falls into
    /// one leaf goes in under one descent.
    fn write_sorted(&mut self) {
        if self.sort.is_null() {
            let cmp = self.shape.tree.cmp();
            self.entries.sort_unstable_by(|a, b| cmp.cmp(&a.0, &b.0));
        }
        let items: Vec<(&[u8], &[u8])> = self.entries.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let mut from = 0;
        while from < items.len() {
            match self.shape.tree.insert_run(&items[from..]).unwrap_or_else(|e| report(e)) {
                // A row the build met twice (a table scan that returned a
                // TID again): one entry is enough.
                Some(at) => from += at + 1,
                None => break,
            }
        }
        self.entries.clear();
        self.bytes = 0;
    }

    /// Writes every entry taken (the sort's in order, in runs).
    fn finish(&mut self) {
        if self.sort.is_null() {
            self.write_sorted();
            return;
        }
        // SAFETY: the sort was begun by `new` and is ended here once; each
        // datum it hands out is a palloc'd bytea of `push`'s layout.
        unsafe {
            pg_sys::tuplesort_performsort(self.sort);
            let (mut d, mut null) = (pg_sys::Datum::from(0), false);
            while pg_sys::tuplesort_getdatum(self.sort, true, &mut d, &mut null, std::ptr::null_mut()) {
                let v = d.cast_mut_ptr::<pg_sys::varlena>();
                let body = std::slice::from_raw_parts(
                    pgrx::varlena::vardata_any(v).cast::<u8>(),
                    pgrx::varlena::varsize_any_exhdr(v),
                );
                let (rest, len) = body.split_at(body.len() - 2);
                let klen = u16::from_le_bytes([len[0], len[1]]) as usize;
                self.bytes += rest.len();
                self.entries.push((rest[..klen].to_vec(), rest[klen..].to_vec()));
                pg_sys::pfree(v.cast());
                if self.bytes >= RUN_BYTES {
                    self.write_sorted();
                }
            }
            // The last run, still known to be sorted.
            self.write_sorted();
            pg_sys::tuplesort_end(self.sort);
            self.sort = std::ptr::null_mut();
        }
    }
}

/// `IndexBuildCallback` of [`ambuild`].
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn build_callback(
    index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _alive: bool,
    state: *mut std::ffi::c_void,
) {
    // SAFETY: `state` is the build's Pending, alive for the scan; the
    // table AM passes the row's TID and one datum per index column.
    unsafe {
        let p = &mut *(state as *mut Pending);
        let e = entry(&p.shape, index, values, isnull, &*tid);
        p.push(e);
    }
}

/// `ambuild`: a new tree for the index's file, filled in key order from a
/// scan of the table ([`Pending`]).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    // SAFETY: PostgreSQL passes open relations, locked for the build.
    unsafe {
        check_target(heap, index);
        // Refused layouts raise their ERROR before any tree exists.
        let (desc, _) = super::shape::layout_of(index);
        let level = super::options::level_of(index);
        let tree = crate::am::storage::trees::new_index_tree(index, level);
        tree.upsert(crate::am::layout::table::DESC_KEY, &desc.encode())
            .unwrap_or_else(|e| report(e));
        let mut pending = Pending::new(shape_of(index));
        let heap_tuples = pg_sys::table_index_build_scan(
            heap,
            index,
            info,
            true,
            true,
            Some(build_callback),
            (&raw mut pending).cast(),
            std::ptr::null_mut(),
        );
        pending.finish();
        let result = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBuildResult>()) as *mut pg_sys::IndexBuildResult;
        (*result).heap_tuples = heap_tuples;
        (*result).index_tuples = pending.tuples;
        result
    }
}

/// `ambuildempty`: never called, since indexes of unlogged tables are
/// refused (there is no init fork to fill).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    // SAFETY: PostgreSQL passes an open index.
    unsafe { not_permanent(index) }
}

/// `aminsert`: the entry for a new row (or a row version whose indexed
/// columns changed). Never a uniqueness check: the method is not unique.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check: pg_sys::IndexUniqueCheck::Type,
    _unchanged: bool,
    _info: *mut pg_sys::IndexInfo,
) -> bool {
    // SAFETY: PostgreSQL passes the open index, the row's TID and one
    // datum per index column.
    unsafe {
        let shape = shape_of(index);
        let (key, value) = entry(&shape, index, values, isnull, &*tid);
        // An entry already there (CREATE INDEX CONCURRENTLY's validation
        // inserts only TIDs it did not find, so only a retry) stays.
        shape.tree.insert(&key, &value).unwrap_or_else(|e| report(e));
    }
    false
}

/// Entries deleted at a time while VACUUM walks the index.
const DELETE_BATCH: usize = 4096;

/// `ambulkdelete`: removes every entry whose TID `callback` calls dead,
/// counting the rest.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    // SAFETY: PostgreSQL passes the open index in `info` and a callback
    // that takes a TID and `state`.
    unsafe {
        let stats = stats_or_new(stats);
        let shape = shape_of((*info).index);
        let callback = callback.expect("ambulkdelete gets a callback");
        let mut doomed: Vec<Vec<u8>> = Vec::new();
        let mut kept = 0.0;
        let delete = |doomed: &mut Vec<Vec<u8>>| {
            for k in doomed.drain(..) {
                shape.tree.delete(&k).unwrap_or_else(|e| report(e));
            }
        };
        let mut walk = orioledb_engine::cursor::LeafWalk::new(shape.tree.range(
            std::ops::Bound::Excluded(crate::am::layout::table::DESC_KEY.to_vec()),
            std::ops::Bound::Unbounded,
            orioledb_engine::Direction::Forward,
        ));
        let mut cost = crate::pg::vacuum_cost::CostMeter::default();
        let mut leaf = 0;
        while let Some(item) = walk.next() {
            let (k, _) = item.unwrap_or_else(|e| report(e));
            let mut tid = key_tid(k);
            // The callback may raise an ERROR (a sort spilling to disk
            // while CREATE INDEX CONCURRENTLY validates): guarded.
            if pg_sys::ffi::pg_guard_ffi_boundary(|| callback(&mut tid, state)) {
                doomed.push(k.to_vec());
                (*stats).tuples_removed += 1.0;
            } else {
                kept += 1.0;
            }
            if doomed.len() >= DELETE_BATCH {
                delete(&mut doomed);
            }
            if walk.leaf().0 != leaf {
                leaf = walk.leaf().0;
                cost.charge_and_pause(1);
            }
        }
        delete(&mut doomed);
        (*stats).num_index_tuples = kept;
        (*stats).num_pages = shape.tree.approx_pages() as pg_sys::BlockNumber;
        stats
    }
}

/// `amvacuumcleanup`: the index's size for `pg_class` (entries counted by
/// a bulk delete of this VACUUM, else the table's estimate).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    // SAFETY: PostgreSQL passes the open index in `info`.
    unsafe {
        if (*info).analyze_only {
            return stats;
        }
        let had = !stats.is_null();
        let stats = stats_or_new(stats);
        if !had {
            (*stats).num_index_tuples = (*info).num_heap_tuples;
            (*stats).estimated_count = (*info).estimated_count;
        }
        (*stats).num_pages = shape_of((*info).index).tree.approx_pages() as pg_sys::BlockNumber;
        stats
    }
}

/// `stats`, or a new zeroed result when null.
///
/// # Safety
/// `stats` is null or a valid result.
unsafe fn stats_or_new(stats: *mut pg_sys::IndexBulkDeleteResult) -> *mut pg_sys::IndexBulkDeleteResult {
    if !stats.is_null() {
        return stats;
    }
    // SAFETY: a zeroed palloc'd result, as PostgreSQL's AMs make it.
    unsafe { pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexBulkDeleteResult>()).cast() }
}
