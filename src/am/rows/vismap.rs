//! The visibility map of an orioledb table, for index-only scans.
//!
//! PostgreSQL's index-only scan asks the table's visibility-map fork
//! whether the TID block of an index entry is all-visible
//! (`VM_ALL_VISIBLE`), and skips the table fetch when it is. Here a TID
//! block is 291 row ids; its ALL_VISIBLE bit means every version with one
//! of those row ids is visible to every snapshot (its inserter committed
//! before every running transaction began, and no deleter or updater is
//! set). VACUUM also reads it, to skip runs of all-visible blocks of a
//! table in row-id order (`all_visible_runs`).
//!
//! Protocol (bits are set by VACUUM, and by COPY FREEZE for the blocks it
//! fills from empty in a table file new in its subtransaction, which no
//! other transaction can see: `set_loaded_frozen`; cleared by every
//! change):
//! - VACUUM announces itself in shared memory (a slot holding the table's
//!   relfilenode, or a shared count when all 32 slots are taken) and raises
//!   a shared generation before its counting pass, which notes for each
//!   block whether all its versions qualify. Then for each block it takes
//!   the map page's exclusive lock, sets the bit only if all qualify
//!   (clears it otherwise), and releases the lock.
//! - A change to a version (insert, update, delete) happens first, under
//!   its leaf latch; afterwards, before the command returns, the writer
//!   clears the block's bit. While a VACUUM of the table is announced it
//!   counts the change in the announcement's change word and always takes
//!   the map page's lock (`visibilitymap_pin` + `_clear`, extending the map
//!   if needed): that VACUUM may have read the version before the change
//!   and be about to set the bit, and waiting for its lock then clearing
//!   keeps the bit from outliving the change. Otherwise a VACUUM starting
//!   later sees the change (fences order the two sides), so an unlocked
//!   read that says "not set" is enough — after refreshing the map size
//!   the relation's smgr entry caches whenever the generation moved (a
//!   finished VACUUM may have grown the map).
//! - VACUUM trusts its counting pass for a block only if the change word
//!   has not moved since it announced itself, or (a slot's VACUUM) the
//!   block's bit in the slot's changed-block set is clear, read under the
//!   block's map lock: a writer counts and sets the bit before it locks, so
//!   a change VACUUM does not see belongs to a writer that clears after
//!   VACUUM set the bit. A changed block is left unmarked: the writer's
//!   transaction id is no older than VACUUM's horizon, so the block holds a
//!   version that is not all-visible. An overflow VACUUM, whose word names
//!   no block, and one of a table past the set's 65,536 bits, whose blocks
//!   share bits, read a changed block's versions again instead.
//! - Row locks leave the bit alone, as on heap: an index-only scan does not
//!   care who locks a row.
//! - The map is not WAL-logged: a lost set costs only table fetches, and a
//!   lost clear is impossible to replay, so recovery (crash or standby)
//!   empties the map forks of every orioledb relation before anything
//!   reads them (`remove_all`), and for a relation created during redo
//!   when its creation is replayed (a map page written before the crash
//!   may hold bits whose clears were lost), dropping the fork's buffers
//!   with it.

use crate::am::layout::table::Table;
use orioledb_engine::version::{self, tid, Hints, VacuumState, Xid};
use pgrx::pg_sys;
use pgrx::pg_guard;
use std::sync::atomic::{fence, AtomicU32, Ordering};

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

/// Indexes into the shared words (`pg::shmem::VM_WORDS`).
const OVERFLOW: usize = 0;
const GENERATION: usize = 1;
const SLOTS: usize = 2;
const OVERFLOW_CHANGES: usize = SLOTS + VM_SLOTS;
const SLOT_CHANGES: usize = OVERFLOW_CHANGES + 1;
const CHANGED_BLOCKS: usize = SLOT_CHANGES + VM_SLOTS;
/// Bits of a slot's changed-block set.
const CHANGED_BITS: u64 = VM_CHANGED_WORDS as u64 * 32;
use crate::pg::shmem::{VM_CHANGED_WORDS, VM_SLOTS};

/// Where block `block`'s bit in slot `slot`'s changed-block set is: the
/// word's index and the mask. Blocks [`CHANGED_BITS`] apart share a bit
/// (in a table past 65,536 blocks a set bit sends VACUUM back to the
/// block's versions, never to a wrong bit).
fn changed_bit(slot: usize, block: u64) -> (usize, u32) {
    let bit = (block % CHANGED_BITS) as usize;
    (
        CHANGED_BLOCKS + slot * VM_CHANGED_WORDS + bit / 32,
        1 << (bit % 32),
    )
}

/// Counts a change to block `block` of `relnode`'s versions in the change
/// word (and, for a slot, the changed-block set) of every VACUUM that may
/// be setting bits in its map now; whether there is one.
fn note_change(words: &[AtomicU32], relnode: u32, block: u64) -> bool {
    let mut announced = false;
    if words[OVERFLOW].load(Ordering::SeqCst) > 0 {
        words[OVERFLOW_CHANGES].fetch_add(1, Ordering::SeqCst);
        announced = true;
    }
    for i in 0..VM_SLOTS {
        if words[SLOTS + i].load(Ordering::SeqCst) == relnode {
            words[SLOT_CHANGES + i].fetch_add(1, Ordering::SeqCst);
            let (w, mask) = changed_bit(i, block);
            words[w].fetch_or(mask, Ordering::SeqCst);
            announced = true;
        }
    }
    announced
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
        let generation = words[GENERATION].load(Ordering::SeqCst);
        let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
        if note_change(words, relnode, block as u64) {
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
    // The ctid does not matter here: any own id does.
    version::Header::decode(v, 0).is_some_and(|h| header_all_visible(&h, oldest_xmin))
}

/// [`all_visible`] of a decoded header.
pub fn header_all_visible(h: &version::Header, oldest_xmin: pg_sys::TransactionId) -> bool {
    if h.flags & version::SPECULATIVE != 0 {
        return false;
    }
    // SAFETY: pure transaction-id comparisons and clog lookups.
    let old = |x: Xid| unsafe { pg_sys::TransactionIdPrecedes(x.into(), oldest_xmin) };
    let state = version::vacuum_state(h, &crate::am::rows::PgXacts, &old, &mut Hints::default());
    let frozen = h.infomask & (version::bits::XMIN_COMMITTED | version::bits::XMIN_INVALID)
        == version::bits::XMIN_COMMITTED | version::bits::XMIN_INVALID;
    state == VacuumState::Live
        && (h.xmax_invalid() || h.lock_only())
        && (frozen || old(h.xmin))
}

/// A VACUUM announced to the writers of its table (module protocol), from
/// before its counting pass until its bits are set. Invariant: while it
/// lives, the slot (or the overflow count) names the table, and every
/// change a writer makes to the table's versions after seeing it is
/// counted in `changes` before that writer locks a map page.
pub struct Announcement {
    words: &'static [AtomicU32],
    /// The slot taken, None when all were (then the overflow count).
    slot: Option<usize>,
    /// The change word's value when the announcement was made.
    seen: u32,
}

impl Announcement {
    /// Announces a VACUUM of `rel` (None without shared memory: nothing
    /// can read the map then either).
    ///
    /// # Safety
    /// `rel` is an open relation.
    pub unsafe fn of(rel: pg_sys::Relation) -> Option<Announcement> {
        let words = crate::pg::shmem::vm_words()?;
        // Before a slot is taken: registering can fail, and nothing would
        // give the slot back then.
        release_at_exit();
        // SAFETY: an open relation.
        let relnode = unsafe { (*rel).rd_node.relNode.to_u32() };
        let slot = (0..VM_SLOTS).find(|&i| {
            words[SLOTS + i]
                .compare_exchange(0, relnode, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        });
        if slot.is_none() {
            words[OVERFLOW].fetch_add(1, Ordering::SeqCst);
        }
        HELD.with(|h| h.set(Some(slot)));
        let mut a = Announcement { words, slot, seen: 0 };
        words[GENERATION].fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        a.seen = a.changes().load(Ordering::SeqCst);
        Some(a)
    }

    fn changes(&self) -> &AtomicU32 {
        &self.words[self.slot.map_or(OVERFLOW_CHANGES, |i| SLOT_CHANGES + i)]
    }

    /// What writers did to `block` of a table of `blocks` blocks since the
    /// announcement, as far as it tells (read under the block's map lock:
    /// see the module protocol).
    fn since(&self, block: u64, blocks: u64) -> Since {
        let quiet = self.changes().load(Ordering::SeqCst) == self.seen;
        match self.slot {
            _ if quiet => Since::Untouched,
            Some(i) => {
                let (w, mask) = changed_bit(i, block);
                if self.words[w].load(Ordering::SeqCst) & mask == 0 {
                    Since::Untouched
                } else if blocks > CHANGED_BITS {
                    // Blocks share the bit: a write elsewhere may have set
                    // it (a big table's cold blocks would stay unmarked).
                    Since::Unknown
                } else {
                    Since::Changed
                }
            }
            None => Since::Unknown,
        }
    }
}

/// What writers did to a block since a VACUUM announced itself.
enum Since {
    /// Nothing: the counting pass's finding stands.
    Untouched,
    /// A version changed, so (but for an abort since) the block holds a
    /// transaction id no older than VACUUM's horizon (every writer's is):
    /// left unmarked, which is always safe.
    Changed,
    /// Unknown (the overflow count moved): read the block again.
    Unknown,
}

impl Drop for Announcement {
    // Also on ERROR unwinding through Rust frames.
    fn drop(&mut self) {
        release(self.words, self.slot);
    }
}

thread_local! {
    /// The announcement this process holds: its slot, or None for the
    /// overflow count. Invariant: set exactly while an [`Announcement`]
    /// lives (or its process exits without unwinding).
    static HELD: std::cell::Cell<Option<Option<usize>>> = const { std::cell::Cell::new(None) };
    static EXIT_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn release(words: &[AtomicU32], slot: Option<usize>) {
    match slot {
        Some(i) => {
            // Emptied while the slot is still ours, so the next VACUUM to
            // take it starts with no changes (a writer that saw this
            // announcement may still set a bit: one block less marked).
            let (first, _) = changed_bit(i, 0);
            for w in &words[first..first + VM_CHANGED_WORDS] {
                w.store(0, Ordering::SeqCst);
            }
            words[SLOTS + i].store(0, Ordering::SeqCst);
        }
        None => {
            words[OVERFLOW].fetch_sub(1, Ordering::SeqCst);
        }
    }
    HELD.with(|h| h.set(None));
}

/// Makes sure a process that exits without unwinding (FATAL, a
/// terminated autovacuum worker) gives its announcement back: a slot left
/// taken would make writers of that table take the map lock for good.
fn release_at_exit() {
    #[pg_guard]
    unsafe extern "C-unwind" fn at_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
        if let (Some(slot), Some(words)) = (HELD.with(|h| h.get()), crate::pg::shmem::vm_words()) {
            release(words, slot);
        }
    }
    if !EXIT_CALLBACK.with(|c| c.replace(true)) {
        // SAFETY: registering an exit callback with a plain function pointer.
        unsafe { pg_sys::before_shmem_exit(Some(at_exit), pg_sys::Datum::from(0usize)) };
    }
}

/// What VACUUM's counting pass found for each TID block: how many
/// versions (or [`BlockCounts::REDIRECT`]) and whether they all qualify
/// ([`header_all_visible`]). Invariant: both vectors have one entry per
/// block up to the highest block the pass saw.
#[derive(Default)]
pub struct BlockCounts {
    versions: Vec<u16>,
    all_visible: Vec<bool>,
}

impl BlockCounts {
    /// A block count no block reaches (291 versions at most): the block
    /// holds the root of a row-id chain whose root is gone but whose later
    /// members were there; its index entries stay, and once those members
    /// go too the block would show no trace of them. Never all-visible in
    /// this VACUUM.
    pub const REDIRECT: u16 = u16::MAX;
    /// A block count no block reaches either: the pass skipped the block
    /// (all-visible when VACUUM began); its bit stays as writers leave it.
    pub const SKIPPED: u16 = u16::MAX - 1;

    fn at(&mut self, block: usize) -> (&mut u16, &mut bool) {
        if self.versions.len() <= block {
            self.versions.resize(block + 1, 0);
            self.all_visible.resize(block + 1, true);
        }
        (&mut self.versions[block], &mut self.all_visible[block])
    }

    /// Counts a version of `block`; `all_visible` judges it, asked only
    /// while the block's versions so far all qualified.
    pub fn version(&mut self, block: usize, all_visible: impl FnOnce() -> bool) {
        let (n, all) = self.at(block);
        *n = n.saturating_add(1);
        *all = *all && all_visible();
    }

    /// Marks `block` as holding a chain's redirect.
    pub fn redirect(&mut self, block: usize) {
        *self.at(block).0 = Self::REDIRECT;
    }

    /// Marks blocks `first..end` as skipped by the counting pass.
    pub fn skip(&mut self, first: usize, end: usize) {
        if first < end {
            self.at(end - 1);
            self.versions[first..end].fill(Self::SKIPPED);
        }
    }

    fn skipped(&self, block: usize) -> bool {
        self.versions(block) == Self::SKIPPED
    }

    fn versions(&self, block: usize) -> u16 {
        self.versions.get(block).copied().unwrap_or(0)
    }

    /// Whether the pass found the block all-visible (and not empty).
    fn marked(&self, block: usize) -> bool {
        let n = self.versions(block);
        n > 0 && n < Self::SKIPPED && self.all_visible[block]
    }
}

/// VACUUM's pass: sets the ALL_VISIBLE bit of every TID block below
/// `blocks` whose versions all qualify, clears it where they do not, and
/// returns how many blocks are all-visible (`relallvisible`).
///
/// `counted` is what the counting pass found, before VACUUM's index
/// cleanup; for a block no writer changed since `announced`, it is what
/// the block holds. A block a writer changed is left unmarked; where the
/// announcement cannot tell which blocks changed (the overflow count, or
/// a table past the changed-block set's size, whose blocks share bits)
/// its versions are read again: row ids are never reused, so a block with
/// fewer versions now lost one since — whose index entries may remain
/// (heap keeps a dead line pointer until then) and would be returned
/// without a table fetch: such a block is not marked. Versions added since
/// are not all-visible anyway. Without `counted` (the index cleanup was
/// skipped) no block is marked.
///
/// # Safety
/// `rel` is an open orioledb table (not toast) that VACUUM holds, announced
/// by `announced` since before the counting pass.
pub unsafe fn update(
    rel: pg_sys::Relation,
    announced: &Announcement,
    table: &Table,
    blocks: u64,
    oldest_xmin: pg_sys::TransactionId,
    counted: Option<&BlockCounts>,
) -> u32 {
    let mut count = 0u32;
    // Where the last block's walk would read on: only a hint, which
    // `Tree::leaf_at` checks under the page's latch.
    let mut hint = orioledb_engine::page::NO_PAGE;
    let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    // SAFETY: per the contract; the map page is pinned by
    // visibilitymap_pin and locked around each block's check, and the
    // last pin is released at the end.
    let mut cost = crate::pg::vacuum_cost::CostMeter::default();
    unsafe {
        for block in 0..blocks.min(0xFFFF_FFFE) {
            if block % 64 == 0 {
                // The visibility map's buffers charge themselves.
                cost.charge_and_pause(0);
            }
            let b = block as pg_sys::BlockNumber;
            pg_sys::visibilitymap_pin(rel, b, &mut buf);
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            let (byte, mask) = visible_bit(pg_sys::BufferGetPage(buf) as *mut u8, b);
            let was = *byte & mask != 0;
            let set = match counted {
                // Not read by the pass: left as writers left it.
                Some(c) if c.skipped(block as usize) => was,
                Some(c) if c.marked(block as usize) => match announced.since(block, blocks) {
                    Since::Untouched => true,
                    Since::Changed => false,
                    Since::Unknown => {
                        // About a leaf's worth of rows per block.
                        cost.charge(1);
                        block_all_visible(
                            table,
                            block,
                            oldest_xmin,
                            c.versions(block as usize),
                            &mut hint,
                        )
                    }
                },
                // Left unmarked (always safe) what the pass did not find
                // all-visible: its horizon is fixed, a version pruned since
                // leaves the block short of the count, and one added since
                // is newer than the horizon (only an abort since could have
                // made it all-visible; the next VACUUM marks it). Without a
                // pass nothing is marked.
                _ => false,
            };
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

/// Where block `b`'s ALL_VISIBLE bit is on its map page `page`: the byte
/// and the mask (`visibilitymap.c`'s layout: two bits per block after the
/// page header).
///
/// # Safety
/// `page` is a pinned map page covering `b`.
unsafe fn visible_bit(page: *mut u8, b: pg_sys::BlockNumber) -> (*mut u8, u8) {
    // SAFETY: per the contract: the offset stays inside the page.
    let byte = unsafe { page.add(24 + ((b % BLOCKS_PER_PAGE) / BLOCKS_PER_BYTE) as usize) };
    let mask = (pg_sys::VISIBILITYMAP_ALL_VISIBLE as u8) << ((b % BLOCKS_PER_BYTE) * 2);
    (byte, mask)
}

/// Runs of TID blocks below `blocks` that VACUUM may skip: at least
/// [`SKIP_RUN`] consecutive blocks whose ALL_VISIBLE bit is set, as
/// `[first, end)`, ascending. Read without the map's locks, as heap's
/// VACUUM reads it to skip pages: a bit cleared after the read belongs to
/// a change newer than the reader's horizon, which this VACUUM could not
/// remove anyway.
///
/// # Safety
/// `rel` is an open orioledb table.
pub unsafe fn all_visible_runs(rel: pg_sys::Relation, blocks: u64) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    let mut start = None;
    // SAFETY: per the contract; the map page pinned last is released here.
    unsafe {
        for block in 0..=blocks.min(0xFFFF_FFFE) {
            let set = block < blocks
                && pg_sys::visibilitymap_get_status(rel, block as pg_sys::BlockNumber, &mut buf)
                    as u32
                    & pg_sys::VISIBILITYMAP_ALL_VISIBLE
                    != 0;
            match (set, start) {
                (true, None) => start = Some(block),
                (false, Some(first)) => {
                    if block - first >= SKIP_RUN {
                        runs.push((first, block));
                    }
                    start = None;
                }
                _ => {}
            }
        }
        if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
            pg_sys::ReleaseBuffer(buf);
        }
    }
    runs
}

/// Fewer all-visible blocks in a row are read anyway (heap's
/// `SKIP_PAGES_THRESHOLD`): a skip is a descent, and short runs save little.
pub const SKIP_RUN: u64 = 32;

/// Whether COPY FREEZE may set bits: not under `wal_level = minimal`,
/// where the commit of a new relation file syncs it by logging images of
/// every fork's pages (`smgrDoPendingSyncs`) — the map's bits with them —
/// which recovery would put back after the later, unlogged clears.
pub fn loads_may_set() -> bool {
    // SAFETY: a GUC read on the backend's thread.
    unsafe { pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as std::ffi::c_int }
}

/// Sets the ALL_VISIBLE bit of TID block `block`, into which COPY FREEZE
/// has just begun to write (heap's `heap_multi_insert` sets a page it
/// fills from empty so): every version there is frozen, and the table's
/// file is new in this subtransaction, so no other transaction can have
/// seen it and a rollback takes it away. A later change clears the bit as
/// any change does.
///
/// # Safety
/// `rel` is an open orioledb table whose relation file is new in this
/// subtransaction; `block` holds only versions inserted frozen.
pub unsafe fn set_loaded_frozen(rel: pg_sys::Relation, block: u64) {
    let mut buf: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    // SAFETY: per the contract; pinned (extending the map if needed),
    // locked, changed and released here.
    unsafe {
        let b = block as pg_sys::BlockNumber;
        pg_sys::visibilitymap_pin(rel, b, &mut buf);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        let (byte, mask) = visible_bit(pg_sys::BufferGetPage(buf) as *mut u8, b);
        if *byte & mask == 0 {
            *byte |= mask;
            pg_sys::MarkBufferDirty(buf);
        }
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_UNLOCK as i32);
        pg_sys::ReleaseBuffer(buf);
    }
}

/// Whether every version of TID block `block` qualifies now and it still
/// holds the `expected` versions the counting pass saw (see [`update`]).
fn block_all_visible(
    table: &Table,
    block: u64,
    oldest_xmin: pg_sys::TransactionId,
    expected: u16,
    hint: &mut u32,
) -> bool {
    let first = block * tid::PER_BLOCK;
    let mut n = 0u16;
    let mut walk = table
        .id_range_with_redirects(first, first + tid::PER_BLOCK)
        .resuming(*hint);
    // A HOT chain's redirect (`am::layout::hot`, an empty value) stands for
    // members elsewhere: never all-visible here.
    let visible = walk.by_ref().all(|(_, v)| {
        n += 1;
        all_visible(&v, oldest_xmin)
    });
    *hint = walk.resume_hint();
    visible && n > 0 && n == expected
}

/// Empties the visibility-map forks of orioledb relations `trees`
/// (recovery: the map is not WAL-logged, see the module documentation):
/// at recovery's start for every tree, and when replay creates a tree.
/// Through the storage manager, which drops the fork's buffers first: the
/// redo of `CREATE DATABASE ... STRATEGY WAL_LOG` writes a page image of
/// every fork of the template's relations — their maps too — into shared
/// buffers before the copy's trees are created, and a map file removed
/// under such a dirty buffer failed the end-of-recovery checkpoint
/// ("could not open file ..._vm"), so the server did not start.
pub fn remove_all(trees: &[orioledb_engine::TreeId]) {
    for t in trees {
        let node = pg_sys::RelFileNode {
            spcNode: pg_sys::DEFAULTTABLESPACE_OID,
            dbNode: pg_sys::Oid::from(t.db),
            relNode: pg_sys::Oid::from(t.rel),
        };
        // SAFETY: the startup process owns recovery's storage; truncating
        // a fork that exists drops its buffers without writing them and
        // tells other processes to close the file, as a replayed
        // truncation does.
        unsafe {
            let smgr = pg_sys::smgropen(node, pg_sys::InvalidBackendId);
            let mut fork = pg_sys::ForkNumber::VISIBILITYMAP_FORKNUM;
            // An empty fork (most, after the first recovery) is left be:
            // a truncation scans the buffers and sends an invalidation.
            if pg_sys::smgrexists(smgr, fork) && pg_sys::smgrnblocks(smgr, fork) > 0 {
                let mut blocks: pg_sys::BlockNumber = 0;
                pg_sys::smgrtruncate(smgr, &mut fork, 1, &mut blocks);
            }
        }
    }
}
