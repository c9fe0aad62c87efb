//! Sort keys of text under ICU collations, for keying a tree by text.
//!
//! A tree compares keys as bytes, also during WAL replay where no catalog
//! (and so no collation) is at hand. An ICU collation's sort key
//! (`ucol_getSortKey`) compares bytewise exactly as `ucol_strcoll` compares
//! the strings — ICU guarantees it, and PostgreSQL relies on it for ICU
//! abbreviated keys — so `sort key ‖ bytes` orders like `varstr_cmp`: by the
//! collation, ties between different strings broken by their bytes (only for
//! deterministic collations; nondeterministic ones have no tie-break).
//!
//! libc language collations get no sort key: PostgreSQL does not trust
//! `strxfrm` to agree with `strcoll` (it disables libc abbreviated keys for
//! that reason), and glibc's transformed strings are about eight times the
//! input, so ordinary keys would not fit a tree key. A tree keyed by such
//! text compares its keys with `strcoll_l` instead ([`LibcCollation`],
//! engine `collated_order.rs`), under a locale named in the tree's key
//! descriptor, so that WAL replay (no catalog) opens the same locale.

use pgrx::pg_sys;
use pgrx::pg_sys::ffi::pg_guard_ffi_boundary;
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

/// PostgreSQL 15's `struct pg_locale_struct` (utils/pg_locale.h), which
/// pgrx does not bind: provider, deterministic, then a union whose ICU
/// member is `{ const char *locale; UCollator *ucol; }`.
#[repr(C)]
struct PgLocale {
    provider: c_char,
    deterministic: bool,
    info: [*mut c_void; 2],
}

unsafe extern "C-unwind" {
    /// pg_locale.c: the cached locale of a collation (NULL for the libc
    /// database default).
    fn pg_newlocale_from_collation(collid: pg_sys::Oid) -> *mut PgLocale;
}

unsafe extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

type GetSortKey = unsafe extern "C" fn(*const c_void, *const u16, i32, *mut u8, i32) -> i32;
type ToUChar = unsafe extern "C-unwind" fn(*mut *mut u16, *const c_char, usize) -> i32;

/// The address of symbol `name` among the loaded objects, if any.
fn symbol(name: &str) -> Option<usize> {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: dlsym with RTLD_DEFAULT (NULL on glibc) only searches the
    // loaded objects' symbol tables.
    let p = unsafe { dlsym(std::ptr::null_mut(), c.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// `ucol_getSortKey` from the ICU the server is linked with, and the
/// server's `icu_to_uchar` (pg_locale.c: database encoding to palloc'd
/// UTF-16), both looked up at run time so that the library also loads into
/// a server built without ICU. ICU renames its symbols per major version
/// (`ucol_getSortKey_72`), so the name is tried for the versions ICU has
/// had.
fn icu_functions() -> Option<(GetSortKey, ToUChar)> {
    static F: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    let addrs = *F.get_or_init(|| {
        let sort_key = std::iter::once("ucol_getSortKey".to_string())
            .chain((40..=120).rev().map(|v| format!("ucol_getSortKey_{v}")))
            .find_map(|n| symbol(&n))?;
        Some((sort_key, symbol("icu_to_uchar")?))
    });
    // SAFETY: the symbols are ICU's ucol_getSortKey, whose C signature is
    // (const UCollator*, const UChar*, int32_t, uint8_t*, int32_t) ->
    // int32_t, and PostgreSQL 15's icu_to_uchar(UChar **, const char *,
    // size_t) -> int32_t.
    addrs.map(|(a, b)| unsafe {
        (
            std::mem::transmute::<usize, GetSortKey>(a),
            std::mem::transmute::<usize, ToUChar>(b),
        )
    })
}

/// An ICU collator a tree can be keyed by. Invariant: `ucol` is the
/// collator PostgreSQL caches for the collation for the life of the
/// backend (pg_newlocale_from_collation never frees its entries).
#[derive(Clone, Copy)]
pub struct IcuOrder {
    ucol: *const c_void,
    pub deterministic: bool,
}

/// The ICU order of collation `coll`, if it is an ICU collation (also as
/// the database default) and the server's ICU is usable.
pub fn icu_order(coll: pg_sys::Oid) -> Option<IcuOrder> {
    if coll == pg_sys::InvalidOid || icu_functions().is_none() {
        return None;
    }
    // SAFETY: a valid collation OID (callers pass an index column's);
    // the returned struct is cached by PostgreSQL for the backend's life;
    // an ERROR it raises becomes a Rust panic at the boundary.
    unsafe {
        let loc = pg_guard_ffi_boundary(|| pg_newlocale_from_collation(coll));
        if loc.is_null() || (*loc).provider as u8 != pg_sys::COLLPROVIDER_ICU {
            return None;
        }
        let ucol = (*loc).info[1];
        (!ucol.is_null()).then_some(IcuOrder {
            ucol,
            deterministic: (*loc).deterministic,
        })
    }
}

impl IcuOrder {
    /// The sort key of `text` (database encoding), without ICU's trailing
    /// NUL: bytewise order of sort keys is the collation's order.
    pub fn sort_key(&self, text: &[u8]) -> Vec<u8> {
        let (f, to_uchar) = icu_functions().expect("checked by icu_order");
        // SAFETY: icu_to_uchar reads `text.len()` bytes and returns a
        // palloc'd UTF-16 buffer of the returned length; ucol_getSortKey
        // writes at most `cap` bytes and returns the full length needed.
        unsafe {
            let mut u: *mut u16 = std::ptr::null_mut();
            let n = pg_guard_ffi_boundary(|| to_uchar(&mut u, text.as_ptr().cast(), text.len()));
            let mut out = vec![0u8; (text.len() * 2 + 16).min(1 << 16)];
            loop {
                let cap = out.len() as i32;
                let need = f(self.ucol, u, n, out.as_mut_ptr(), cap);
                if need <= 0 {
                    crate::pg::error::internal("orioledb: ICU could not compute a sort key");
                }
                if need <= cap {
                    out.truncate(need as usize);
                    break;
                }
                out.resize(need as usize, 0);
            }
            pg_sys::pfree(u.cast());
            if out.last() == Some(&0) {
                out.pop();
            }
            out
        }
    }
}

unsafe extern "C" {
    fn newlocale(mask: i32, locale: *const c_char, base: *mut c_void) -> *mut c_void;
    fn strcoll_l(a: *const c_char, b: *const c_char, loc: *mut c_void) -> i32;
    fn setlocale(category: i32, locale: *const c_char) -> *const c_char;
}

/// glibc's `LC_COLLATE` category and its `newlocale` mask bit.
const LC_COLLATE: i32 = 3;
const LC_COLLATE_MASK: i32 = 1 << LC_COLLATE;

/// A libc locale's collation. Invariant: `loc` was returned by `newlocale`
/// and is never freed (one per locale name and process, see
/// [`libc_collation`]); glibc locale objects are read-only once made, so
/// any thread may collate with them.
pub struct LibcCollation {
    loc: *mut c_void,
}

// SAFETY: per the invariant, the locale object is immutable and lives for
// the process.
unsafe impl Send for LibcCollation {}
// SAFETY: as above.
unsafe impl Sync for LibcCollation {}

impl orioledb_engine::collated_order::Collation for LibcCollation {
    /// `strcoll_l`, as PostgreSQL's `varstr_cmp` calls it for a libc
    /// collation (the byte tie-break is the caller's).
    fn compare(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        fn with_nul<R>(s: &[u8], f: impl FnOnce(*const c_char) -> R) -> R {
            let mut stack = [0u8; 256];
            if s.len() < stack.len() {
                stack[..s.len()].copy_from_slice(s);
                f(stack.as_ptr().cast())
            } else {
                let mut v = Vec::with_capacity(s.len() + 1);
                v.extend_from_slice(s);
                v.push(0);
                f(v.as_ptr().cast())
            }
        }
        // SAFETY: both strings are NUL-terminated copies (text holds no
        // NUL bytes; one that did would only compare shorter) and `loc` is
        // a live locale per the invariant.
        let r = with_nul(a, |pa| with_nul(b, |pb| unsafe { strcoll_l(pa, pb, self.loc) }));
        r.cmp(&0)
    }
}

/// The collation of libc locale `name`, opened once per process; None when
/// the locale is not installed.
pub fn libc_collation(name: &str) -> Option<std::sync::Arc<LibcCollation>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    static OPEN: OnceLock<Mutex<HashMap<String, Arc<LibcCollation>>>> = OnceLock::new();
    let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = open.get(name) {
        return Some(c.clone());
    }
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: newlocale reads the NUL-terminated name; NULL base.
    let loc = unsafe { newlocale(LC_COLLATE_MASK, c.as_ptr(), std::ptr::null_mut()) };
    if loc.is_null() {
        return None;
    }
    let coll = Arc::new(LibcCollation { loc });
    open.insert(name.to_string(), coll.clone());
    Some(coll)
}

/// The locale a libc collation sorts by: `pg_collation.collcollate`, or for
/// the database default (when it is a libc one) the process's `LC_COLLATE`,
/// which PostgreSQL sets from the database's and compares with (`strcoll`).
/// None for ICU collations and unknown OIDs.
pub fn libc_locale(coll: pg_sys::Oid) -> Option<String> {
    if coll == pg_sys::DEFAULT_COLLATION_OID {
        if icu_order(coll).is_some() {
            return None;
        }
        // SAFETY: a query of the current locale (NULL argument changes
        // nothing); the returned string is copied before any other call.
        let p = unsafe { setlocale(LC_COLLATE, std::ptr::null()) };
        // SAFETY: a non-NULL result is a NUL-terminated string.
        return (!p.is_null())
            .then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned());
    }
    // SAFETY: a syscache lookup; the text attribute is copied out while
    // the tuple is pinned.
    unsafe {
        crate::pg::with_syscache(pg_sys::SysCacheIdentifier::COLLOID, coll.into(), |tup| {
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_collation>(tup);
            let libc = (*form).collprovider as u8 == pg_sys::COLLPROVIDER_LIBC;
            let mut null = true;
            let d = pg_sys::SysCacheGetAttr(
                pg_sys::SysCacheIdentifier::COLLOID as i32,
                tup,
                pg_sys::Anum_pg_collation_collcollate as _,
                &mut null,
            );
            (libc && !null).then(|| {
                let t = pg_sys::text_to_cstring(d.cast_mut_ptr());
                let s = std::ffi::CStr::from_ptr(t).to_string_lossy().into_owned();
                pg_sys::pfree(t.cast());
                s
            })
        })
        .flatten()
    }
}
