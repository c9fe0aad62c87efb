//! Keying a table's tree by its primary key.
//!
//! A primary-key index is built on an empty tree when a table is created
//! with its key (CREATE TABLE, a partition created from a parent with one,
//! TRUNCATE's rebuild): the tree then takes the key's descriptor in place.
//! A key added to a table that has rows (ALTER TABLE ... ADD PRIMARY KEY,
//! pgbench's way, or a rewrite that rebuilds the key's index) is applied at
//! the end of the utility statement by re-keying: the table gets a new
//! relation file (transactional, like a rewrite), and every version is
//! copied into the new tree under its primary-key position, keeping its row
//! id, so every index stays valid as it is.

use crate::am::layout::hot;
use crate::am::layout::key_desc::KeyDesc;
use crate::am::rows::{self, table_of};
use crate::am::layout::table::Table;
use orioledb_engine::version;
use orioledb_engine::Direction;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ops::Bound;

thread_local! {
    /// Tables whose primary key was built over rows in the running utility
    /// statement. Invariant: empty outside a transaction.
    static PENDING: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
}

thread_local! {
    /// Set while a re-key gives the table a new file: the horizons
    /// (`relfrozenxid`, `relminmxid`) the new file must keep, since the
    /// versions are copied unchanged.
    static KEEP_HORIZONS: std::cell::Cell<Option<(pg_sys::TransactionId, pg_sys::MultiXactId)>> =
        const { std::cell::Cell::new(None) };
}

/// The horizons a new relation file must keep (see [`KEEP_HORIZONS`]).
pub fn kept_horizons() -> Option<(pg_sys::TransactionId, pg_sys::MultiXactId)> {
    KEEP_HORIZONS.with(|k| k.get())
}

fn has_versions(t: &Table) -> bool {
    t.versions(Bound::Unbounded, Bound::Unbounded, Direction::Forward)
        .next()
        .is_some()
}

/// Whether this backend holds `rel` alone (no other session can read or
/// write it until we commit).
///
/// # Safety
/// `rel` is an open relation.
unsafe fn held_exclusively(rel: pg_sys::Relation) -> bool {
    // SAFETY: per the contract.
    unsafe { pg_sys::CheckRelationLockedByMe(rel, pg_sys::AccessExclusiveLock as _, false) }
}

/// A primary-key index `index` is being built on `table`.
///
/// # Safety
/// Open relations; `index` is an index of `table`.
pub unsafe fn primary_index_built(table: pg_sys::Relation, index: pg_sys::Relation) {
    // SAFETY: per the contract.
    unsafe {
        let want = KeyDesc::for_index(table, index);
        let mut t = table_of(table);
        if t.desc() == want.as_ref() {
            return;
        }
        // In place only in a tree no other session can have opened: the
        // descriptor write is not undone by a rollback, and other sessions
        // keep their handles until a (committed) invalidation reaches them
        // (rows::table_of). An empty table created earlier is re-keyed into
        // a new file like any other.
        let created_here = (*table).rd_createSubid != 0
            || (*table).rd_firstRelfilenodeSubid != 0;
        if !has_versions(&t) && created_here {
            t.set_layout(want);
            rows::forget_tree(t.tree.id());
            return;
        }
        let oid = (*table).rd_id;
        PENDING.with(|p| {
            let mut p = p.borrow_mut();
            if !p.contains(&oid) {
                p.push(oid);
            }
        });
    }
}

/// The primary key of `table` is being dropped: the table goes back to
/// row-id order at the end of the statement (if it is still there and
/// held exclusively).
pub fn key_dropped(table: pg_sys::Oid) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if !p.contains(&table) {
            p.push(table);
        }
    });
}

/// Whether a re-key waits for the end of the statement.
pub fn has_pending() -> bool {
    PENDING.with(|p| !p.borrow().is_empty())
}

/// Forgets pending work at a transaction's end (`pg::xact`).
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    if matches!(e, Prepare | Commit | Abort) {
        PENDING.with(|p| p.borrow_mut().clear());
    }
}

/// Re-keys the tables whose primary key was built over rows, at the end of
/// a utility statement that succeeded. A table this backend does not hold
/// exclusively (REINDEX takes a weaker lock) stays as it is: correct, just
/// not ordered by its key.
pub fn run_pending() {
    let work = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if work.is_empty() {
        return;
    }
    // SAFETY: the tables were locked by the statement that built their
    // index, and stay locked until the transaction ends; opening with
    // NoLock only looks them up again. CCI makes the statement's catalog
    // changes (the new index) visible to the relcache first.
    unsafe {
        pg_sys::CommandCounterIncrement();
        for oid in work {
            let rel = pg_sys::RelationIdGetRelation(oid);
            if rel.is_null() {
                continue;
            }
            if held_exclusively(rel) {
                let want = KeyDesc::for_table(rel);
                if table_of(rel).desc() != want.as_ref() {
                    // Like ALTER TABLE: not under an open cursor or pending
                    // trigger events of this session.
                    pg_sys::CheckTableNotInUse(rel, c"ALTER TABLE".as_ptr());
                    rekey(rel, want);
                }
            }
            pg_sys::RelationClose(rel);
        }
    }
}

/// Moves every version of `rel` into a new tree keyed by `desc`.
///
/// # Safety
/// `rel` is an open orioledb table this backend holds exclusively.
unsafe fn rekey(rel: pg_sys::Relation, desc: Option<KeyDesc>) {
    // SAFETY: per the contract; tuples are built in a context reset per row.
    unsafe {
        let old = table_of(rel);
        let next_id = old.tree.next_id();
        let keys = KeysOf::new(rel, desc.clone());
        // Every version's key first: a key too long to key the tree (which
        // the btree accepts) leaves the table in row-id order, as a type
        // without an encoding does, instead of failing the statement.
        // They are kept for the copy while they fit in
        // maintenance_work_mem (computed again otherwise).
        let mut kept = KeptKeys::new(pg_sys::maintenance_work_mem as usize * 1024, true);
        let mut keyable = true;
        // From the end: the copy then reads from the start, which this
        // walk read last and is still in the pool (a table larger than the
        // pool was read from the file twice in full).
        old.for_each_version_backward(|k, v| {
            pgrx::check_for_interrupts!();
            let id = old.id_of(k);
            match keys.of(id, v) {
                Ok(prefix) => kept.push(id, &prefix),
                Err(_) => keyable = false,
            }
            keyable
        });
        if !keyable {
            return;
        }
        let horizons = ((*(*rel).rd_rel).relfrozenxid, (*(*rel).rd_rel).relminmxid);
        KEEP_HORIZONS.with(|k| k.set(Some(horizons)));
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                KEEP_HORIZONS.with(|k| k.set(None));
            }
        }
        let reset = Reset;
        pg_sys::RelationSetNewRelfilenode(rel, (*(*rel).rd_rel).relpersistence);
        drop(reset);
        // Only the table's own file is new (its toast relation and indexes
        // keep theirs: row ids did not change). PostgreSQL takes a relation
        // whose file is new in this subtransaction to have all-new storage
        // and would TRUNCATE it in place — emptying the toast table and the
        // indexes beyond what ROLLBACK can restore. Not claiming that keeps
        // TRUNCATE on its transactional path.
        (*rel).rd_newRelfilenodeSubid = 0;
        let new = copy_target(rel, desc, next_id);
        // The map entries first, then the versions: each pass appends in
        // its own key range (in key order when the rows were loaded so), so
        // leaves fill as an ordered load fills them.
        let source = Source {
            from: &old,
            keys: &keys,
            kept: &kept,
        };
        if new.desc().is_some() {
            copy_pass(rel, &source, &new, false);
        }
        let had_chains = copy_pass(rel, &source, &new, true);
        if had_chains {
            let mut params = pg_sys::ReindexParams::default();
            pg_sys::CommandCounterIncrement();
            pg_sys::reindex_relation((*rel).rd_id, 0, &mut params);
        }
    }
}

/// The empty tree of `rel` (a new relation file) made ready to take a
/// copy of a table's versions under their row ids: keyed by `desc` (row
/// id when None), with row ids below `next_id` reserved, so the copied ids
/// stay what the indexes hold and new rows continue above.
///
/// # Safety
/// `rel` is an open orioledb table whose tree is new and empty.
unsafe fn copy_target(rel: pg_sys::Relation, desc: Option<KeyDesc>, next_id: u64) -> Table {
    // SAFETY: per the contract.
    unsafe {
        let mut t = table_of(rel);
        t.set_layout(desc);
        rows::forget_tree(t.tree.id());
        let t = table_of(rel);
        if next_id > 0 {
            t.tree
                .alloc_ids(next_id)
                .unwrap_or_else(|e| crate::pg::engine::report(e));
        }
        t
    }
}

/// Stores a copied version in `to` (the tree of `rel`'s copy); a row id
/// already there means the source held it twice.
///
/// # Safety
/// `rel` is an open relation (named in the error).
unsafe fn copy_in(rel: pg_sys::Relation, to: &Table, id: u64, prefix: &[u8], v: &[u8]) {
    if !to.insert(id, prefix, v) {
        // SAFETY: per the contract.
        unsafe { appears_twice(rel, id) };
    }
}

/// The ERROR for a row id a copy's source holds twice.
///
/// # Safety
/// `rel` is an open relation.
unsafe fn appears_twice(rel: pg_sys::Relation, id: u64) -> ! {
    crate::pg::error::raise(
        pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!(
            // SAFETY: per the contract.
            "orioledb: row id {id} of table \"{}\" appears twice",
            unsafe { crate::pg::rel_name(rel) }
        ),
    )
}

/// One pass of a re-key's copy from `from` into `to`, in batches: the
/// row-id map entries (`versions` false), or the versions, whose map
/// entries are in. HOT chains (am::layout::hot) do not survive a new key: their
/// members are copied as ordinary versions; returns whether there were
/// any (then every index must be rebuilt so that each gets its own
/// entries). A row id met twice is an ERROR.
///
/// # Safety
/// `rel` is the open relation of `to` (named in the error).
// Long because the batch buffer and its flush are closures over one set of
// locals; split, they would need a struct of their own for no reader's gain.
unsafe fn copy_pass(rel: pg_sys::Relation, source: &Source, to: &Table, versions: bool) -> bool {
    const BATCH_BYTES: usize = 4 << 20;
    let mut had_chains = false;
    // Rows as (row id, key prefix, value) ranges of one buffer: a batch
    // holds tens of thousands of rows, and two vectors each were a fifth
    // of the copy's time in the allocator.
    let mut bytes: Vec<u8> = Vec::new();
    let mut rows: Vec<(u64, std::ops::Range<usize>, std::ops::Range<usize>)> = Vec::new();
    let flush = |bytes: &mut Vec<u8>, rows: &mut Vec<_>| {
        let batch: Vec<(u64, &[u8], &[u8])> = rows
            .iter()
            .map(|(id, p, v): &(u64, std::ops::Range<usize>, std::ops::Range<usize>)| {
                (*id, &bytes[p.clone()], &bytes[v.clone()])
            })
            .collect();
        let taken = if versions {
            to.insert_versions(&batch)
        } else {
            to.insert_map_entries(&batch)
        };
        if let Some(id) = taken {
            // SAFETY: per the contract.
            unsafe { appears_twice(rel, id) };
        }
        drop(batch);
        rows.clear();
        bytes.clear();
    };
    let mut push = |id: u64, prefix: &[u8], value: &[u8]| {
        let p = bytes.len()..bytes.len() + prefix.len();
        bytes.extend_from_slice(prefix);
        let v = bytes.len()..bytes.len() + value.len();
        bytes.extend_from_slice(value);
        rows.push((id, p, v));
        if bytes.len() + 16 * rows.len() >= BATCH_BYTES {
            flush(&mut bytes, &mut rows);
        }
    };
    let kept = source.kept;
    if !versions && kept.complete {
        // The map entries need only the keys kept: no read of the table.
        for n in 0..kept.ids.len() {
            pgrx::check_for_interrupts!();
            let (id, prefix) = kept.get(n);
            push(id, prefix, &[]);
        }
    } else {
        let mut n = 0;
        source.from.for_each_version(|k, v| {
            pgrx::check_for_interrupts!();
            let id = source.from.id_of(k);
            let computed;
            let prefix = match (kept.complete && n < kept.ids.len()).then(|| kept.get(n)) {
                // The same walk of the same tree (held exclusively) as
                // the one that kept the keys: the n-th version again.
                Some((kid, p)) if kid == id => p,
                _ => {
                    computed = source.keys.of(id, v).unwrap_or_default();
                    &computed[..]
                }
            };
            n += 1;
            if !versions {
                push(id, prefix, &[]);
                return true;
            }
            let h = version::Header::decode(v, id);
            had_chains |= h.is_some_and(|h| hot::heap_only(&h));
            // Versions outside HOT chains (all of a fresh load) are copied
            // as they are, without a vector of their own.
            if h.is_some_and(|h| version::has_hot_marks(&h)) {
                push(id, prefix, &version::without_hot(v.to_vec()));
            } else {
                push(id, prefix, v);
            }
            true
        });
    }
    drop(push);
    flush(&mut bytes, &mut rows);
    had_chains
}

/// Where a re-key's copy reads: the table, its key computation, and the
/// keys the check pass kept.
struct Source<'a> {
    from: &'a Table,
    keys: &'a KeysOf,
    kept: &'a KeptKeys,
}

/// The key prefixes of a table's versions in the order a walk of the tree
/// meets them (from its end when `backward`), packed, kept up to a memory
/// budget. Invariant: `ends[n]` is where the n-th prefix kept ends in
/// `bytes`, `ids[n]` its version's row id; `complete` until a push went
/// over the budget (then nothing more is kept and the keys are computed
/// again).
struct KeptKeys {
    ids: Vec<u64>,
    ends: Vec<u32>,
    bytes: Vec<u8>,
    budget: usize,
    complete: bool,
    backward: bool,
}

impl KeptKeys {
    fn new(budget: usize, backward: bool) -> KeptKeys {
        KeptKeys {
            backward,
            ids: Vec::new(),
            ends: Vec::new(),
            bytes: Vec::new(),
            budget,
            complete: true,
        }
    }

    fn push(&mut self, id: u64, prefix: &[u8]) {
        if !self.complete {
            return;
        }
        let used = self.bytes.len() + self.ids.len() * 12 + prefix.len() + 12;
        if used > self.budget || self.bytes.len() + prefix.len() > u32::MAX as usize {
            *self = KeptKeys {
                complete: false,
                ..KeptKeys::new(0, false)
            };
            return;
        }
        self.bytes.extend_from_slice(prefix);
        self.ends.push(self.bytes.len() as u32);
        self.ids.push(id);
    }

    /// The n-th version's row id and prefix in a forward walk (`n` below
    /// the count kept), whichever way the keys were kept.
    fn get(&self, n: usize) -> (u64, &[u8]) {
        let n = if self.backward { self.ids.len() - 1 - n } else { n };
        let start = if n == 0 { 0 } else { self.ends[n - 1] as usize };
        (self.ids[n], &self.bytes[start..self.ends[n] as usize])
    }
}

/// Computes versions' key prefixes under a descriptor. Invariant: `cxt` is
/// a memory context of its own, reset after every row and deleted on drop.
struct KeysOf {
    rel: pg_sys::Relation,
    desc: Option<KeyDesc>,
    cxt: pg_sys::MemoryContext,
    values: std::cell::RefCell<(Vec<pg_sys::Datum>, Vec<bool>)>,
}

impl KeysOf {
    /// # Safety
    /// `rel` is an open relation that outlives the value.
    unsafe fn new(rel: pg_sys::Relation, desc: Option<KeyDesc>) -> KeysOf {
        // SAFETY: per the contract.
        unsafe {
            let natts = (*(*rel).rd_att).natts as usize;
            KeysOf {
                rel,
                desc,
                cxt: pg_sys::AllocSetContextCreateExtended(
                    pg_sys::CurrentMemoryContext,
                    c"orioledb re-key".as_ptr(),
                    pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
                ),
                values: std::cell::RefCell::new((
                    vec![pg_sys::Datum::from(0usize); natts],
                    vec![true; natts],
                )),
            }
        }
    }

    /// The key prefix of version `v` (row id `id`); Err if too long, or if
    /// the version would not fit beside it once it gets its full header
    /// (a row formed for a shorter key, and stored with the short header,
    /// could then never be deleted, updated or locked).
    fn of(&self, id: u64, v: &[u8]) -> Result<Vec<u8>, usize> {
        let Some(d) = &self.desc else {
            return Ok(Vec::new());
        };
        let (values, nulls) = &mut *self.values.borrow_mut();
        // SAFETY: the relation is open (constructor contract); the tuple and
        // any detoasted values live in our context, reset right after.
        unsafe {
            let prev = pg_sys::MemoryContextSwitchTo(self.cxt);
            rows::decode(self.rel, id, v);
            let tup = rows::build_tuple(v, id, (*self.rel).rd_id, self.cxt);
            pg_sys::heap_deform_tuple(tup, (*self.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
            let p = d.try_prefix(values, nulls);
            pg_sys::MemoryContextSwitchTo(prev);
            pg_sys::MemoryContextReset(self.cxt);
            let p = p?;
            if version::full_len(v) > crate::am::layout::table::keyed_max_value(p.len()) {
                return Err(p.len());
            }
            Ok(p)
        }
    }
}

impl Drop for KeysOf {
    fn drop(&mut self) {
        // SAFETY: our own context, not current (every use switched back).
        unsafe { pg_sys::MemoryContextDelete(self.cxt) };
    }
}

/// VACUUM FULL and CLUSTER (`relation_copy_for_cluster`): copies every
/// version of `old` that some snapshot may still see into `new` (the
/// transient table PostgreSQL swaps in afterwards), under the same row id
/// and in the same layout, so update chains stay intact; versions dead to
/// everyone stay behind. Their toast values are copied into `new`'s toast
/// tree under the same value ids: PostgreSQL swaps the toast relations by
/// content when both tables have one, and the pointers name the old toast
/// relation's OID, which then owns the new tree. The result is a compact
/// tree (the old file's free and copy-on-write pages are left behind).
///
/// CLUSTER on a table stored in row-id order rewrites it in the index's
/// order under new row ids (`cluster_by_index`), so later sequential scans
/// return that order, as on heap. A primary-key-ordered table's order is
/// its key: CLUSTER on its own key is a compacting copy, on another index
/// 0A000.
///
/// # Safety
/// Open relations locked AccessExclusive by CLUSTER / VACUUM FULL;
/// `old_index` NULL or an index of `old`.
pub unsafe fn copy_for_cluster(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    old_index: pg_sys::Relation,
    use_sort: bool,
    oldest_xmin: pg_sys::TransactionId,
    counts: (&mut f64, &mut f64, &mut f64),
) {
    use orioledb_engine::version::{Hints, VacuumState, Xid};
    // SAFETY: per the contract.
    unsafe {
        let (from, reorder) = cluster_source(old, new, old_index);
        let to = if reorder {
            copy_target(new, None, 0)
        } else {
            copy_target(new, from.desc().cloned(), from.tree.next_id())
        };
        let toast_trees = toast_tree_pair(old, new);
        let removable = |x: Xid| pg_sys::TransactionIdPrecedes(x.into(), oldest_xmin);
        let (num_tuples, vacuumed, recently_dead) = counts;
        // Whether a version survives, counted as CLUSTER reports them; its
        // toast values are copied when it does.
        let mut keep = |id: u64, v: &[u8]| -> bool {
            let h = rows::decode(old, id, v);
            match version::vacuum_state(&h, &rows::PgXacts, &removable, &mut Hints::default()) {
                VacuumState::Dead => {
                    *vacuumed += 1.0;
                    return false;
                }
                VacuumState::RecentlyDead => *recently_dead += 1.0,
                _ => *num_tuples += 1.0,
            }
            if let Some((src, dst)) = &toast_trees {
                for (_, valueid) in version::tail_and_toast(&h, v).1 {
                    crate::am::toast::copy_value(src, dst, valueid);
                }
            }
            true
        };
        if reorder {
            cluster_by_index(old, &from, &to, old_index, use_sort, &mut keep);
            return;
        }
        for item in from.versions(Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
            pgrx::check_for_interrupts!();
            let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
            let id = from.id_of(&k);
            if keep(id, &v) {
                // PostgreSQL rebuilds every index after this copy, so each
                // version gets entries of its own: HOT chains (am::layout::hot)
                // end here.
                copy_in(old, &to, id, from.prefix_of(&k), &version::without_hot(v));
            }
        }
    }
}

/// The table [`copy_for_cluster`] copies from `old` into `new`, and whether
/// it reorders its rows (CLUSTER of a table in row-id order on
/// `old_index`) rather than copying them in their order. What it cannot do
/// is refused
/// (0A000): a toast relation on its own, CLUSTER of a keyed table on
/// another index than its key, and a table whose toastable columns were
/// all dropped (its new relation has no toast relation for the values).
///
/// # Safety
/// As `copy_for_cluster`.
unsafe fn cluster_source(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
    old_index: pg_sys::Relation,
) -> (Table, bool) {
    // SAFETY: per the contract.
    unsafe {
        let name = crate::pg::rel_name(old);
        if crate::pg::is_toast(old) {
            // Chunks, not versions: rewritten with the table that owns them.
            crate::pg::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!(
                    "orioledb: VACUUM FULL of toast relation \"{name}\" is not supported yet; VACUUM FULL its table"
                ),
            );
        }
        let from = table_of(old);
        let mut reorder = false;
        if !old_index.is_null() {
            let keyed_by_it = (*(*old_index).rd_index).indisprimary && from.desc().is_some();
            reorder = from.desc().is_none();
            if !keyed_by_it && !reorder {
                crate::pg::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    format!(
                        "orioledb: CLUSTER of table \"{name}\" on an index other than its primary key is not supported yet"
                    ),
                );
            }
        }
        let old_toast = (*(*old).rd_rel).reltoastrelid;
        let new_toast = (*(*new).rd_rel).reltoastrelid;
        if old_toast != pg_sys::InvalidOid && new_toast == pg_sys::InvalidOid {
            crate::pg::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!(
                    "orioledb: VACUUM FULL and CLUSTER of table \"{name}\" whose toastable columns were all dropped are not supported yet"
                ),
            );
        }
        (from, reorder)
    }
}

/// The toast trees of `old` and `new` when `old`'s has one (it may hold
/// only deleted values): the new one is made for the copy.
///
/// # Safety
/// Open relations.
unsafe fn toast_tree_pair(
    old: pg_sys::Relation,
    new: pg_sys::Relation,
) -> Option<(orioledb_engine::Tree, orioledb_engine::Tree)> {
    // SAFETY: per the contract.
    unsafe {
        let old_toast = (*(*old).rd_rel).reltoastrelid;
        let new_toast = (*(*new).rd_rel).reltoastrelid;
        if old_toast == pg_sys::InvalidOid {
            return None;
        }
        let o = pg_sys::RelationIdGetRelation(old_toast);
        let trees = crate::am::storage::trees::toast_tree(o).map(|src| {
            let n = pg_sys::RelationIdGetRelation(new_toast);
            let dst = crate::am::storage::trees::create_toast_tree(n);
            pg_sys::RelationClose(n);
            (src, dst)
        });
        pg_sys::RelationClose(o);
        trees
    }
}

/// CLUSTER of a row-id-ordered table: the versions in `index` order, each
/// under the next new row id. With `use_sort` (PostgreSQL's choice for a
/// btree, as for heap) the surviving versions go through the same cluster
/// tuplesort heap's CLUSTER uses, fed in row-id order, so equal keys come
/// out as on heap; otherwise an index scan under SnapshotAny gives the
/// order, then the versions the index did not return follow in row-id
/// order. An update chain's link would name an old row id, so every copy
/// is its own chain end (`ctid` = its new id): nothing can follow such a
/// link across the rewrite, which holds ACCESS EXCLUSIVE throughout.
///
/// # Safety
/// As `copy_for_cluster`; `to` is the new table's empty tree.
unsafe fn cluster_by_index(
    old: pg_sys::Relation,
    from: &Table,
    to: &Table,
    index: pg_sys::Relation,
    use_sort: bool,
    keep: &mut dyn FnMut(u64, &[u8]) -> bool,
) {
    use orioledb_engine::version::Header;
    let mut next = 0u64;
    let mut copy = |v: Vec<u8>| {
        // Every index is rebuilt after the copy: HOT chains end here.
        let mut v = version::without_hot(v);
        if let Some(mut h) = Header::decode(&v, next).filter(|h| h.ctid != rows::MOVED) {
            h.ctid = next;
            version::set_header(&mut v, &h);
        }
        // SAFETY: per the contract.
        unsafe { copy_in(old, to, next, &[], &v) };
        next += 1;
    };
    if use_sort {
        // SAFETY: per the contract; the sort copies each tuple it is given
        // (built in a context reset after every row) and is ended here.
        unsafe {
            let sort = pg_sys::tuplesort_begin_cluster(
                (*old).rd_att,
                index,
                pg_sys::maintenance_work_mem,
                std::ptr::null_mut(),
                pg_sys::TUPLESORT_NONE as i32,
            );
            let cxt = pg_sys::AllocSetContextCreateExtended(
                pg_sys::CurrentMemoryContext,
                c"orioledb cluster".as_ptr(),
                pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
            );
            for item in from.versions(Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
                pgrx::check_for_interrupts!();
                let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
                let id = from.id_of(&k);
                if keep(id, &v) {
                    let tup = rows::build_tuple(&v, id, (*old).rd_id, cxt);
                    pg_sys::tuplesort_putheaptuple(sort, tup);
                    pg_sys::MemoryContextReset(cxt);
                }
            }
            pg_sys::MemoryContextDelete(cxt);
            pg_sys::tuplesort_performsort(sort);
            loop {
                pgrx::check_for_interrupts!();
                let tup = pg_sys::tuplesort_getheaptuple(sort, true);
                if tup.is_null() {
                    break;
                }
                let v = rows::from_item_pointer(&(*tup).t_self)
                    .and_then(|id| rows::get_version(from, id))
                    .expect("a sorted version is in the table, locked exclusively");
                copy(v);
            }
            pg_sys::tuplesort_end(sort);
        }
    } else {
        cluster_by_index_scan(old, from, index, keep, &mut copy);
    }
    if next > 0 {
        to.tree
            .alloc_ids(next)
            .unwrap_or_else(|e| crate::pg::engine::report(e));
    }
}

/// The index-scan order of [`cluster_by_index`]: versions as `index`
/// returns them, then the rest in row-id order.
///
/// # Safety
/// As `cluster_by_index`.
unsafe fn cluster_by_index_scan(
    old: pg_sys::Relation,
    from: &Table,
    index: pg_sys::Relation,
    keep: &mut dyn FnMut(u64, &[u8]) -> bool,
    copy: &mut dyn FnMut(Vec<u8>),
) {
    let limit = from.tree.next_id();
    // One bit per old row id: copied already (from the index).
    let mut done = vec![0u64; (limit as usize).div_ceil(64)];
    let seen = |done: &[u64], id: u64| id < limit && done[(id / 64) as usize] & (1 << (id % 64)) != 0;
    // SAFETY: per the contract; the scan is ended before returning.
    unsafe {
        let scan = pg_sys::index_beginscan(old, index, &raw mut pg_sys::SnapshotAnyData, 0, 0);
        pg_sys::index_rescan(scan, std::ptr::null_mut(), 0, std::ptr::null_mut(), 0);
        loop {
            pgrx::check_for_interrupts!();
            let tid = pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tid.is_null() {
                break;
            }
            let Some(id) = rows::from_item_pointer(&*tid) else {
                continue;
            };
            if id >= limit || seen(&done, id) {
                continue;
            }
            done[(id / 64) as usize] |= 1 << (id % 64);
            if let Some(v) = rows::get_version(from, id) {
                if keep(id, &v) {
                    copy(v);
                }
            }
        }
        pg_sys::index_endscan(scan);
    }
    for item in from.versions(Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
        pgrx::check_for_interrupts!();
        let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
        let id = from.id_of(&k);
        if !seen(&done, id) && keep(id, &v) {
            copy(v);
        }
    }
}
