//! Unlogged tables are empty after a crash, as heap's are.
//!
//! An unlogged table's tree is WAL-logged and checkpointed like any other
//! (so the engine's image and its replay stay consistent), yet after a
//! crash PostgreSQL empties the table's indexes from their init forks.
//! A tree that kept its rows would then disagree with its indexes: index
//! scans would miss rows and a unique index would accept duplicates. So
//! the tree is emptied too, by the first backend that opens the table
//! afterwards ([`empty_after_crash`], from `rows::open_table`, before
//! anything reads or writes the tree).
//!
//! Which tables must be emptied is read from their files, which
//! PostgreSQL itself resets:
//!
//! * Every unlogged orioledb relation has an (empty) init fork, created
//!   and WAL-logged with its file as heap does ([`create_forks`]), which
//!   also tells the orphan sweep that the relation still exists where its
//!   main fork is missing (a standby, a restored base backup).
//! * It also has a free-space-map fork file, unused by orioledb, that is
//!   the marker "emptied since the last crash". It is never WAL-logged.
//!   PostgreSQL removes every fork of an unlogged relation but the init
//!   fork when crash or archive recovery starts (`ResetUnloggedRelations`),
//!   a standby never had the marker, and a base backup leaves it out.
//!
//! So "init fork present, marker missing" means the rows of before a
//! crash (or a promotion, or a restore) are still in the tree. The
//! emptying is WAL-logged (a crash during or after it finds the marker
//! missing again and repeats it) and runs under the relation extension
//! lock, so two backends opening the table at once empty it once and the
//! second one never empties rows the first one has written since.
//! A relation made by a build without init forks has neither file: it
//! gets both when it is first opened, with its rows.

use crate::pg::engine::{engine, report};
use orioledb_engine::TreeId;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Forks of a new unlogged relation file `rnode` (`persistence` is the
/// relation's): the WAL-logged, synced init fork, as heap creates it, and
/// the marker.
///
/// # Safety
/// `srel` is the open storage of the new file `rnode`, whose main fork
/// exists.
pub unsafe fn create_forks(
    srel: pg_sys::SMgrRelation,
    rnode: *const pg_sys::RelFileNode,
    persistence: std::ffi::c_char,
) {
    if persistence as u8 != pg_sys::RELPERSISTENCE_UNLOGGED {
        return;
    }
    // SAFETY: per the contract.
    unsafe {
        create_init_fork(srel, rnode);
        create_marker(srel);
    }
}

/// Creates the marker fork's (empty) file.
///
/// # Safety
/// `srel` is open storage.
unsafe fn create_marker(srel: pg_sys::SMgrRelation) {
    // SAFETY: per the contract. `isRedo` lets a file that is there already
    // be (a crash between its creation and ours cannot leave one, but an
    // ERROR for it would stop the table's use for nothing).
    unsafe { pg_sys::smgrcreate(srel, MARKER, true) };
}

/// Creates, WAL-logs and syncs the (empty) init fork of `rnode`, as heap
/// does for an unlogged relation.
///
/// # Safety
/// `srel` is the open storage of `rnode`.
unsafe fn create_init_fork(srel: pg_sys::SMgrRelation, rnode: *const pg_sys::RelFileNode) {
    // SAFETY: per the contract.
    unsafe {
        pg_sys::smgrcreate(srel, pg_sys::ForkNumber::INIT_FORKNUM, false);
        // It may raise an ERROR (a longjmp): through PostgreSQL's guard.
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            log_smgrcreate(rnode, pg_sys::ForkNumber::INIT_FORKNUM)
        });
        // Replay recreates it, but only from the WAL after the next
        // checkpoint's redo point: sync it now, as heap does.
        pg_sys::smgrimmedsync(srel, pg_sys::ForkNumber::INIT_FORKNUM);
    }
}

unsafe extern "C-unwind" {
    /// `catalog/storage_xlog.h`, which pgrx does not bind: logs the
    /// creation of a fork (`XLOG_SMGR_CREATE`). Call it through
    /// `pg_guard_ffi_boundary`.
    fn log_smgrcreate(rnode: *const pg_sys::RelFileNode, fork: pg_sys::ForkNumber::Type);
}

/// The fork whose file is the marker: orioledb never writes free-space
/// maps, and PostgreSQL's recovery removes it with the other non-init
/// forks of an unlogged relation.
const MARKER: pg_sys::ForkNumber::Type = pg_sys::ForkNumber::FSM_FORKNUM;

/// What an unlogged relation's files say about its tree.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Init fork and marker: emptied since the last crash.
    Current,
    /// Init fork without the marker: holds rows of before a crash,
    /// promotion or restore.
    Stale,
    /// No init fork: made by a build that did not give unlogged relations
    /// one.
    Unmarked,
}

/// Empties unlogged table `rel`'s tree `id` (and its toast tree) if a
/// crash, promotion or restore happened since it was last emptied; see the
/// module documentation. A no-op for any other relation. On a server in
/// recovery, where the tree cannot be emptied, an ERROR as PostgreSQL
/// gives for unlogged tables there. A table made by a build without init
/// forks gets them now (its rows kept: no crash can be told from its files).
///
/// # Safety
/// `rel` is a valid, open, locked orioledb relation whose tree is `id`.
pub unsafe fn empty_after_crash(rel: pg_sys::Relation, id: TreeId) -> Vec<TreeId> {
    // SAFETY: per the contract.
    unsafe {
        if (*(*rel).rd_rel).relpersistence as u8 != pg_sys::RELPERSISTENCE_UNLOGGED
            || crate::pg::is_toast(rel)
            || state(rel) == State::Current
        {
            return Vec::new();
        }
        if pg_sys::RecoveryInProgress() {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "cannot access temporary or unlogged relations during recovery",
            );
        }
        // Catalog reads and other locks first: nothing else may be locked
        // while the extension lock is held (lock.c asserts it, and the
        // deadlock detector does not see that lock's waits).
        let desc = crate::am::layout::key_desc::KeyDesc::for_table(rel);
        let toast = toast_tree_id(rel);
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as _);
        let now = state(rel);
        let mut emptied = Vec::new();
        match now {
            State::Current => {}
            State::Stale => {
                pgrx::log!(
                    "orioledb: emptying unlogged table \"{}\" after a crash or restore",
                    crate::pg::rel_name(rel)
                );
                empty_tree(id, desc.map(|d| d.encode()));
                emptied.push(id);
                if let Some(t) = toast {
                    empty_tree(t, None);
                    emptied.push(t);
                }
            }
            State::Unmarked => {
                let node = (*rel).rd_node;
                create_init_fork(storage(rel), &node);
            }
        }
        if now != State::Current {
            create_marker(storage(rel));
        }
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as _);
        emptied
    }
}

/// What `rel`'s files say (see [`State`]).
///
/// # Safety
/// `rel` is a valid, open relation.
unsafe fn state(rel: pg_sys::Relation) -> State {
    // SAFETY: per the contract. smgrexists looks at the file system afresh
    // (it closes a fork it had open first, outside recovery).
    unsafe {
        let srel = storage(rel);
        if !pg_sys::smgrexists(srel, pg_sys::ForkNumber::INIT_FORKNUM) {
            State::Unmarked
        } else if pg_sys::smgrexists(srel, MARKER) {
            State::Current
        } else {
            State::Stale
        }
    }
}

/// `rel`'s storage (PostgreSQL's `RelationGetSmgr`, an inline function).
///
/// # Safety
/// `rel` is a valid, open relation.
unsafe fn storage(rel: pg_sys::Relation) -> pg_sys::SMgrRelation {
    // SAFETY: per the contract; smgropen returns the entry the relation
    // owns, or one that smgrsetowner hands to it.
    unsafe {
        if (*rel).rd_smgr.is_null() {
            let s = pg_sys::smgropen((*rel).rd_node, (*rel).rd_backend);
            pg_sys::smgrsetowner(&mut (*rel).rd_smgr, s);
        }
        (*rel).rd_smgr
    }
}

/// Empties tree `id` if it exists, then writes `desc` as its key
/// descriptor: the one the table's primary key asks for now, not the one
/// the tree held, which a crash between the two records (or an ERROR)
/// would otherwise lose for good.
fn empty_tree(id: TreeId, desc: Option<Vec<u8>>) {
    let e = engine();
    if !e.has_tree(id) {
        return;
    }
    e.truncate_tree(id).unwrap_or_else(|err| report(err));
    if let Some(d) = desc {
        let tree = e.tree(id).unwrap_or_else(|err| report(err));
        tree.upsert(crate::am::layout::table::DESC_KEY, &d).unwrap_or_else(|err| report(err));
    }
}

/// The tree id of `rel`'s toast relation, if it has one: its values
/// belong to rows that go with the table's. Read from its pg_class row
/// (`pg::orioledb_relfile`): no relcache entry or lock of its own.
///
/// # Safety
/// `rel` is a valid, open relation.
unsafe fn toast_tree_id(rel: pg_sys::Relation) -> Option<TreeId> {
    // SAFETY: per the contract.
    let toastoid = unsafe { (*(*rel).rd_rel).reltoastrelid };
    let (db, node) = crate::pg::orioledb_relfile(toastoid)?;
    Some(crate::pg::engine::tree_id(db, node))
}
