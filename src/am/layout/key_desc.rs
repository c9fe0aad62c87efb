//! The primary-key descriptor of a table's tree, and the encoding of a
//! row's primary-key values as the tree-key prefix of its versions.
//!
//! A tree is keyed by a descriptor it stores itself (see `table.rs`), not by
//! whatever the catalog says now: the key of a version is a pure function of
//! the row and the descriptor, so a version is found by the same bytes for
//! as long as the tree lives, whatever DDL happens to the catalog meanwhile.
//! Correctness never depends on the descriptor matching the current primary
//! key; the custom scan is only offered when it does.
//!
//! Only types whose btree order is byte order of an encoding (engine
//! `key_format.rs`, and ICU sort keys from `collate.rs` for text under an ICU
//! collation) key a tree, and text under a libc language collation, whose
//! bytes key the tree for equality only ([`Kind::ordered`]): tables whose
//! primary key has another type stay keyed by row id.

use orioledb_engine::order::KeyCmp;
use orioledb_engine::collated_order::{Collation, Column, ColumnOrder};
use orioledb_engine::key_format::{encode_part, KeyPart};
use std::sync::Arc;
use pgrx::pg_sys;
use pgrx::prelude::*;

unsafe extern "C-unwind" {
    /// pg_locale.c: whether a collation sorts by plain byte order ("C" and
    /// "POSIX", also as the database default). Not in pgrx's bindings.
    fn lc_collate_is_c(collation: pg_sys::Oid) -> bool;
}

/// Whether text under collation `coll` sorts in plain byte order: "C" and
/// "POSIX" (also as the database default: PostgreSQL compares those with
/// memcmp), and a libc collation whose locale is glibc's "C.UTF-8" (code
/// point order, which is UTF-8 byte order) — judged by its provider and
/// locale in pg_collation, never by its name.
fn byte_order_collation(coll: pg_sys::Oid) -> bool {
    // SAFETY: lc_collate_is_c only reads collation state.
    if unsafe { pgrx::pg_sys::ffi::pg_guard_ffi_boundary(|| lc_collate_is_c(coll)) } {
        return true;
    }
    coll != pg_sys::DEFAULT_COLLATION_OID
        && matches!(
            crate::am::layout::collate::libc_locale(coll).as_deref(),
            Some("C.UTF-8" | "C.utf8")
        )
}

/// Whether collation `coll` compares equal only identical strings (every
/// libc collation; ICU ones may not be).
fn deterministic(coll: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup of a valid collation (an index column's).
    coll != pg_sys::InvalidOid && unsafe { pg_sys::get_collation_isdeterministic(coll) }
}

/// How one key column's datum is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Bool = 1,
    Int2 = 2,
    /// int4 and date (a 4-byte signed day number).
    Int4 = 3,
    /// int8, timestamp, timestamptz, time (8-byte signed).
    Int8 = 4,
    Oid = 5,
    Uuid = 6,
    /// bytea, and text/varchar under a "C" collation: the bytes.
    Bytes = 7,
    /// bpchar under a "C" collation: the bytes without trailing spaces
    /// (bpchar comparison ignores them).
    Bpchar = 8,
    /// numeric: the engine's decimal encoding of its text form.
    Numeric = 9,
    Float4 = 10,
    Float8 = 11,
    /// text/varchar under an ICU collation: the collation's sort key, then
    /// (deterministic collations) the bytes.
    Collated = 12,
    /// bpchar under an ICU collation: as `Collated`, trailing spaces
    /// stripped first.
    CollatedBpchar = 13,
    /// text/varchar under a libc language collation: the bytes, as `Bytes`.
    /// The tree's order is then not the collation's: only equality (which
    /// is byte equality for these deterministic collations) finds rows
    /// through it, never ranges or ORDER BY (see [`Kind::ordered`]).
    TextBytes = 14,
    /// bpchar under a libc language collation: as `Bpchar`, equality only.
    BpcharBytes = 15,
    /// text/varchar under a libc language collation: the bytes, as `Bytes`,
    /// in a tree that compares them with `strcoll_l` under the column's
    /// locale ([`KeyDesc::locales`], `keyorder`): the btree order.
    LibcText = 16,
    /// bpchar under a libc language collation: as `LibcText`, trailing
    /// spaces stripped first.
    LibcBpchar = 17,
    /// pg_lsn: unsigned 64-bit, big-endian.
    Lsn = 18,
    /// "char": the byte (btree compares it unsigned).
    Char = 19,
    /// macaddr (6 bytes) and macaddr8 (8 bytes): the bytes, whose memcmp
    /// order is `macaddr_cmp`'s.
    Mac6 = 20,
    Mac8 = 21,
    /// timetz: UTC time (`time + zone` seconds) then the zone, as
    /// `timetz_cmp` orders them.
    TimeTz = 22,
    /// interval: the 128-bit span `interval_cmp` compares (months as 30
    /// days, days as 24 hours), so equal intervals ('1 mon', '30 days')
    /// share a key as the btree takes them as equal.
    Interval = 23,
    /// name under the "C" collation: its bytes, as `Bytes`.
    Name = 24,
    /// inet and cidr: family, address masked to its prefix length, prefix
    /// length, whole address (34 bytes): `network_cmp`'s order.
    Inet = 25,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Bool,
            2 => Int2,
            3 => Int4,
            4 => Int8,
            5 => Oid,
            6 => Uuid,
            7 => Bytes,
            8 => Bpchar,
            9 => Numeric,
            10 => Float4,
            11 => Float8,
            12 => Collated,
            13 => CollatedBpchar,
            14 => TextBytes,
            15 => BpcharBytes,
            16 => LibcText,
            17 => LibcBpchar,
            18 => Lsn,
            19 => Char,
            20 => Mac6,
            21 => Mac8,
            22 => TimeTz,
            23 => Interval,
            24 => Name,
            25 => Inet,
            _ => return None,
        })
    }

    /// Whether the encoding's byte order is the btree order (else it only
    /// decides equality).
    pub fn ordered(self) -> bool {
        !matches!(self, Kind::TextBytes | Kind::BpcharBytes)
    }

    /// Whether a tree can tell where this column's encoding ends without
    /// knowing its collation.
    fn delimited(self) -> bool {
        matches!(self, Kind::LibcText | Kind::LibcBpchar) || self.column(|| None).is_some()
    }

    /// How a tree compares this column's encodings when it is keyed by
    /// libc-collated text ([`KeyDesc::key_order`]); None for encodings
    /// whose length the tree cannot tell without the column's collation.
    fn column(self, collation: impl FnOnce() -> Option<Arc<dyn Collation>>) -> Option<Column> {
        use Kind::*;
        Some(match self {
            Bool | Char => Column::Fixed(1),
            Int2 => Column::Fixed(2),
            Int4 | Oid | Float4 => Column::Fixed(4),
            Mac6 => Column::Fixed(6),
            Int8 | Float8 | Lsn | Mac8 => Column::Fixed(8),
            TimeTz => Column::Fixed(12),
            Uuid | Interval => Column::Fixed(16),
            Inet => Column::Fixed(INET_KEY_LEN),
            Bytes | Bpchar | TextBytes | BpcharBytes | Name => Column::Escaped,
            LibcText | LibcBpchar => Column::Collated(collation()?),
            Numeric | Collated | CollatedBpchar => return None,
        })
    }

    /// The encoding for a column of type `typid` under collation `coll`:
    /// one whose byte order is the btree order, or for text under a libc
    /// language collation one that decides equality (`LibcText` is chosen
    /// by [`KeyDesc::for_index`] where the tree can compare it).
    fn of(typid: pg_sys::Oid, coll: pg_sys::Oid) -> Option<Kind> {
        use pg_sys::BuiltinOid::*;
        let t = pg_sys::BuiltinOid::from_u32(typid.to_u32()).ok()?;
        let c_order = || byte_order_collation(coll);
        let icu = || crate::am::layout::collate::icu_order(coll).is_some();
        Some(match t {
            BOOLOID => Kind::Bool,
            INT2OID => Kind::Int2,
            INT4OID | DATEOID => Kind::Int4,
            INT8OID | TIMESTAMPOID | TIMESTAMPTZOID | TIMEOID | MONEYOID => Kind::Int8,
            PG_LSNOID => Kind::Lsn,
            CHAROID => Kind::Char,
            MACADDROID => Kind::Mac6,
            MACADDR8OID => Kind::Mac8,
            TIMETZOID => Kind::TimeTz,
            INTERVALOID => Kind::Interval,
            NAMEOID if c_order() => Kind::Name,
            INETOID | CIDROID => Kind::Inet,
            OIDOID => Kind::Oid,
            NUMERICOID => Kind::Numeric,
            UUIDOID => Kind::Uuid,
            BYTEAOID => Kind::Bytes,
            FLOAT4OID => Kind::Float4,
            FLOAT8OID => Kind::Float8,
            TEXTOID | VARCHAROID if c_order() => Kind::Bytes,
            BPCHAROID if c_order() => Kind::Bpchar,
            TEXTOID | VARCHAROID if icu() => Kind::Collated,
            BPCHAROID if icu() => Kind::CollatedBpchar,
            TEXTOID | VARCHAROID if deterministic(coll) => Kind::TextBytes,
            BPCHAROID if deterministic(coll) => Kind::BpcharBytes,
            _ => return None,
        })
    }
}

/// One column of the key. Invariant: `kind` is `Kind::of(typid, coll)`,
/// or `LibcText`/`LibcBpchar` in place of `TextBytes`/`BpcharBytes`, with
/// `locale` then indexing the descriptor's `locales` (0 otherwise);
/// `descending` only in a secondary index's descriptor (its encodings are
/// stored inverted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyCol {
    /// Table attribute number (1-based); a secondary index's column number.
    pub attnum: i16,
    pub typid: u32,
    pub coll: u32,
    pub kind: Kind,
    pub locale: u8,
    pub descending: bool,
}

/// The columns a tree is keyed by, in index column order. Invariant: at
/// least one column, at most `INDEX_MAX_KEYS`; `locales` holds the libc
/// locale names (each under 256 bytes) the `Libc*` columns collate by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyDesc {
    pub cols: Vec<KeyCol>,
    pub locales: Vec<String>,
}

/// Descriptor formats: `PK1` without locales, `PK2` with a locale index
/// per column and the locale names after the columns, `PK3` as `PK2` with
/// a flags byte per column after its locale (bit 0: descending).
const MAGIC: &[u8; 3] = b"PK1";
const MAGIC2: &[u8; 3] = b"PK2";
const MAGIC3: &[u8; 3] = b"PK3";

/// Longest encoded key prefix: a version's key (tag, prefix, 6-byte
/// suffix) stays inside the engine's 1024-byte key limit, leaving at least
/// 1593 bytes of the item for the row (the toaster moves values out to fit).
pub const MAX_PREFIX: usize = 1000;

/// Encoded length of an inet/cidr key value.
const INET_KEY_LEN: usize = 34;

/// Appends the key of an inet/cidr value given as its `inet_struct`
/// (family, prefix length, address bytes). `network_cmp` orders by family,
/// then the addresses' first min(prefix lengths) bits, then prefix length,
/// then the whole address; the masked address (zero bits past the prefix)
/// compared as bytes decides the first two exactly as that, since a
/// shorter prefix's zeros sort at or before whatever a longer one has there.
fn inet_key(v: &[u8], out: &mut Vec<u8>) {
    let (family, bits) = (v.first().copied().unwrap_or(0), v.get(1).copied().unwrap_or(0));
    let mut addr = [0u8; 16];
    let a = v.get(2..).unwrap_or(&[]);
    let n = a.len().min(16);
    addr[..n].copy_from_slice(&a[..n]);
    let mut masked = addr;
    for (i, b) in masked.iter_mut().enumerate() {
        let keep = (bits as usize).saturating_sub(i * 8).min(8);
        *b &= (0xFF00u16 >> keep) as u8;
    }
    out.push(family);
    out.extend_from_slice(&masked);
    out.push(bits);
    out.extend_from_slice(&addr);
}

/// Per-column tags: a NULL sorts after every value (btree's default
/// NULLS LAST), which only matters once a key column lost NOT NULL.
const TAG_VALUE: u8 = 1;
const TAG_NULL: u8 = 2;

/// `kind`, or for text under a libc language collation (`TextBytes`,
/// `BpcharBytes`) the kind a tree compares under its locale (`LibcText`,
/// `LibcBpchar`), when the tree can delimit every column before it (`cols`)
/// and this process can open the locale; with the locale's index in
/// `locales` (added there if new), 0 for other kinds.
fn libc_ordered(kind: Kind, cols: &[KeyCol], coll: pg_sys::Oid, locales: &mut Vec<String>) -> (Kind, u8) {
    if !matches!(kind, Kind::TextBytes | Kind::BpcharBytes) || !cols.iter().all(|c| c.kind.delimited()) {
        return (kind, 0);
    }
    let Some(name) = crate::am::layout::collate::libc_locale(coll)
        .filter(|n| n.len() < 256 && crate::am::layout::collate::libc_collation(n).is_some())
    else {
        return (kind, 0);
    };
    let locale = match locales.iter().position(|l| *l == name) {
        Some(i) => i,
        None => {
            locales.push(name);
            locales.len() - 1
        }
    } as u8;
    (if kind == Kind::TextBytes { Kind::LibcText } else { Kind::LibcBpchar }, locale)
}

impl KeyDesc {
    pub fn encode(&self) -> Vec<u8> {
        let v3 = self.cols.iter().any(|c| c.descending);
        let v2 = v3 || !self.locales.is_empty();
        let mut out = if v3 {
            MAGIC3
        } else if v2 {
            MAGIC2
        } else {
            MAGIC
        }
        .to_vec();
        out.push(self.cols.len() as u8);
        for c in &self.cols {
            out.extend_from_slice(&c.attnum.to_le_bytes());
            out.extend_from_slice(&c.typid.to_le_bytes());
            out.extend_from_slice(&c.coll.to_le_bytes());
            out.push(c.kind as u8);
            if v2 {
                out.push(c.locale);
            }
            if v3 {
                out.push(c.descending as u8);
            }
        }
        if v2 {
            out.push(self.locales.len() as u8);
            for l in &self.locales {
                out.push(l.len() as u8);
                out.extend_from_slice(l.as_bytes());
            }
        }
        out
    }

    pub fn decode(b: &[u8]) -> Option<KeyDesc> {
        let (v2, v3, rest) = if let Some(r) = b.strip_prefix(MAGIC) {
            (false, false, r)
        } else if let Some(r) = b.strip_prefix(MAGIC2) {
            (true, false, r)
        } else {
            (true, true, b.strip_prefix(MAGIC3)?)
        };
        let width = 11 + v2 as usize + v3 as usize;
        let (&n, mut rest) = rest.split_first()?;
        let mut cols = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let c = rest.get(..width)?;
            cols.push(KeyCol {
                attnum: i16::from_le_bytes([c[0], c[1]]),
                typid: u32::from_le_bytes(c[2..6].try_into().ok()?),
                coll: u32::from_le_bytes(c[6..10].try_into().ok()?),
                kind: Kind::from_u8(c[10])?,
                locale: if v2 { c[11] } else { 0 },
                descending: v3 && c[12] & 1 != 0,
            });
            rest = &rest[width..];
        }
        let mut locales = Vec::new();
        if v2 {
            let (&n, r) = rest.split_first()?;
            rest = r;
            for _ in 0..n {
                let (&len, r) = rest.split_first()?;
                locales.push(String::from_utf8(r.get(..len as usize)?.to_vec()).ok()?);
                rest = &r[len as usize..];
            }
        }
        let locales_ok = cols.iter().all(|c| {
            !matches!(c.kind, Kind::LibcText | Kind::LibcBpchar) || (c.locale as usize) < locales.len()
        });
        (rest.is_empty() && !cols.is_empty() && locales_ok).then_some(KeyDesc { cols, locales })
    }

    /// The order of a tree keyed by this descriptor, when byte order is not
    /// it (libc-collated text columns): compares those columns with
    /// `strcoll_l`. Err says why the tree cannot be ordered here (a locale
    /// this machine does not have), as a predicate on "tree N".
    pub fn key_order(&self) -> Result<Option<Arc<dyn KeyCmp>>, String> {
        let Some(last) = self
            .cols
            .iter()
            .rposition(|c| matches!(c.kind, Kind::LibcText | Kind::LibcBpchar))
        else {
            return Ok(None);
        };
        let mut cols = Vec::with_capacity(last + 1);
        for c in &self.cols[..=last] {
            let name = self.locales.get(c.locale as usize).map(String::as_str).unwrap_or("");
            let mut missing = false;
            let col = c.kind.column(|| {
                let got = crate::am::layout::collate::libc_collation(name);
                missing = got.is_none();
                got.map(|g| g as Arc<dyn Collation>)
            });
            match col {
                Some(col) => cols.push(col),
                None if missing => {
                    return Err(format!(
                        "is ordered by locale \"{name}\", which this machine does not have"
                    ))
                }
                None => {
                    return Err(format!(
                        "has a collated key column after column {}, whose encoded length is unknown",
                        c.attnum
                    ))
                }
            }
        }
        let inverted = if self.cols.iter().any(|c| c.descending) {
            self.cols[..=last].iter().map(|c| c.descending).collect()
        } else {
            Vec::new()
        };
        Ok(Some(Arc::new(ColumnOrder {
            tag: orioledb_engine::key_format::VERSION_TAG,
            cols,
            inverted,
        })))
    }

    /// The descriptor for primary-key index `index` of `table`, if every
    /// column is a plain column of an encodable type with the default
    /// btree operator class, ascending, NULLS LAST.
    ///
    /// # Safety
    /// Open relations; `index` is an index of `table`.
    pub unsafe fn for_index(table: pg_sys::Relation, index: pg_sys::Relation) -> Option<KeyDesc> {
        // SAFETY: an open index has rd_index, rd_indoption, rd_indcollation
        // and rd_opcintype arrays of indnkeyatts entries.
        unsafe {
            let ix = (*index).rd_index;
            let nkeys = (*ix).indnkeyatts as usize;
            if nkeys == 0 || !(*index).rd_indexprs.is_null() {
                return None;
            }
            let desc = (*table).rd_att;
            let attrs = (*desc).attrs.as_slice((*desc).natts as usize);
            let indkey = (*ix).indkey.values.as_slice(nkeys);
            let mut cols = Vec::with_capacity(nkeys);
            let mut locales: Vec<String> = Vec::new();
            for (i, &attnum) in indkey.iter().enumerate() {
                if attnum <= 0 || attnum as usize > attrs.len() {
                    return None;
                }
                if *(*index).rd_indoption.add(i) != 0 {
                    return None;
                }
                let att = &attrs[attnum as usize - 1];
                let coll = *(*index).rd_indcollation.add(i);
                let opfamily = *(*index).rd_opfamily.add(i);
                // The type cache holds the default btree family (a catalog
                // scan through GetDefaultOpClass otherwise: this runs when
                // every query on the table is planned).
                let tc = pg_sys::lookup_type_cache(
                    att.atttypid,
                    pg_sys::TYPECACHE_BTREE_OPFAMILY as i32,
                );
                if tc.is_null()
                    || (*tc).btree_opf == pg_sys::InvalidOid
                    || (*tc).btree_opf != opfamily
                    || *(*index).rd_opcintype.add(i) != att.atttypid
                        && !(att.atttypid == pg_sys::VARCHAROID
                            && *(*index).rd_opcintype.add(i) == pg_sys::TEXTOID)
                        && !(att.atttypid == pg_sys::CIDROID
                            && *(*index).rd_opcintype.add(i) == pg_sys::INETOID)
                {
                    return None;
                }
                let (kind, locale) = libc_ordered(Kind::of(att.atttypid, coll)?, &cols, coll, &mut locales);
                cols.push(KeyCol {
                    attnum,
                    typid: att.atttypid.to_u32(),
                    coll: coll.to_u32(),
                    kind,
                    locale,
                    descending: false,
                });
            }
            Some(KeyDesc { cols, locales })
        }
    }

    /// The descriptor `table`'s current primary key asks for (None: no
    /// primary key, or one that cannot key a tree).
    ///
    /// # Safety
    /// `table` is an open relation.
    pub unsafe fn for_table(table: pg_sys::Relation) -> Option<KeyDesc> {
        // SAFETY: per the contract; the index is opened and closed here
        // under the table's lock.
        unsafe {
            let pk = pg_sys::RelationGetPrimaryKeyIndex(table);
            if pk == pg_sys::InvalidOid {
                return None;
            }
            let index = pg_sys::index_open(pk, pg_sys::AccessShareLock as _);
            let d = KeyDesc::for_index(table, index);
            pg_sys::index_close(index, pg_sys::AccessShareLock as _);
            d
        }
    }

    /// The descriptor of secondary index `index`'s key columns (`attnum`:
    /// the index column, 1-based) for a tree in the btree order of every
    /// column (`secondary`); Err names the first column no encoding keeps
    /// in that order.
    ///
    /// # Safety
    /// `index` is an open index relation.
    pub unsafe fn for_secondary(index: pg_sys::Relation) -> Result<KeyDesc, String> {
        // SAFETY: an open index has rd_index, rd_indcollation and
        // rd_opcintype arrays of indnkeyatts entries.
        unsafe {
            let nkeys = (*(*index).rd_index).indnkeyatts as usize;
            let mut cols: Vec<KeyCol> = Vec::with_capacity(nkeys);
            let mut locales = Vec::new();
            for i in 0..nkeys {
                let typid = *(*index).rd_opcintype.add(i);
                let coll = *(*index).rd_indcollation.add(i);
                let kind = Kind::of(typid, coll)
                    .map(|k| libc_ordered(k, &cols, coll, &mut locales))
                    .filter(|(k, _)| k.ordered());
                let Some((kind, locale)) = kind else {
                    let ty = std::ffi::CStr::from_ptr(pg_sys::format_type_be(typid)).to_string_lossy();
                    return Err(format!(
                        "column {} (type {ty}) has no encoding in its btree order{}",
                        i + 1,
                        if matches!(Kind::of(typid, coll), Some(Kind::TextBytes | Kind::BpcharBytes)) {
                            " after the columns before it"
                        } else {
                            ""
                        }
                    ));
                };
                let option = *(*index).rd_indoption.add(i) as u32;
                cols.push(KeyCol {
                    attnum: (i + 1) as i16,
                    typid: typid.to_u32(),
                    coll: coll.to_u32(),
                    kind,
                    locale,
                    descending: option & pg_sys::INDOPTION_DESC != 0,
                });
            }
            if cols.is_empty() {
                return Err("an index needs a key column".into());
            }
            Ok(KeyDesc { cols, locales })
        }
    }

    /// Appends the encoding of one column's datum (`None` = NULL).
    ///
    /// # Safety
    /// `d` is a datum of the column's type.
    // Long because one match over the key column types, a short arm each;
    // split up, the arms would only move.
    pub unsafe fn push_datum(col: &KeyCol, d: Option<pg_sys::Datum>, out: &mut Vec<u8>) {
        let Some(d) = d else {
            out.push(TAG_NULL);
            return;
        };
        out.push(TAG_VALUE);
        // SAFETY: per the contract; varlena datums are detoasted into
        // palloc'd copies when needed.
        unsafe {
            match col.kind {
                Kind::Bool => encode_part(&KeyPart::Bool(d.value() != 0), out),
                Kind::Int2 => encode_part(&KeyPart::Int2(d.value() as i16), out),
                Kind::Int4 => encode_part(&KeyPart::Int4(d.value() as i32), out),
                Kind::Int8 => encode_part(&KeyPart::Int8(d.value() as i64), out),
                Kind::Oid => encode_part(&KeyPart::Oid(d.value() as u32), out),
                Kind::Uuid => {
                    let p = d.cast_mut_ptr::<[u8; 16]>();
                    encode_part(&KeyPart::Uuid(*p), out)
                }
                Kind::Numeric => {
                    let p = pg_sys::OidOutputFunctionCall(
                        pg_sys::Oid::from(pg_sys::F_NUMERIC_OUT),
                        d,
                    );
                    let s = std::ffi::CStr::from_ptr(p).to_str().unwrap_or("");
                    let ok = orioledb_engine::key_format::encode_decimal(s, out);
                    pg_sys::pfree(p.cast());
                    if !ok {
                        crate::pg::error::raise(
                            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                            "orioledb: cannot encode a numeric key value",
                        );
                    }
                }
                Kind::Float4 => encode_part(&KeyPart::Float4(f32::from_bits(d.value() as u32)), out),
                Kind::Lsn => out.extend_from_slice(&(d.value() as u64).to_be_bytes()),
                Kind::Char => out.push(d.value() as u8),
                Kind::Mac6 => out.extend_from_slice(&*d.cast_mut_ptr::<[u8; 6]>()),
                Kind::Mac8 => out.extend_from_slice(&*d.cast_mut_ptr::<[u8; 8]>()),
                Kind::TimeTz => {
                    // TimeTzADT: int64 time (µs), int32 zone (seconds west).
                    let p = d.cast_mut_ptr::<u8>();
                    let time = std::ptr::read_unaligned(p.cast::<i64>());
                    let zone = std::ptr::read_unaligned(p.add(8).cast::<i32>());
                    let utc = time.wrapping_add(zone as i64 * 1_000_000);
                    encode_part(&KeyPart::Int8(utc), out);
                    encode_part(&KeyPart::Int4(zone), out);
                }
                Kind::Interval => {
                    // Interval: int64 time (µs), int32 day, int32 month.
                    let p = d.cast_mut_ptr::<u8>();
                    let time = std::ptr::read_unaligned(p.cast::<i64>()) as i128;
                    let day = std::ptr::read_unaligned(p.add(8).cast::<i32>()) as i128;
                    let month = std::ptr::read_unaligned(p.add(12).cast::<i32>()) as i128;
                    const DAY: i128 = 86_400_000_000;
                    let span = time + (day + month * 30) * DAY;
                    out.extend_from_slice(&((span as u128) ^ (1 << 127)).to_be_bytes());
                }
                Kind::Name => {
                    let p = d.cast_mut_ptr::<u8>();
                    let bytes = std::slice::from_raw_parts(p, pg_sys::NAMEDATALEN as usize);
                    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                    encode_part(&KeyPart::Bytes(&bytes[..len]), out);
                }
                Kind::Inet => {
                    let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
                    let len = pgrx::varlena::varsize_any_exhdr(v);
                    let p = pgrx::varlena::vardata_any(v).cast::<u8>();
                    inet_key(std::slice::from_raw_parts(p, len), out);
                }
                Kind::Float8 => encode_part(&KeyPart::Float8(f64::from_bits(d.value() as u64)), out),
                Kind::Bytes
                | Kind::Bpchar
                | Kind::Collated
                | Kind::CollatedBpchar
                | Kind::TextBytes
                | Kind::BpcharBytes
                | Kind::LibcText
                | Kind::LibcBpchar => {
                    let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
                    let len = pgrx::varlena::varsize_any_exhdr(v);
                    let p = pgrx::varlena::vardata_any(v).cast::<u8>();
                    let mut bytes = std::slice::from_raw_parts(p, len);
                    if matches!(
                        col.kind,
                        Kind::Bpchar | Kind::CollatedBpchar | Kind::BpcharBytes | Kind::LibcBpchar
                    ) {
                        while let [rest @ .., b' '] = bytes {
                            bytes = rest;
                        }
                    }
                    if matches!(col.kind, Kind::Collated | Kind::CollatedBpchar) {
                        let Some(order) =
                            crate::am::layout::collate::icu_order(pg_sys::Oid::from(col.coll))
                        else {
                            crate::pg::error::raise(
                                PgSqlErrorCode::ERRCODE_INDETERMINATE_COLLATION,
                                format!(
                                    "orioledb: collation {} of a primary key column is no longer an ICU collation",
                                    col.coll
                                ),
                            );
                        };
                        encode_part(&KeyPart::Bytes(&order.sort_key(bytes)), out);
                        if !order.deterministic {
                            return;
                        }
                    }
                    encode_part(&KeyPart::Bytes(bytes), out)
                }
            }
        }
    }

    /// The key prefix of a row given as deformed columns (`values`/`nulls`
    /// indexed by attribute number - 1; attributes beyond them are NULL);
    /// Err(its length) when longer than [`MAX_PREFIX`].
    ///
    /// # Safety
    /// The datums are of the table's column types.
    pub unsafe fn try_prefix(&self, values: &[pg_sys::Datum], nulls: &[bool]) -> Result<Vec<u8>, usize> {
        let mut out = Vec::with_capacity(16);
        for c in &self.cols {
            let i = c.attnum as usize - 1;
            let d = (i < values.len() && !nulls[i]).then(|| values[i]);
            // SAFETY: per the contract.
            unsafe { KeyDesc::push_datum(c, d, &mut out) };
        }
        if out.len() > MAX_PREFIX {
            return Err(out.len());
        }
        Ok(out)
    }

    /// [`KeyDesc::try_prefix`], raising 54000 for a key that is too long.
    ///
    /// # Safety
    /// The datums are of the table's column types.
    pub unsafe fn prefix(
        &self,
        values: &[pg_sys::Datum],
        nulls: &[bool],
        table_name: impl FnOnce() -> String,
    ) -> Vec<u8> {
        // SAFETY: per the contract.
        let out = unsafe { self.try_prefix(values, nulls) };
        if let Err(len) = out {
            crate::pg::error::raise(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "orioledb: primary key value of table \"{}\" is too long: {len} bytes encoded, maximum {MAX_PREFIX}",
                    table_name(),
                ),
            );
        }
        out.unwrap_or_default()
    }
}
