//! Row changes of orioledb tables for logical decoding (`pg::decode`).
//!
//! After an insert, update or delete of a logically logged table (permanent,
//! `wal_level = logical`), the access method logs the change as heap's
//! records would let decoding see it:
//!
//! * the new row (insert, update) as a heap tuple whose out-of-line values
//!   are inline — except, in an update, a value the new row took over
//!   unchanged from the old one, which stays a toast pointer so that output
//!   plugins report it unchanged (test_decoding's `unchanged-toast-datum`,
//!   pgoutput's `u`), as they do for heap;
//! * the old row's replica identity (`ExtractReplicaIdentity` in heapam.c):
//!   the whole row for `REPLICA IDENTITY FULL`, nothing for `NOTHING`, else
//!   the identity index's columns (others NULL) — for a delete always, for
//!   an update only when one of them changed or is out of line.
//!
//! Everything is built in a memory context of its own, deleted before
//! returning, so a statement changing many rows does not accumulate it.

use crate::am::rows;
use crate::pg::decode::{self, Action, RowChange};
use pgrx::pg_sys;

// utils/datum.h, which pgrx does not bind.
extern "C-unwind" {
    fn datumIsEqual(a: pg_sys::Datum, b: pg_sys::Datum, by_val: bool, len: std::ffi::c_int) -> bool;
}

/// The change being logged: which rows it has.
enum Rows<'a> {
    Insert(*mut pg_sys::TupleTableSlot),
    Update {
        old: (&'a [u8], u64),
        new: *mut pg_sys::TupleTableSlot,
    },
    Delete {
        old: (&'a [u8], u64),
    },
}

/// Logs the insert of the slot's row (after it is stored).
///
/// # Safety
/// `rel` is open; `slot` holds a row of its type.
pub unsafe fn inserted(rel: pg_sys::Relation, slot: *mut pg_sys::TupleTableSlot) {
    // SAFETY: per the contract.
    unsafe { log(rel, Rows::Insert(slot)) }
}

/// Logs the update of version `old` (row id `old_id`) to the slot's row.
///
/// # Safety
/// As [`inserted`]; `old` is a version of `rel`'s tree.
pub unsafe fn updated(rel: pg_sys::Relation, old: &[u8], old_id: u64, slot: *mut pg_sys::TupleTableSlot) {
    // SAFETY: per the contract.
    unsafe {
        log(
            rel,
            Rows::Update {
                old: (old, old_id),
                new: slot,
            },
        )
    }
}

/// Logs the delete of version `old` (row id `old_id`).
///
/// # Safety
/// `rel` is open; `old` is a version of its tree.
pub unsafe fn deleted(rel: pg_sys::Relation, old: &[u8], old_id: u64) {
    // SAFETY: per the contract.
    unsafe {
        log(
            rel,
            Rows::Delete {
                old: (old, old_id),
            },
        )
    }
}

/// Whether `rel`'s changes are logged for decoding at all.
///
/// # Safety
/// `rel` is open.
pub unsafe fn wanted(rel: pg_sys::Relation) -> bool {
    // SAFETY: per the contract.
    unsafe { decode::logically_logged(rel) }
}

/// A row deformed: its values and null flags, one per attribute.
struct Deformed {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

/// # Safety
/// `tup` is a tuple of `desc`.
unsafe fn deform(desc: pg_sys::TupleDesc, tup: pg_sys::HeapTuple) -> Deformed {
    // SAFETY: per the contract; the arrays have natts entries.
    unsafe {
        let natts = (*desc).natts as usize;
        let mut d = Deformed {
            values: vec![pg_sys::Datum::from(0usize); natts],
            nulls: vec![true; natts],
        };
        pg_sys::heap_deform_tuple(tup, desc, d.values.as_mut_ptr(), d.nulls.as_mut_ptr());
        d
    }
}

unsafe fn log(rel: pg_sys::Relation, rows: Rows) {
    // SAFETY: per the callers' contracts; every palloc below lands in `cxt`,
    // which is deleted after the record is logged (XLogInsert copies it).
    unsafe {
        if !decode::logically_logged(rel) {
            return;
        }
        let cxt = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"orioledb row change".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let prev = pg_sys::MemoryContextSwitchTo(cxt);
        let desc = (*rel).rd_att;
        let old_of = |(v, id): (&[u8], u64)| {
            let tup = rows::build_tuple(v, id, (*rel).rd_id, cxt);
            deform(desc, tup)
        };
        let (action, new, old) = match rows {
            Rows::Insert(slot) => (Action::Insert, Some(deform_slot(desc, slot)), None),
            Rows::Update { old, new } => (Action::Update, Some(deform_slot(desc, new)), Some(old_of(old))),
            Rows::Delete { old } => (Action::Delete, None, Some(old_of(old))),
        };
        let new_tup = new.as_ref().map(|n| form(desc, n, old.as_ref(), None));
        let old_tup = old
            .as_ref()
            .and_then(|o| identity(rel, o, new.as_ref()));
        let node = (*rel).rd_node;
        decode::log(&RowChange {
            action,
            node: [node.spcNode.into(), node.dbNode.into(), node.relNode.into()],
            new: new_tup.map(|t| image(t)),
            old: old_tup.map(|t| image(t)),
        });
        pg_sys::MemoryContextSwitchTo(prev);
        pg_sys::MemoryContextDelete(cxt);
    }
}

/// The slot's row, deformed.
///
/// # Safety
/// `slot` holds a row of `desc`.
unsafe fn deform_slot(desc: pg_sys::TupleDesc, slot: *mut pg_sys::TupleTableSlot) -> Deformed {
    // SAFETY: per the contract; slot_getallattrs fills natts entries.
    unsafe {
        let natts = (*desc).natts as usize;
        pg_sys::slot_getallattrs(slot);
        Deformed {
            values: std::slice::from_raw_parts((*slot).tts_values, natts).to_vec(),
            nulls: std::slice::from_raw_parts((*slot).tts_isnull, natts).to_vec(),
        }
    }
}

/// The tuple's bytes (`HeapTupleHeader` and data).
///
/// # Safety
/// `t` is a valid tuple that outlives the slice.
unsafe fn image<'a>(t: pg_sys::HeapTuple) -> &'a [u8] {
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts((*t).t_data.cast::<u8>(), (*t).t_len as usize) }
}

/// The varlena at `d` when the attribute is varlena, not NULL, and stored
/// out of line (any kind of external pointer).
///
/// # Safety
/// `d` is a value of attribute `att`.
unsafe fn external(att: &pg_sys::FormData_pg_attribute, null: bool, d: pg_sys::Datum) -> Option<*mut u8> {
    // SAFETY: a varlena's first byte 0x01 marks a 1-byte header with a
    // tag (`VARATT_IS_EXTERNAL`).
    unsafe {
        let p = d.cast_mut_ptr::<u8>();
        (att.attlen == -1 && !null && *p == 0x01).then_some(p)
    }
}

/// A heap tuple of `row` with every out-of-line value fetched inline —
/// except values equal to `old`'s on-disk toast pointer in the same
/// column (an update's unchanged toasted values); only the columns in
/// `only` when given (others NULL).
///
/// # Safety
/// `row` and `old` hold values of `desc`'s attributes.
unsafe fn form(
    desc: pg_sys::TupleDesc,
    row: &Deformed,
    old: Option<&Deformed>,
    only: Option<*mut pg_sys::Bitmapset>,
) -> pg_sys::HeapTuple {
    // SAFETY: per the contract; detoasted copies are palloc'd in the
    // current (row change) context.
    unsafe {
        let natts = row.values.len();
        let attrs = (*desc).attrs.as_slice(natts);
        let mut values = row.values.clone();
        let mut nulls = row.nulls.clone();
        for i in 0..natts {
            if let Some(set) = only {
                let member = i as i32 + 1 - pg_sys::FirstLowInvalidHeapAttributeNumber;
                if !pg_sys::bms_is_member(member, set) {
                    nulls[i] = true;
                    continue;
                }
            }
            let Some(p) = external(&attrs[i], nulls[i], values[i]) else {
                continue;
            };
            let unchanged = old.is_some_and(|o| {
                const VARTAG_ONDISK: u8 = 18;
                *p.add(1) == VARTAG_ONDISK
                    && external(&attrs[i], o.nulls[i], o.values[i]).is_some_and(|q| {
                        let len = crate::am::toast::varsize_any(p);
                        len == crate::am::toast::varsize_any(q)
                            && std::slice::from_raw_parts(p, len) == std::slice::from_raw_parts(q, len)
                    })
            });
            if !unchanged {
                values[i] = pg_sys::Datum::from(pg_sys::detoast_external_attr(p.cast()));
            }
        }
        pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr())
    }
}

/// The old row's replica identity as heap logs it (see the module
/// comment); `new` is an update's new row.
///
/// # Safety
/// `old` and `new` hold values of `rel`'s attributes.
unsafe fn identity(rel: pg_sys::Relation, old: &Deformed, new: Option<&Deformed>) -> Option<pg_sys::HeapTuple> {
    // SAFETY: per the contract; the bitmap is a copy made for us.
    unsafe {
        let desc = (*rel).rd_att;
        match (*(*rel).rd_rel).relreplident as u8 {
            pg_sys::REPLICA_IDENTITY_NOTHING => return None,
            pg_sys::REPLICA_IDENTITY_FULL => return Some(form(desc, old, None, None)),
            _ => {}
        }
        let key = pg_sys::RelationGetIndexAttrBitmap(
            rel,
            pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_IDENTITY_KEY,
        );
        if key.is_null() {
            return None;
        }
        let required = match new {
            None => true,
            Some(new) => key_changed_or_external(desc, key, old, new),
        };
        let t = required.then(|| form(desc, old, None, Some(key)));
        pg_sys::bms_free(key);
        t
    }
}

/// Whether an identity column (in `key`) differs between `old` and `new`
/// (binary image) or is out of line in `old`: heap's `key_required`.
///
/// # Safety
/// As [`identity`]; `key` is a valid attribute bitmap.
unsafe fn key_changed_or_external(
    desc: pg_sys::TupleDesc,
    key: *mut pg_sys::Bitmapset,
    old: &Deformed,
    new: &Deformed,
) -> bool {
    // SAFETY: per the contract.
    unsafe {
        let natts = old.values.len();
        let attrs = (*desc).attrs.as_slice(natts);
        let mut x = -1;
        loop {
            x = pg_sys::bms_next_member(key, x);
            if x < 0 {
                return false;
            }
            let attnum = x + pg_sys::FirstLowInvalidHeapAttributeNumber;
            if attnum <= 0 || attnum as usize > natts {
                continue;
            }
            let i = attnum as usize - 1;
            let att = &attrs[i];
            if old.nulls[i] != new.nulls[i] || external(att, old.nulls[i], old.values[i]).is_some() {
                return true;
            }
            if !old.nulls[i] && !datumIsEqual(old.values[i], new.values[i], att.attbyval, att.attlen as i32) {
                return true;
            }
        }
    }
}
