//! The custom scan "OrioleDB Primary Scan": reads a primary-key-keyed
//! table straight from its tree for primary-key equality, `IN`/`= ANY`,
//! ranges and primary-key order (both directions, with LIMIT), instead of
//! going through the primary key's btree and then fetching each row.
//!
//! Planning piggybacks on the btree: for every index path the planner
//! built on the table's primary key, a custom path with the same key
//! clauses, ordering and parameterization is added at a lower cost (no
//! second lookup per row). Every restriction clause stays in the plan's
//! qual and is evaluated on each row, so the key conditions only narrow
//! the key ranges read; a condition that cannot be encoded is simply not
//! used for narrowing. EvalPlanQual works through `ExecScan` as for a
//! sequential scan: the re-check tuple is tested against the same quals.
//!
//! Not offered when the query reads `xmin`/`xmax`/`cmin`/`cmax` of the
//! table: PostgreSQL 15 gives a custom scan a virtual scan slot, which
//! carries only `ctid` and `tableoid` of the system columns.

use crate::am::layout::key_desc::{KeyCol, KeyDesc};
use crate::am::rows::{self, decode, satisfies, store_version, table_of};
use crate::am::rows::ssi;
use crate::am::layout::table::Table;
use orioledb_engine::version::Header;
use orioledb_engine::{Cursor, Direction};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, CString};
use std::ops::Bound;

const NAME: &std::ffi::CStr = c"OrioleDB Primary Scan";

static mut PATH_METHODS: pg_sys::CustomPathMethods = pg_sys::CustomPathMethods {
    CustomName: NAME.as_ptr(),
    PlanCustomPath: Some(plan_path),
    ReparameterizeCustomPathByChild: Some(reparameterize),
};

static mut SCAN_METHODS: pg_sys::CustomScanMethods = pg_sys::CustomScanMethods {
    CustomName: NAME.as_ptr(),
    CreateCustomScanState: Some(create_state),
};

static mut EXEC_METHODS: pg_sys::CustomExecMethods = pg_sys::CustomExecMethods {
    CustomName: NAME.as_ptr(),
    BeginCustomScan: Some(begin),
    ExecCustomScan: Some(exec),
    EndCustomScan: Some(end),
    ReScanCustomScan: Some(rescan),
    MarkPosCustomScan: None,
    RestrPosCustomScan: None,
    EstimateDSMCustomScan: None,
    InitializeDSMCustomScan: None,
    ReInitializeDSMCustomScan: None,
    InitializeWorkerCustomScan: None,
    ShutdownCustomScan: None,
    ExplainCustomScan: Some(explain),
};

static mut PREV_PATHLIST: pg_sys::set_rel_pathlist_hook_type = None;

/// Installs the planner hook and registers the scan (from `_PG_init`).
pub(crate) fn install() {
    // SAFETY: called once from _PG_init, single-threaded; the methods
    // structs are statics that live for the process.
    unsafe {
        PREV_PATHLIST = pg_sys::set_rel_pathlist_hook;
        pg_sys::set_rel_pathlist_hook = Some(rel_pathlist);
        pg_sys::RegisterCustomScanMethods(&raw const SCAN_METHODS);
    }
}

/// Pointers of a `List` of pointers.
///
/// # Safety
/// `l` is NIL or a valid pointer list.
pub(crate) unsafe fn ptrs<T>(l: *mut pg_sys::List) -> Vec<*mut T> {
    if l.is_null() {
        return Vec::new();
    }
    // SAFETY: a valid list has `length` cells.
    unsafe {
        std::slice::from_raw_parts((*l).elements, (*l).length as usize)
            .iter()
            .map(|c| c.ptr_value.cast())
            .collect()
    }
}

/// Integers of an integer `List`.
///
/// # Safety
/// `l` is NIL or a valid integer list.
unsafe fn ints(l: *mut pg_sys::List) -> Vec<i32> {
    if l.is_null() {
        return Vec::new();
    }
    // SAFETY: a valid list has `length` cells.
    unsafe {
        std::slice::from_raw_parts((*l).elements, (*l).length as usize)
            .iter()
            .map(|c| c.int_value)
            .collect()
    }
}

/// Strips binary-compatible relabelings (varchar columns compared as text).
///
/// # Safety
/// `n` is a valid expression node.
unsafe fn strip(mut n: *mut pg_sys::Node) -> *mut pg_sys::Node {
    // SAFETY: per the contract.
    unsafe {
        while !n.is_null() && (*n).type_ == pg_sys::NodeTag::T_RelabelType {
            n = (*(n as *mut pg_sys::RelabelType)).arg.cast();
        }
        n
    }
}

/// Whether `n` is the column `attnum` of range-table entry `relid`.
///
/// # Safety
/// `n` is a valid expression node.
unsafe fn is_column(n: *mut pg_sys::Node, relid: u32, attnum: i16) -> bool {
    // SAFETY: per the contract.
    unsafe {
        let n = strip(n);
        !n.is_null()
            && (*n).type_ == pg_sys::NodeTag::T_Var
            && (*(n as *mut pg_sys::Var)).varno as u32 == relid
            && (*(n as *mut pg_sys::Var)).varattno == attnum
            && (*(n as *mut pg_sys::Var)).varlevelsup == 0
    }
}

fn is_int(t: pg_sys::Oid) -> bool {
    [pg_sys::INT2OID, pg_sys::INT4OID, pg_sys::INT8OID].contains(&t)
}

/// text and varchar share one representation (and text's operators).
fn is_text(t: pg_sys::Oid) -> bool {
    [pg_sys::TEXTOID, pg_sys::VARCHAROID].contains(&t)
}

/// A key condition: `column <strategy> value(s)`.
#[derive(Clone, Copy, Debug)]
struct Cond {
    /// Position in the key.
    col: usize,
    /// btree strategy: 1 <, 2 <=, 3 =, 4 >=, 5 >.
    strategy: i32,
    /// `= ANY (array)`.
    array: bool,
    /// Type of the value (or of the array's elements).
    typid: pg_sys::Oid,
}

/// The key conditions among an index path's clauses, with their values.
///
/// # Safety
/// `ipath` is a valid index path of `rel` on the key's index.
unsafe fn key_conds(
    rel: *mut pg_sys::RelOptInfo,
    ipath: *mut pg_sys::IndexPath,
    desc: &KeyDesc,
) -> Vec<(Cond, *mut pg_sys::Expr)> {
    let mut out = Vec::new();
    // SAFETY: per the contract; every node read is part of the path.
    unsafe {
        let relid = (*rel).relid;
        let index = (*ipath).indexinfo;
        for ic in ptrs::<pg_sys::IndexClause>((*ipath).indexclauses) {
            let col = (*ic).indexcol as usize;
            let Some(kc) = desc.cols.get(col) else {
                continue;
            };
            let opfamily = *(*index).opfamily.add(col);
            for ri in ptrs::<pg_sys::RestrictInfo>((*ic).indexquals) {
                let clause = (*ri).clause as *mut pg_sys::Node;
                let (op, rhs, array) = match (*clause).type_ {
                    pg_sys::NodeTag::T_OpExpr => {
                        let e = clause as *mut pg_sys::OpExpr;
                        let args = ptrs::<pg_sys::Node>((*e).args);
                        if args.len() != 2 {
                            continue;
                        }
                        if is_column(args[0], relid, kc.attnum) {
                            ((*e).opno, args[1], false)
                        } else if is_column(args[1], relid, kc.attnum) {
                            (pg_sys::get_commutator((*e).opno), args[0], false)
                        } else {
                            continue;
                        }
                    }
                    pg_sys::NodeTag::T_ScalarArrayOpExpr => {
                        let e = clause as *mut pg_sys::ScalarArrayOpExpr;
                        let args = ptrs::<pg_sys::Node>((*e).args);
                        if !(*e).useOr || args.len() != 2 || !is_column(args[0], relid, kc.attnum)
                        {
                            continue;
                        }
                        ((*e).opno, args[1], true)
                    }
                    _ => continue,
                };
                if op == pg_sys::InvalidOid {
                    continue;
                }
                let strategy = pg_sys::get_op_opfamily_strategy(op, opfamily);
                if !(1..=5).contains(&strategy) || (array && strategy != 3) {
                    continue;
                }
                let mut typid = pg_sys::exprType(rhs);
                if array {
                    typid = pg_sys::get_element_type(typid);
                }
                let coltype = pg_sys::Oid::from(kc.typid);
                if typid != coltype
                    && !(is_int(typid) && is_int(coltype))
                    && !(is_text(typid) && is_text(coltype))
                {
                    continue;
                }
                out.push((
                    Cond {
                        col,
                        strategy,
                        array,
                        typid,
                    },
                    rhs.cast(),
                ));
            }
        }
    }
    out
}

/// Whether the query reads a system column the virtual scan slot lacks.
///
/// # Safety
/// `rel` is a valid base relation.
unsafe fn needs_tuple_header(rel: *mut pg_sys::RelOptInfo) -> bool {
    // SAFETY: per the contract.
    unsafe {
        let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        let relid = (*rel).relid;
        pg_sys::pull_varattnos((*(*rel).reltarget).exprs.cast(), relid, &mut attrs);
        for ri in ptrs::<pg_sys::RestrictInfo>((*rel).baserestrictinfo) {
            pg_sys::pull_varattnos((*ri).clause.cast(), relid, &mut attrs);
        }
        let off = pg_sys::FirstLowInvalidHeapAttributeNumber;
        [
            pg_sys::MinTransactionIdAttributeNumber,
            pg_sys::MaxTransactionIdAttributeNumber,
            pg_sys::MinCommandIdAttributeNumber,
            pg_sys::MaxCommandIdAttributeNumber,
        ]
        .iter()
        .any(|&a| pg_sys::bms_is_member(a as c_int - off, attrs))
    }
}

/// The table and primary key of a plain table of ours whose tree is keyed
/// by its current primary key: the only relations the scan serves.
///
/// # Safety
/// Valid planner nodes of a relation the planner has locked.
unsafe fn served_relation(
    rel: *mut pg_sys::RelOptInfo,
    rte: *mut pg_sys::RangeTblEntry,
) -> Option<(Table, pg_sys::Oid)> {
    // SAFETY: per the contract; the relcache entry is opened and closed
    // here without a new lock.
    unsafe {
        if (*rte).rtekind != pg_sys::RTEKind::RTE_RELATION
            || (*rte).relkind as u8 != pg_sys::RELKIND_RELATION
            || (*rte).inh
            || !(*rte).tablesample.is_null()
            || !matches!(
                (*rel).reloptkind,
                pg_sys::RelOptKind::RELOPT_BASEREL | pg_sys::RelOptKind::RELOPT_OTHER_MEMBER_REL
            )
            || !crate::pg::preload::is_preloaded()
        {
            return None;
        }
        let r = pg_sys::RelationIdGetRelation((*rte).relid);
        if r.is_null() {
            return None;
        }
        let ours = std::ptr::eq((*r).rd_tableam, &raw const crate::am::ROUTINE);
        // The tree's own key, if it is the table's current primary key.
        let served = if ours {
            rows::served_primary_key(r)
        } else {
            None
        };
        pg_sys::RelationClose(r);
        served
    }
}

/// Adds the point lookup path (equality on every key column) of a rel
/// without join clauses (so no parameterized paths to offer), if it has
/// one: no other path on the key can read less, so the table's index paths
/// need not be planned a second time (that doubled this part of heap's
/// planning cost). Whether it was the rel's point lookup.
///
/// # Safety
/// Valid planner nodes of a base relation of ours with primary key `pk`.
unsafe fn add_point_path(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    pk: pg_sys::Oid,
    table: &Table,
    desc: &KeyDesc,
) -> bool {
    // SAFETY: per the contract.
    unsafe {
        // Its index path survived add_path: mirror it.
        let point = ptrs::<pg_sys::Path>((*rel).pathlist).into_iter().find(|&p| {
            (*p).type_ == pg_sys::NodeTag::T_IndexPath
                && (*p).param_info.is_null()
                && (*(*(p as *mut pg_sys::IndexPath)).indexinfo).indexoid == pk
                && is_point_lookup(rel, p as *mut pg_sys::IndexPath, desc)
        });
        if let Some(ip) = point {
            if let Some(cp) = make_path(rel, ip as *mut pg_sys::IndexPath, desc) {
                pg_sys::add_path(rel, cp.cast());
            }
            return true;
        }
        // The same when the sequential scan beat the btree's point
        // lookup (a small table): its index path built from the
        // equalities directly, not by planning every index path again.
        if let Some(ip) = point_index_path(root, rel, pk) {
            if is_point_lookup(rel, ip, desc) {
                if let Some(cp) = make_path(rel, ip, desc) {
                    price_row_id_order_walk(rel, table);
                    pg_sys::add_path(rel, cp.cast());
                    return true;
                }
            }
        }
        false
    }
}

/// The planner's index paths of `rel`, built again aside: those add_path
/// already dropped (beaten by the sequential scan, since a btree scan pays
/// a second lookup per row) are among them, and the rel's paths are left
/// as they were.
///
/// # Safety
/// Valid planner nodes of a base relation.
unsafe fn index_paths_aside(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
) -> *mut pg_sys::List {
    // SAFETY: per the contract.
    unsafe {
        let saved = (*rel).pathlist;
        let saved_partial = (*rel).partial_pathlist;
        (*rel).pathlist = std::ptr::null_mut();
        (*rel).partial_pathlist = std::ptr::null_mut();
        // Bitmap paths would push out the index paths they beat (same, no,
        // pathkeys); only the index paths matter here.
        // The setting is put back even if planning raises an ERROR.
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: the planner's GUC variable, read and written in
                // this single-threaded backend.
                unsafe { pg_sys::enable_bitmapscan = self.0 };
            }
        }
        let restore = Restore(pg_sys::enable_bitmapscan);
        pg_sys::enable_bitmapscan = false;
        pg_sys::create_index_paths(root, rel);
        drop(restore);
        let index_paths = (*rel).pathlist;
        (*rel).pathlist = saved;
        (*rel).partial_pathlist = saved_partial;
        index_paths
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn rel_pathlist(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    rti: pg_sys::Index,
    rte: *mut pg_sys::RangeTblEntry,
) {
    // SAFETY: the planner passes valid nodes of a relation it has locked.
    unsafe {
        if let Some(prev) = PREV_PATHLIST {
            prev(root, rel, rti, rte);
        }
        let Some((table, pk)) = served_relation(rel, rte) else {
            return;
        };
        let desc = table.desc().expect("a served key is the tree's");
        if needs_tuple_header(rel) {
            return;
        }
        if (*rel).joininfo.is_null() && add_point_path(root, rel, pk, &table, desc) {
            return;
        }
        // The planner's own index paths on the key tell which clauses match
        // it and which orderings it can give.
        let index_paths = index_paths_aside(root, rel);
        let mut new_paths = Vec::new();
        for p in ptrs::<pg_sys::Path>(index_paths) {
            if (*p).type_ != pg_sys::NodeTag::T_IndexPath {
                continue;
            }
            let ip = p as *mut pg_sys::IndexPath;
            if (*(*ip).indexinfo).indexoid != pk {
                continue;
            }
            if let Some(cp) = make_path(rel, ip, desc) {
                new_paths.push(cp);
            }
        }
        for cp in new_paths {
            pg_sys::add_path(rel, cp.cast());
        }
    }
}

/// The plain index path on primary key `pk` of `rel` for clauses
/// `column = value` (the column on the left, the value free of the rel's
/// columns and volatile functions, the operator the column's btree
/// equality) on every key column, as `create_index_paths` would build it;
/// None if any key column lacks one.
///
/// # Safety
/// Valid planner nodes of a base relation.
unsafe fn point_index_path(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    pk: pg_sys::Oid,
) -> Option<*mut pg_sys::IndexPath> {
    // SAFETY: per the contract; the nodes built are planner nodes in the
    // planner's memory context.
    unsafe {
        let index = ptrs::<pg_sys::IndexOptInfo>((*rel).indexlist)
            .into_iter()
            .find(|&i| (*i).indexoid == pk)?;
        let mut clauses: *mut pg_sys::List = std::ptr::null_mut();
        for col in 0..(*index).nkeycolumns as usize {
            let attno = *(*index).indexkeys.add(col);
            let opfamily = *(*index).opfamily.add(col);
            let collation = *(*index).indexcollations.add(col);
            let rinfo = ptrs::<pg_sys::RestrictInfo>((*rel).baserestrictinfo)
                .into_iter()
                .find(|&r| is_column_equality(r, (*rel).relid, attno, opfamily, collation))?;
            let ic = pg_sys::palloc0(size_of::<pg_sys::IndexClause>()) as *mut pg_sys::IndexClause;
            (*ic).type_ = pg_sys::NodeTag::T_IndexClause;
            (*ic).rinfo = rinfo;
            (*ic).indexquals = pg_sys::lappend(std::ptr::null_mut(), rinfo.cast());
            (*ic).lossy = false;
            (*ic).indexcol = col as pg_sys::AttrNumber;
            clauses = pg_sys::lappend(clauses, ic.cast());
        }
        Some(pg_sys::create_index_path(
            root,
            index,
            clauses,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            pg_sys::ScanDirection::ForwardScanDirection,
            false,
            std::ptr::null_mut(),
            1.0,
            false,
        ))
    }
}

/// Whether `r` is `column attno = value` of base relation `relid` with the
/// btree equality of `opfamily` under the index column's `collation` (as
/// `IndexCollMatchesExprColl`), the value holding none of the relation's
/// columns and nothing volatile.
///
/// # Safety
/// `r` is a valid RestrictInfo.
unsafe fn is_column_equality(
    r: *mut pg_sys::RestrictInfo,
    relid: pg_sys::Index,
    attno: std::ffi::c_int,
    opfamily: pg_sys::Oid,
    collation: pg_sys::Oid,
) -> bool {
    // SAFETY: per the contract; node tags are checked before each cast.
    unsafe {
        let e = (*r).clause;
        if e.is_null() || (*e).type_ != pg_sys::NodeTag::T_OpExpr || (*r).pseudoconstant {
            return false;
        }
        let op = e as *mut pg_sys::OpExpr;
        let args = ptrs::<pg_sys::Node>((*op).args);
        let [mut left, right] = args[..] else { return false };
        // A binary-compatible cast (varchar to text) hides the column, as
        // `match_index_to_operand` knows.
        while (*left).type_ == pg_sys::NodeTag::T_RelabelType {
            left = (*(left as *mut pg_sys::RelabelType)).arg.cast();
        }
        if (*left).type_ != pg_sys::NodeTag::T_Var {
            return false;
        }
        let v = left as *mut pg_sys::Var;
        (*v).varno as pg_sys::Index == relid
            && (*v).varlevelsup == 0
            && (*v).varattno as std::ffi::c_int == attno
            && (collation == pg_sys::InvalidOid || collation == (*op).inputcollid)
            && pg_sys::bms_is_empty((*r).right_relids)
            && !pg_sys::contain_volatile_functions(right)
            && pg_sys::get_op_opfamily_strategy((*op).opno, opfamily)
                == pg_sys::BTEqualStrategyNumber as std::ffi::c_int
    }
}

/// Against a point lookup on the key: a small table's sequential scan
/// walks its rows in row-id order (`Table::scans_in_row_id_order`), each row
/// through its row-id map entry and a lookup of its version, besides the
/// versions of each row not yet pruned — twice a heap tuple's CPU at
/// least. Priced as heap's, it beat the lookup by a hundredth (a 10-row
/// table: 1.125 against 1.15) and was chosen for a third of pgbench's
/// branch updates, where it read every branch's versions under load
/// (14 µs against 7 µs quiet). Only where a point lookup is offered: a
/// scan of the whole table stays a sequential one, in heap's row order.
///
/// # Safety
/// `rel` is a base relation of ours with its paths added.
unsafe fn price_row_id_order_walk(rel: *mut pg_sys::RelOptInfo, table: &crate::am::layout::table::Table) {
    if !table.scans_in_row_id_order() {
        return;
    }
    // SAFETY: per the contract; the repriced paths go through add_path
    // again, which keeps the path list in its cost order.
    unsafe {
        let extra = (*rel).tuples.max(1.0) * pg_sys::cpu_tuple_cost;
        let (seq, rest): (Vec<_>, Vec<_>) = ptrs::<pg_sys::Path>((*rel).pathlist)
            .into_iter()
            .partition(|&p| (*p).pathtype == pg_sys::NodeTag::T_SeqScan);
        if seq.is_empty() {
            return;
        }
        let mut kept: *mut pg_sys::List = std::ptr::null_mut();
        for p in rest {
            kept = pg_sys::lappend(kept, p.cast());
        }
        (*rel).pathlist = kept;
        for p in seq {
            (*p).total_cost += extra;
            pg_sys::add_path(rel, p);
        }
    }
}

/// Elements of a constant array expression (1 if not a constant).
///
/// # Safety
/// `e` is a valid expression.
unsafe fn const_array_len(e: *mut pg_sys::Expr) -> f64 {
    // SAFETY: per the contract; a Const array is a detoastable array datum.
    unsafe {
        let n = e as *mut pg_sys::Node;
        if (*n).type_ != pg_sys::NodeTag::T_Const || (*(n as *mut pg_sys::Const)).constisnull {
            return 1.0;
        }
        let c = n as *mut pg_sys::Const;
        let arr = pg_sys::pg_detoast_datum((*c).constvalue.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let ndim = (*arr).ndim;
        let dims = (arr as *mut u8).add(size_of::<pg_sys::ArrayType>()) as *const c_int;
        (0..ndim as usize).map(|i| *dims.add(i) as f64).product::<f64>().max(1.0)
    }
}

/// Whether index path `ip` has a plain equality on every key column.
///
/// # Safety
/// Valid planner nodes; `ip` is an index path of `rel` on its primary key.
unsafe fn is_point_lookup(
    rel: *mut pg_sys::RelOptInfo,
    ip: *mut pg_sys::IndexPath,
    desc: &KeyDesc,
) -> bool {
    // SAFETY: per the contract.
    let conds = unsafe { key_conds(rel, ip, desc) };
    (0..desc.cols.len())
        .all(|col| conds.iter().any(|(c, _)| c.col == col && c.strategy == 3 && !c.array))
}

/// Whether the conditions narrow the scan as the btree's would: each one
/// on a column that follows equalities on every earlier key column, with
/// at most one column of ranges (the last narrowed one).
fn all_narrowing(conds: &[Cond]) -> bool {
    let mut col = 0;
    loop {
        let here: Vec<&Cond> = conds.iter().filter(|c| c.col == col).collect();
        if here.is_empty() {
            return conds.iter().all(|c| c.col < col);
        }
        if !here.iter().any(|c| c.strategy == 3) {
            // Ranges on this column: nothing after it narrows.
            return conds.iter().all(|c| c.col <= col)
                && here.iter().all(|c| c.strategy != 3);
        }
        col += 1;
    }
}

/// Whether a column stored in byte order but compared by a libc collation
/// keeps the scan from serving the path: such a column narrows by equality
/// only, and the scan's output is not in the index's order (= ANY values
/// come in byte order).
fn collation_rules_out(desc: &KeyDesc, plain: &[Cond], backward: bool) -> bool {
    let equality_bound = |col: usize| {
        plain.iter().any(|c| c.col == col && c.strategy == 3)
            && plain.iter().all(|c| c.col != col || c.strategy == 3)
    };
    backward || (0..desc.cols.len()).any(|i| !desc.cols[i].kind.ordered() && !equality_bound(i))
}

/// The plan's integer list (direction, then each condition's fields) and
/// expression list (each condition's value): how the conditions reach the
/// executor through `custom_private`.
///
/// # Safety
/// Called in the planner's memory context; the expressions are planner
/// nodes.
unsafe fn encode_conds(
    conds: &[(Cond, *mut pg_sys::Expr)],
    backward: bool,
) -> (*mut pg_sys::List, *mut pg_sys::List) {
    // SAFETY: per the contract; the lists are palloc'd there.
    unsafe {
        let mut ilist: *mut pg_sys::List = std::ptr::null_mut();
        ilist = pg_sys::lappend_int(ilist, backward as c_int);
        let mut elist: *mut pg_sys::List = std::ptr::null_mut();
        for (c, e) in conds {
            ilist = pg_sys::lappend_int(ilist, c.col as c_int);
            ilist = pg_sys::lappend_int(ilist, c.strategy);
            ilist = pg_sys::lappend_int(ilist, c.array as c_int);
            ilist = pg_sys::lappend_int(ilist, c.typid.to_u32() as c_int);
            elist = pg_sys::lappend(elist, (*e).cast());
        }
        (ilist, elist)
    }
}

/// The start-up and total cost of the scan mirroring index path `ip`,
/// priced against the sequential scan's way of pricing pages and rows.
///
/// # Safety
/// Valid planner nodes; `ip` is an index path of `rel` on its primary key,
/// `conds` its key conditions.
unsafe fn path_costs(
    rel: *mut pg_sys::RelOptInfo,
    ip: *mut pg_sys::IndexPath,
    conds: &[(Cond, *mut pg_sys::Expr)],
) -> (pg_sys::Cost, pg_sys::Cost) {
    // SAFETY: per the contract.
    unsafe {
        let src = &(*ip).path;
        // One descent per key range (its CPU is the btree's start-up cost;
        // inner pages stay in the page pool, like a btree's) to a leaf,
        // then the rows read in key order from consecutive leaves: no
        // second lookup per row as through the btree. A range's first leaf
        // is the one its descent reached (charging it twice made a point
        // lookup cost two pages, and lose to a sequential scan of a
        // two-page table).
        let ranges = conds
            .iter()
            .filter(|(c, _)| c.array)
            .map(|(_, e)| const_array_len(*e))
            .product::<f64>()
            .max(1.0);
        let density = if (*rel).pages > 0 && (*rel).tuples > 0.0 {
            (*rel).tuples / (*rel).pages as f64
        } else {
            50.0
        };
        // The rows the key ranges cover (the index clauses' selectivity),
        // not the rows left after the other quals: those are all read and
        // filtered (a scan without key conditions reads the whole table).
        let read = ((*ip).indexselectivity * (*rel).tuples).max(src.rows).max(1.0);
        // Every row read is checked against all of the rel's quals, priced
        // as the sequential scan prices them.
        let quals = (*rel).baserestrictcost;
        // And every row returned computes the output columns, as
        // cost_seqscan adds the target list's cost (its start-up part is in
        // the index path's start-up cost already).
        let target = (*(*rel).reltarget).cost;
        let startup_cost = src.startup_cost + quals.startup;
        let total_cost = startup_cost
            + (ranges + (read / density).ceil() - 1.0).max(ranges) * pg_sys::seq_page_cost
            + read * (pg_sys::cpu_tuple_cost + quals.per_tuple)
            + src.rows * target.per_tuple;
        (startup_cost, total_cost)
    }
}

/// A custom path mirroring index path `ip` on the primary key, or None when
/// the scan could not narrow to what the btree reads (a clause the key
/// conditions cannot express: it would read more than the path's costs
/// say).
///
/// # Safety
/// Valid planner nodes; `ip` is an index path of `rel` on its primary key.
unsafe fn make_path(
    rel: *mut pg_sys::RelOptInfo,
    ip: *mut pg_sys::IndexPath,
    desc: &KeyDesc,
) -> Option<*mut pg_sys::CustomPath> {
    // SAFETY: per the contract; nodes are palloc'd in the planner's context.
    unsafe {
        let conds = key_conds(rel, ip, desc);
        let clauses: usize = ptrs::<pg_sys::IndexClause>((*ip).indexclauses)
            .iter()
            .map(|&ic| ptrs::<pg_sys::RestrictInfo>((*ic).indexquals).len())
            .sum();
        let plain: Vec<Cond> = conds.iter().map(|(c, _)| *c).collect();
        if conds.len() != clauses || !all_narrowing(&plain) {
            return None;
        }
        let backward = (*ip).indexscandir == pg_sys::ScanDirection::BackwardScanDirection;
        // Byte-order columns compared by a libc collation lose the index's
        // order (see collation_rules_out).
        let ordered = desc.cols.iter().all(|c| c.kind.ordered());
        if !ordered && collation_rules_out(desc, &plain, backward) {
            return None;
        }
        let (ilist, elist) = encode_conds(&conds, backward);
        let cp = pg_sys::palloc0(size_of::<pg_sys::CustomPath>()) as *mut pg_sys::CustomPath;
        let src = &(*ip).path;
        let path = &mut (*cp).path;
        path.type_ = pg_sys::NodeTag::T_CustomPath;
        path.pathtype = pg_sys::NodeTag::T_CustomScan;
        path.parent = rel;
        path.pathtarget = (*rel).reltarget;
        path.param_info = src.param_info;
        path.parallel_aware = false;
        path.parallel_safe = false;
        path.parallel_workers = 0;
        path.rows = src.rows;
        path.pathkeys = if ordered {
            src.pathkeys
        } else {
            std::ptr::null_mut()
        };
        (path.startup_cost, path.total_cost) = path_costs(rel, ip, &conds);
        // It projects (ExecScan with the projection ExecInitCustomScan sets
        // up): without this, UPDATE's target list put a Result node on top
        // of every primary scan, one more node to build and run per row.
        (*cp).flags = pg_sys::CUSTOMPATH_SUPPORT_PROJECTION;
        (*cp).custom_paths = std::ptr::null_mut();
        let mut private = pg_sys::lappend(std::ptr::null_mut(), ilist.cast());
        private = pg_sys::lappend(private, elist.cast());
        (*cp).custom_private = private;
        (*cp).methods = &raw const PATH_METHODS;
        Some(cp)
    }
}

/// A partitionwise join moves our parameterized path to a child relation:
/// the key values' references to the other side's parent become references
/// to its matching child.
#[pg_guard]
unsafe extern "C-unwind" fn reparameterize(
    root: *mut pg_sys::PlannerInfo,
    custom_private: *mut pg_sys::List,
    child_rel: *mut pg_sys::RelOptInfo,
) -> *mut pg_sys::List {
    // SAFETY: PostgreSQL passes our path's private list and a valid child
    // relation; the adjusted list is a new copy.
    unsafe {
        let private = ptrs::<pg_sys::List>(custom_private);
        let exprs = pg_sys::adjust_appendrel_attrs_multilevel(
            root,
            private[1].cast(),
            (*child_rel).relids,
            (*child_rel).top_parent_relids,
        );
        let mut out = pg_sys::lappend(std::ptr::null_mut(), private[0].cast());
        out = pg_sys::lappend(out, exprs.cast());
        out
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn plan_path(
    _root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    best_path: *mut pg_sys::CustomPath,
    tlist: *mut pg_sys::List,
    clauses: *mut pg_sys::List,
    _custom_plans: *mut pg_sys::List,
) -> *mut pg_sys::Plan {
    // SAFETY: PostgreSQL passes our path and valid lists.
    unsafe {
        let cs = pg_sys::palloc0(size_of::<pg_sys::CustomScan>()) as *mut pg_sys::CustomScan;
        (*cs).scan.plan.type_ = pg_sys::NodeTag::T_CustomScan;
        (*cs).scan.plan.targetlist = tlist;
        (*cs).scan.plan.qual = pg_sys::extract_actual_clauses(clauses, false);
        (*cs).scan.scanrelid = (*rel).relid;
        (*cs).flags = (*best_path).flags;
        let private = ptrs::<pg_sys::List>((*best_path).custom_private);
        (*cs).custom_private = pg_sys::copyObjectImpl(private[0].cast()).cast();
        (*cs).custom_exprs = pg_sys::copyObjectImpl(private[1].cast()).cast();
        (*cs).methods = &raw const SCAN_METHODS;
        cs.cast()
    }
}

/// A range of tree keys, lower and upper bound.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Rust-side run state. Invariant: `ranges` is None until the key values
/// were evaluated for the current scan (first fetch after begin/rescan).
struct PkScanRun {
    table: Table,
    conds: Vec<Cond>,
    values: Vec<*mut pg_sys::ExprState>,
    dir: Direction,
    ranges: Option<VecDeque<KeyRange>>,
    cursor: Option<Cursor>,
    ssi_out: bool,
    /// SERIALIZABLE point lookups (every range is one whole key): visible
    /// rows take tuple locks, as heap's index fetches do; a key with no
    /// visible row locks the relation instead (the phantom).
    point: bool,
    /// Every range is one whole key of an immediate primary key, read with
    /// an MVCC snapshot (not SERIALIZABLE): at most one version per range
    /// is visible, so the range ends with the first (heap's HOT-chain
    /// search stops there too). A deferrable key may hold two rows of one
    /// key until commit.
    unique: bool,
    /// In point mode: the current range, and whether it had a visible row.
    current: Option<(KeyRange, bool)>,
    /// The primary key's index, opened when first counted: the scan counts
    /// in its statistics (`pg_stat_*_indexes.idx_scan`, tuples read and
    /// fetched) as a btree scan of it would.
    pk_index: pg_sys::Relation,
}

/// The scan node: PostgreSQL's part first.
#[repr(C)]
struct PkScanState {
    css: pg_sys::CustomScanState,
    run: *mut PkScanRun,
}

#[pg_guard]
unsafe extern "C-unwind" fn create_state(_cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    // SAFETY: zeroed node memory, tagged as PostgreSQL requires.
    unsafe {
        let s = pg_sys::palloc0(size_of::<PkScanState>()) as *mut PkScanState;
        (*s).css.ss.ps.type_ = pg_sys::NodeTag::T_CustomScanState;
        (*s).css.methods = &raw const EXEC_METHODS;
        s.cast()
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin(
    node: *mut pg_sys::CustomScanState,
    estate: *mut pg_sys::EState,
    _eflags: c_int,
) {
    // SAFETY: `node` is our PkScanState (create_state made it) with its
    // relation opened by ExecInitCustomScan; PkScanRun lives in the query context.
    unsafe {
        let s = node as *mut PkScanState;
        let plan = (*node).ss.ps.plan as *mut pg_sys::CustomScan;
        let rel = (*node).ss.ss_currentRelation;
        let iv = ints((*plan).custom_private);
        let dir = if iv.first() == Some(&1) {
            Direction::Backward
        } else {
            Direction::Forward
        };
        let conds = iv[1..]
            .chunks_exact(4)
            .map(|c| Cond {
                col: c[0] as usize,
                strategy: c[1],
                array: c[2] != 0,
                typid: pg_sys::Oid::from(c[3] as u32),
            })
            .collect();
        let values = ptrs::<pg_sys::Expr>((*plan).custom_exprs)
            .into_iter()
            .map(|e| pg_sys::ExecInitExpr(e, &mut (*node).ss.ps))
            .collect();
        let snapshot = (*estate).es_snapshot;
        (*s).run = PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(PkScanRun {
            table: table_of(rel),
            conds,
            values,
            dir,
            ranges: None,
            cursor: None,
            ssi_out: ssi::out_needed(rel, snapshot),
            point: false,
            unique: false,
            current: None,
            pk_index: std::ptr::null_mut(),
        });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn exec(node: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: ExecScan drives our access and recheck methods on this node.
    unsafe { pg_sys::ExecScan(&mut (*node).ss, Some(next), Some(recheck)) }
}

#[pg_guard]
unsafe extern "C-unwind" fn recheck(
    _ss: *mut pg_sys::ScanState,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // Every clause, key conditions included, is in the plan's qual, which
    // ExecScan evaluates on the re-check tuple too. That tuple arrives in
    // the table's own slot type, while our qual and projection were
    // compiled for a virtual scan slot, which reads column values without
    // deforming first: deform them all here.
    // SAFETY: ExecScanFetch passes a valid, non-empty slot.
    unsafe { pg_sys::slot_getallattrs(slot) };
    true
}

#[pg_guard]
unsafe extern "C-unwind" fn end(node: *mut pg_sys::CustomScanState) {
    // SAFETY: our node; the cursor is released now, the rest with the
    // query's memory context.
    unsafe {
        let run = (*(node as *mut PkScanState)).run;
        if !run.is_null() {
            (*run).cursor = None;
            (*run).ranges = None;
            if !(*run).pk_index.is_null() {
                // The lock stays until the transaction ends, as the
                // executor's index scans keep theirs.
                pg_sys::index_close((*run).pk_index, pg_sys::NoLock as _);
                (*run).pk_index = std::ptr::null_mut();
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn rescan(node: *mut pg_sys::CustomScanState) {
    // SAFETY: our node; ExecScanReScan clears the scan slot and the
    // EvalPlanQual bookkeeping, as every scan's rescan does.
    unsafe {
        let run = (*(node as *mut PkScanState)).run;
        if !run.is_null() {
            (*run).cursor = None;
            (*run).current = None;
            (*run).ranges = None;
        }
        pg_sys::ExecScanReScan(&mut (*node).ss);
    }
}

/// Evaluates expression `e` in the node's per-tuple context; None = NULL.
///
/// # Safety
/// `e` was initialised for `node`.
unsafe fn eval(
    node: *mut pg_sys::CustomScanState,
    e: *mut pg_sys::ExprState,
) -> Option<pg_sys::Datum> {
    // SAFETY: ExecInitExpr set evalfunc; the result lives in the per-query
    // context long enough to be encoded (ranges are built right away).
    unsafe {
        let econtext = (*node).ss.ps.ps_ExprContext;
        let mut null = false;
        let f = (*e).evalfunc.expect("initialised expression");
        let d = f(e, econtext, &mut null);
        (!null).then_some(d)
    }
}

/// Integer value of a datum of integer type `t`.
fn int_value(d: pg_sys::Datum, t: pg_sys::Oid) -> i64 {
    match t {
        pg_sys::INT2OID => d.value() as i16 as i64,
        pg_sys::INT4OID => d.value() as i32 as i64,
        _ => d.value() as i64,
    }
}

/// A value of a condition, converted to the key column's type. Err(above):
/// an integer beyond the column type's range (above its maximum or below
/// its minimum), which no row can equal.
fn to_column(
    d: pg_sys::Datum,
    from: pg_sys::Oid,
    to: pg_sys::Oid,
) -> Result<pg_sys::Datum, bool> {
    if from == to || is_text(from) && is_text(to) {
        return Ok(d);
    }
    let v = int_value(d, from);
    let (lo, hi) = match to {
        pg_sys::INT2OID => (i16::MIN as i64, i16::MAX as i64),
        pg_sys::INT4OID => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    };
    if v > hi {
        return Err(true);
    }
    if v < lo {
        return Err(false);
    }
    Ok(pg_sys::Datum::from(v))
}

/// `b` (complete column encodings) extended to sort after every key that
/// starts with it and before every greater one, in byte order and in a
/// collating tree's order alike (`keyorder::AFTER_PREFIX`).
fn after(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.extend_from_slice(&orioledb_engine::collated_order::AFTER_PREFIX);
    v
}

/// [`key_ranges`] of a point lookup (a single-value equality first among
/// the conditions of every key column): the one range of that key, built
/// without the general case's sorting and per-prefix copies (a tenth of a
/// point lookup's time went there); None for any other conditions.
///
/// # Safety
/// As for [`key_ranges`].
unsafe fn point_range(
    node: *mut pg_sys::CustomScanState,
    run: &PkScanRun,
    desc: &KeyDesc,
) -> Option<(VecDeque<KeyRange>, bool)> {
    let mut key = Vec::new();
    for (ci, col) in desc.cols.iter().enumerate() {
        let (i, c) = run
            .conds
            .iter()
            .enumerate()
            .find(|(_, c)| c.col == ci && c.strategy == 3)?;
        if c.array {
            return None;
        }
        // SAFETY: per the contract.
        let value = unsafe { eval(node, run.values[i]) }
            .and_then(|d| to_column(d, c.typid, pg_sys::Oid::from(col.typid)).ok());
        // NULL, or out of the column's range: no row has it.
        let Some(v) = value else {
            return Some((VecDeque::new(), false));
        };
        KeyDesc::push_datum(col, Some(v), &mut key);
    }
    let base = Table::prefix_bound(&key);
    let hi = after(&base);
    Some((VecDeque::from([(Bound::Included(base), Bound::Excluded(hi))]), true))
}

/// What the conditions make of the key, column by column: the general
/// case of [`key_ranges`], before the ranges are put together.
struct Bounds {
    /// Prefixes of equal leading columns (several with = ANY).
    prefixes: Vec<Vec<u8>>,
    /// Inclusive, behind each prefix.
    lower: Option<Vec<u8>>,
    /// Exclusive, behind each prefix.
    upper: Option<Vec<u8>>,
    /// Every range is one whole key: equalities on every column, not
    /// capped.
    exact: bool,
}

/// The key ranges the conditions allow, in scan order (None: the whole
/// table).
///
/// # Safety
/// `node` is our scan node with its PkScanRun.
unsafe fn key_ranges(
    node: *mut pg_sys::CustomScanState,
    run: &PkScanRun,
) -> (VecDeque<KeyRange>, bool) {
    let desc = run.table.desc().expect("custom scan on a keyed table");
    // SAFETY: per the contract.
    if let Some(point) = unsafe { point_range(node, run, desc) } {
        return point;
    }
    let desc = desc.clone();
    let order = run.table.tree.cmp();
    let keys_cmp = |a: &[u8], b: &[u8]| order.cmp(a, b);
    // Encodings of one column compare in the tree's order behind the
    // (complete) columns before it, `prefix`.
    let column_cmp = |prefix: &[u8], a: &[u8], b: &[u8]| {
        let base = Table::prefix_bound(prefix);
        keys_cmp(&[base.as_slice(), a].concat(), &[base.as_slice(), b].concat())
    };
    // SAFETY: per the contract.
    let bounds = unsafe { column_bounds(node, run, &desc, &column_cmp) };
    let mut out = VecDeque::new();
    let Some(bounds) = bounds else {
        return (out, false);
    };
    for p in bounds.prefixes {
        let base = Table::prefix_bound(&p);
        let lo = match &bounds.lower {
            Some(l) => {
                let mut k = base.clone();
                k.extend_from_slice(l);
                k
            }
            None => base.clone(),
        };
        let hi = match &bounds.upper {
            Some(u) => {
                let mut k = base.clone();
                k.extend_from_slice(u);
                k
            }
            None => after(&base),
        };
        if keys_cmp(&lo, &hi).is_lt() {
            out.push_back((Bound::Included(lo), Bound::Excluded(hi)));
        }
    }
    if run.dir == Direction::Backward {
        out = out.into_iter().rev().collect();
    }
    (out, bounds.exact)
}

/// The [`Bounds`] of the conditions: equalities on the leading columns,
/// then ranges on the first column without one (nothing after it
/// narrows); None when no row can qualify.
///
/// # Safety
/// As for [`key_ranges`].
unsafe fn column_bounds(
    node: *mut pg_sys::CustomScanState,
    run: &PkScanRun,
    desc: &KeyDesc,
    column_cmp: &impl Fn(&[u8], &[u8], &[u8]) -> std::cmp::Ordering,
) -> Option<Bounds> {
    let mut bounds = Bounds {
        prefixes: vec![Vec::new()],
        lower: None,
        upper: None,
        exact: true,
    };
    for (ci, col) in desc.cols.iter().enumerate() {
        let here: Vec<(usize, &Cond)> = run
            .conds
            .iter()
            .enumerate()
            .filter(|(_, c)| c.col == ci)
            .collect();
        if let Some(&(i, c)) = here.iter().find(|(_, c)| c.strategy == 3) {
            let prefix = &bounds.prefixes[0];
            // SAFETY: per the contract.
            let encoded = unsafe { equal_values(node, run.values[i], c, col, prefix, column_cmp) };
            if encoded.is_empty() {
                return None;
            }
            if bounds.prefixes.len() * encoded.len() > 100_000 {
                bounds.exact = false;
                break;
            }
            bounds.prefixes = bounds
                .prefixes
                .iter()
                .flat_map(|p| {
                    encoded.iter().map(move |e| {
                        let mut k = p.clone();
                        k.extend_from_slice(e);
                        k
                    })
                })
                .collect();
            continue;
        }
        // Range conditions on the first column without an equality.
        let prefix = &bounds.prefixes[0];
        // SAFETY: per the contract.
        let (lower, upper) = unsafe { range_bounds(node, run, col, &here, prefix, column_cmp) }?;
        bounds.lower = lower;
        bounds.upper = upper;
        bounds.exact = false;
        break;
    }
    Some(bounds)
}

/// The encodings of an equality's value (or `= ANY`'s values) on key
/// column `col`, sorted in the tree's order behind `prefix` and without
/// duplicates, so that the ranges built from them come in scan order;
/// empty when no row can match (NULL, or every value beyond the column's
/// type).
///
/// # Safety
/// `value` was initialised for our scan node `node`.
unsafe fn equal_values(
    node: *mut pg_sys::CustomScanState,
    value: *mut pg_sys::ExprState,
    c: &Cond,
    col: &KeyCol,
    prefix: &[u8],
    column_cmp: &impl Fn(&[u8], &[u8], &[u8]) -> std::cmp::Ordering,
) -> Vec<Vec<u8>> {
    let coltype = pg_sys::Oid::from(col.typid);
    // SAFETY: per the contract; array datums are deconstructed in the
    // per-query memory context.
    unsafe {
        let Some(d) = eval(node, value) else {
            return Vec::new();
        };
        let mut encoded: Vec<Vec<u8>> = Vec::new();
        let vals: Vec<pg_sys::Datum> = if c.array {
            array_elements(d, c.typid)
        } else {
            vec![d]
        };
        for v in vals {
            if let Ok(v) = to_column(v, c.typid, coltype) {
                let mut e = Vec::new();
                KeyDesc::push_datum(col, Some(v), &mut e);
                encoded.push(e);
            }
        }
        encoded.sort_by(|a, b| column_cmp(prefix, a, b));
        encoded.dedup();
        encoded
    }
}

/// A key column's lower (inclusive) and upper (exclusive) bound, encoded;
/// None: unbounded on that side.
type ColumnBounds = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The tightest (lower inclusive, upper exclusive) bounds the range
/// conditions `here` put on key column `col` behind `prefix`; None when no
/// row can qualify.
///
/// # Safety
/// As for [`key_ranges`].
unsafe fn range_bounds(
    node: *mut pg_sys::CustomScanState,
    run: &PkScanRun,
    col: &KeyCol,
    here: &[(usize, &Cond)],
    prefix: &[u8],
    column_cmp: &impl Fn(&[u8], &[u8], &[u8]) -> std::cmp::Ordering,
) -> Option<ColumnBounds> {
    let coltype = pg_sys::Oid::from(col.typid);
    let mut lower: Option<Vec<u8>> = None;
    let mut upper: Option<Vec<u8>> = None;
    // SAFETY: per the contract.
    unsafe {
        for &(i, c) in here {
            let d = eval(node, run.values[i])?;
            let v = match to_column(d, c.typid, coltype) {
                Ok(v) => v,
                // Beyond the type's range: either no row qualifies
                // or the bound does not narrow anything.
                Err(above) => {
                    let is_upper = c.strategy <= 2;
                    if is_upper != above {
                        return None;
                    }
                    continue;
                }
            };
            let mut e = Vec::new();
            KeyDesc::push_datum(col, Some(v), &mut e);
            let tighter = |old: Option<Vec<u8>>, new: Vec<u8>, want_less: bool| match old {
                Some(o) if column_cmp(prefix, &o, &new).is_lt() == want_less => Some(o),
                _ => Some(new),
            };
            match c.strategy {
                1 => upper = tighter(upper.take(), e, true),
                2 => upper = tighter(upper.take(), after(&e), true),
                4 => lower = tighter(lower.take(), e, false),
                5 => lower = tighter(lower.take(), after(&e), false),
                _ => {}
            }
        }
    }
    Some((lower, upper))
}

/// Elements of a one-dimensional array datum (NULLs left out).
///
/// # Safety
/// `d` is an array of `elemtype`.
unsafe fn array_elements(d: pg_sys::Datum, elemtype: pg_sys::Oid) -> Vec<pg_sys::Datum> {
    // SAFETY: per the contract; deconstruct_array pallocs its outputs.
    unsafe {
        let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let (mut len, mut byval, mut align) = (0i16, false, 0 as c_char);
        pg_sys::get_typlenbyvalalign(elemtype, &mut len, &mut byval, &mut align);
        let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut n: c_int = 0;
        pg_sys::deconstruct_array(
            arr, elemtype, len as c_int, byval, align, &mut elems, &mut nulls, &mut n,
        );
        (0..n as usize)
            .filter(|&i| !*nulls.add(i))
            .map(|i| *elems.add(i))
            .collect()
    }
}

/// Evaluates the key values and sets up the scan's mode (point, unique,
/// statistics, relation lock) on its first fetch after begin or rescan,
/// when the parameters are known.
///
/// # Safety
/// `ss` is our scan node, `run` its PkScanRun; `rel` and `snapshot` are the
/// scan's.
unsafe fn start_ranges(
    ss: *mut pg_sys::ScanState,
    run: &mut PkScanRun,
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
) {
    // SAFETY: per the contract; the index is opened under the lock the
    // executor's index scans take.
    unsafe {
        let node = ss as *mut pg_sys::CustomScanState;
        // Key values (and detoasted arrays) only live until they are
        // encoded: the per-tuple context, reset for every row.
        let econtext = (*ss).ps.ps_ExprContext;
        let prev = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
        let (ranges, exact) = key_ranges(node, run);
        pg_sys::MemoryContextSwitchTo(prev);
        run.point = exact && run.ssi_out;
        if run.pk_index.is_null() {
            let pk = pg_sys::RelationGetPrimaryKeyIndex(rel);
            if pk != pg_sys::InvalidOid {
                run.pk_index = pg_sys::index_open(pk, pg_sys::AccessShareLock as _);
            }
        }
        if !run.pk_index.is_null() {
            rows::count_scan_stat(run.pk_index, rows::ScanStat::Scan);
            run.unique = exact
                && !run.ssi_out
                && crate::am::scan::is_mvcc(snapshot)
                && (*(*run.pk_index).rd_index).indimmediate;
        }
        if !run.point {
            // Before reading: ranges are predicates over the table.
            ssi::lock_relation(rel, snapshot);
        }
        run.ranges = Some(ranges);
    }
}

/// Reads the open cursor on to its next visible version and stores it in
/// `slot`; false when the cursor's range holds no more.
///
/// # Safety
/// `run` has a cursor; `rel`, `snapshot` and `slot` are the scan's.
unsafe fn next_visible(
    run: &mut PkScanRun,
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    // SAFETY: per the contract.
    unsafe {
        let cursor = run.cursor.as_mut().expect("just set");
        for item in cursor.by_ref() {
            pgrx::check_for_interrupts!();
            let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
            let id = run.table.id_of(&k);
            let h = decode(rel, id, &v);
            let visible = satisfies(&h, snapshot, rel);
            if run.ssi_out {
                ssi::check_out(rel, &h, visible, snapshot);
            }
            if visible {
                if let Some((_, found)) = run.current.as_mut() {
                    *found = lock_point_row(&run.table, rel, id, &h, snapshot);
                }
                if !run.pk_index.is_null() {
                    rows::count_scan_stat(run.pk_index, rows::ScanStat::Returned);
                    rows::count_scan_stat(run.pk_index, rows::ScanStat::Fetched);
                }
                // UPDATE, DELETE and row locks come back by row id: spare
                // them the row-id map probe.
                crate::am::layout::table::remember_key(run.table.tree.id(), id, &k);
                crate::am::layout::table::remember_read(run.table.tree.id(), id, &v);
                store_version(rel, slot, id, &v);
                return true;
            }
        }
        false
    }
}

/// Takes a SERIALIZABLE point lookup's tuple lock on visible row `id`, as
/// heap's index fetches do; whether the key counts as read through that
/// lock (if not, it counts as empty and gets the relation lock).
///
/// # Safety
/// `rel` is the scan's open relation of `table`, `snapshot` its snapshot.
unsafe fn lock_point_row(
    table: &Table,
    rel: pg_sys::Relation,
    id: u64,
    h: &Header,
    snapshot: pg_sys::Snapshot,
) -> bool {
    // SAFETY: per the contract.
    unsafe {
        ssi::lock_tid(rel, id, h.xmin, snapshot);
        // Writers check for conflicts after writing: read again after
        // locking to catch an xmax set between.
        let now = rows::get_version(table, id).map(|v| decode(rel, id, &v));
        if let Some(now) = &now {
            ssi::check_out(rel, now, true, snapshot);
        }
        // A row someone else is deleting or updating may give way to
        // another row of the same key, which would not inherit the tuple
        // lock: then the key counts as empty (relation lock) too.
        now.is_some_and(|n| n.xmax == 0 || n.lock_only())
    }
}

/// A SERIALIZABLE point lookup's key without a visible row: a phantom
/// only a relation lock covers.
///
/// # Safety
/// `rel` and `snapshot` are the scan's.
unsafe fn lock_empty_key(
    run: &PkScanRun,
    rel: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    range: KeyRange,
) {
    // SAFETY: per the contract.
    unsafe {
        let (lo, hi) = range;
        // Lock the relation, then read the key again so that a version
        // written before the lock (whose writer missed it) is reported
        // from this side.
        ssi::lock_relation(rel, snapshot);
        for item in run.table.versions(lo, hi, run.dir) {
            let (k, v) = item.unwrap_or_else(|e| crate::pg::engine::report(e));
            let id = run.table.id_of(&k);
            let h = decode(rel, id, &v);
            ssi::check_out(rel, &h, satisfies(&h, snapshot, rel), snapshot);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn next(ss: *mut pg_sys::ScanState) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: ExecScan passes our node; the relation, snapshot and slot
    // stay valid for the scan's life.
    unsafe {
        let node = ss as *mut pg_sys::CustomScanState;
        let run = &mut *(*(node as *mut PkScanState)).run;
        let rel = (*ss).ss_currentRelation;
        let snapshot = (*(*ss).ps.state).es_snapshot;
        let slot = (*ss).ss_ScanTupleSlot;
        if run.ranges.is_none() {
            start_ranges(ss, run, rel, snapshot);
        }
        loop {
            if run.cursor.is_none() {
                let Some((lo, hi)) = run.ranges.as_mut().and_then(|r| r.pop_front()) else {
                    return pg_sys::ExecClearTuple(slot);
                };
                if run.point {
                    run.current = Some(((lo.clone(), hi.clone()), false));
                }
                run.cursor = Some(run.table.versions(lo, hi, run.dir));
            }
            if next_visible(run, rel, snapshot, slot) {
                if run.unique {
                    run.cursor = None;
                }
                return slot;
            }
            run.cursor = None;
            if let Some((range, false)) = run.current.take() {
                lock_empty_key(run, rel, snapshot, range);
            }
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn explain(
    node: *mut pg_sys::CustomScanState,
    ancestors: *mut pg_sys::List,
    es: *mut pg_sys::ExplainState,
) {
    // SAFETY: our node and a valid ExplainState; deparsing only reads the
    // plan.
    unsafe {
        let plan = (*node).ss.ps.plan as *mut pg_sys::CustomScan;
        let rel = (*node).ss.ss_currentRelation;
        let iv = ints((*plan).custom_private);
        let exprs = ptrs::<pg_sys::Node>((*plan).custom_exprs);
        let table = table_of(rel);
        let Some(desc) = table.desc() else { return };
        let ctx = pg_sys::set_deparse_context_plan((*es).deparse_cxt, plan.cast(), ancestors);
        let mut conds = Vec::new();
        for (c, e) in iv[1..].chunks_exact(4).zip(exprs) {
            let attnum = desc.cols[c[0] as usize].attnum;
            let name = pg_sys::get_attname((*rel).rd_id, attnum, false);
            let name = std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned();
            let op = ["<", "<=", "=", ">=", ">"][(c[1] - 1) as usize];
            let value = pg_sys::deparse_expression(e, ctx, false, false);
            let value = std::ffi::CStr::from_ptr(value).to_string_lossy().into_owned();
            conds.push(if c[2] != 0 {
                format!("({name} = ANY ({value}))")
            } else {
                format!("({name} {op} {value})")
            });
        }
        let label = c"Primary Key Cond";
        if !conds.is_empty() {
            let text = CString::new(conds.join(" AND ")).unwrap_or_default();
            pg_sys::ExplainPropertyText(label.as_ptr(), text.as_ptr(), es);
        }
        if iv.first() == Some(&1) {
            pg_sys::ExplainPropertyText(c"Scan Direction".as_ptr(), c"Backward".as_ptr(), es);
        }
        let _ = rows::MOVED;
    }
}
