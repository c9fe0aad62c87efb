//! Key order for primary trees whose keys hold text under a collation that
//! no byte encoding captures (libc language collations, whose `strxfrm`
//! PostgreSQL does not trust): the tree compares such keys column by
//! column, handing the collated columns to a [`Collation`].
//!
//! Keys are those of the primary-key layout (`src/am/table.rs`): a one-byte
//! range tag, then — for versions — per column a tag byte (`1` value
//! follows, `2` NULL, or `0` NULL sorting first) and the value's encoding
//! (`key_format.rs`; every byte inverted in a descending column of a
//! secondary index, `src/am/secondary/shape.rs`), then a suffix compared
//! as bytes. Keys of other ranges, and the parts of search bounds
//! that are not complete column encodings (a bound may end in `0xFF` bytes to
//! sit after every key with its prefix), compare as bytes from where they
//! stop being decodable: for well-formed keys that is exactly where byte
//! order and column order agree (tags, fixed-width values, suffixes).

use crate::order::KeyCmp;
use std::cmp::Ordering;
use std::sync::Arc;

/// A collation of NUL-free byte strings. Invariant: a total order, the
/// same in every process and for the life of the trees keyed by it.
pub trait Collation: Send + Sync {
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering;
}

/// How one key column's encoding is delimited and compared.
#[derive(Clone)]
pub enum Column {
    /// A fixed-width value, compared as bytes.
    Fixed(usize),
    /// An escaped byte string (`0x00` as `0x00 0xFF`, ended by `0x00 0x00`),
    /// compared as bytes.
    Escaped,
    /// An escaped string of text, compared by the collation; strings it
    /// calls equal are ordered by their bytes (PostgreSQL's `varstr_cmp`
    /// tie-break for deterministic collations).
    Collated(Arc<dyn Collation>),
}

const TAG_VALUE: u8 = 1;
const TAG_NULL: u8 = 2;

/// Length of an escaped string at the start of `b`, terminator included.
fn escaped_len(b: &[u8]) -> Option<usize> {
    escaped_len_by(b, 0)
}

/// [`escaped_len`] of an escaped string stored with every byte inverted.
fn inverted_escaped_len(b: &[u8]) -> Option<usize> {
    escaped_len_by(b, 0xFF)
}

/// Length of an escaped string whose bytes are XORed with `x` (0: as
/// written; 0xFF: inverted): `0x00` stands as `0x00 0xFF`, the end is
/// `0x00 0x00`, both XORed.
fn escaped_len_by(b: &[u8], x: u8) -> Option<usize> {
    let mut i = 0;
    loop {
        let z = i + b.get(i..)?.iter().position(|&c| c == x)?;
        match b.get(z + 1)? ^ x {
            0 => return Some(z + 2),
            0xFF => i = z + 2,
            _ => return None,
        }
    }
}

/// `b` with every byte inverted back.
fn uninvert(b: &[u8]) -> Vec<u8> {
    b.iter().map(|c| !c).collect()
}

/// The bytes an escaped string stands for (terminator already removed).
fn unescape(b: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !b.windows(2).any(|w| w == [0, 0xFF]) {
        return b.into();
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        out.push(b[i]);
        i += if b[i] == 0 { 2 } else { 1 };
    }
    out.into()
}

impl Column {
    /// Length of this column's value encoding at the start of `b` (stored
    /// inverted when `inverted`).
    fn len(&self, b: &[u8], inverted: bool) -> Option<usize> {
        match self {
            Column::Fixed(n) => (b.len() >= *n).then_some(*n),
            Column::Escaped | Column::Collated(_) if inverted => inverted_escaped_len(b),
            Column::Escaped | Column::Collated(_) => escaped_len(b),
        }
    }

    /// [`Column::compare`] of encodings stored inverted: inverted bytes
    /// already compare in reverse, collated text is compared as it was and
    /// the result reversed.
    fn compare_inverted(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            Column::Fixed(_) | Column::Escaped => a.cmp(b),
            Column::Collated(_) => self.compare(&uninvert(a), &uninvert(b)).reverse(),
        }
    }

    /// Compares two value encodings of this column (as [`Column::len`]
    /// delimited them).
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            Column::Fixed(_) | Column::Escaped => a.cmp(b),
            Column::Collated(c) => {
                if a == b {
                    return Ordering::Equal;
                }
                let (a, b) = (unescape(&a[..a.len() - 2]), unescape(&b[..b.len() - 2]));
                c.compare(&a, &b).then_with(|| a.cmp(&b))
            }
        }
    }
}

/// The order of a tree keyed by `cols` under range tag `tag`. Invariant:
/// `cols` describes every column up to the last collated one (later
/// columns and the suffix compare as bytes, as their encodings order
/// them); `inverted` is empty (no column inverted) or has one flag per
/// column of `cols`, set for a column whose encodings are stored with
/// every byte inverted (descending).
pub struct ColumnOrder {
    pub tag: u8,
    pub cols: Vec<Column>,
    pub inverted: Vec<bool>,
}

impl KeyCmp for ColumnOrder {
    fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
        if a.first() != Some(&self.tag) || b.first() != Some(&self.tag) {
            return a.cmp(b);
        }
        let (mut i, mut j) = (1, 1);
        for (n, col) in self.cols.iter().enumerate() {
            let (ra, rb) = (&a[i..], &b[j..]);
            match (ra.first(), rb.first()) {
                (Some(&TAG_VALUE), Some(&TAG_VALUE)) => {}
                // Two NULLs (tag 2, or 0 for NULLS FIRST): equal here.
                (Some(&x), Some(&y)) if x == y && x != TAG_VALUE && x <= TAG_NULL => {
                    i += 1;
                    j += 1;
                    continue;
                }
                _ => return ra.cmp(rb),
            }
            let inverted = self.inverted.get(n).copied().unwrap_or(false);
            let (Some(la), Some(lb)) = (col.len(&ra[1..], inverted), col.len(&rb[1..], inverted)) else {
                return ra.cmp(rb);
            };
            let (va, vb) = (&ra[1..1 + la], &rb[1..1 + lb]);
            let o = if inverted { col.compare_inverted(va, vb) } else { col.compare(va, vb) };
            if o != Ordering::Equal {
                return o;
            }
            i += 1 + la;
            j += 1 + lb;
        }
        a[i..].cmp(&b[j..])
    }
}

/// Bytes appended to a search bound made of complete column encodings so
/// that it sorts after every key that starts with them (the next column's
/// tag is at most 2, a version suffix is 6 bytes) and before every key
/// with a greater prefix — in byte order and in [`ColumnOrder`] alike.
pub const AFTER_PREFIX: [u8; 7] = [0xFF; 7];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_format::{encode_part, KeyPart};
    use proptest::prelude::*;

    /// A stand-in language collation: ASCII case-insensitive.
    struct NoCase;
    impl Collation for NoCase {
        fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
            a.to_ascii_lowercase().cmp(&b.to_ascii_lowercase())
        }
    }

    fn order() -> ColumnOrder {
        ColumnOrder {
            tag: 2,
            cols: vec![Column::Fixed(4), Column::Collated(Arc::new(NoCase))],
            inverted: Vec::new(),
        }
    }

    type Row = (Option<i32>, Option<String>, u16);

    fn encode(r: &Row) -> Vec<u8> {
        let mut k = vec![2];
        for (tag, part) in [
            (r.0.is_some(), r.0.map(KeyPart::Int4)),
            (r.1.is_some(), r.1.as_deref().map(|s| KeyPart::Bytes(s.as_bytes()))),
        ] {
            k.push(if tag { TAG_VALUE } else { TAG_NULL });
            if let Some(p) = part {
                encode_part(&p, &mut k);
            }
        }
        k.extend_from_slice(&[0, 0, 0, 0]);
        k.extend_from_slice(&r.2.to_be_bytes());
        k
    }

    /// The order a btree with NULLS LAST gives the rows.
    fn model(a: &Row, b: &Row) -> Ordering {
        fn nulls_last<T: Ord>(a: &Option<T>, b: &Option<T>, f: impl Fn(&T, &T) -> Ordering) -> Ordering {
            match (a, b) {
                (Some(x), Some(y)) => f(x, y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
        }
        nulls_last(&a.0, &b.0, |x, y| x.cmp(y))
            .then_with(|| {
                nulls_last(&a.1, &b.1, |x, y| {
                    NoCase.compare(x.as_bytes(), y.as_bytes()).then_with(|| x.cmp(y))
                })
            })
            .then_with(|| a.2.cmp(&b.2))
    }

    fn row() -> impl Strategy<Value = Row> {
        (
            proptest::option::of(-3i32..3),
            proptest::option::of("[aAbB\u{e9}]{0,3}"),
            any::<u16>(),
        )
    }

    proptest! {
        #[test]
        fn orders_as_the_columns(rows in proptest::collection::vec(row(), 1..40)) {
            let o = order();
            for a in &rows {
                for b in &rows {
                    prop_assert_eq!(o.cmp(&encode(a), &encode(b)), model(a, b), "{:?} {:?}", a, b);
                }
            }
        }

        /// A bound of complete leading columns (optionally followed by
        /// AFTER_PREFIX) sits where the rows' order puts it.
        #[test]
        fn bounds_bracket_their_prefix(rows in proptest::collection::vec(row(), 1..40), probe in row()) {
            let o = order();
            let mut lo = vec![2, TAG_VALUE];
            encode_part(&KeyPart::Int4(probe.0.unwrap_or(0)), &mut lo);
            lo.push(TAG_VALUE);
            let s = probe.1.clone().unwrap_or_default();
            encode_part(&KeyPart::Bytes(s.as_bytes()), &mut lo);
            let mut hi = lo.clone();
            hi.extend_from_slice(&AFTER_PREFIX);
            let p = (Some(probe.0.unwrap_or(0)), Some(s));
            for r in &rows {
                let k = encode(r);
                let by_prefix = model(&(r.0, r.1.clone(), 0), &(p.0, p.1.clone(), 0));
                prop_assert_eq!(o.cmp(&k, &lo) == Ordering::Less, by_prefix == Ordering::Less);
                prop_assert_eq!(o.cmp(&k, &hi) == Ordering::Less, by_prefix != Ordering::Greater);
            }
        }
    }

    /// The order of the same columns with the collated one descending and
    /// its NULLs first (tag 0), as a secondary index stores them.
    fn descending_order() -> ColumnOrder {
        ColumnOrder {
            inverted: vec![false, true],
            ..order()
        }
    }

    fn encode_descending(r: &Row) -> Vec<u8> {
        let mut k = vec![2];
        k.push(if r.0.is_some() { TAG_VALUE } else { TAG_NULL });
        if let Some(v) = r.0 {
            encode_part(&KeyPart::Int4(v), &mut k);
        }
        match &r.1 {
            None => k.push(0),
            Some(s) => {
                k.push(TAG_VALUE);
                let mut v = Vec::new();
                encode_part(&KeyPart::Bytes(s.as_bytes()), &mut v);
                k.extend(v.iter().map(|c| !c));
            }
        }
        k.extend_from_slice(&[0, 0, 0, 0]);
        k.extend_from_slice(&r.2.to_be_bytes());
        k
    }

    /// The order of `(a NULLS LAST, b DESC NULLS FIRST, suffix)`.
    fn descending_model(a: &Row, b: &Row) -> Ordering {
        let first = match (a.0, b.0) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        let second = match (&a.1, &b.1) {
            (Some(x), Some(y)) => NoCase.compare(x.as_bytes(), y.as_bytes()).then_with(|| x.cmp(y)).reverse(),
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        };
        first.then(second).then_with(|| a.2.cmp(&b.2))
    }

    proptest! {
        #[test]
        fn orders_descending_nulls_first_columns(rows in proptest::collection::vec(row(), 1..40)) {
            let o = descending_order();
            for a in &rows {
                for b in &rows {
                    prop_assert_eq!(
                        o.cmp(&encode_descending(a), &encode_descending(b)),
                        descending_model(a, b),
                        "{:?} {:?}", a, b
                    );
                }
            }
        }
    }

    #[test]
    fn other_ranges_and_broken_values_compare_as_bytes() {
        let o = order();
        assert_eq!(o.cmp(&[0], &[1, 5]), Ordering::Less);
        assert_eq!(o.cmp(&[1, 9], &[2, 1]), Ordering::Less);
        assert_eq!(o.cmp(&[1, 9, 9], &[1, 9, 8]), Ordering::Greater);
        assert_eq!(o.cmp(&[2], &[2, 1, 0, 0, 0, 0]), Ordering::Less);
        // An escaped string that is not terminated: bytes from the column.
        assert_eq!(escaped_len(b"ab\0"), None);
        assert_eq!(escaped_len(b"a\0\xFFb\0\0z"), Some(6));
        assert_eq!(&*unescape(b"a\0\xFFb"), b"a\0b");
        assert_eq!(inverted_escaped_len(&uninvert(b"a\0\xFFb\0\0z")), Some(6));
    }
}
