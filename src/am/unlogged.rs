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
//! A relation made by a build without init forks has neither file and is
//! left alone.

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
        pg_sys::smgrcreate(srel, pg_sys::ForkNumber::INIT_FORKNUM, false);
        // It may raise an ERROR (a longjmp): through PostgreSQL's guard.
        pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| {
            log_smgrcreate(rnode, pg_sys::ForkNumber::INIT_FORKNUM)
        });
        // Replay recreates it, but only from the WAL after the next
        // checkpoint's redo point: sync it now, as heap does.
        pg_sys::smgrimmedsync(srel, pg_sys::ForkNumber::INIT_FORKNUM);
        pg_sys::smgrcreate(srel, MARKER, false);
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

/// Empties unlogged table `rel`'s tree `id` (and its toast tree) if a
/// crash, promotion or restore happened since it was last emptied; see the
/// module documentation. A no-op for any other relation. On a server in
/// recovery, where the tree cannot be emptied, an ERROR as PostgreSQL
/// gives for unlogged tables there.
///
/// # Safety
/// `rel` is a valid, open, locked orioledb relation whose tree is `id`.
pub unsafe fn empty_after_crash(rel: pg_sys::Relation, id: TreeId) {
    // SAFETY: per the contract.
    unsafe {
        if (*(*rel).rd_rel).relpersistence as u8 != pg_sys::RELPERSISTENCE_UNLOGGED
            || crate::am::rows::is_toast(rel)
            || !needs_emptying(rel)
        {
            return;
        }
        if pg_sys::RecoveryInProgress() {
            pgrx::ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "cannot access temporary or unlogged relations during recovery"
            );
        }
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as _);
        if needs_emptying(rel) {
            pgrx::log!(
                "orioledb: emptying unlogged table \"{}\" after a crash or restore",
                crate::am::rows::rel_name(rel)
            );
            empty_tree(id, true);
            empty_toast(rel);
            pg_sys::smgrcreate(storage(rel), MARKER, false);
        }
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as _);
    }
}

/// Whether `rel` has its init fork but not the marker.
///
/// # Safety
/// `rel` is a valid, open relation.
unsafe fn needs_emptying(rel: pg_sys::Relation) -> bool {
    // SAFETY: per the contract. smgrexists looks at the file system afresh
    // (it closes a fork it had open first, outside recovery).
    unsafe {
        let srel = storage(rel);
        pg_sys::smgrexists(srel, pg_sys::ForkNumber::INIT_FORKNUM) && !pg_sys::smgrexists(srel, MARKER)
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

/// Empties tree `id` if it exists, keeping its key descriptor when `keyed`
/// (what the table's indexes and layout say it is keyed by).
fn empty_tree(id: TreeId, keyed: bool) {
    let e = engine();
    let Ok(tree) = e.tree(id) else { return };
    let desc = if keyed {
        tree.get(crate::am::table::DESC_KEY).unwrap_or_else(|err| report(err))
    } else {
        None
    };
    e.truncate_tree(id).unwrap_or_else(|err| report(err));
    if let Some(d) = desc {
        let tree = e.tree(id).unwrap_or_else(|err| report(err));
        tree.upsert(crate::am::table::DESC_KEY, &d).unwrap_or_else(|err| report(err));
    }
    crate::am::rows::forget_tree(id);
}

/// Empties the toast tree of `rel`, if it has one: its values belong to
/// rows that are gone.
///
/// # Safety
/// `rel` is a valid, open relation.
unsafe fn empty_toast(rel: pg_sys::Relation) {
    // SAFETY: per the contract.
    unsafe {
        let toastoid = (*(*rel).rd_rel).reltoastrelid;
        if toastoid == pg_sys::InvalidOid {
            return;
        }
        let toast = pg_sys::table_open(toastoid, pg_sys::AccessShareLock as _);
        let node = (*toast).rd_node;
        pg_sys::table_close(toast, pg_sys::NoLock as _);
        empty_tree(crate::pg::engine::tree_id(node.dbNode, node.relNode), false);
    }
}
