//! A table's compression levels (`compress`, `primary_compress`,
//! `toast_compress`): how they are stored in `pg_class.reloptions`, what a
//! new table gets from the `orioledb.default_*compress` settings, how
//! ALTER TABLE's `SET`/`RESET` change them, and how they reach the table's
//! trees. Levels are -1 (off), 0 (zstd's default level) or 1..=22. The
//! utility hook that takes these options out of statements (PostgreSQL 15
//! has no reloption callback for table access methods) is
//! `hooks::utility`, one layer up.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::pg::guc::{COMPRESS_MAX, COMPRESS_OFF};

/// Name of the table access method these options belong to.
pub(crate) const AM_NAME: &str = "orioledb";

/// DETAIL of every "invalid value" error.
pub(crate) const RANGE_DETAIL: &str =
    "Valid values are integers from -1 (off) to 22; 0 means zstd's default level.";

/// One of the three table options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opt {
    /// `compress`: the table's level; the default for the other two.
    Compress,
    /// `primary_compress`: the primary (row) tree.
    Primary,
    /// `toast_compress`: the toast tree.
    Toast,
}

impl Opt {
    pub(crate) const ALL: [Opt; 3] = [Opt::Compress, Opt::Primary, Opt::Toast];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Opt::Compress => "compress",
            Opt::Primary => "primary_compress",
            Opt::Toast => "toast_compress",
        }
    }

    pub(crate) fn from_name(name: &[u8]) -> Option<Opt> {
        Opt::ALL.into_iter().find(|o| o.name().as_bytes() == name)
    }
}

/// The compression levels of one table, as stored in `pg_class.reloptions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    /// `compress`.
    pub compress: i32,
    /// `primary_compress`.
    pub primary: i32,
    /// `toast_compress`.
    pub toast: i32,
}

impl Levels {
    /// The levels a new table gets: each given option, else `compress` for
    /// primary/toast, else the GUC defaults (`default_primary_compress` and
    /// `default_toast_compress` when not -1, else `default_compress`).
    pub(crate) fn for_new_table(given: &GivenLevels) -> Levels {
        let default_compress = crate::pg::guc::default_compress();
        let guc_or = |specific: i32| {
            if specific != COMPRESS_OFF {
                specific
            } else {
                default_compress
            }
        };
        Levels {
            compress: given.compress.unwrap_or(default_compress),
            primary: given
                .primary
                .or(given.compress)
                .unwrap_or_else(|| guc_or(crate::pg::guc::default_primary_compress())),
            toast: given
                .toast
                .or(given.compress)
                .unwrap_or_else(|| guc_or(crate::pg::guc::default_toast_compress())),
        }
    }

    /// Applies one ALTER TABLE statement's `SET`s and `RESET`s to `self`:
    /// `RESET (compress)` puts all three back to what a new table would get
    /// now; `SET (compress = N)` sets all three to N; `RESET
    /// (primary_compress)` (or toast) makes it follow the table's `compress`;
    /// a specific `SET` always wins for its own tree.
    pub(crate) fn altered(self, set: &GivenLevels, reset: &[Opt]) -> Levels {
        let mut l = self;
        if reset.contains(&Opt::Compress) {
            l = Levels::for_new_table(&GivenLevels::default());
        }
        if let Some(c) = set.compress {
            l = Levels {
                compress: c,
                primary: c,
                toast: c,
            };
        }
        if reset.contains(&Opt::Primary) {
            l.primary = l.compress;
        }
        if reset.contains(&Opt::Toast) {
            l.toast = l.compress;
        }
        if let Some(p) = set.primary {
            l.primary = p;
        }
        if let Some(t) = set.toast {
            l.toast = t;
        }
        l
    }

    pub(crate) fn get(&self, opt: Opt) -> i32 {
        match opt {
            Opt::Compress => self.compress,
            Opt::Primary => self.primary,
            Opt::Toast => self.toast,
        }
    }
}

/// Our options given in one statement (validated values).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GivenLevels {
    pub(crate) compress: Option<i32>,
    pub(crate) primary: Option<i32>,
    pub(crate) toast: Option<i32>,
}

impl GivenLevels {
    pub(crate) fn slot(&mut self, opt: Opt) -> &mut Option<i32> {
        match opt {
            Opt::Compress => &mut self.compress,
            Opt::Primary => &mut self.primary,
            Opt::Toast => &mut self.toast,
        }
    }
}

/// The levels a table created now without options would get.
pub fn new_table_levels() -> Levels {
    Levels::for_new_table(&GivenLevels::default())
}

/// Reads stored levels of `reloid` from `pg_class.reloptions`.
///
/// Returns `(compress, primary_compress, toast_compress)`. A table created
/// without the hook (none stored) reads as `compress = -1`, and a missing
/// primary/toast level follows `compress`; the GUCs are deliberately not
/// consulted, so a table's levels never change behind its back. Raises
/// SQLSTATE 42P01 if there is no relation `reloid`.
pub fn table_compression(reloid: pg_sys::Oid) -> (i32, i32, i32) {
    let l = stored_levels(reloid);
    (l.compress, l.primary, l.toast)
}

/// [`table_compression`] as [`Levels`].
pub fn stored_levels(reloid: pg_sys::Oid) -> Levels {
    let mut found = [None; 3];
    for entry in read_reloptions(reloid) {
        if let Some((opt, value)) = parse_entry(&entry) {
            found[opt as usize] = Some(value);
        }
    }
    let compress = found[0].unwrap_or(COMPRESS_OFF);
    Levels {
        compress,
        primary: found[1].unwrap_or(compress),
        toast: found[2].unwrap_or(compress),
    }
}

/// `Some((option, level))` if `entry` ("name=value") is one of ours with a
/// valid level.
fn parse_entry(entry: &str) -> Option<(Opt, i32)> {
    let (name, value) = entry.split_once('=')?;
    let opt = Opt::from_name(name.as_bytes())?;
    let level = parse_level(value)?;
    Some((opt, level))
}

/// Whether a `reloptions` entry ("name=value") is one of ours.
fn is_our_entry(entry: &str) -> bool {
    entry
        .split_once('=')
        .is_some_and(|(name, _)| Opt::from_name(name.as_bytes()).is_some())
}

/// Parses a level: an integer within -1..=22, surrounding blanks allowed.
pub(crate) fn parse_level(text: &str) -> Option<i32> {
    let v: i32 = text.trim().parse().ok()?;
    (COMPRESS_OFF..=COMPRESS_MAX).contains(&v).then_some(v)
}

/// The entries of `pg_class.reloptions` of `reloid` (empty when NULL).
fn read_reloptions(reloid: pg_sys::Oid) -> Vec<String> {
    // SAFETY: syscache lookups are valid inside a transaction (every caller
    // is SQL or utility processing); the tuple is released before returning
    // and the array is copied into Rust strings while it is pinned.
    let entries = unsafe {
        crate::pg::with_syscache(pg_sys::SysCacheIdentifier::RELOID, reloid.into(), |tup| {
            let mut isnull = false;
            let datum = pg_sys::SysCacheGetAttr(
                pg_sys::SysCacheIdentifier::RELOID as i32,
                tup,
                pg_sys::Anum_pg_class_reloptions as pg_sys::AttrNumber,
                &mut isnull,
            );
            Vec::<Option<String>>::from_datum(datum, isnull).unwrap_or_default()
        })
    };
    let Some(entries) = entries else {
        crate::pg::error::raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", reloid.to_u32()),
        );
    };
    entries.into_iter().flatten().collect()
}

/// Replaces our entries in `pg_class.reloptions` of `reloid` by `levels`
/// (or just removes them when `None`), keeping every other option.
///
/// # Safety
/// Must run inside a transaction, with `reloid` locked by the caller against
/// concurrent DDL.
pub(crate) unsafe fn write_levels(reloid: pg_sys::Oid, levels: Option<Levels>) {
    let existing = read_reloptions(reloid);
    let mut entries: Vec<String> = existing
        .iter()
        .filter(|e| !is_our_entry(e))
        .cloned()
        .collect();
    if let Some(l) = levels {
        // Only what [`stored_levels`] would not infer: a missing `compress`
        // reads as off and a missing tree level follows `compress`, so a
        // table with the default levels stores nothing and `\d+` shows no
        // `Options:` line, as for a heap table.
        for opt in Opt::ALL {
            let implied = match opt {
                Opt::Compress => COMPRESS_OFF,
                Opt::Primary | Opt::Toast => l.compress,
            };
            if l.get(opt) != implied {
                entries.push(format!("{}={}", opt.name(), l.get(opt)));
            }
        }
    }
    let unchanged = entries == existing;
    const N: usize = pg_sys::Natts_pg_class as usize;
    const I: usize = pg_sys::Anum_pg_class_reloptions as usize - 1;
    let mut values = [pg_sys::Datum::from(0usize); N];
    let mut nulls = [false; N];
    let mut replace = [false; N];
    replace[I] = true;
    if entries.is_empty() {
        nulls[I] = true;
    } else {
        values[I] = entries.into_datum().expect("a Vec is never NULL");
    }
    // SAFETY: the documented catalog-update sequence (as in
    // ATExecSetRelOptions): pg_class is opened with RowExclusiveLock, the
    // tuple is a private copy, the arrays have Natts_pg_class entries, and the
    // CommandCounterIncrements make the change visible on both sides.
    // Unchanged (a table created with the default levels): no catalog
    // update, so CREATE TABLE does no more than on heap.
    if !unchanged {
     unsafe {
        pg_sys::CommandCounterIncrement();
        let rel = pg_sys::table_open(pg_sys::RelationRelationId, pg_sys::RowExclusiveLock as i32);
        let tup = pg_sys::SearchSysCacheCopy(
            pg_sys::SysCacheIdentifier::RELOID as i32,
            reloid.into(),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
            pg_sys::Datum::from(0usize),
        );
        if tup.is_null() {
            crate::pg::error::internal(format!(
                "orioledb_rs: cache lookup failed for relation {}",
                reloid.to_u32()
            ));
        }
        let newtup = pg_sys::heap_modify_tuple(
            tup,
            (*rel).rd_att,
            values.as_mut_ptr(),
            nulls.as_mut_ptr(),
            replace.as_mut_ptr(),
        );
        pg_sys::CatalogTupleUpdate(rel, &mut (*newtup).t_self, newtup);
        pg_sys::heap_freetuple(newtup);
        pg_sys::heap_freetuple(tup);
        pg_sys::table_close(rel, pg_sys::RowExclusiveLock as i32);
        pg_sys::CommandCounterIncrement();
     }
    }
    if let Some(l) = levels {
        // Pages written from now on use the new levels: the primary tree
        // the primary level, the toast tree the toast level.
        set_tree_compression(reloid, l.primary);
        if let Some(toast) = toast_relation_of(reloid) {
            set_tree_compression(toast, l.toast);
        }
    }
}

/// The toast relation of table `reloid`, if it has one.
fn toast_relation_of(reloid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a relcache lookup of a relation the caller has locked; the
    // reference is released before returning.
    unsafe {
        let rel = pg_sys::RelationIdGetRelation(reloid);
        if rel.is_null() {
            return None;
        }
        let toast = (*(*rel).rd_rel).reltoastrelid;
        pg_sys::RelationClose(rel);
        (toast != pg_sys::InvalidOid).then_some(toast)
    }
}

/// The table a toast relation belongs to: PostgreSQL names toast relations
/// `pg_toast_<table oid>` (and keeps that name across rewrites).
///
/// # Safety
/// `toast` is an open relation.
pub unsafe fn toast_owner(toast: pg_sys::Relation) -> Option<pg_sys::Oid> {
    // SAFETY: an open relation has its pg_class row; relname is NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr((*(*toast).rd_rel).relname.data.as_ptr()) };
    name.to_str()
        .ok()?
        .strip_prefix("pg_toast_")?
        .parse::<u32>()
        .ok()
        .map(pg_sys::Oid::from)
}


/// Sets the compression level of relation `reloid`'s tree (pages written
/// from now on), if it is an orioledb table or `orioledb_btree` index with
/// a tree; undone if the transaction rolls back ([`set_level`]).
pub fn set_tree_compression(reloid: pg_sys::Oid, level: i32) {
    let Some((db, relnode)) = crate::pg::engine_relfile(reloid) else {
        return;
    };
    match crate::pg::engine::engine().tree(crate::pg::engine::tree_id(db, relnode)) {
        Ok(t) => set_level(&t, level),
        Err(orioledb_engine::EngineError::NoSuchTree(_)) => {}
        Err(e) => crate::pg::engine::report(e),
    }
}

thread_local! {
    /// Levels this transaction changed: (tree, level before, subtransaction
    /// that changed it), oldest first. Invariant: empty between
    /// transactions.
    static UNDO: std::cell::RefCell<Vec<(orioledb_engine::TreeId, i32, pg_sys::SubTransactionId)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Sets `tree`'s level at once (this transaction's own writes use it) and
/// remembers the old one, which a rollback of the changing (sub)transaction
/// puts back: a tree's level follows its catalog options.
pub fn set_level(tree: &orioledb_engine::Tree, level: i32) {
    let before = tree.compress();
    if before == level {
        return;
    }
    tree.set_compress(level).unwrap_or_else(|e| crate::pg::engine::report(e));
    // SAFETY: plain read of the current subtransaction id.
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    UNDO.with(|u| u.borrow_mut().push((tree.id(), before, sub)));
}

/// After ALTER TABLE changed table `reloid`'s toast level (from
/// `before`; callers skip statements that left it): a toast tree that does
/// not exist yet would be made later in
/// this transaction at the new level (read from the transaction's own
/// catalog) and outlive a rollback, so a rollback sets it to `before`.
pub fn toast_level_before(reloid: pg_sys::Oid, before: i32) {
    let Some(toast) = toast_relation_of(reloid) else {
        return;
    };
    let Some((db, relnode)) = crate::pg::engine_relfile(toast) else {
        return;
    };
    let id = crate::pg::engine::tree_id(db, relnode);
    if !crate::pg::engine::tree_exists(id) {
        // SAFETY: plain read of the current subtransaction id.
        let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
        UNDO.with(|u| u.borrow_mut().push((id, before, sub)));
    }
}

/// Puts back the levels of `undone` (newest first); a tree dropped by the
/// same rollback is gone and skipped.
fn restore(undone: Vec<(orioledb_engine::TreeId, i32, pg_sys::SubTransactionId)>) {
    for (id, level, _) in undone.into_iter().rev() {
        let restored = match crate::pg::engine::engine().tree(id) {
            Ok(t) => t.set_compress(level),
            Err(orioledb_engine::EngineError::NoSuchTree(_)) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = restored {
            pgrx::warning!("orioledb: could not restore the compression level of tree {id}: {e}");
        }
    }
}

/// Keeps or undoes level changes at transaction end (`pg::xact`).
pub fn at_event(e: crate::pg::xact::Event) {
    use crate::pg::xact::Event::*;
    match e {
        // ROLLBACK PREPARED runs where this list is not: a prepared
        // transaction must not leave a level to undo.
        PrePrepare if UNDO.with(|u| !u.borrow().is_empty()) => crate::pg::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "orioledb: cannot PREPARE a transaction that changed a compression level",
        ),
        Commit | Prepare => UNDO.with(|u| u.borrow_mut().clear()),
        Abort => restore(UNDO.with(|u| std::mem::take(&mut *u.borrow_mut()))),
        SubCommit { sub, parent } => UNDO.with(|u| {
            for e in u.borrow_mut().iter_mut().filter(|e| e.2 == sub) {
                e.2 = parent;
            }
        }),
        SubAbort { sub } => {
            let mine = UNDO.with(|u| {
                let mut all = u.borrow_mut();
                let (mine, rest) = all.drain(..).partition(|e| e.2 == sub);
                *all = rest;
                mine
            });
            restore(mine);
        }
        PreCommit | PrePrepare | Other => {}
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("3"), Some(3));
        assert_eq!(parse_level(" -1 "), Some(-1));
        assert_eq!(parse_level("22"), Some(22));
        assert_eq!(parse_level("23"), None);
        assert_eq!(parse_level("-2"), None);
        assert_eq!(parse_level("abc"), None);
        assert_eq!(parse_level("1.5"), None);
        assert_eq!(parse_entry("primary_compress=7"), Some((Opt::Primary, 7)));
        assert_eq!(parse_entry("fillfactor=70"), None);
        assert!(is_our_entry("toast_compress=1"));
        assert!(!is_our_entry("toast.autovacuum_enabled=false"));
    }
}
