//! The visibility map of an orioledb table, for index-only scans.
//!
//! PostgreSQL's index-only scan asks the table's visibility-map fork
//! whether the TID block of an index entry is all-visible
//! (`VM_ALL_VISIBLE`), and skips the table fetch when it is. Here a TID
//! block is 291 row ids; its ALL_VISIBLE bit means every version with one
//! of those row ids is visible to every snapshot (its inserter committed
//! before every running transaction began, and no deleter or updater is
//! set). Nothing else reads the map.
//!
//! Protocol (bits are set only by VACUUM, cleared by every change):
//! - VACUUM announces itself in shared memory (a slot holding the table's
//!   relfilenode, or a shared count when all 32 slots are taken) and raises
//!   a shared generation, then for each block takes the map page's
//!   exclusive lock, checks the block's versions, sets the bit only if all
//!   qualify (clears it otherwise), and releases the lock.
//! - A change to a version (insert, update, delete) happens first, under
//!   its leaf latch; afterwards, before the command returns, the writer
//!   clears the block's bit. While a VACUUM of the table is announced it
//!   always takes the map page's lock (`visibilitymap_pin` + `_clear`,
//!   extending the map if needed): that VACUUM may have read the version
//!   before the change and be about to set the bit, and waiting for its
//!   lock then clearing keeps the bit from outliving the change. Otherwise
//!   a VACUUM starting later sees the change (fences order the two sides),
//!   so an unlocked read that says "not set" is enough — after refreshing
//!   the map size the relation's smgr entry caches whenever the generation
//!   moved (a finished VACUUM may have grown the map).
//! - Row locks leave the bit alone, as on heap: an index-only scan does not
//!   care who locks a row.
//! - The map is not WAL-logged: a lost set costs only table fetches, and a
//!   lost clear is impossible to replay, so recovery (crash or standby)
//!   removes the map forks of every orioledb relation before anything
//!   reads them (`remove_all`).

use crate::am::table::Table;
use orioledb_engine::version::{self, tid, Hints, VacuumState, Xid};
use pgrx::pg_sys;
use std::sync::atomic::{fence, Ordering};

/// 2 bits per block, `MAPSIZE` bytes of bits per map page
/// (`visibilitymap.c`).
const MAPSIZE: u32 = pg_sys::BLCKSZ - 24;
const BLOCKS_PER_BYTE: u32 = 4;
const BLOCKS_PER_PAGE: u32 = MAPSIZE * BLOCKS_PER_BYTE;

thread_local! {
    /// The visibility-map generation this backend last refreshed each
    /// relation's cached map size at (by relfilenode).
    static SEEN: std::cell::RefCell<std::collections::HashMap<u32, u32>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Whether a VACUUM is setting bits in `relnode`'s map now.
fn being_set(words: &[std::sync::atomic::AtomicU32], relnode: u32) -> bool {
    words[0].load(Ordering::SeqCst) > 0
        || words[2..].iter().any(|w| w.load(Ordering::SeqCst) == relnode)
}

/// Clears the ALL_VISIBLE bit of the block holding row id `id` after a
/// change of one of its versions (see the module protocol).
///
/// # Safety
/// `rel` is an open orioledb relation the caller has just changed.
pub unsafe fn clear(rel: pg_sys::Relation, id: u64) {
    let Some(words) = crate::pg::shmem::vm_words() else {
        return;
    };
    let block = (id / tid::PER_BLOCK) as pg_sys::BlockNumber;
    // The change is done; whatever VACUUM reads from now on sees it.
    fence(Ordering::SeqCst);
    // SAFETY: per the contract; every buffer pinned here is released here.
    unsafe {
        let relnode = (*rel).rd_node.relNode.to_u32();
        let generation = words[1].load(Ordering::SeqCst);
        let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
        if being_set(words, relnode) {
            // It may have read this version before the change and be about
            // to set the bit: wait for its lock on the map page, then
            // clear (extending the map if it does not reach the block yet).
            pg_sys::visibilitymap_pin(rel, block, &mut buf);
            pg_sys::visibilitymap_clear(rel, block, buf, pg_sys::VISIBILITYMAP_VALID_BITS as u8);
            pg_sys::ReleaseBuffer(buf);
            return;
        }
        // A VACUUM since this backend last looked may have grown the map
        // past the size cached in the relation's smgr entry: look again.
        let stale = SEEN.with(|m| m.borrow_mut().insert(relnode, generation) != Some(generation));
        if stale && !(*rel).rd_smgr.is_null() {
            (*(*rel).rd_smgr).smgr_cached_nblocks
                [pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM as usize] = pg_sys::InvalidBlockNumber;
        }
        let status = pg_sys::visibilitymap_get_status(rel, block, &mut buf);
        if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
            if status as u32 & pg_sys::VISIBILITYMAP_ALL_VISIBLE != 0 {
                pg_sys::visibilitymap_clear(rel, block, buf, pg_sys::VISIBILITYMAP_VALID_BITS as u8);
            }
            pg_sys::ReleaseBuffer(buf);
        }
    }
}

/// Whether version `v` (row id `id`) is visible to every snapshot now and
/// later: inserted by a transaction that committed before `oldest_xmin`,
/// not being inserted speculatively, and not deleted or updated (lockers
/// do not matter to an index-only scan).
fn all_visible(v: &[u8], oldest_xmin: pg_sys::TransactionId) -> bool {
    let Some(h) = version::Header::decode(v) else {
        return false;
    };
    if h.flags & version::SPECULATIVE != 0 {
        return false;
    }
    // SAFETY: pure transaction-id comparisons and clog lookups.
    let old = |x: Xid| unsafe { pg_sys::TransactionIdPrecedes(x.into(), oldest_xmin) };
    let state = version::vacuum_state(&h, &crate::am::rows::PgXacts, &old, &mut Hints::default());
    let frozen = h.infomask & (version::bits::XMIN_COMMITTED | version::bits::XMIN_INVALID)
        == version::bits::XMIN_COMMITTED | version::bits::XMIN_INVALID;
    state == VacuumState::Live
        && (h.xmax_invalid() || h.lock_only())
        && (frozen || old(h.xmin))
}

/// VACUUM's pass: sets the ALL_VISIBLE bit of every TID block below
/// `blocks` whose versions all qualify, clears it where they do not, and
/// returns how many blocks are all-visible (`relallvisible`).
///
/// `counted[b]` is how many versions block `b` had before VACUUM's index
/// cleanup. Row ids are never reused, so a block with fewer versions now
/// lost one since — whose index entries may remain (heap keeps a dead line
/// pointer until then) and would be returned without a table fetch: such a
/// block is not marked. Versions added since are not all-visible anyway.
/// Without `counted` (the index cleanup was skipped) no block is marked.
///
/// # Safety
/// `rel` is an open orioledb table (not toast) that VACUUM holds.
pub unsafe fn update(
    rel: pg_sys::Relation,
    table: &Table,
    blocks: u64,
    oldest_xmin: pg_sys::TransactionId,
    counted: Option<&[u16]>,
) -> u32 {
    /// Announces this VACUUM to writers (a slot with the relfilenode, or
    /// the shared count when every slot is taken) until dropped, also on
    /// ERROR unwinding through Rust frames.
    struct Setting(&'static std::sync::atomic::AtomicU32, bool);
    impl Drop for Setting {
        fn drop(&mut self) {
            if self.1 {
                self.0.store(0, Ordering::SeqCst);
            } else {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
    let Some(words) = crate::pg::shmem::vm_words() else {
        return 0;
    };
    // SAFETY: an open relation.
    let relnode = unsafe { (*rel).rd_node.relNode.to_u32() };
    let slot = words[2..].iter().find(|w| {
        w.compare_exchange(0, relnode, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    });
    let _setting = match slot {
        Some(w) => Setting(w, true),
        None => {
            words[0].fetch_add(1, Ordering::SeqCst);
            Setting(&words[0], false)
        }
    };
    words[1].fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let mut count = 0u32;
    let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    // SAFETY: per the contract; the map page is pinned by
    // visibilitymap_pin and locked around each block's check, and the
    // last pin is released at the end.
    unsafe {
        for block in 0..blocks.min(0xFFFF_FFFE) {
            if block % 64 == 0 {
                pgrx::check_for_interrupts!();
            }
            let b = block as pg_sys::BlockNumber;
            pg_sys::visibilitymap_pin(rel, b, &mut buf);
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            let first = block * tid::PER_BLOCK;
            let expected = counted.and_then(|c| c.get(block as usize)).copied().unwrap_or(0);
            let mut n = 0u16;
            let mut all = counted.is_some();
            if all {
                // A HOT chain's redirect (`am::hot`, an empty value) stands
                // for members elsewhere: never all-visible here.
                for (_, v) in table.id_range_with_redirects(first, first + tid::PER_BLOCK) {
                    n += 1;
                    if !all_visible(&v, oldest_xmin) {
                        all = false;
                        break;
                    }
                }
            }
            let set = all && n > 0 && n == expected;
            let page = pg_sys::BufferGetPage(buf) as *mut u8;
            let byte = page.add(24 + ((b % BLOCKS_PER_PAGE) / BLOCKS_PER_BYTE) as usize);
            let mask = (pg_sys::VISIBILITYMAP_ALL_VISIBLE as u8) << ((b % BLOCKS_PER_BYTE) * 2);
            let was = *byte & mask != 0;
            if set != was {
                if set {
                    *byte |= mask;
                } else {
                    *byte &= !mask;
                }
                pg_sys::MarkBufferDirty(buf);
            }
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
            if set {
                count += 1;
            }
        }
        if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
            pg_sys::ReleaseBuffer(buf);
        }
    }
    count
}

/// Removes the visibility-map forks of every orioledb relation (recovery
/// start: the map is not WAL-logged, see the module documentation).
pub fn remove_all(trees: &[orioledb_engine::TreeId]) {
    for t in trees {
        // SAFETY: GetRelationPath returns a palloc'd path relative to the
        // data directory (the current directory of every backend).
        let base = unsafe {
            let p = pg_sys::GetRelationPath(
                pg_sys::Oid::from(t.db),
                pg_sys::DEFAULTTABLESPACE_OID,
                pg_sys::Oid::from(t.rel),
                pg_sys::InvalidBackendId,
                pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM,
            );
            let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
            pg_sys::pfree(p.cast());
            s
        };
        let _ = std::fs::remove_file(&base);
        for seg in 1.. {
            if std::fs::remove_file(format!("{base}.{seg}")).is_err() {
                break;
            }
        }
    }
}
