//! `orioledb_btree`: secondary indexes of orioledb tables stored in engine
//! trees, beside the table's, with a compression level of their own.
//!
//! An index is a tree of entries keyed by the encoded key columns and the
//! row's TID (`shape`), so it serves what a btree serves — equality,
//! ranges, ordered scans both ways, NULL tests, multi-column keys, INCLUDE
//! columns, index-only and bitmap scans — and it names rows by TID, as a
//! btree does: a HOT-like update, which keeps the indexed columns, inserts
//! no entry and the existing one still leads to the row (`layout::hot`).
//! Its trees are created, WAL-logged, checkpointed, replayed and dropped as
//! a table's (`storage::trees`). Not unique: primary keys, unique
//! constraints and ON CONFLICT arbiters stay PostgreSQL btrees.
//!
//! A room of its own at the top of the access method: it uses `layout`
//! (key encodings, descriptors) and `storage` (tree lives), nothing of the
//! table's rows.

pub mod build;
pub mod options;
pub mod scan;
pub mod shape;

use pgrx::pg_sys;

pgrx::extension_sql_file!("../../../sql/orioledb_btree.sql", name = "orioledb_btree");

crate::pg::fmgr_v1!(pg_finfo_orioledb_btree_handler);

/// Returns a new `IndexAmRoutine` of `orioledb_btree` (PostgreSQL copies
/// it into the relation cache). Works without the preloaded library:
/// CREATE OPERATOR CLASS asks for it while CREATE EXTENSION runs (the
/// callbacks that need the engine check for it).
#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: a zeroed node of the right size and tag, as makeNode makes it.
    unsafe {
        let r = pg_sys::palloc0(std::mem::size_of::<pg_sys::IndexAmRoutine>()) as *mut pg_sys::IndexAmRoutine;
        (*r).type_ = pg_sys::NodeTag::T_IndexAmRoutine;
        fill(&mut *r);
        pg_sys::Datum::from(r)
    }
}

/// The method's properties and callbacks (those left None are optional:
/// no mark/restore, no parallel scans, no properties beyond the defaults).
fn fill(r: &mut pg_sys::IndexAmRoutine) {
    r.amstrategies = pg_sys::BTMaxStrategyNumber as u16;
    r.amsupport = 1;
    r.amoptsprocnum = 0;
    r.amcanorder = true;
    r.amcanorderbyop = false;
    r.amcanbackward = true;
    r.amcanunique = false;
    r.amcanmulticol = true;
    r.amoptionalkey = true;
    r.amsearcharray = false;
    r.amsearchnulls = true;
    r.amstorage = false;
    r.amclusterable = false;
    r.ampredlocks = false;
    r.amcanparallel = false;
    r.amcaninclude = true;
    r.amusemaintenanceworkmem = false;
    r.amparallelvacuumoptions = 0;
    r.amkeytype = pg_sys::InvalidOid;
    r.ambuild = Some(build::ambuild);
    r.ambuildempty = Some(build::ambuildempty);
    r.aminsert = Some(build::aminsert);
    r.ambulkdelete = Some(build::ambulkdelete);
    r.amvacuumcleanup = Some(build::amvacuumcleanup);
    r.amcanreturn = Some(amcanreturn);
    r.amcostestimate = Some(amcostestimate);
    r.amoptions = Some(options::amoptions);
    r.amvalidate = Some(amvalidate);
    r.ambeginscan = Some(scan::ambeginscan);
    r.amrescan = Some(scan::amrescan);
    r.amgettuple = Some(scan::amgettuple);
    r.amgetbitmap = Some(scan::amgetbitmap);
    r.amendscan = Some(scan::amendscan);
}

/// Every column can be returned: entries hold the whole index tuple.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn amcanreturn(_index: pg_sys::Relation, _attno: std::ffi::c_int) -> bool {
    true
}

/// The operator classes are the extension's own (btree's operators and
/// comparison functions, `sql/orioledb_btree.sql`).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn amvalidate(_opclass: pg_sys::Oid) -> bool {
    true
}

unsafe extern "C-unwind" {
    /// selfuncs.c: btree's cost model, which fits any ordered index whose
    /// operators are btree's strategies. Not in pgrx's bindings.
    fn btcostestimate(
        root: *mut pg_sys::PlannerInfo,
        path: *mut pg_sys::IndexPath,
        loop_count: f64,
        startup: *mut pg_sys::Cost,
        total: *mut pg_sys::Cost,
        selectivity: *mut pg_sys::Selectivity,
        correlation: *mut f64,
        pages: *mut f64,
    );
}

/// `amcostestimate`: btree's, over the tree's pages (the index's
/// PostgreSQL file is empty, so the planner's page count is 0).
#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn amcostestimate(
    root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    // SAFETY: the planner passes a valid path whose index it has locked;
    // the relation is only looked up in the cache for its file and its
    // pg_class row.
    unsafe {
        let info = (*path).indexinfo;
        let rel = pg_sys::RelationIdGetRelation((*info).indexoid);
        if !rel.is_null() {
            let node = (*rel).rd_node;
            if let Ok(t) = crate::pg::engine::engine().tree(crate::pg::engine::tree_id(node.dbNode, node.relNode)) {
                (*info).pages = t.approx_pages().max(1) as pg_sys::BlockNumber;
            }
            // A partial index's entries were estimated from its empty
            // file (none): the count its build or VACUUM stored instead,
            // else the table's.
            if (*info).tuples <= 0.0 {
                let stored = (*(*rel).rd_rel).reltuples as f64;
                (*info).tuples = if stored > 0.0 { stored } else { (*(*info).rel).tuples };
            }
            pg_sys::RelationClose(rel);
        }
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            btcostestimate(root, path, loop_count, startup, total, selectivity, correlation, pages)
        });
    }
}
