//! The format of tree keys: how a table's tree spells its keys (the
//! descriptor item, row-id map entries and versions, told apart by a tag
//! byte, [`DESC_KEY`], [`MAP_TAG`], [`VERSION_TAG`]), and the
//! order-preserving encodings of primary-key values in them. How keys are
//! compared is `order` (bytewise) and `collated_order` (column by column,
//! for libc-collated text); which columns a table's key has is the access
//! method's `layout::key_desc`.
//!
//! Order-preserving encodings, for these types: the
//! byte order of the encoding (memcmp, then length) is exactly PostgreSQL's
//! btree order, so a tree keyed by them needs no comparator callback.
//!
//! - integers (int2/int4/int8, date, timestamp(tz), oid): big-endian with the
//!   sign bit flipped (oid is unsigned: plain big-endian);
//! - bool: one byte, false < true;
//! - uuid: the 16 bytes (`uuid_cmp` is memcmp);
//! - float4/float8: IEEE bits big-endian, all bits inverted for negatives
//!   and the sign bit set for the rest, after folding -0 into +0 and every
//!   NaN into one (btree's `float8_cmp`: -0 = 0, NaN equal to NaN and above
//!   +Infinity);
//! - bytea and text under the "C" collation: the bytes with 0x00 escaped as
//!   0x00 0xFF, terminated by 0x00 0x00 — self-delimiting, so a shorter
//!   value sorts before its extensions and composite keys concatenate;
//! - the version suffix (docs/architecture.md, "Primary-key order"): a
//!   6-byte TID, bitwise inverted,
//!   so the versions of one key sit together, newest first.
//!
//! numeric has its own decimal encoding ([`encode_decimal`]). Text under a
//! language collation is keyed by the collation's sort key followed by the
//! bytes (the server computes the sort key; see `src/am/layout/key_desc.rs`).

use std::cmp::Ordering;

/// One key column's value.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyPart<'a> {
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Oid(u32),
    Uuid([u8; 16]),
    Float4(f32),
    Float8(f64),
    /// bytea, or text/varchar under the "C" collation.
    Bytes(&'a [u8]),
}

/// `$name(v)`: the bits of `v` ordered as btree orders floats: -0 folded
/// into +0, every NaN into the positive quiet NaN (above +Infinity), then
/// sign-magnitude turned into offset binary.
macro_rules! float_order_bits {
    ($name:ident, $f:ty, $u:ty) => {
        fn $name(v: $f) -> $u {
            let v = if v.is_nan() {
                <$f>::NAN
            } else if v == 0.0 {
                0.0
            } else {
                v
            };
            let b = v.to_bits();
            let sign: $u = 1 << (<$u>::BITS - 1);
            if b & sign != 0 { !b } else { b | sign }
        }
    };
}
float_order_bits!(float8_order_bits, f64, u64);
float_order_bits!(float4_order_bits, f32, u32);

/// PostgreSQL's `float8_cmp`: NaN equals NaN and sorts above everything.
fn float_cmp<F: PartialOrd>(a: F, b: F, a_nan: bool, b_nan: bool) -> Ordering {
    match (a_nan, b_nan) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).expect("not NaN"),
    }
}

impl KeyPart<'_> {
    /// PostgreSQL's btree order for two values of the same type.
    pub fn pg_cmp(&self, other: &KeyPart) -> Option<Ordering> {
        use KeyPart::*;
        Some(match (self, other) {
            (Bool(a), Bool(b)) => a.cmp(b),
            (Int2(a), Int2(b)) => a.cmp(b),
            (Int4(a), Int4(b)) => a.cmp(b),
            (Int8(a), Int8(b)) => a.cmp(b),
            (Oid(a), Oid(b)) => a.cmp(b),
            (Uuid(a), Uuid(b)) => a.cmp(b),
            (Float4(a), Float4(b)) => float_cmp(*a, *b, a.is_nan(), b.is_nan()),
            (Float8(a), Float8(b)) => float_cmp(*a, *b, a.is_nan(), b.is_nan()),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            _ => return None,
        })
    }
}

/// Appends the encoding of `part` to `out`.
pub fn encode_part(part: &KeyPart, out: &mut Vec<u8>) {
    match part {
        KeyPart::Bool(b) => out.push(*b as u8),
        KeyPart::Int2(v) => out.extend_from_slice(&((*v as u16) ^ 0x8000).to_be_bytes()),
        KeyPart::Int4(v) => out.extend_from_slice(&((*v as u32) ^ 0x8000_0000).to_be_bytes()),
        KeyPart::Int8(v) => out.extend_from_slice(&((*v as u64) ^ (1 << 63)).to_be_bytes()),
        KeyPart::Oid(v) => out.extend_from_slice(&v.to_be_bytes()),
        KeyPart::Uuid(u) => out.extend_from_slice(u),
        KeyPart::Float4(v) => out.extend_from_slice(&float4_order_bits(*v).to_be_bytes()),
        KeyPart::Float8(v) => out.extend_from_slice(&float8_order_bits(*v).to_be_bytes()),
        KeyPart::Bytes(b) => {
            for &c in b.iter() {
                out.push(c);
                if c == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0, 0]);
        }
    }
}

/// Encodes a composite key (columns in index order).
pub fn encode_key(parts: &[KeyPart]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        encode_part(p, &mut out);
    }
    out
}

/// The type of a key column, for decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Uuid,
    Float4,
    Float8,
    Bytes,
}

/// A decoded column value (owned; floats as their order bits, so that
/// values compare and hash as encodings do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyValue {
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Oid(u32),
    Uuid([u8; 16]),
    /// The value's order bits (see [`encode_part`]).
    Float4(u32),
    Float8(u64),
    Bytes(Vec<u8>),
}

impl KeyValue {
    /// The value as a [`KeyPart`] (for encoding or comparing).
    pub fn as_part(&self) -> KeyPart<'_> {
        match self {
            KeyValue::Bool(b) => KeyPart::Bool(*b),
            KeyValue::Int2(v) => KeyPart::Int2(*v),
            KeyValue::Int4(v) => KeyPart::Int4(*v),
            KeyValue::Int8(v) => KeyPart::Int8(*v),
            KeyValue::Oid(v) => KeyPart::Oid(*v),
            KeyValue::Uuid(u) => KeyPart::Uuid(*u),
            KeyValue::Float4(b) => KeyPart::Float4(f32::from_bits(if b >> 31 == 1 {
                b & !(1 << 31)
            } else {
                !b
            })),
            KeyValue::Float8(b) => KeyPart::Float8(f64::from_bits(if b >> 63 == 1 {
                b & !(1 << 63)
            } else {
                !b
            })),
            KeyValue::Bytes(b) => KeyPart::Bytes(b),
        }
    }
}

/// Decodes a composite key of the given column types; None if the bytes
/// are not such an encoding (or have bytes left over).
pub fn decode_key(mut b: &[u8], types: &[KeyType]) -> Option<Vec<KeyValue>> {
    let mut out = Vec::with_capacity(types.len());
    let take = |n: usize, b: &mut &[u8]| -> Option<Vec<u8>> {
        let (h, t) = (b.get(..n)?, b.get(n..)?);
        let v = h.to_vec();
        *b = t;
        Some(v)
    };
    for t in types {
        out.push(match t {
            KeyType::Bool => match take(1, &mut b)?[0] {
                0 => KeyValue::Bool(false),
                1 => KeyValue::Bool(true),
                _ => return None,
            },
            KeyType::Int2 => KeyValue::Int2(
                (u16::from_be_bytes(take(2, &mut b)?.try_into().ok()?) ^ 0x8000) as i16,
            ),
            KeyType::Int4 => KeyValue::Int4(
                (u32::from_be_bytes(take(4, &mut b)?.try_into().ok()?) ^ 0x8000_0000) as i32,
            ),
            KeyType::Int8 => KeyValue::Int8(
                (u64::from_be_bytes(take(8, &mut b)?.try_into().ok()?) ^ (1 << 63)) as i64,
            ),
            KeyType::Oid => KeyValue::Oid(u32::from_be_bytes(take(4, &mut b)?.try_into().ok()?)),
            KeyType::Uuid => KeyValue::Uuid(take(16, &mut b)?.try_into().ok()?),
            KeyType::Float4 => KeyValue::Float4(u32::from_be_bytes(take(4, &mut b)?.try_into().ok()?)),
            KeyType::Float8 => KeyValue::Float8(u64::from_be_bytes(take(8, &mut b)?.try_into().ok()?)),
            KeyType::Bytes => {
                let mut v = Vec::new();
                loop {
                    let c = *b.first()?;
                    b = &b[1..];
                    if c != 0 {
                        v.push(c);
                        continue;
                    }
                    match *b.first()? {
                        0 => {
                            b = &b[1..];
                            break;
                        }
                        0xFF => {
                            v.push(0);
                            b = &b[1..];
                        }
                        _ => return None,
                    }
                }
                KeyValue::Bytes(v)
            }
        });
    }
    b.is_empty().then_some(out)
}

/// Appends an order-preserving, self-delimiting encoding of a decimal
/// number written as PostgreSQL's `numeric` output (`-12.340`, `NaN`,
/// `Infinity`, `-Infinity`), in `numeric`'s btree order: -Infinity <
/// negatives < 0 < positives < Infinity < NaN, equal values (1.0, 1.00)
/// encoding identically. Returns false (and appends nothing) for text that
/// is not such a number.
///
/// Layout: a class byte (1 -Inf, 2 negative, 3 zero, 4 positive, 5 +Inf,
/// 6 NaN); a nonzero value `0.d1d2… × 10^e` (d1 ≠ 0, no trailing zeros)
/// then has `e` as a sign-flipped big-endian i32, one byte `d + 1` per
/// digit and a 0 terminator — all bits inverted for negatives, which
/// reverses their order.
pub fn encode_decimal(text: &str, out: &mut Vec<u8>) -> bool {
    match text {
        "NaN" => {
            out.push(6);
            return true;
        }
        "Infinity" => {
            out.push(5);
            return true;
        }
        "-Infinity" => {
            out.push(1);
            return true;
        }
        _ => {}
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
    {
        return false;
    }
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|c| c - b'0').collect();
    let Some(first) = digits.iter().position(|&d| d != 0) else {
        out.push(3);
        return true;
    };
    let last = digits.iter().rposition(|&d| d != 0).expect("a nonzero digit");
    let exp = int.len() as i64 - first as i64;
    let Ok(exp) = i32::try_from(exp) else {
        return false;
    };
    let mut enc = Vec::with_capacity(6 + last - first);
    enc.extend_from_slice(&((exp as u32) ^ 0x8000_0000).to_be_bytes());
    enc.extend(digits[first..=last].iter().map(|&d| d + 1));
    enc.push(0);
    if negative {
        out.push(2);
        out.extend(enc.iter().map(|b| !b));
    } else {
        out.push(4);
        out.extend_from_slice(&enc);
    }
    true
}

/// Length of the version suffix.
pub const SUFFIX: usize = 6;

/// Key of a keyed tree's descriptor item (the table AM's encoded primary
/// key description; it sorts before every map entry and version). Replay
/// reads it to learn a tree's key order.
pub const DESC_KEY: &[u8] = &[0x00];

/// Tag of a row-id map entry's key in a keyed tree (`MAP_TAG ‖ row id u48
/// BE` → key prefix; the table AM's layout, `src/am/table.rs`).
pub const MAP_TAG: u8 = 0x01;
/// Bytes of a row-id map entry's key: the tag and 48 bits of row id (row
/// ids stay below `version::tid::LIMIT`, under 2^41).
pub const MAP_KEY: usize = 7;
/// Tag of a version's key in a keyed tree (`VERSION_TAG ‖ prefix ‖
/// suffix`).
pub const VERSION_TAG: u8 = 0x02;

/// The largest 48-bit value: row ids in keys are 48 bits wide.
const U48_MAX: u64 = (1 << 48) - 1;

/// `x` (at most [`U48_MAX`]) as six big-endian bytes.
fn be48(x: u64) -> [u8; 6] {
    x.to_be_bytes()[2..].try_into().expect("six bytes")
}

/// The value of six big-endian bytes.
fn from_be48(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[2..].copy_from_slice(b);
    u64::from_be_bytes(w)
}

/// The row-id map entry's key of version `tid` (a larger value, as a
/// range's open end may be, gives the last key there can be).
pub fn map_key(tid: u64) -> [u8; MAP_KEY] {
    let mut k = [MAP_TAG; MAP_KEY];
    k[1..].copy_from_slice(&be48(tid.min(U48_MAX)));
    k
}

/// The row id of map key `key` (None: no map key).
pub fn map_id(key: &[u8]) -> Option<u64> {
    is_map_key(key).then(|| from_be48(&key[1..]))
}

/// The row id of the version stored under `key`: a keyed tree's version
/// or a chain member (its suffix), or a row-id tree's version (the key
/// itself). Any other key gives a value that only has to be the same each
/// time (header edits of such items never happen, see `edit.rs`).
pub fn own_id(key: &[u8]) -> u64 {
    key_id(key).unwrap_or(0)
}

/// [`own_id`], None for a key too short to hold a row id.
pub fn key_id(key: &[u8]) -> Option<u64> {
    if key.len() == ROW_ID_KEY && key[0] != VERSION_TAG {
        Some(u64::from_be_bytes(key.try_into().expect("eight bytes")))
    } else {
        version_suffix(key)
    }
}

/// Whether `key` is a row-id map entry's key (no version, descriptor or
/// toast key has its tag and length).
pub fn is_map_key(key: &[u8]) -> bool {
    key.len() == MAP_KEY && key[0] == MAP_TAG
}

/// The row-id map entry (key, value) that locates version key `key`: a
/// keyed tree's version (→ its key prefix) or a row-id tree's chain member
/// (→ its root's key, see [`member_key`]). A function of the key alone, so
/// the log names such an entry beside its version with a marker instead
/// of its bytes (`wal.rs`). None for a key that has no entry.
pub fn map_entry_of(key: &[u8]) -> Option<([u8; MAP_KEY], &[u8])> {
    if is_member_key(key) {
        return Some((map_key(version_suffix(key)?), &key[..ROW_ID_KEY]));
    }
    if key.len() < 1 + SUFFIX || key[0] != VERSION_TAG {
        return None;
    }
    Some((map_key(version_suffix(key)?), &key[1..key.len() - SUFFIX]))
}

/// Length of a row-id tree's version key: the row id, big-endian.
pub const ROW_ID_KEY: usize = 8;

/// Key of chain member `id` (a HOT-like version) in a row-id tree: its
/// root's key and the member's version suffix, so a chain's members sort
/// right after their root, newest first, and before the next row id. Row
/// ids stay below 2^48, so such a key starts with a zero byte, which no
/// keyed tree's 14-byte key does (its tags are 0x01 and 0x02; its
/// descriptor key is one byte), and every row-id map key (`MAP_TAG` first)
/// sorts after every version.
pub fn member_key(root: u64, id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(ROW_ID_KEY + SUFFIX);
    k.extend_from_slice(&root.to_be_bytes());
    push_version_suffix(&mut k, id);
    k
}

/// Whether version keys `a` and `b` are versions of one row: in a row-id
/// tree, the same root (a row id and its chain members' keys); in a keyed
/// tree, the same key prefix (tag, encoded key, then the suffix). False
/// for anything else (map entries, the descriptor, a toast tree's chunks).
pub fn same_row(a: &[u8], b: &[u8]) -> bool {
    if is_member_key(a) || is_member_key(b) {
        // Only member keys (14 bytes) tie row-id keys together: two row
        // ids, or a toast tree's 8-byte chunk keys, never share a row.
        fn root(k: &[u8]) -> Option<&[u8]> {
            (k.len() == ROW_ID_KEY || is_member_key(k)).then(|| &k[..ROW_ID_KEY])
        }
        return root(a).is_some() && root(a) == root(b);
    }
    a.len() == b.len()
        && a.len() >= 1 + SUFFIX
        && a[0] == VERSION_TAG
        && b[0] == VERSION_TAG
        && a[..a.len() - SUFFIX] == b[..b.len() - SUFFIX]
}

/// Whether `key` is a row-id tree's chain member key ([`member_key`]).
pub fn is_member_key(key: &[u8]) -> bool {
    key.len() == ROW_ID_KEY + SUFFIX && key[0] == 0
}

/// Appends the version suffix for `tid` (48 bits): inverted, so that a
/// key's versions sort newest (highest TID) first.
pub fn push_version_suffix(key: &mut Vec<u8>, tid: u64) {
    debug_assert!(tid <= U48_MAX);
    key.extend_from_slice(&be48(!tid & U48_MAX));
}

/// The TID in a key's version suffix.
pub fn version_suffix(key: &[u8]) -> Option<u64> {
    let s = key.len().checked_sub(SUFFIX)?;
    Some(!from_be48(&key[s..]) & U48_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn part() -> impl Strategy<Value = (u8, i64, Vec<u8>)> {
        (
            0u8..9,
            any::<i64>(),
            proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFFu8), any::<u8>()], 0..6),
        )
    }

    fn make<'a>(kind: u8, n: i64, bytes: &'a [u8]) -> KeyPart<'a> {
        match kind {
            0 => KeyPart::Bool(n & 1 == 1),
            1 => KeyPart::Int2(n as i16),
            2 => KeyPart::Int4(n as i32),
            3 => KeyPart::Int8(n),
            4 => KeyPart::Oid(n as u32),
            5 => {
                let mut u = [0u8; 16];
                u[..8].copy_from_slice(&n.to_be_bytes());
                u[8..8 + bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
                KeyPart::Uuid(u)
            }
            6 => KeyPart::Float4(special_f64(n) as f32),
            7 => KeyPart::Float8(special_f64(n)),
            _ => KeyPart::Bytes(bytes),
        }
    }

    /// The values float comparison gets wrong most easily, else any bits.
    fn special_f64(n: i64) -> f64 {
        match n.rem_euclid(12) {
            0 => 0.0,
            1 => -0.0,
            2 => f64::NAN,
            3 => f64::from_bits(0xFFF8_0000_0000_0001),
            4 => f64::INFINITY,
            5 => f64::NEG_INFINITY,
            6 => 1.5,
            7 => -1.5,
            8 => f64::MIN_POSITIVE / 2.0,
            _ => f64::from_bits(n as u64),
        }
    }

    fn kind_type(kind: u8) -> KeyType {
        [
            KeyType::Bool,
            KeyType::Int2,
            KeyType::Int4,
            KeyType::Int8,
            KeyType::Oid,
            KeyType::Uuid,
            KeyType::Float4,
            KeyType::Float8,
            KeyType::Bytes,
        ][kind as usize]
    }

    /// Map keys hold 48 bits of row id, in row-id order, and sort after
    /// every row-id tree key; a range's open end saturates.
    #[test]
    fn map_keys_round_trip_and_sort_by_row_id() {
        let limit = crate::version::tid::LIMIT;
        for id in [0, 1, 290, 1 << 32, limit - 1] {
            assert_eq!(map_id(&map_key(id)), Some(id));
            assert!(map_key(id) < map_key(id + 1));
            assert!(map_key(id).as_slice() > member_key(limit, limit).as_slice());
        }
        assert_eq!(map_id(&map_key(u64::MAX)), Some((1 << 48) - 1));
        assert_eq!(map_id(&crate::version::tid::key(5)), None);
        assert_eq!(own_id(&crate::version::tid::key(5)), 5);
        assert_eq!(own_id(&member_key(5, 9)), 9);
    }

    proptest! {
        /// For two-column keys of the same types, the encodings compare
        /// exactly as the values do column by column, and decode back.
        #[test]
        fn byte_order_is_value_order(a in part(), b in part(), c in part(), d in part()) {
            let (k1, k2) = (a.0, b.0);
            let x = [make(k1, a.1, &a.2), make(k2, b.1, &b.2)];
            let y = [make(k1, c.1, &c.2), make(k2, d.1, &d.2)];
            let want = x[0].pg_cmp(&y[0]).unwrap().then(x[1].pg_cmp(&y[1]).unwrap());
            let (ex, ey) = (encode_key(&x), encode_key(&y));
            prop_assert_eq!(ex.cmp(&ey), want);
            let types = [kind_type(k1), kind_type(k2)];
            prop_assert_eq!(decode_key(&ex, &types).map(|v| encode_key(&v.iter().map(KeyValue::as_part).collect::<Vec<_>>())),
                Some(ex.clone()));
        }

        /// A row-id tree's chain members sort after their root, newest
        /// first, before the next row id and every map key, and name their
        /// map entry.
        #[test]
        fn member_keys_sort_between_their_root_and_the_next_id(root in 0u64..1 << 47, d1 in 1u64..1 << 20, d2 in 1u64..1 << 20) {
            let (a, b) = (member_key(root, root + d1), member_key(root, root + d2));
            prop_assert!(is_member_key(&a));
            prop_assert_eq!(a.cmp(&b), d2.cmp(&d1));
            prop_assert!(root.to_be_bytes().as_slice() < a.as_slice());
            prop_assert!(a.as_slice() < (root + 1).to_be_bytes().as_slice());
            prop_assert!(a.as_slice() < map_key(0).as_slice());
            prop_assert!(same_row(&a, &b) && same_row(&root.to_be_bytes(), &a));
            prop_assert!(!same_row(&root.to_be_bytes(), &(root + 1).to_be_bytes()));
            prop_assert!(!same_row(&a, &member_key(root + 1, root + d1)));
            prop_assert!(!same_row(&a, &map_key(root + d1)));
            let (mk, mv) = map_entry_of(&a).expect("a member's entry");
            prop_assert_eq!(mk, map_key(root + d1));
            let want = root.to_be_bytes();
            prop_assert_eq!(mv, &want[..]);
        }

        /// Versions of one key are adjacent and newest first, before any
        /// larger key.
        #[test]
        fn version_suffix_orders_newest_first(k in proptest::collection::vec(any::<u8>(), 0..5), t1 in 0u64..1 << 48, t2 in 0u64..1 << 48) {
            let mut a = encode_key(&[KeyPart::Bytes(&k)]);
            let mut b = a.clone();
            push_version_suffix(&mut a, t1);
            push_version_suffix(&mut b, t2);
            prop_assert_eq!(a.cmp(&b), t2.cmp(&t1));
            prop_assert_eq!(version_suffix(&a), Some(t1));
            let mut next = k.clone();
            next.push(0);
            let mut c = encode_key(&[KeyPart::Bytes(&next)]);
            push_version_suffix(&mut c, 0);
            prop_assert!(a < c);
        }
    }

    /// `mantissa × 10^-scale` as PostgreSQL prints it with that scale.
    fn decimal_text(mantissa: i64, scale: u32) -> String {
        let digits = mantissa.unsigned_abs().to_string();
        let s = scale as usize;
        let padded = format!("{digits:0>width$}", width = s + 1);
        let (i, f) = padded.split_at(padded.len() - s);
        let sign = if mantissa < 0 { "-" } else { "" };
        if s == 0 {
            format!("{sign}{i}")
        } else {
            format!("{sign}{i}.{f}")
        }
    }

    proptest! {
        /// Decimal encodings compare as the values do (any scales), equal
        /// values encode identically, and an encoding followed by more
        /// bytes still compares by the number alone (self-delimiting).
        #[test]
        fn decimal_byte_order_is_value_order(
            a in -1_000_000_000i64..1_000_000_000, sa in 0u32..6,
            b in -1_000_000_000i64..1_000_000_000, sb in 0u32..6,
            tail_a in any::<u8>(), tail_b in any::<u8>(),
        ) {
            let (ta, tb) = (decimal_text(a, sa), decimal_text(b, sb));
            let want = (a as i128 * 10i128.pow(sb)).cmp(&(b as i128 * 10i128.pow(sa)));
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            prop_assert!(encode_decimal(&ta, &mut ea));
            prop_assert!(encode_decimal(&tb, &mut eb));
            prop_assert_eq!(ea.cmp(&eb), want, "{} vs {}", ta, tb);
            if want == Ordering::Equal {
                prop_assert_eq!(&ea, &eb);
            } else {
                ea.push(tail_a);
                eb.push(tail_b);
                prop_assert_eq!(ea.cmp(&eb), want);
            }
        }
    }

    #[test]
    fn decimal_special_values_sort_like_numeric() {
        let order = ["-Infinity", "-1e0", "-0.5", "0", "0.000", "0.5", "12.30", "Infinity", "NaN"];
        let enc: Vec<Vec<u8>> = order
            .iter()
            .map(|t| {
                let t = if *t == "-1e0" { "-1" } else { t };
                let mut v = Vec::new();
                assert!(encode_decimal(t, &mut v), "{t}");
                v
            })
            .collect();
        for w in enc.windows(2) {
            assert!(w[0] <= w[1]);
        }
        assert_eq!(enc[3], enc[4], "0 = 0.000");
        assert!(!encode_decimal("1e5", &mut Vec::new()));
        assert!(!encode_decimal("", &mut Vec::new()));
        assert!(!encode_decimal("-", &mut Vec::new()));
    }

    #[test]
    fn malformed_encodings_do_not_decode() {
        assert_eq!(decode_key(&[0, 1], &[KeyType::Bytes]), None);
        assert_eq!(decode_key(&[2], &[KeyType::Bool]), None);
        assert_eq!(
            decode_key(&[0, 0, 0], &[KeyType::Int2]),
            None,
            "bytes left over"
        );
        assert_eq!(decode_key(&[b'a', 0, 0x10], &[KeyType::Bytes]), None);
    }
}
