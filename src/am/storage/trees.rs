//! The life of a table's engine trees, following PostgreSQL's transactions.
//!
//! A tree is created when PostgreSQL assigns the table a relation file
//! (`relation_set_new_filenode`: CREATE TABLE, TRUNCATE, rewrites) and must
//! disappear if that transaction rolls back; a tree whose table is dropped
//! (or whose file is replaced) must disappear when that transaction commits
//! and stay if it rolls back. PostgreSQL keeps the same kind of list for
//! heap files (`catalog/storage.c`, private to the server), so we keep ours:
//! entries are tagged with the subtransaction that made them, run or dropped
//! when it aborts, and handed to the parent when it commits.
//!
//! A toast relation's tree is the exception: it is created with the first
//! value that goes out of line ([`create_toast_tree`]), so a table whose
//! values all stay inline has no toast files. Such a tree outlives the
//! transaction that created it (another one may have stored values in it
//! meanwhile) unless the relation's file is new in that transaction: then
//! it goes with the subtransaction that made the file.

use crate::pg::engine::{engine, report, tree_id};
use crate::pg::orioledb_relfile;
use orioledb_engine::{EngineError, TreeId, TreeOptions};
use pgrx::pg_sys;
use std::cell::RefCell;

/// What to do with a tree at the end of the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// Drop it if the transaction (or the subtransaction) aborts.
    DropAtAbort,
    /// Drop it when the transaction commits.
    DropAtCommit,
}

/// Invariant: only this backend's open transaction's entries; empty between
/// transactions.
#[derive(Clone, Copy, Debug)]
struct Pending {
    tree: TreeId,
    when: When,
    subid: pg_sys::SubTransactionId,
}

thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

fn remember(tree: TreeId, when: When) {
    // SAFETY: plain read of the current subtransaction id.
    remember_in(tree, when, unsafe { pg_sys::GetCurrentSubTransactionId() });
}

/// `InvalidSubTransactionId` (utils/relcache.h: "not created in this
/// transaction").
const INVALID_SUBXACT: pg_sys::SubTransactionId = 0;

/// [`remember`] on behalf of subtransaction `subid` of this transaction
/// (one that is still open: the current one or a parent).
fn remember_in(tree: TreeId, when: When, subid: pg_sys::SubTransactionId) {
    PENDING.with(|p| p.borrow_mut().push(Pending { tree, when, subid }));
}

/// Drops trees at transaction end. Failures cannot be raised after commit,
/// so they become WARNINGs (the tree then stays until removed by hand).
fn drop_trees(trees: impl IntoIterator<Item = TreeId>) {
    let mut left = 0;
    for t in trees {
        // Every one is tried: a resident tree drops without a new slot.
        match engine().drop_tree(t) {
            Ok(()) | Err(EngineError::NoSuchTree(_)) => {}
            // A dropped tree keeps its slot until the next engine
            // checkpoint, and dropping an evicted tree takes a slot: many
            // drops at once (DROP DATABASE, DROP SCHEMA ... CASCADE) run
            // out. The rest are orphans once their relation files are gone
            // (at once here: the relations are dropped), which the sweep
            // after each checkpoint drops; the checkpointer takes one early
            // when slots run short. No checkpoint here: this runs at
            // commit, where an ERROR cannot be raised.
            Err(EngineError::TooManyTrees(_)) => left += 1,
            Err(e) => pgrx::warning!("orioledb: could not drop tree {t}: {e}"),
        }
    }
    if left > 0 {
        pgrx::log!("orioledb: {left} dropped trees wait for the orphan sweep after the next engine checkpoint");
    }
}

/// Creates the tree of a relation getting the new file `rnode` (a toast
/// relation's only with its first value, [`create_toast_tree`]) and
/// arranges for the old one (if the relation had a tree) to go at
/// commit. Compression starts at the level a new table would get now; the
/// options hook sets the stored level right after CREATE TABLE.
///
/// # Safety
/// `rel` is an open relation, `rnode` a valid pointer.
pub unsafe fn new_relation_file(rel: pg_sys::Relation, rnode: *const pg_sys::RelFileNode) {
    // SAFETY: per the contract.
    let (old, new) = unsafe {
        let old = (*rel).rd_node;
        (old, *rnode)
    };
    let id = tree_id(new.dbNode, new.relNode);
    // A relation getting a new file (TRUNCATE, rewrite) keeps its stored
    // level; a brand-new one starts at the defaults, and the options hook
    // applies the CREATE statement's own options right after.
    let replacing = old.relNode != new.relNode && old.relNode != pg_sys::InvalidOid;
    // SAFETY: `rel` is an open relation (contract).
    let is_toast = unsafe { crate::pg::is_toast(rel) };
    let level = match (replacing, is_toast) {
        // A toast relation's level is its table's toast level.
        // SAFETY: as above.
        (true, true) => unsafe { crate::am::storage::levels::toast_owner(rel) }
            .map(|t| crate::am::storage::levels::stored_levels(t).toast)
            .unwrap_or(-1),
        // SAFETY: as above.
        (true, false) => crate::am::storage::levels::stored_levels(unsafe { (*rel).rd_id }).primary,
        (false, true) => crate::am::storage::levels::new_table_levels().toast,
        (false, false) => crate::am::storage::levels::new_table_levels().primary,
    };
    let engine = engine();
    let leftover = crate::pg::engine::tree_exists(id);
    // SAFETY: `rel` is an open relation (contract).
    let temp = unsafe { (*(*rel).rd_rel).relpersistence } as u8 == pg_sys::RELPERSISTENCE_TEMP;
    if other_kind_has_file(new.dbNode.to_u32(), new.relNode.to_u32(), temp) {
        // PostgreSQL checks a new file number only against files of its
        // own kind (`t<backend>_N` or `N`), so after OID wraparound a
        // temporary and a permanent relation can get the same one, and one
        // tree id: a tree under it is live, not left over, and a toast
        // relation would take the other's tree for its own with its first
        // value. Retrying picks another number.
        crate::pg::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
            format!(
                "orioledb: relation file number {} is in use by a {} relation; try again",
                new.relNode.to_u32(),
                if temp { "permanent" } else { "temporary" }
            ),
        );
    }
    if leftover {
        // PostgreSQL picks relation file numbers without looking at our
        // files, so it can hand out one whose tree a crash left behind (its
        // table dropped after the last engine checkpoint): start it empty.
        engine.truncate_tree(id).unwrap_or_else(|e| report(e));
    }
    // A toast relation gets its tree with its first value.
    if !is_toast || leftover {
        open_or_create(id, level);
        remember(id, When::DropAtAbort);
    }
    if replacing {
        let old_id = tree_id(old.dbNode, old.relNode);
        // has_tree, not tree(): a damaged tree must go with its file too.
        if engine.has_tree(old_id) {
            remember(old_id, When::DropAtCommit);
        }
    }
}

/// Whether a relation of the other kind than a new `temp` (or permanent)
/// one has file number `rel` in database `db`: a main fork `base/<db>/<rel>`
/// for a temporary one (every relation has one), a `t<backend>_<rel>`
/// main fork for a permanent one, of any backend (one lookup per backend
/// id: listing the directory instead cost every CREATE TABLE time in
/// proportion to the database's files, 20 ms per table at 10,000 tables).
/// Only the default tablespace: orioledb relations live nowhere else.
fn other_kind_has_file(db: u32, rel: u32, temp: bool) -> bool {
    if temp {
        return std::path::Path::new(&format!("base/{db}/{rel}")).exists();
    }
    // SAFETY: a plain read of a global set at postmaster start.
    let backends = unsafe { pg_sys::MaxBackends };
    (1..=backends).any(|b| std::path::Path::new(&format!("base/{db}/t{b}_{rel}")).exists())
}

/// The empty tree of secondary index `index` (an `orioledb_btree` index
/// being built on its current relation file) at compression `level`. A
/// tree already under that file — left over by a crash, or the same file
/// built again (TRUNCATE of a table created in this transaction empties
/// its indexes in place) — is emptied. Dropped if the transaction rolls
/// back; a file the index leaves (REINDEX, TRUNCATE) loses its tree to the
/// orphan sweep once PostgreSQL has removed the file.
///
/// # Safety
/// `index` is an open index relation.
pub unsafe fn new_index_tree(index: pg_sys::Relation, level: i32) -> orioledb_engine::Tree {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*index).rd_node };
    let id = tree_id(node.dbNode, node.relNode);
    let engine = engine();
    if crate::pg::engine::tree_exists(id) {
        engine.truncate_tree(id).unwrap_or_else(|e| report(e));
    }
    let tree = open_or_create(id, level);
    tree.set_compress(level).unwrap_or_else(|e| report(e));
    remember(id, When::DropAtAbort);
    tree
}

/// Opens tree `id`, creating it at compression `level` if it does not
/// exist (atomically: two processes asking at once get the same tree).
fn open_or_create(id: TreeId, level: i32) -> orioledb_engine::Tree {
    let opts = TreeOptions {
        compress: level,
        ..Default::default()
    };
    let engine = engine();
    let opened = match engine.open_tree(id, opts.clone()) {
        // The engine makes room by evicting idle trees (those exactly as
        // the last checkpoint wrote them, which no process holds), and
        // the slots of dropped tables come back at the next engine
        // checkpoint: when every resident tree changed since the last
        // one, or slots wait for one, take one now rather than fail.
        Err(EngineError::TooManyTrees(_) | EngineError::MetadataFull(_)) => {
            crate::pg::engine::checkpoint().unwrap_or_else(|e| report(e));
            engine.open_tree(id, opts)
        }
        r => r,
    };
    opened.unwrap_or_else(|e| report(e))
}

/// The tree of toast relation `rel` if it has one yet (see the module
/// documentation).
///
/// # Safety
/// `rel` is an open toast relation of our AM.
pub unsafe fn toast_tree(rel: pg_sys::Relation) -> Option<orioledb_engine::Tree> {
    // SAFETY: an open relation has a valid rd_node.
    let node = unsafe { (*rel).rd_node };
    match engine().tree(tree_id(node.dbNode, node.relNode)) {
        Ok(t) => Some(t),
        Err(EngineError::NoSuchTree(_)) => None,
        Err(e) => report(e),
    }
}

/// The tree of toast relation `rel`, created now if this is its first
/// value, at the toast level its table stores. Dropped with an abort only
/// of the subtransaction that gave the relation its file, when that is
/// part of this transaction: nobody else can see such a relation, so
/// nobody else stored a value in the tree, and the file goes too.
///
/// # Safety
/// `rel` is an open toast relation of our AM, locked for writing.
pub unsafe fn create_toast_tree(rel: pg_sys::Relation) -> orioledb_engine::Tree {
    // SAFETY: per the contract.
    if let Some(t) = unsafe { toast_tree(rel) } {
        return t;
    }
    // SAFETY: per the contract (rd_node, rd_newRelfilenodeSubid and
    // rd_createSubid of an open relation: the open subtransaction of this
    // transaction that gave it its file or created it, else invalid).
    let (id, file_sub) = unsafe {
        let node = (*rel).rd_node;
        let sub = [(*rel).rd_newRelfilenodeSubid, (*rel).rd_createSubid]
            .into_iter()
            .find(|s| *s != INVALID_SUBXACT);
        (tree_id(node.dbNode, node.relNode), sub)
    };
    // SAFETY: per the contract.
    let level = unsafe { crate::am::storage::levels::toast_owner(rel) }
        .map(|t| crate::am::storage::levels::stored_levels(t).toast)
        .unwrap_or(-1);
    let tree = open_or_create(id, level);
    if let Some(sub) = file_sub {
        remember_in(id, When::DropAtAbort, sub);
    }
    tree
}




/// A relation is being dropped (`hooks::object_access`, with its catalog
/// row still there): the tree of an orioledb table or `orioledb_btree`
/// index goes when the transaction commits. Whether it is one of those.
pub fn relation_dropped(reloid: pg_sys::Oid) -> bool {
    let Some((db, relnode)) = crate::pg::engine_relfile(reloid) else {
        return false;
    };
    let id = tree_id(db, relnode);
    if engine().has_tree(id) {
        remember(id, When::DropAtCommit);
    }
    true
}

/// The orioledb table whose primary-key index is `index`, if it is one.
pub fn primary_key_owner(index: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a syscache lookup of pg_index by index oid; the tuple is
    // released before returning and only its fixed-width part is read.
    let (primary, table) = unsafe {
        crate::pg::with_syscache(pg_sys::SysCacheIdentifier::INDEXRELID, index.into(), |tup| {
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tup);
            ((*form).indisprimary, (*form).indrelid)
        })
    }?;
    (primary && orioledb_relfile(table).is_some()).then_some(table)
}

/// The trees this transaction made or dropped, at its end (`pg::xact`). A
/// prepared transaction's trees are settled by their files: PostgreSQL
/// creates or unlinks the relation files at COMMIT/ROLLBACK PREPARED (in
/// whichever session, also after a restart), and the checkpointer's sweep
/// then drops every tree whose file is gone.
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    match e {
        Prepare => PENDING.with(|p| p.borrow_mut().clear()),
        Commit | Abort => {
            let want = if e == Commit {
                When::DropAtCommit
            } else {
                When::DropAtAbort
            };
            let all = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
            if !all.is_empty() {
                drop_trees(all.into_iter().filter(|e| e.when == want).map(|e| e.tree));
            }
        }
        SubCommit { sub, parent } => PENDING.with(|p| {
            for e in p.borrow_mut().iter_mut().filter(|e| e.subid == sub) {
                e.subid = parent;
            }
        }),
        SubAbort { sub } => {
            let mine: Vec<Pending> = PENDING.with(|p| {
                let mut all = p.borrow_mut();
                let (mine, rest) = all.drain(..).partition(|e| e.subid == sub);
                *all = rest;
                mine
            });
            drop_trees(
                mine.into_iter()
                    .filter(|e| e.when == When::DropAtAbort)
                    .map(|e| e.tree),
            );
        }
        PreCommit | PrePrepare | Other => {}
    }
}

/// Whether database `db` has engine trees (its orioledb tables' storage).
pub fn database_has_trees(db: pg_sys::Oid) -> bool {
    let db = db.to_u32();
    crate::pg::engine::tree_ids().iter().any(|t| t.db == db)
}

/// After `CREATE DATABASE ... TEMPLATE`: PostgreSQL copied the template's
/// relation files under the same relfilenodes (either strategy), so each
/// tree of `template` is copied to the same relfilenode in `new`, in its
/// key order (a collated key's comparator comes from the tree's
/// descriptor, as in WAL replay) and logged, so a crash after the commit
/// or a standby has the copies. The copies are dropped if the transaction
/// aborts (an ERROR here aborts the CREATE DATABASE).
pub fn copy_database_trees(template: pg_sys::Oid, new: pg_sys::Oid) {
    let (template, new) = (template.to_u32(), new.to_u32());
    let e = engine();
    let sources: Vec<TreeId> = crate::pg::engine::tree_ids().into_iter().filter(|t| t.db == template).collect();
    for id in sources {
        let to = TreeId::new(new, id.rel);
        // The database was created just now: a tree under its id can only
        // be a leftover of an earlier attempt that crashed before its
        // commit (replay rebuilt its copies) and an OID used again.
        if crate::pg::engine::tree_exists(to) {
            drop_trees([to]);
        }
        // Dropped at abort like a new table's tree, whatever ends the
        // transaction (this copy's ERROR, a cancel, a failing commit).
        remember(to, When::DropAtAbort);
        // The source's order as a table reads it (its descriptor's).
        let src = crate::am::layout::table::Table::open(e.tree(id).unwrap_or_else(|err| report(err)));
        e.copy_tree(id, to, src.tree.cmp_arc()).unwrap_or_else(|err| report(err));
    }
}

/// After DROP DATABASE: its trees go too (their files at the next engine
/// checkpoint). DROP DATABASE runs outside any transaction block, so this is
/// final.
pub fn drop_database_trees(db: pg_sys::Oid) {
    let db = db.to_u32();
    drop_trees(crate::pg::engine::tree_ids().into_iter().filter(|t| t.db == db));
}

/// Drops trees whose relation file is gone. Every tree's relation has an
/// empty main fork `base/<db>/<relfilenode>` (`t<backend>_<relfilenode>`
/// for temporary tables) that PostgreSQL creates before the tree and
/// unlinks after the transaction that dropped the relation — or rolled
/// back its creation — has ended (at the next checkpoint; at once in WAL
/// replay). So a tree is garbage exactly when its file is gone: after a
/// crash between a DROP's commit and the tree drop, and after COMMIT
/// PREPARED of a DROP or ROLLBACK PREPARED of a CREATE, which may run in
/// another session or after a restart, where no transaction callback of
/// ours sees them. Runs in the checkpointer worker (the data directory is
/// its working directory) after recovery and after every engine checkpoint.
///
/// Trees are listed before the files: a tree is created after its file,
/// so one created while this runs is never taken for an orphan. (A
/// relation file number is reused only after its file is unlinked and the
/// OID counter comes round again, not between the listing and the drop.)
pub fn sweep_orphans() {
    let engine = engine();
    let trees = crate::pg::engine::tree_ids();
    let mut files: std::collections::HashMap<u32, std::collections::HashSet<u32>> =
        std::collections::HashMap::new();
    for id in trees {
        let present = files.entry(id.db).or_insert_with(|| relation_files(id.db));
        if present.contains(&id.rel) {
            continue;
        }
        pgrx::debug1!(
            "orioledb: dropping tree {}/{}: its relation file is gone",
            id.db,
            id.rel
        );
        match engine.drop_tree(id) {
            Ok(()) | Err(EngineError::NoSuchTree(_)) => {}
            // Slots full of trees dropped since the checkpoint: the next
            // one frees them, and its sweep takes the rest.
            Err(EngineError::TooManyTrees(_)) => {}
            Err(e) => pgrx::warning!("orioledb: could not drop orphan tree {}/{}: {e}", id.db, id.rel),
        }
    }
}

/// The relation file numbers that have a file in database `db`'s
/// directories (any fork or segment, temporary ones included): `base/<db>`
/// and the database's directory in every tablespace, so that a database
/// moved or created elsewhere keeps its trees (orioledb tables are refused
/// outside the default tablespace, and so are the database statements
/// that would move them, yet a tree must never be taken for an orphan
/// because its file lies where this did not look). None when no directory
/// exists (a dropped database); every number the database's trees use
/// when one cannot be read, so an I/O error drops nothing.
fn relation_files(db: u32) -> std::collections::HashSet<u32> {
    let mut out = std::collections::HashSet::new();
    for path in database_dirs(db) {
        let dir = match std::fs::read_dir(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                pgrx::warning!("orioledb: cannot list {}: {e}", path.display());
                // Keep every tree of this database: report them all present.
                return crate::pg::engine::tree_ids()
                    .into_iter()
                    .filter(|t| t.db == db)
                    .map(|t| t.rel)
                    .collect();
            }
        };
        for entry in dir.flatten() {
            if let Some(rel) = relation_file_number(&entry.file_name().to_string_lossy()) {
                out.insert(rel);
            }
        }
    }
    out
}

/// Where database `db`'s relation files may lie: `base/<db>` and, for
/// every tablespace, `pg_tblspc/<oid>/PG_<major>_<catalog version>/<db>` (only
/// this server's version directory: a location may hold other entries, an
/// unreadable `lost+found` or an older cluster's directory).
fn database_dirs(db: u32) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![std::path::PathBuf::from(format!("base/{db}"))];
    let Ok(spaces) = std::fs::read_dir("pg_tblspc") else {
        return dirs;
    };
    // PostgreSQL's TABLESPACE_VERSION_DIRECTORY.
    let major = pg_sys::PG_MAJORVERSION.to_string_lossy();
    let version = format!("PG_{major}_{}", pg_sys::CATALOG_VERSION_NO);
    for space in spaces.flatten() {
        if space.file_name().to_string_lossy().parse::<u32>().is_ok() {
            dirs.push(space.path().join(&version).join(db.to_string()));
        }
    }
    dirs
}

/// The relation file number a file name under `base/<db>` belongs to:
/// `<n>`, `<n>_<fork>`, `<n>.<segment>`, and `t<backend>_<n>…` for
/// temporary relations.
fn relation_file_number(name: &str) -> Option<u32> {
    let name = match name.strip_prefix('t') {
        Some(rest) => rest.split_once('_')?.1,
        None => name,
    };
    let digits = name.split(['_', '.']).next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod unit {
    use super::relation_file_number;

    #[test]
    fn file_names_map_to_relation_numbers() {
        assert_eq!(relation_file_number("16384"), Some(16384));
        assert_eq!(relation_file_number("16384_fsm"), Some(16384));
        assert_eq!(relation_file_number("16384.2"), Some(16384));
        assert_eq!(relation_file_number("t3_16390"), Some(16390));
        assert_eq!(relation_file_number("t3_16390_init"), Some(16390));
        assert_eq!(relation_file_number("pg_filenode.map"), None);
        assert_eq!(relation_file_number("PG_VERSION"), None);
        assert_eq!(relation_file_number("pg_internal.init"), None);
    }
}
