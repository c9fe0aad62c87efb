//! This backend's handles on tables' trees: opened once per backend with
//! their layout and pruner, found again through the relation cache
//! (`AmCache`), and forgotten when a tree's layout changes or it is
//! emptied.

use super::*;

thread_local! {
    /// descriptor from the tree again (a descent, a decode, a comparator).
    static TREES: RefCell<HashMap<TreeId, (u64, Table), IdHash>> = RefCell::new(HashMap::default());
    /// The last generation handed out.
    static GENERATION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Forgets what is cached about tree `id` (its layout changed, or it was
/// emptied in place): map entries queued for deletion are not deleted from
/// it any more (the versions they located are gone with the rest).
pub fn forget_tree(id: TreeId) {
    TREES.with(|t| t.borrow_mut().remove(&id));
    crate::am::layout::table::forget_keys();
    crate::am::layout::table::forget_doomed_map_entries(Some(id));
}

/// The primary tree of `rel`.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn tree_of(rel: pg_sys::Relation) -> Tree {
    // SAFETY: per the contract.
    unsafe { table_of(rel) }.tree.clone()
}

/// The primary tree of `rel` with its layout.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn table_of(rel: pg_sys::Relation) -> Table {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*rel).rd_node };
    let id = crate::pg::engine::tree_id(node.dbNode, node.relNode);
    // SAFETY: rd_amcache of our relations is null or an AmCache of ours.
    let cache = unsafe { (*rel).rd_amcache } as *mut AmCache;
    // SAFETY: as above.
    if let Some(c) = unsafe { cache.as_ref() }.filter(|c| (c.db, c.rel) == (id.db, id.rel)) {
        let hit = TREES.with(|t| {
            t.borrow()
                .get(&id)
                .filter(|(g, _)| *g == c.generation)
                .map(|(_, t)| t.clone())
        });
        if let Some(t) = hit {
            return t;
        }
    }
    // SAFETY: per the contract.
    let t = unsafe { open_table(rel, id) };
    let generation = GENERATION.get() + 1;
    GENERATION.set(generation);
    TREES.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= TREES_MAX {
            // Handles of dropped tables are never looked up again.
            m.clear();
        }
        m.insert(id, (generation, t.clone()));
    });
    // SAFETY: an open relation's relcache entry lives in CacheMemoryContext,
    // where its rd_amcache belongs (PostgreSQL pfrees it with the entry's
    // other parts on every invalidation). Read again: opening the table may
    // have processed invalidations (`am::storage::unlogged` opens relations), which
    // free the one read above.
    unsafe {
        let cache = (*rel).rd_amcache as *mut AmCache;
        let cache = if cache.is_null() {
            let c = pg_sys::MemoryContextAlloc(pg_sys::CacheMemoryContext, size_of::<AmCache>())
                as *mut AmCache;
            (*rel).rd_amcache = c.cast();
            c
        } else {
            cache
        };
        cache.write(AmCache {
            db: id.db,
            rel: id.rel,
            generation,
            pk_known: false,
            pk: 0,
        });
    }
    t
}

/// What an orioledb relation's relcache entry keeps in `rd_amcache`: the
/// generation of this backend's tree handle it may use. PostgreSQL frees
/// `rd_amcache` whenever the entry is invalidated (RelationClearRelation:
/// any catalog change of the table, a new relfilenode, a cache reset), so
/// a handle found through it was built after the table's last change —
/// a key added or dropped (re-key), a rewrite. Changes this backend makes
/// in place (a re-key, an emptied tree) drop the handle ([`forget_tree`]).
#[repr(C)]
pub(super) struct AmCache {
    db: u32,
    rel: u32,
    generation: u64,
    /// [`served_primary_key`]'s answer, once known (0: none).
    pk_known: bool,
    pk: u32,
}

/// The table's primary key index when its tree is keyed by exactly that
/// key (what the primary scan serves), with the table; None otherwise.
/// Asked when every query on the table is planned, so the answer is kept
/// with the tree handle: a change of the table's indexes invalidates its
/// relcache entry, and with it the answer.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub unsafe fn served_primary_key(rel: pg_sys::Relation) -> Option<(Table, pg_sys::Oid)> {
    // SAFETY: per the contract; table_of leaves an AmCache in rd_amcache.
    unsafe {
        let t = table_of(rel);
        let cache = (*rel).rd_amcache as *mut AmCache;
        let generation = cache.as_ref().map(|c| c.generation);
        if let Some(c) = cache.as_ref().filter(|c| c.pk_known) {
            return (c.pk != 0).then(|| (t, pg_sys::Oid::from(c.pk)));
        }
        let served = t
            .desc()
            .is_some_and(|d| crate::am::layout::key_desc::KeyDesc::for_table(rel).as_ref() == Some(d));
        let pk = if served {
            pg_sys::RelationGetPrimaryKeyIndex(rel)
        } else {
            pg_sys::InvalidOid
        };
        // Opening the index may have processed invalidations: keep the
        // answer only in the entry it was computed for.
        let cache = (*rel).rd_amcache as *mut AmCache;
        if let Some(c) = cache.as_mut().filter(|c| Some(c.generation) == generation) {
            c.pk_known = true;
            c.pk = pk.to_u32();
        }
        (pk != pg_sys::InvalidOid).then_some((t, pk))
    }
}

/// Tree handles kept before they are all dropped (and rebuilt on use). A
/// handle keeps its tree's metadata resident (the engine evicts only
/// trees nobody holds), so a backend that touched many tables must not
/// hold them all: this is an eighth of the engine's default tree slots.
pub(super) const TREES_MAX: usize = 512;

/// A new handle on `rel`'s tree `id` with its layout.
///
/// # Safety
/// `rel` must be a valid, open orioledb relation.
pub(super) unsafe fn open_table(rel: pg_sys::Relation, id: TreeId) -> Table {
    // SAFETY: per the contract. What the emptying removed was cached
    // nowhere yet but in handles on the toast tree, and keys.
    for emptied in unsafe { crate::am::storage::unlogged::empty_after_crash(rel, id) } {
        forget_tree(emptied);
    }
    let engine = crate::pg::engine::engine();
    // SAFETY: per the contract.
    let is_toast = unsafe { is_toast(rel) };
    // Toast trees hold chunks, not versions: never let the pruner near them.
    let t = if is_toast {
        engine.tree(id)
    } else {
        // SAFETY: an open relation; GlobalVisTestFor only reads its kind.
        let horizon = unsafe { pg_sys::GlobalVisTestFor(rel) } as usize;
        engine.tree_pruned(id, Arc::new(VersionPruner { tree: id, horizon }))
    }
    .unwrap_or_else(|e| crate::pg::engine::report(e));
    if is_toast {
        // Chunk keys (value id ‖ chunk number) are no row ids: nothing
        // walks this Table's versions or row ids (scans refuse toast
        // relations; `am::toast` reads the tree directly).
        Table::new(t, crate::am::layout::table::Layout::RowId)
    } else {
        Table::open(t)
    }
}
