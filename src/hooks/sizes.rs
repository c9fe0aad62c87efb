//! PostgreSQL's size functions for relations stored in engine trees.
//!
//! `pg_relation_size`, `pg_table_size`, `pg_indexes_size` and
//! `pg_total_relation_size` measure the files under `base/`, where an
//! orioledb table keeps only empty forks, so stock PostgreSQL reports 0
//! bytes for it (in `\dt+`, `\d+` and every monitoring query). Their code
//! has no hook, so the parse-analysis hook swaps them, in the queries a
//! session runs, for this module's functions: the stock function's result
//! plus the pages of the engine trees the relation owns — its primary tree
//! (with the row-id map), its toast tree, and its `orioledb_btree` indexes'
//! trees — at `BLCKSZ` each, which is what heap counts for its blocks.
//!
//! Only statements a session runs are changed. A view's stored query keeps
//! the stock functions (storing ours would make every such view depend on
//! the extension), so does a materialized view's; other stored expressions
//! (rules, SQL-standard function bodies, defaults, constraints, policies)
//! and scalar SQL functions the planner inlines are analysed without the
//! hook. The README says so.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::c_void;

/// The stock functions this module stands in for (`pg_proc.dat`).
const PG_RELATION_SIZE: u32 = 2332; // pg_relation_size(regclass, text)
/// The one-argument `pg_relation_size`, a SQL function running the other
/// with `'main'`: its calls gain that argument.
const PG_RELATION_SIZE_OF_MAIN: u32 = 2325;
const PG_TABLE_SIZE: u32 = 2997;
const PG_INDEXES_SIZE: u32 = 2998;
const PG_TOTAL_RELATION_SIZE: u32 = 2286;

/// Each stock function, the function of ours that replaces it, and the
/// number of arguments ours takes.
const SWAPPED: [(u32, &str, i32); 5] = [
    (PG_RELATION_SIZE, "orioledb_pg_relation_size", 2),
    (PG_RELATION_SIZE_OF_MAIN, "orioledb_pg_relation_size_main", 2),
    (PG_TABLE_SIZE, "orioledb_pg_table_size", 1),
    (PG_INDEXES_SIZE, "orioledb_pg_indexes_size", 1),
    (PG_TOTAL_RELATION_SIZE, "orioledb_pg_total_relation_size", 1),
];

/// A `CREATE VIEW` being run: the statement text and location its query is
/// analysed with (`DefineView` passes the utility statement's own), and the
/// transaction nesting level it runs at. Invariant: pushed and popped around
/// the statement; an ERROR longjmps past the pop, and the (sub)transaction's
/// abort drops the entries of its level and deeper.
struct ViewDefinition {
    text: usize,
    location: i32,
    level: i32,
}

thread_local! {
    /// The views being defined, innermost last (see the module comment).
    static VIEWS: std::cell::RefCell<Vec<ViewDefinition>> = const { std::cell::RefCell::new(Vec::new()) };
}

static mut PREV_POST_PARSE: pg_sys::post_parse_analyze_hook_type = None;

/// Installs the parse-analysis hook and the view list's reset (from
/// `_PG_init`).
pub fn install() {
    // SAFETY: single-threaded `_PG_init`; the documented way to chain hooks.
    unsafe {
        PREV_POST_PARSE = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(post_parse);
    }
    crate::pg::xact::on_event(|e| match e {
        crate::pg::xact::Event::Abort => VIEWS.with(|v| v.borrow_mut().clear()),
        crate::pg::xact::Event::SubAbort { .. } => {
            // SAFETY: a plain read of the transaction state; the callback
            // runs while the aborting subtransaction is still current.
            let level = unsafe { pg_sys::GetCurrentTransactionNestLevel() };
            VIEWS.with(|v| v.borrow_mut().retain(|d| d.level < level));
        }
        _ => {}
    });
}

/// Runs `f`, the `CREATE VIEW` statement at `location` of `text`, so that
/// the query it stores keeps the stock functions. Only that query: event
/// triggers and functions it runs on the way are analysed as always.
pub fn defining_view(text: *const std::ffi::c_char, location: i32, f: impl FnOnce()) {
    // SAFETY: a plain read of the transaction state.
    let level = unsafe { pg_sys::GetCurrentTransactionNestLevel() };
    VIEWS.with(|v| v.borrow_mut().push(ViewDefinition { text: text as usize, location, level }));
    f();
    VIEWS.with(|v| v.borrow_mut().pop());
}

/// Whether `query` is the one a `CREATE VIEW` being run analyses.
///
/// # Safety
/// `pstate` and `query` are the hook's arguments.
unsafe fn is_view_query(pstate: *const pg_sys::ParseState, query: *const pg_sys::Query) -> bool {
    // SAFETY: per the contract.
    let (text, location, select) = unsafe {
        (
            (*pstate).p_sourcetext as usize,
            (*query).stmt_location,
            (*query).commandType == pg_sys::CmdType::CMD_SELECT,
        )
    };
    select && VIEWS.with(|v| v.borrow().iter().any(|d| d.text == text && d.location == location))
}

/// The hook. Not a pgrx error boundary: an ERROR of the previous hook
/// reaches PostgreSQL with its fields, and most statements leave after a
/// scan of their text; the walk runs behind one ([`swap_in`]).
unsafe extern "C-unwind" fn post_parse(
    pstate: *mut pg_sys::ParseState,
    query: *mut pg_sys::Query,
    jstate: *mut pg_sys::JumbleState,
) {
    // SAFETY: PostgreSQL passes the analysed query of `pstate`'s text; the
    // previous hook takes the same arguments.
    unsafe {
        if let Some(prev) = PREV_POST_PARSE {
            prev(pstate, query, jstate);
        }
        // An aborted transaction reads no catalogs (ROLLBACK TO a savepoint
        // named like a size function is analysed in one).
        if pg_sys::IsTransactionState()
            && mentions_size((*pstate).p_sourcetext, query)
            && !is_view_query(pstate, query)
        {
            swap_in(query);
        }
    }
}

/// Swaps the size functions' calls in `query` (see the module comment).
///
/// # Safety
/// `query` is an analysed query not yet planned (the caller's to change).
#[pg_guard]
unsafe extern "C-unwind" fn swap_in(query: *mut pg_sys::Query) {
    // SAFETY: per the contract; the walk only rewrites function OIDs (and
    // appends a constant argument) in nodes of `query`.
    unsafe {
        let Some(root) = statement_query(query) else { return };
        let Some(mut ours) = replacements() else { return };
        pg_sys::query_tree_walker(root, Some(swap), &mut ours as *mut _ as *mut c_void, 0);
    }
}

/// Whether the text of `query` (its statement's part of `text`) may call a
/// size function: each of them ends in `_size`, and most statements do not
/// contain it, so they skip the walk. Only the statement's own part is read:
/// a string of many statements is analysed one statement at a time.
///
/// # Safety
/// `text` is NULL or the NUL-terminated source text `query` was parsed from.
unsafe fn mentions_size(text: *const std::ffi::c_char, query: *const pg_sys::Query) -> bool {
    if text.is_null() {
        return false;
    }
    // SAFETY: per the contract; the statement's range lies inside the text
    // (PostgreSQL's own `CleanQuerytext` relies on the same). The rest of
    // the text is not measured: with many statements in one string, each
    // would otherwise read all of it.
    let bytes = unsafe {
        let start = text.add(usize::try_from((*query).stmt_location).unwrap_or(0));
        match usize::try_from((*query).stmt_len) {
            Ok(len) if len > 0 => {
                // Never past the string's end, whatever the length says.
                let n = (0..len).find(|&i| *start.add(i) == 0).unwrap_or(len);
                std::slice::from_raw_parts(start as *const u8, n)
            }
            _ => std::ffi::CStr::from_ptr(start).to_bytes(),
        }
    };
    bytes.windows(5).any(|w| w.eq_ignore_ascii_case(b"_size"))
}

/// The query whose expressions run now: `query` itself, or the query inside
/// EXPLAIN, DECLARE CURSOR and CREATE TABLE AS (not a materialized view's,
/// which is stored); None for other utility statements.
///
/// # Safety
/// `query` is an analysed query.
unsafe fn statement_query(query: *mut pg_sys::Query) -> Option<*mut pg_sys::Query> {
    // SAFETY: per the contract; node tags are checked before each cast.
    unsafe {
        if (*query).commandType != pg_sys::CmdType::CMD_UTILITY {
            return Some(query);
        }
        let stmt = (*query).utilityStmt;
        let inner = match (*stmt).type_ {
            pg_sys::NodeTag::T_ExplainStmt => (*(stmt as *mut pg_sys::ExplainStmt)).query,
            pg_sys::NodeTag::T_DeclareCursorStmt => (*(stmt as *mut pg_sys::DeclareCursorStmt)).query,
            pg_sys::NodeTag::T_CreateTableAsStmt => {
                let c = stmt as *mut pg_sys::CreateTableAsStmt;
                if (*c).objtype == pg_sys::ObjectType::OBJECT_MATVIEW {
                    return None;
                }
                (*c).query
            }
            _ => return None,
        };
        (!inner.is_null() && (*inner).type_ == pg_sys::NodeTag::T_Query).then_some(inner as *mut pg_sys::Query)
    }
}

/// This module's functions in the current database, in [`SWAPPED`]'s
/// order; None where the extension is not installed (or not completely).
fn replacements() -> Option<[pg_sys::Oid; 5]> {
    // SAFETY: catalog lookups; `get_extension_oid` with missing_ok.
    unsafe {
        let ext = pg_sys::get_extension_oid(c"orioledb_rs".as_ptr(), true);
        if ext == pg_sys::InvalidOid {
            return None;
        }
        let nsp = extension_schema(ext)?;
        let mut out = [pg_sys::InvalidOid; 5];
        for (slot, (_, name, nargs)) in out.iter_mut().zip(SWAPPED) {
            let args = [pg_sys::OIDOID, pg_sys::TEXTOID];
            let cname = std::ffi::CString::new(name).ok()?;
            *slot = pg_sys::GetSysCacheOid(
                pg_sys::SysCacheIdentifier::PROCNAMEARGSNSP as i32,
                pg_sys::Anum_pg_proc_oid as pg_sys::AttrNumber,
                pg_sys::Datum::from(cname.as_ptr()),
                pg_sys::Datum::from(pg_sys::buildoidvector(args.as_ptr(), nargs)),
                pg_sys::Datum::from(nsp),
                pg_sys::Datum::from(0usize),
            );
            if *slot == pg_sys::InvalidOid {
                return None;
            }
        }
        Some(out)
    }
}

/// The schema extension `ext` was created in (PostgreSQL 15 does not export
/// `get_extension_schema`).
///
/// # Safety
/// In a transaction.
unsafe fn extension_schema(ext: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: an index scan of pg_extension by OID; the tuple is read
    // before the scan ends.
    unsafe {
        let rel = pg_sys::table_open(pg_sys::ExtensionRelationId, pg_sys::AccessShareLock as _);
        let mut key = std::mem::zeroed::<pg_sys::ScanKeyData>();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_oid as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_OIDEQ),
            pg_sys::Datum::from(ext),
        );
        let scan = pg_sys::systable_beginscan(
            rel,
            pg_sys::Oid::from(pg_sys::ExtensionOidIndexId),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let tup = pg_sys::systable_getnext(scan);
        let nsp = (!tup.is_null())
            .then(|| (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_extension>(tup)).extnamespace);
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as _);
        nsp
    }
}

/// The walker: swaps the stock size functions' calls for ours (`ctx` is
/// the array from [`replacements`]); descends into sub-queries.
#[pg_guard]
unsafe extern "C-unwind" fn swap(node: *mut pg_sys::Node, ctx: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: PostgreSQL's walkers pass nodes of the tree being walked and
    // our context back; tags are checked before each cast.
    unsafe {
        match (*node).type_ {
            pg_sys::NodeTag::T_Query => {
                return pg_sys::query_tree_walker(node as *mut pg_sys::Query, Some(swap), ctx, 0);
            }
            pg_sys::NodeTag::T_FuncExpr => {
                let f = node as *mut pg_sys::FuncExpr;
                let ours = &*(ctx as *const [pg_sys::Oid; 5]);
                if let Some(n) = SWAPPED.iter().position(|(stock, _, _)| (*f).funcid.to_u32() == *stock) {
                    if (*f).funcid.to_u32() == PG_RELATION_SIZE_OF_MAIN {
                        (*f).args = pg_sys::lappend((*f).args, main_fork() as *mut c_void);
                    }
                    (*f).funcid = ours[n];
                }
            }
            _ => {}
        }
        pg_sys::expression_tree_walker(node, Some(swap), ctx)
    }
}

/// The constant `'main'::text`.
///
/// # Safety
/// In a memory context that outlives the query.
unsafe fn main_fork() -> *mut pg_sys::Const {
    // SAFETY: a text datum built by PostgreSQL; makeConst copies nothing.
    unsafe {
        pg_sys::makeConst(
            pg_sys::TEXTOID,
            -1,
            pg_sys::DEFAULT_COLLATION_OID,
            -1,
            pg_sys::Datum::from(pg_sys::cstring_to_text(c"main".as_ptr())),
            false,
            false,
        )
    }
}

/// Bytes of `rel`'s own engine tree, if it has one: its pages at `BLCKSZ`
/// (a toast relation whose first value has not come yet has none).
fn tree_bytes(rel: pg_sys::Oid) -> i64 {
    let Some((db, node)) = crate::pg::engine_relfile(rel) else {
        return 0;
    };
    crate::pg::require_preloaded();
    let id = crate::pg::engine::tree_id(db, node);
    crate::pg::engine::engine()
        .tree(id)
        .map_or(0, |t| t.approx_pages() as i64 * pg_sys::BLCKSZ as i64)
}

/// Bytes of the engine trees of `rel`'s indexes.
fn index_trees_bytes(rel: pg_sys::Oid) -> i64 {
    // SAFETY: the relation is opened (if it still exists) and closed here;
    // the index list is a copy of ours.
    unsafe {
        let r = pg_sys::try_relation_open(rel, pg_sys::AccessShareLock as _);
        if r.is_null() {
            return 0;
        }
        let list = pg_sys::RelationGetIndexList(r);
        pg_sys::relation_close(r, pg_sys::AccessShareLock as _);
        let n = if list.is_null() { 0 } else { (*list).length as usize };
        (0..n).map(|i| tree_bytes((*(*list).elements.add(i)).oid_value)).sum()
    }
}

/// A size function's result: the stock function's (`stock` on the same
/// call) plus `extra(rel)`; NULL where the stock one is NULL (no such
/// relation). The caller must be allowed to execute the stock functions
/// `stock_oids` stand for, as before the swap (the executor checks ours):
/// a REVOKE of them still holds. Checked once per call site, as the
/// executor checks once per plan (`fn_extra` marks it done).
///
/// # Safety
/// `fcinfo` is a call whose first argument is a relation OID.
unsafe fn stock_plus(
    fcinfo: pg_sys::FunctionCallInfo,
    stock_oids: &[u32],
    stock: impl FnOnce(pg_sys::FunctionCallInfo) -> pg_sys::Datum,
    extra: impl FnOnce(pg_sys::Oid) -> i64,
) -> pg_sys::Datum {
    // SAFETY: per the contract; `fn_extra` is ours to set (a marker that is
    // never dereferenced or freed).
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if flinfo.is_null() || (*flinfo).fn_extra.is_null() {
            for &stock_oid in stock_oids {
                let oid = pg_sys::Oid::from(stock_oid);
                let acl = pg_sys::pg_proc_aclcheck(oid, pg_sys::GetUserId(), pg_sys::ACL_EXECUTE as pg_sys::AclMode);
                if acl != pg_sys::AclResult::ACLCHECK_OK {
                    pg_sys::aclcheck_error(acl, pg_sys::ObjectType::OBJECT_FUNCTION, pg_sys::get_func_name(oid));
                }
            }
            if !flinfo.is_null() {
                (*flinfo).fn_extra = std::ptr::NonNull::<u8>::dangling().as_ptr().cast();
            }
        }
        let d = stock(fcinfo);
        if (*fcinfo).isnull {
            return d;
        }
        let rel = pg_sys::Oid::from((*fcinfo).args.as_slice(1)[0].value.value() as u32);
        pg_sys::Datum::from(d.value() as i64 + extra(rel))
    }
}

crate::pg::fmgr_v1!(pg_finfo_orioledb_pg_relation_size);
crate::pg::fmgr_v1!(pg_finfo_orioledb_pg_relation_size_main);
crate::pg::fmgr_v1!(pg_finfo_orioledb_pg_table_size);
crate::pg::fmgr_v1!(pg_finfo_orioledb_pg_indexes_size);
crate::pg::fmgr_v1!(pg_finfo_orioledb_pg_total_relation_size);

/// `pg_relation_size(rel, fork)` counting the main fork's engine tree.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_pg_relation_size(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: fmgr calls with (oid, text), both non-NULL (STRICT).
    unsafe { relation_size(fcinfo, &[PG_RELATION_SIZE]) }
}

/// `pg_relation_size(rel)`, which runs the two-argument one with `'main'`
/// (the hook appends it), and needs EXECUTE on both.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_pg_relation_size_main(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: fmgr calls with (oid, text), both non-NULL (STRICT).
    unsafe { relation_size(fcinfo, &[PG_RELATION_SIZE_OF_MAIN, PG_RELATION_SIZE]) }
}

/// Both `pg_relation_size` forms, checked against `stock_oids`.
///
/// # Safety
/// `fcinfo` is a call with (oid, text), both non-NULL.
unsafe fn relation_size(fcinfo: pg_sys::FunctionCallInfo, stock_oids: &[u32]) -> pg_sys::Datum {
    // SAFETY: per the contract.
    unsafe {
        let fork = (*fcinfo).args.as_slice(2)[1].value;
        let name = pg_sys::text_to_cstring(fork.cast_mut_ptr::<pg_sys::text>());
        let main = pg_sys::forkname_to_number(name) == pg_sys::ForkNumber::MAIN_FORKNUM;
        stock_plus(fcinfo, stock_oids, |f| pg_sys::pg_relation_size(f), |rel| if main { tree_bytes(rel) } else { 0 })
    }
}

/// `pg_table_size(rel)` counting its primary and toast trees.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_pg_table_size(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: fmgr calls with one non-NULL oid (STRICT).
    unsafe { stock_plus(fcinfo, &[PG_TABLE_SIZE], |f| pg_sys::pg_table_size(f), table_trees_bytes) }
}

/// `pg_indexes_size(rel)` counting its indexes' engine trees.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_pg_indexes_size(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: fmgr calls with one non-NULL oid (STRICT).
    unsafe { stock_plus(fcinfo, &[PG_INDEXES_SIZE], |f| pg_sys::pg_indexes_size(f), index_trees_bytes) }
}

/// `pg_total_relation_size(rel)` counting every engine tree of the table.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn orioledb_pg_total_relation_size(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: fmgr calls with one non-NULL oid (STRICT).
    unsafe {
        stock_plus(fcinfo, &[PG_TOTAL_RELATION_SIZE], |f| pg_sys::pg_total_relation_size(f), |rel| {
            table_trees_bytes(rel) + index_trees_bytes(rel)
        })
    }
}

/// Bytes of `rel`'s primary and toast trees.
fn table_trees_bytes(rel: pg_sys::Oid) -> i64 {
    tree_bytes(rel) + crate::pg::toast_relation_of(rel).map_or(0, tree_bytes)
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION orioledb_pg_relation_size(rel oid, fork text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'orioledb_pg_relation_size' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION orioledb_pg_relation_size_main(rel oid, fork text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'orioledb_pg_relation_size_main' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION orioledb_pg_table_size(rel oid) RETURNS bigint
    AS 'MODULE_PATHNAME', 'orioledb_pg_table_size' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION orioledb_pg_indexes_size(rel oid) RETURNS bigint
    AS 'MODULE_PATHNAME', 'orioledb_pg_indexes_size' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION orioledb_pg_total_relation_size(rel oid) RETURNS bigint
    AS 'MODULE_PATHNAME', 'orioledb_pg_total_relation_size' LANGUAGE C STRICT PARALLEL SAFE;
"#,
    name = "orioledb_size_functions"
);
