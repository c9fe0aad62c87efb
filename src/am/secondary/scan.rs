//! Reading an `orioledb_btree` index: ordered scans in either direction
//! (index and index-only scans) and bitmap scans.
//!
//! The scan keys' leading equalities and the range on the next column give
//! the key range walked (`bounds`); every entry in it is then checked
//! against the scan keys the range does not imply, with their operators,
//! on the entry's columns (read back from its key, or from its stored
//! index tuple), so the range only has to hold every match, and an entry
//! is returned only if it satisfies every key (no recheck is asked for).

use super::shape::{key_tid, shape_of, Shape};
use crate::pg::engine::report;
use orioledb_engine::collated_order::AFTER_PREFIX;
use orioledb_engine::cursor::LeafWalk;
use orioledb_engine::key_format::VERSION_TAG;
use orioledb_engine::Direction;
use pgrx::pg_sys;
use std::cmp::Ordering;
use std::ops::Bound;
use std::rc::Rc;

/// A scan's state (`IndexScanDesc.opaque`). Invariant: `walk`, when set,
/// reads `lo..hi` (narrowed past `last` when the walk began after a turn)
/// in its direction; `last` is the key of the entry returned last, None
/// before the first and after either end; `itup` (a page-sized buffer in
/// `scan_cxt`, null until first needed) holds the current entry's index
/// tuple unless `from_key`, when its columns were read from its key into
/// `values`/`nulls` (by-reference ones in `cxt`, a child of `scan_cxt`
/// made on first use and reset for every entry).
struct ScanState {
    shape: Option<Rc<Shape>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    /// A scan key no entry can satisfy (a comparison with NULL).
    empty: bool,
    /// Per scan key: whether every entry in `lo..hi` satisfies it.
    implied: Vec<bool>,
    walk: Option<(LeafWalk, Direction)>,
    last: Option<Vec<u8>>,
    itup: *mut u8,
    from_key: bool,
    cxt: pg_sys::MemoryContext,
    /// The scan's own memory context (`itup`, `cxt` and the holder live
    /// there).
    scan_cxt: pg_sys::MemoryContext,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

/// The per-entry memory context `cxt`, made on first use as a child of
/// `scan_cxt` (a lookup of integers that returns TIDs only never needs
/// one).
fn entry_cxt(cxt: &mut pg_sys::MemoryContext, scan_cxt: pg_sys::MemoryContext) -> pg_sys::MemoryContext {
    if cxt.is_null() {
        // SAFETY: a child of the scan's own context.
        *cxt = unsafe {
            pg_sys::AllocSetContextCreateExtended(
                scan_cxt,
                c"orioledb_btree entry".as_ptr(),
                pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
                pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
                pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
            )
        };
    }
    *cxt
}

/// The page-sized buffer `itup` for stored index tuples, made in
/// `scan_cxt` on first use.
fn tuple_buffer(itup: &mut *mut u8, scan_cxt: pg_sys::MemoryContext) -> *mut u8 {
    if itup.is_null() {
        // SAFETY: allocated in the scan's own context.
        *itup = unsafe { pg_sys::MemoryContextAlloc(scan_cxt, pg_sys::BLCKSZ as usize) }.cast();
    }
    *itup
}

/// `ambeginscan`.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    // SAFETY: PostgreSQL passes an open index; the scan descriptor and the
    // buffer live in the executor's memory context for the scan.
    unsafe {
        let scan = pg_sys::RelationGetIndexScan(index, nkeys, norderbys);
        let natts = (*(*index).rd_att).natts as usize;
        // Everything of the scan but its descriptor lives in a context of
        // its own, deleted by amendscan (a scan per row, as an exclusion
        // constraint's check makes, leaves nothing behind) or with the
        // caller's when an ERROR ends the query first.
        let scan_cxt = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"orioledb_btree scan".as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let state = Box::new(ScanState {
            shape: None,
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
            empty: false,
            implied: Vec::new(),
            walk: None,
            last: None,
            itup: std::ptr::null_mut(),
            from_key: false,
            cxt: std::ptr::null_mut(),
            scan_cxt,
            values: vec![pg_sys::Datum::from(0); natts],
            nulls: vec![false; natts],
        });
        let holder = pg_sys::MemoryContextAllocZero(scan_cxt, std::mem::size_of::<Holder>()) as *mut Holder;
        (*holder).state = Box::into_raw(state);
        (*holder).callback.func = Some(drop_held_state);
        (*holder).callback.arg = holder.cast();
        pg_sys::MemoryContextRegisterResetCallback(scan_cxt, &mut (*holder).callback);
        (*scan).opaque = holder.cast();
        (*scan).xs_itupdesc = (*index).rd_att;
        scan
    }
}

/// What `IndexScanDesc.opaque` points to: the scan's state, and the
/// callback that drops it when the scan's memory context goes away before
/// amendscan. Invariant: allocated in that context; `state` is null once
/// dropped.
#[repr(C)]
struct Holder {
    state: *mut ScanState,
    callback: pg_sys::MemoryContextCallback,
}

/// Drops a scan's state that `amendscan` did not (an ERROR ended the
/// query). Its buffer and per-entry context go with the scan's context.
unsafe extern "C-unwind" fn drop_held_state(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` is the Holder registered with this callback; the state
    // was boxed by ambeginscan and is dropped once (amendscan nulls it).
    unsafe {
        let holder = arg as *mut Holder;
        if !(*holder).state.is_null() {
            drop(Box::from_raw((*holder).state));
            (*holder).state = std::ptr::null_mut();
        }
    }
}

/// The scan's state.
///
/// # Safety
/// `scan` was begun by [`ambeginscan`] and not ended.
unsafe fn state<'a>(scan: pg_sys::IndexScanDesc) -> &'a mut ScanState {
    // SAFETY: per the contract: the holder's state is set until amendscan.
    unsafe { &mut *(*((*scan).opaque as *mut Holder)).state }
}

/// `amrescan`: takes the new scan keys and computes the range to walk.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amrescan(
    scan: pg_sys::IndexScanDesc,
    keys: pg_sys::ScanKey,
    _nkeys: std::ffi::c_int,
    _orderbys: pg_sys::ScanKey,
    _norderbys: std::ffi::c_int,
) {
    // SAFETY: PostgreSQL passes the scan and (when not null) as many keys
    // as the scan was begun with.
    unsafe {
        let n = (*scan).numberOfKeys as usize;
        if !keys.is_null() && n > 0 {
            std::ptr::copy(keys, (*scan).keyData, n);
        }
        let st = state(scan);
        let shape = match &st.shape {
            Some(s) => s.clone(),
            None => {
                let s = shape_of((*scan).indexRelation);
                st.shape = Some(s.clone());
                s
            }
        };
        let keys = std::slice::from_raw_parts((*scan).keyData, n);
        (st.lo, st.hi, st.empty, st.implied) = bounds(&shape, (*scan).indexRelation, keys);
        st.walk = None;
        st.last = None;
    }
}

/// Which of two lower (`lower`) or upper bounds leaves the smaller range.
fn tighter(shape: &Shape, a: Bound<Vec<u8>>, b: Bound<Vec<u8>>, lower: bool) -> Bound<Vec<u8>> {
    let key = |x: &Bound<Vec<u8>>| match x {
        Bound::Included(k) | Bound::Excluded(k) => Some(k.clone()),
        Bound::Unbounded => None,
    };
    let (Some(ka), Some(kb)) = (key(&a), key(&b)) else {
        return if matches!(a, Bound::Unbounded) { b } else { a };
    };
    match shape.tree.cmp().cmp(&ka, &kb) {
        Ordering::Equal => {
            if matches!(a, Bound::Excluded(_)) {
                a
            } else {
                b
            }
        }
        Ordering::Greater => {
            if lower {
                a
            } else {
                b
            }
        }
        Ordering::Less => {
            if lower {
                b
            } else {
                a
            }
        }
    }
}

/// `prefix` followed by `AFTER_PREFIX`: after every key that starts with it.
fn after(prefix: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(&AFTER_PREFIX);
    v
}

/// The key range holding every entry that satisfies `keys`, whether none
/// can (a key compares with NULL), and which keys every entry in the range
/// satisfies: the equalities (and `IS NULL`s) whose encodings make up its
/// prefix, and the next column's range keys when they bound it on both
/// sides — encodings order values exactly as the operators do (values
/// btree calls equal share one, as -0 and 0, 1.0 and 1.00).
///
/// # Safety
/// `keys` are the scan's keys on open index `index`.
// Long because one walk over the columns keeps the prefix, the bounds and
// the per-strategy cases together, as btree's _bt_first does.
unsafe fn bounds(
    shape: &Shape,
    index: pg_sys::Relation,
    keys: &[pg_sys::ScanKeyData],
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>, bool, Vec<bool>) {
    let mut implied = vec![false; keys.len()];
    let null_compare = keys.iter().any(|k| {
        k.sk_flags as u32 & pg_sys::SK_ISNULL != 0
            && k.sk_flags as u32 & (pg_sys::SK_SEARCHNULL | pg_sys::SK_SEARCHNOTNULL) == 0
    });
    if null_compare {
        return (Bound::Unbounded, Bound::Unbounded, true, implied);
    }
    let mut prefix = vec![VERSION_TAG];
    for n in 0..shape.desc.cols.len() {
        // SAFETY: rd_opcintype has an entry per key column.
        let opcintype = unsafe { *(*index).rd_opcintype.add(n) };
        let on_col = keys.iter().enumerate().filter(|(_, k)| k.sk_attno as usize == n + 1);
        let usable = |(_, k): &(usize, &pg_sys::ScanKeyData)| bound_datum(k, opcintype).is_some();
        let encode = |k: &pg_sys::ScanKeyData| {
            let mut v = prefix.clone();
            // SAFETY: bound_datum gives a datum of the column's type.
            unsafe { shape.push_column(n, bound_datum(k, opcintype), &mut v) };
            v
        };
        let equal = |(_, k): &(usize, &pg_sys::ScanKeyData)| k.sk_strategy == pg_sys::BTEqualStrategyNumber as u16;
        if let Some((i, k)) = on_col.clone().filter(usable).find(equal) {
            prefix = encode(k);
            implied[i] = true;
            continue;
        }
        if let Some((i, _)) = on_col.clone().find(|(_, k)| k.sk_flags as u32 & pg_sys::SK_SEARCHNULL != 0) {
            // SAFETY: a NULL needs no datum.
            unsafe { shape.push_column(n, None, &mut prefix) };
            implied[i] = true;
            continue;
        }
        let descending = shape.desc.cols[n].descending;
        let mut lo = Bound::Included(prefix.clone());
        let mut hi = Bound::Included(after(&prefix));
        let (mut lower_keys, mut upper_keys) = (Vec::new(), Vec::new());
        for (i, k) in on_col.filter(usable) {
            let s = k.sk_strategy as u32;
            // In the tree's order: on a descending column "greater" is
            // "earlier".
            let (less, greater) = (pg_sys::BTLessStrategyNumber, pg_sys::BTGreaterStrategyNumber);
            let (le, ge) = (pg_sys::BTLessEqualStrategyNumber, pg_sys::BTGreaterEqualStrategyNumber);
            let (s_lt, s_le, s_ge, s_gt) = if descending { (greater, ge, le, less) } else { (less, le, ge, greater) };
            let v = encode(k);
            if s == s_lt {
                hi = tighter(shape, hi, Bound::Excluded(v), false);
                upper_keys.push(i);
            } else if s == s_le {
                hi = tighter(shape, hi, Bound::Included(after(&v)), false);
                upper_keys.push(i);
            } else if s == s_ge {
                lo = tighter(shape, lo, Bound::Included(v), true);
                lower_keys.push(i);
            } else if s == s_gt {
                lo = tighter(shape, lo, Bound::Included(after(&v)), true);
                lower_keys.push(i);
            }
        }
        // Bounded on both sides by keys, the range holds only values
        // (NULLs sort outside it) that satisfy every key of either side:
        // the tightest bound of a side implies the looser ones. Bounded on
        // one side only, NULLs at the open end are in the range.
        if !lower_keys.is_empty() && !upper_keys.is_empty() {
            for i in lower_keys.into_iter().chain(upper_keys) {
                implied[i] = true;
            }
        }
        return (lo, hi, false, implied);
    }
    (Bound::Included(prefix.clone()), Bound::Included(after(&prefix)), false, implied)
}

/// The argument of scan key `k` as a datum of the column's type
/// `opcintype`, when it bounds the range: of that type, or an integer of
/// another width that the column's type holds (integers share an operator
/// family); None for a NULL or anything else (then the key only filters).
fn bound_datum(k: &pg_sys::ScanKeyData, opcintype: pg_sys::Oid) -> Option<pg_sys::Datum> {
    if k.sk_flags as u32 & pg_sys::SK_ISNULL != 0 {
        return None;
    }
    if k.sk_subtype == pg_sys::InvalidOid || k.sk_subtype == opcintype {
        return Some(k.sk_argument);
    }
    let width = |t: pg_sys::Oid| match t {
        pg_sys::INT2OID => Some(16),
        pg_sys::INT4OID => Some(32),
        pg_sys::INT8OID => Some(64),
        _ => None,
    };
    let (from, to) = (width(k.sk_subtype)?, width(opcintype)?);
    let raw = k.sk_argument.value() as i64;
    let v = match from {
        16 => raw as i16 as i64,
        32 => raw as i32 as i64,
        _ => raw,
    };
    match to {
        16 => i16::try_from(v).ok().map(pg_sys::Datum::from),
        32 => i32::try_from(v).ok().map(pg_sys::Datum::from),
        _ => Some(pg_sys::Datum::from(v)),
    }
}

/// Whether the current entry satisfies every scan key (deforming the index
/// tuple in `st.itup` into `st.values`/`st.nulls` unless `st.from_key`).
///
/// # Safety
/// `scan` is begun; `st` holds the current entry (see [`ScanState`]).
unsafe fn matches(scan: pg_sys::IndexScanDesc, st: &mut ScanState) -> bool {
    // SAFETY: per the contract; each key's function takes the column's
    // datum and the key's argument.
    unsafe {
        let n = (*scan).numberOfKeys as usize;
        if st.implied.iter().all(|&i| i) {
            return true;
        }
        if !st.from_key {
            pg_sys::index_deform_tuple(
                st.itup.cast(),
                (*(*scan).indexRelation).rd_att,
                st.values.as_mut_ptr(),
                st.nulls.as_mut_ptr(),
            );
        }
        let keys = std::slice::from_raw_parts_mut((*scan).keyData, n);
        keys.iter_mut().zip(&st.implied).filter(|(_, &implied)| !implied).all(|(k, _)| {
            let a = k.sk_attno as usize - 1;
            let flags = k.sk_flags as u32;
            if flags & pg_sys::SK_ISNULL != 0 {
                return if flags & pg_sys::SK_SEARCHNULL != 0 {
                    st.nulls[a]
                } else {
                    flags & pg_sys::SK_SEARCHNOTNULL != 0 && !st.nulls[a]
                };
            }
            !st.nulls[a]
                && pg_sys::FunctionCall2Coll(&mut k.sk_func, k.sk_collation, st.values[a], k.sk_argument).value() != 0
        })
    }
}

/// The TID of the next entry in `dir` that satisfies the keys (its columns
/// in the scan's state, see [`ScanState`]); None at the end of the range.
///
/// # Safety
/// `scan` is begun and rescanned.
unsafe fn next_match(scan: pg_sys::IndexScanDesc, dir: Direction) -> Option<pg_sys::ItemPointerData> {
    // SAFETY: per the contract.
    let st = unsafe { state(scan) };
    if st.empty {
        return None;
    }
    if st.walk.as_ref().is_none_or(|(_, d)| *d != dir) {
        let shape = st.shape.clone().expect("a rescan sets the shape");
        let (mut lo, mut hi) = (st.lo.clone(), st.hi.clone());
        // A turn: go on from the entry returned last, leaving it out.
        match (&st.last, dir) {
            (Some(k), Direction::Forward) => lo = Bound::Excluded(k.clone()),
            (Some(k), Direction::Backward) => hi = Bound::Excluded(k.clone()),
            (None, _) => {}
        }
        st.walk = Some((LeafWalk::new(shape.tree.range(lo, hi, dir)), dir));
    }
    loop {
        let (walk, _) = st.walk.as_mut().expect("set above");
        let Some(item) = walk.next() else {
            st.last = None;
            return None;
        };
        pgrx::check_for_interrupts!();
        let (k, v) = item.unwrap_or_else(|e| report(e));
        st.from_key = v.is_empty();
        // SAFETY: `scan` is begun (contract).
        let want_columns = unsafe { (*scan).xs_want_itup } || !st.implied.iter().all(|&i| i);
        if st.from_key && want_columns {
            let shape = st.shape.as_ref().expect("a rescan sets the shape");
            // SAFETY: `cxt` is the scan's; the key is an entry key of the
            // index, whose entries are key-only when their value is empty.
            unsafe {
                let cxt = entry_cxt(&mut st.cxt, st.scan_cxt);
                pg_sys::MemoryContextReset(cxt);
                let prev = pg_sys::MemoryContextSwitchTo(cxt);
                shape.decode_key(k, &mut st.values, &mut st.nulls);
                pg_sys::MemoryContextSwitchTo(prev);
            }
        } else if !st.from_key && want_columns {
            // SAFETY: `itup` is a page-sized buffer; values are at most a
            // third of a page.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), tuple_buffer(&mut st.itup, st.scan_cxt), v.len()) };
        }
        let (tid, k) = (key_tid(k), k.to_vec());
        // SAFETY: the state holds the current entry (see ScanState).
        if unsafe { matches(scan, st) } {
            st.last = Some(k);
            return Some(tid);
        }
    }
}

/// `amgettuple`: the next matching entry's TID (and, for index-only
/// scans, its tuple).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(scan: pg_sys::IndexScanDesc, dir: pg_sys::ScanDirection::Type) -> bool {
    let dir = if dir == pg_sys::ScanDirection::BackwardScanDirection {
        Direction::Backward
    } else {
        Direction::Forward
    };
    // SAFETY: PostgreSQL passes a begun, rescanned scan.
    unsafe {
        let Some(tid) = next_match(scan, dir) else {
            return false;
        };
        (*scan).xs_heaptid = tid;
        (*scan).xs_recheck = false;
        if (*scan).xs_want_itup {
            let st = state(scan);
            (*scan).xs_itup = if st.from_key {
                let prev = pg_sys::MemoryContextSwitchTo(entry_cxt(&mut st.cxt, st.scan_cxt));
                let t = pg_sys::index_form_tuple(
                    (*(*scan).indexRelation).rd_att,
                    st.values.as_mut_ptr(),
                    st.nulls.as_mut_ptr(),
                );
                pg_sys::MemoryContextSwitchTo(prev);
                t
            } else {
                st.itup.cast()
            };
        }
        true
    }
}

/// `amgetbitmap`: every matching entry's TID.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amgetbitmap(scan: pg_sys::IndexScanDesc, tbm: *mut pg_sys::TIDBitmap) -> i64 {
    let mut n = 0;
    // SAFETY: PostgreSQL passes a begun, rescanned scan and its bitmap.
    unsafe {
        while let Some(mut tid) = next_match(scan, Direction::Forward) {
            pg_sys::tbm_add_tuples(tbm, &mut tid, 1, false);
            n += 1;
        }
    }
    n
}

/// `amendscan`.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amendscan(scan: pg_sys::IndexScanDesc) {
    // SAFETY: the state was boxed by ambeginscan and is dropped once: the
    // holder forgets it, so its callback finds nothing to drop.
    unsafe {
        let holder = (*scan).opaque as *mut Holder;
        let st = Box::from_raw((*holder).state);
        (*holder).state = std::ptr::null_mut();
        (*scan).opaque = std::ptr::null_mut();
        let scan_cxt = st.scan_cxt;
        drop(st);
        pg_sys::MemoryContextDelete(scan_cxt);
    }
}
