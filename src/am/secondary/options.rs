//! The storage parameter of `orioledb_btree` indexes: `compress` (-1..22),
//! the zstd level of the index tree's pages, as for tables.
//!
//! Parsed by hand rather than through a reloption kind of our own: the
//! only parameter is one integer, and PostgreSQL keeps the parsed form we
//! return (`rd_options`) with the relation.

use crate::am::storage::levels::{parse_level, RANGE_DETAIL};
use crate::pg::error::error;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

/// `rd_options` of an `orioledb_btree` index. Invariant: a varlena with a
/// 4-byte header; `compress` is a level in -1..=22 when `has_compress`.
#[repr(C)]
struct IndexOptions {
    vl_len_: i32,
    has_compress: bool,
    compress: i32,
}

/// `amoptions`: parses `reloptions` (a text array, or a null datum),
/// raising 22023 for a bad `compress` and, when `validate`, for any other
/// name.
///
/// # Safety
/// `reloptions` is a null datum or a text array.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn amoptions(reloptions: pg_sys::Datum, validate: bool) -> *mut pg_sys::bytea {
    if reloptions.is_null() {
        return std::ptr::null_mut();
    }
    let mut level = None;
    // SAFETY: per the contract; untransformRelOptions makes a List of
    // DefElem whose arguments are strings.
    unsafe {
        let list = pg_sys::untransformRelOptions(reloptions);
        let n = if list.is_null() { 0 } else { (*list).length as usize };
        for i in 0..n {
            let def = (*(*list).elements.add(i)).ptr_value as *mut pg_sys::DefElem;
            let name = std::ffi::CStr::from_ptr((*def).defname).to_string_lossy().into_owned();
            if name != "compress" {
                if validate {
                    crate::pg::error::raise(
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        format!("unrecognized parameter \"{name}\""),
                    );
                }
                continue;
            }
            let text = std::ffi::CStr::from_ptr(pg_sys::defGetString(def)).to_string_lossy().into_owned();
            match parse_level(&text) {
                Some(l) => level = Some(l),
                None => error(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("invalid value for parameter \"compress\": \"{text}\""),
                )
                .detail(RANGE_DETAIL)
                .raise(),
            }
        }
        let size = std::mem::size_of::<IndexOptions>();
        let opts = pg_sys::palloc0(size) as *mut IndexOptions;
        pgrx::varlena::set_varsize_4b(opts.cast(), size as i32);
        (*opts).has_compress = level.is_some();
        (*opts).compress = level.unwrap_or(-1);
        opts.cast()
    }
}

/// The compression level `index` stores its pages at: its `compress`
/// parameter, else `orioledb.default_compress` (as a table's trees).
///
/// # Safety
/// `index` is an open `orioledb_btree` index (its `rd_options` were made by
/// [`amoptions`]).
pub unsafe fn level_of(index: pg_sys::Relation) -> i32 {
    // SAFETY: per the contract.
    unsafe {
        let opts = (*index).rd_options as *const IndexOptions;
        if !opts.is_null() && (*opts).has_compress {
            return (*opts).compress;
        }
    }
    crate::pg::guc::default_compress()
}
