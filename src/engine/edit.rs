//! How the log describes a new value against the value it was made from:
//! byte ranges (same length), a splice (another length), the changed
//! fields of a row version's header, and a delta (a new value against a
//! base value's bytes). Each `between` gives a description only when it is
//! smaller than the value it stands for, and checks that it rebuilds that
//! value exactly; each `apply` rebuilds it, or says None when its input
//! cannot be the value it was made from. Also the variable-length integers
//! the compact record kinds use (`wal.rs`).

use crate::version::{self, Header};

/// A change of a value in place, against the value of known length it
/// was made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Byte ranges replaced (same length, see [`diff`]).
    Ranges(Vec<(u16, Vec<u8>)>),
    /// The first `prefix` and last `suffix` bytes kept, `middle` between.
    Splice {
        prefix: u16,
        suffix: u16,
        middle: Vec<u8>,
    },
    /// A row version's header fields set (its tuple kept): an updater's,
    /// deleter's or locker's mark, which the bytes would spell as the
    /// whole new header when the short header becomes the full one.
    Header(HeaderEdit),
}

impl Edit {
    /// The smallest edit turning `old` into `new`, values of the item whose
    /// key has own row id `own` ([`crate::key_format::own_id`]; header edits
    /// read a short header's `ctid` as it): ranges when the lengths
    /// agree, else a splice, or the header fields that changed when that
    /// is smaller; None when none is smaller than `new`.
    pub fn between(old: &[u8], new: &[u8], own: u64) -> Option<Edit> {
        let bytes = if old.len() == new.len() {
            diff(old, new).map(Edit::Ranges)
        } else {
            splice(old, new).map(|(prefix, suffix, middle)| Edit::Splice {
                prefix,
                suffix,
                middle,
            })
        };
        let fields = HeaderEdit::between(old, new, own).map(Edit::Header);
        match (bytes, fields) {
            (Some(b), Some(f)) if f.encoded_len() < b.encoded_len() => Some(f),
            (Some(b), _) => Some(b),
            (None, f) => f,
        }
    }

    /// Bytes of the edit in a compact record (close enough to choose by).
    pub fn encoded_len(&self) -> usize {
        match self {
            Edit::Ranges(r) => 1 + r.iter().map(|(o, b)| var_len(*o as u64) + 1 + b.len()).sum::<usize>(),
            Edit::Splice {
                prefix,
                suffix,
                middle,
            } => {
                var_len(*prefix as u64) + var_len(*suffix as u64) + var_len(middle.len() as u64) + middle.len()
            }
            Edit::Header(h) => h.encoded_len(),
        }
    }

    /// Whether `value` is what this edit made of a value of `len` bytes
    /// and needs no second application: a result of another length than
    /// `len` (a splice's, with its middle in place, or a header edit's that
    /// changed the header's form). Ranges say nothing here: they keep the
    /// length, so a value of another length was never theirs. `own` as for
    /// [`Edit::between`].
    pub fn applied(&self, value: &[u8], len: u16, own: u64) -> bool {
        if value.len() == len as usize {
            return false;
        }
        match self {
            Edit::Ranges(_) => false,
            Edit::Splice {
                prefix,
                suffix,
                middle,
            } => {
                let (p, s) = (*prefix as usize, *suffix as usize);
                value.len() == p + middle.len() + s && value[p..p + middle.len()] == middle[..]
            }
            // Setting the same fields again changes nothing.
            Edit::Header(h) => h.apply(value, own).as_deref() == Some(value),
        }
    }

    /// `value` edited; None if the edit does not fit it. `own` as for
    /// [`Edit::between`].
    pub fn apply(&self, value: &[u8], own: u64) -> Option<Vec<u8>> {
        match self {
            Edit::Ranges(r) => apply_patch(value, r),
            Edit::Splice {
                prefix,
                suffix,
                middle,
            } => apply_splice(value, *prefix, *suffix, middle),
            Edit::Header(h) => h.apply(value, own),
        }
    }
}

/// The header fields an [`Edit::Header`] sets: those whose bit is in
/// `mask` take their value from `to`. Invariant: `mask` has no bit beyond
/// [`header_field::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEdit {
    pub mask: u16,
    pub to: Header,
}

/// Bits of [`HeaderEdit::mask`], the fields an updater, deleter or locker
/// sets first (so that their mask is one byte).
pub mod header_field {
    pub const INFOMASK: u16 = 1;
    pub const INFOMASK2: u16 = 2;
    pub const XMAX: u16 = 4;
    pub const CTID: u16 = 8;
    pub const CMAX: u16 = 16;
    pub const FLAGS: u16 = 32;
    pub const SPEC: u16 = 64;
    pub const XMIN: u16 = 128;
    pub const CMIN: u16 = 256;
    pub const HOFF: u16 = 512;
    pub const ALL: u16 = 1023;
}

impl HeaderEdit {
    /// The fields turning version `old`'s header into `new`'s, when both
    /// are versions with the same tuple and the edit rebuilds `new`
    /// exactly (a header's bytes are a function of its fields, and of
    /// `own`, the version's row id, for the short form's `ctid`).
    pub fn between(old: &[u8], new: &[u8], own: u64) -> Option<HeaderEdit> {
        let (a, b) = (Header::decode(old, own)?, Header::decode(new, own)?);
        if old.get(version::header_len(old)..)? != new.get(version::header_len(new)..)? {
            return None;
        }
        let mask = field_bits()
            .filter(|&bit| field(&a, bit) != field(&b, bit))
            .fold(0, |m, bit| m | bit);
        let mut to = Header::default();
        set_fields(&mut to, mask, &b);
        let e = HeaderEdit { mask, to };
        (e.apply(old, own).as_deref() == Some(new)).then_some(e)
    }

    /// Version `value`, whose row id is `own`, with the fields set; None if
    /// it is not a version.
    pub fn apply(&self, value: &[u8], own: u64) -> Option<Vec<u8>> {
        let mut h = Header::decode(value, own)?;
        set_fields(&mut h, self.mask, &self.to);
        Some(h.with_tail(&value[version::header_len(value)..]))
    }

    /// The fields, in bit order after the mask: infomasks as two bytes,
    /// flags and hoff as one, the rest as variable-length integers.
    pub fn encode(&self, b: &mut Vec<u8>) {
        use header_field::*;
        put_var(b, self.mask as u64);
        for (bit, v) in self.fields() {
            match bit {
                INFOMASK | INFOMASK2 => b.extend_from_slice(&(v as u16).to_le_bytes()),
                FLAGS | HOFF => b.push(v as u8),
                _ => put_var(b, v),
            }
        }
    }

    /// Decodes the fields at `b[*at..]`.
    pub fn decode(b: &[u8], at: &mut usize) -> Result<HeaderEdit, String> {
        use header_field::*;
        let mask = get_var(b, at)?;
        if mask > ALL as u64 {
            return Err(format!("header edit names unknown fields {mask:#x}"));
        }
        let mut to = Header::default();
        for bit in field_bits().filter(|bit| mask as u16 & bit != 0) {
            let v = match bit {
                INFOMASK | INFOMASK2 => {
                    let s = b.get(*at..*at + 2).ok_or("log record truncated")?;
                    *at += 2;
                    u16::from_le_bytes([s[0], s[1]]) as u64
                }
                FLAGS | HOFF => {
                    let x = *b.get(*at).ok_or("log record truncated")?;
                    *at += 1;
                    x as u64
                }
                _ => get_var(b, at)?,
            };
            let max = match bit {
                CTID => (1 << 48) - 1,
                _ => u32::MAX as u64,
            };
            if v > max {
                return Err(format!("header field {bit:#x} holds {v}, too large"));
            }
            set_field(&mut to, bit, v);
        }
        Ok(HeaderEdit {
            mask: mask as u16,
            to,
        })
    }

    /// Bytes [`HeaderEdit::encode`] writes, counted without writing them
    /// (every UPDATE compares its edits by size).
    fn encoded_len(&self) -> usize {
        use header_field::*;
        var_len(self.mask as u64)
            + self
                .fields()
                .map(|(bit, v)| match bit {
                    INFOMASK | INFOMASK2 => 2,
                    FLAGS | HOFF => 1,
                    _ => var_len(v),
                })
                .sum::<usize>()
    }

    /// (bit, value) of every field the mask names, in bit order.
    fn fields(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        field_bits()
            .filter(move |bit| self.mask & bit != 0)
            .map(move |bit| (bit, field(&self.to, bit)))
    }
}

impl HeaderEdit {
    /// This edit without its `ctid` when that is `new_key`'s row id: the
    /// old version of an UPDATE names its successor, whose key the record
    /// holds anyway. None when the edit sets no such `ctid`.
    pub fn without_ctid_of(&self, new_key: &[u8]) -> Option<HeaderEdit> {
        use header_field::CTID;
        let id = crate::key_format::key_id(new_key)?;
        (self.mask & CTID != 0 && self.to.ctid == id).then(|| HeaderEdit {
            mask: self.mask & !CTID,
            to: Header { ctid: 0, ..self.to },
        })
    }

    /// The inverse of [`HeaderEdit::without_ctid_of`]: the `ctid` set to
    /// `new_key`'s row id (None if that key has none, or the edit sets a
    /// `ctid` already).
    pub fn with_ctid_of(&self, new_key: &[u8]) -> Option<HeaderEdit> {
        use header_field::CTID;
        let id = crate::key_format::key_id(new_key)?;
        (self.mask & CTID == 0).then(|| HeaderEdit {
            mask: self.mask | CTID,
            to: Header { ctid: id, ..self.to },
        })
    }
}

/// The header an UPDATE's new version starts with, as the record's edit
/// of the old version implies it: inserted by the transaction and command
/// that became the old version's `xmax` and `cmax` (`cmin` 0 when the edit
/// leaves `cmax`), marked as an update's (heap's `HEAP_UPDATED`), with the
/// old tuple's data bits and attribute count,
/// heap-only with the root trailer's flag when the old version became
/// HOT-updated, its own row id (`new_key`'s) as `ctid`. Built from the
/// record alone — never from the value replay finds, which may be a later
/// state of the old version. None when the edit does not name those
/// fields or `xmax` is no plain updater; the encoder logs it instead of
/// the literal header only when it is exactly that header.
pub fn successor_header(edit: &HeaderEdit, new_key: &[u8]) -> Option<Vec<u8>> {
    use crate::version::bits;
    use header_field::*;
    let (m, to) = (edit.mask, &edit.to);
    if m & (INFOMASK | INFOMASK2 | XMAX) != INFOMASK | INFOMASK2 | XMAX
        || to.infomask & (bits::XMAX_IS_MULTI | bits::XMAX_LOCK_ONLY | bits::XMAX_INVALID) != 0
    {
        return None;
    }
    let hot = to.infomask2 & bits::HOT_UPDATED != 0;
    let mut h = Header::new(
        to.xmax,
        if m & CMAX != 0 { to.cmax } else { 0 },
        crate::key_format::key_id(new_key)?,
    );
    h.infomask |= bits::UPDATED | (to.infomask & bits::DATA_MASK);
    h.infomask2 = (to.infomask2 & bits::NATTS_MASK) | if hot { bits::HEAP_ONLY } else { 0 };
    if hot {
        h.flags = version::HOT_ROOT;
    }
    h.hoff = version::natural_hoff(h.infomask, h.infomask2) as u8;
    let (b, n) = h.encode();
    Some(b[..n].to_vec())
}

/// The bits of [`header_field`], in order.
fn field_bits() -> impl Iterator<Item = u16> {
    (0..10).map(|i| 1u16 << i)
}

/// The field of `h` that `bit` names, widened.
fn field(h: &Header, bit: u16) -> u64 {
    use header_field::*;
    match bit {
        INFOMASK => h.infomask as u64,
        INFOMASK2 => h.infomask2 as u64,
        XMAX => h.xmax as u64,
        CTID => h.ctid,
        CMAX => h.cmax as u64,
        FLAGS => h.flags as u64,
        SPEC => h.spec as u64,
        XMIN => h.xmin as u64,
        CMIN => h.cmin as u64,
        _ => h.hoff as u64,
    }
}

/// Sets the field of `h` that `bit` names (`v` fits it: [`field`] gave
/// it, or a decoder checked it).
fn set_field(h: &mut Header, bit: u16, v: u64) {
    use header_field::*;
    match bit {
        INFOMASK => h.infomask = v as u16,
        INFOMASK2 => h.infomask2 = v as u16,
        XMAX => h.xmax = v as u32,
        CTID => h.ctid = v,
        CMAX => h.cmax = v as u32,
        FLAGS => h.flags = v as u8,
        SPEC => h.spec = v as u32,
        XMIN => h.xmin = v as u32,
        CMIN => h.cmin = v as u32,
        _ => h.hoff = v as u8,
    }
}

/// Sets the fields of `h` that `mask` names to their values in `to`.
fn set_fields(h: &mut Header, mask: u16, to: &Header) {
    for bit in field_bits().filter(|bit| mask & bit != 0) {
        set_field(h, bit, field(to, bit));
    }
}

/// (prefix, suffix, middle) turning `old` into `new` by keeping `old`'s
/// first `prefix` and last `suffix` bytes; None unless smaller than `new`.
pub fn splice(old: &[u8], new: &[u8]) -> Option<(u16, u16, Vec<u8>)> {
    if old.len() > u16::MAX as usize || new.len() > u16::MAX as usize {
        return None;
    }
    let prefix = common_prefix(new, old);
    let suffix = common_suffix(&new[prefix..], &old[prefix..]);
    let middle = &new[prefix..new.len() - suffix];
    (middle.len() + 6 < new.len()).then(|| (prefix as u16, suffix as u16, middle.to_vec()))
}

/// `value` spliced (see [`splice`]); None if prefix and suffix overlap.
pub fn apply_splice(value: &[u8], prefix: u16, suffix: u16, middle: &[u8]) -> Option<Vec<u8>> {
    let (p, s) = (prefix as usize, suffix as usize);
    if value.len() < p + s {
        return None;
    }
    Some([&value[..p], middle, &value[value.len() - s..]].concat())
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count()
}

/// A value as `head`, then `prefix` bytes of a base value from offset
/// `from`, then `middle`, then `suffix` bytes of the base that end `skip`
/// bytes before its end, then `tail`. Invariant of a delta `between`
/// made: its base holds `from + prefix + suffix + skip` bytes at least.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub head: Vec<u8>,
    pub from: u16,
    pub prefix: u16,
    pub middle: Vec<u8>,
    pub suffix: u16,
    pub skip: u16,
    pub tail: Vec<u8>,
}

/// Trailer lengths [`Delta::between`] tries to step over (a version's HOT
/// root, 6 bytes, or a short toast list).
const MAX_TRAILER: usize = 16;

impl Delta {
    /// `new` against `base`: the first `new_from` bytes of `new` literally
    /// (a version's header), the rest against `base` from `base_from` on
    /// (the part of a base that never changes: a version's tuple, whatever
    /// its header became); None unless smaller than `new`. The bytes the
    /// two share at the end may stop short of either's end by a trailer
    /// one has and the other has not (a HOT chain's root id, which a
    /// chain's first version lacks): then `new`'s own is the delta's tail,
    /// or the base's is skipped, or both when they differ.
    pub fn between(new: &[u8], new_from: usize, base: &[u8], base_from: usize) -> Option<Delta> {
        let h = new_from.min(new.len());
        if base.len() < base_from || new.len() > u16::MAX as usize || base.len() > u16::MAX as usize {
            return None;
        }
        let (n, b) = (&new[h..], &base[base_from..]);
        let p = common_prefix(n, b);
        let (n, b) = (&n[p..], &b[p..]);
        // (suffix, tail, skip): literal bytes are middle and tail alike,
        // so the longest shared suffix wins.
        let mut best = (common_suffix(n, b), 0, 0);
        if n.len() - best.0 > 8 {
            for t in 1..=MAX_TRAILER.min(n.len()) {
                let s = common_suffix(&n[..n.len() - t], b);
                if s > best.0 {
                    best = (s, t, 0);
                }
            }
            for k in 1..=MAX_TRAILER.min(b.len()) {
                let s = common_suffix(n, &b[..b.len() - k]);
                if s > best.0 {
                    best = (s, 0, k);
                }
                // Both with a trailer of that length, not the same one.
                if k <= n.len() {
                    let s = common_suffix(&n[..n.len() - k], &b[..b.len() - k]);
                    if s > best.0 {
                        best = (s, k, k);
                    }
                }
            }
        }
        let (s, t, k) = best;
        let middle = &n[..n.len() - t - s];
        if h + middle.len() + t + 8 >= new.len() {
            return None;
        }
        Some(Delta {
            head: new[..h].to_vec(),
            from: base_from as u16,
            prefix: p as u16,
            middle: middle.to_vec(),
            suffix: s as u16,
            skip: k as u16,
            tail: n[n.len() - t..].to_vec(),
        })
    }

    /// The value this delta makes of `base`; None if `base` is too short.
    pub fn apply(&self, base: &[u8]) -> Option<Vec<u8>> {
        let (f, p, s, k) = (self.from as usize, self.prefix as usize, self.suffix as usize, self.skip as usize);
        if base.len() < f + p + s + k {
            return None;
        }
        let end = base.len() - k;
        Some([&self.head[..], &base[f..f + p], &self.middle, &base[end - s..end], &self.tail].concat())
    }
}

/// Patch ranges turning `old` into `new` (same length), or None when the
/// values differ in length or a patch would not be smaller than `new`.
/// Runs closer than [`PATCH_GAP`] equal bytes are joined (a range costs
/// three bytes of framing).
pub fn diff(old: &[u8], new: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
    if old.len() != new.len() || new.len() > u16::MAX as usize {
        return None;
    }
    let mut ranges: Vec<(u16, Vec<u8>)> = Vec::new();
    let mut size = 0usize;
    let mut i = 0;
    while i < new.len() {
        if old[i] == new[i] {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        // Extend over differing bytes and short equal gaps.
        let mut j = end;
        while j < new.len() && end - start < 255 {
            if old[j] != new[j] {
                end = j + 1;
            } else if j - end >= PATCH_GAP {
                break;
            }
            j += 1;
        }
        let end = end.min(start + 255);
        size += 3 + (end - start);
        if size + 2 >= new.len() {
            return None;
        }
        ranges.push((start as u16, new[start..end].to_vec()));
        i = end;
    }
    Some(ranges)
}

const PATCH_GAP: usize = 3;

/// `value` with `ranges` applied; None if a range does not fit.
pub fn apply_patch(value: &[u8], ranges: &[(u16, Vec<u8>)]) -> Option<Vec<u8>> {
    let mut v = value.to_vec();
    for (off, bytes) in ranges {
        let off = *off as usize;
        v.get_mut(off..off + bytes.len())?.copy_from_slice(bytes);
    }
    Some(v)
}

/// Appends `x` as a variable-length integer: seven bits a byte, low bits
/// first, the top bit set on every byte but the last.
pub fn put_var(b: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        b.push(x as u8 | 0x80);
        x >>= 7;
    }
    b.push(x as u8);
}

/// Bytes [`put_var`] writes for `x`.
pub fn var_len(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a variable-length integer at `b[*at..]`.
pub fn get_var(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut x = 0u64;
    for i in 0..10 {
        let byte = *b.get(*at).ok_or("log record truncated")?;
        *at += 1;
        x |= ((byte & 0x7F) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(x);
        }
    }
    Err("log record holds an overlong integer".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `successor_header` is part of the log's format: WAL written by one
    /// build is replayed by the next, with no checksum of the header it
    /// implies. These bytes change only with the control file's version
    /// (`store/control.rs`), which makes a new build refuse the old files
    /// (version 4: the short header holds no `ctid`).
    #[test]
    fn an_implied_successor_header_keeps_its_bytes() {
        use crate::version::bits;
        use header_field::*;
        let mut new_key = vec![crate::key_format::VERSION_TAG, 1, 0x80, 0, 0, 7];
        crate::key_format::push_version_suffix(&mut new_key, 0x0102_0304);
        let edit = HeaderEdit {
            mask: INFOMASK | INFOMASK2 | XMAX | CMAX,
            to: Header {
                xmax: 0x0A0B_0C0D,
                cmax: 2,
                infomask: bits::HASVARWIDTH | bits::XMIN_COMMITTED,
                infomask2: bits::HOT_UPDATED | 4,
                ..Header::default()
            },
        };
        assert_eq!(
            successor_header(&edit, &new_key).unwrap(),
            [0xB0, 0x02, 0x28, 0x04, 0x80, 0x0D, 0x0C, 0x0B, 0x0A, 2]
        );
        let plain = HeaderEdit {
            mask: INFOMASK | INFOMASK2 | XMAX,
            to: Header {
                infomask2: 4,
                ..edit.to
            },
        };
        assert_eq!(
            successor_header(&plain, &new_key).unwrap(),
            [0x80, 0x02, 0x28, 0x04, 0x00, 0x0D, 0x0C, 0x0B, 0x0A]
        );
        let locker = HeaderEdit {
            to: Header {
                infomask: bits::XMAX_LOCK_ONLY,
                ..edit.to
            },
            ..edit
        };
        assert_eq!(successor_header(&locker, &new_key), None);
    }

    #[test]
    fn variable_length_integers_roundtrip() {
        for x in [0u64, 1, 127, 128, 300, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_var(&mut b, x);
            assert_eq!(b.len(), var_len(x), "{x}");
            let mut at = 0;
            assert_eq!(get_var(&b, &mut at).unwrap(), x);
            assert_eq!(at, b.len());
            assert!(get_var(&b[..b.len() - 1], &mut 0).is_err());
        }
        assert!(get_var(&[0x80; 11], &mut 0).is_err());
    }

    /// A version: `h`'s header over a fixed 40-byte tuple, plus `trailer`.
    fn version(h: &Header, trailer: &[u8]) -> Vec<u8> {
        let tuple: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        let mut v = h.with_tail(&tuple);
        v.extend_from_slice(trailer);
        v
    }

    #[test]
    fn an_updaters_mark_is_logged_as_the_fields_it_sets() {
        let fresh = Header {
            hoff: 24,
            ..Header::new(1000, 0, 7)
        };
        let old = version(&fresh, &[]);
        let mut h = Header::decode(&old, 7).unwrap();
        h.set_deleter(2_000_000, 3, 9_000, false);
        let new = version(&h, &[]);
        assert!(new.len() > old.len(), "the short header became the full one");
        let e = Edit::between(&old, &new, 7).unwrap();
        assert!(matches!(e, Edit::Header(_)), "{e:?}");
        // Infomasks 4 bytes, xmax, ctid, cmax, flags and the raw command id,
        // against the 32-byte header a splice would spell out.
        assert!(e.encoded_len() <= 16, "{} bytes", e.encoded_len());
        assert_eq!(e.apply(&old, 7).unwrap(), new);
        // Replayed over its own result: applied, and applying it again
        // changes nothing.
        assert!(e.applied(&new, old.len() as u16, 7));
        assert_eq!(e.apply(&new, 7).unwrap(), new);
        assert!(!e.applied(&old, old.len() as u16, 7));
        // Another tuple is no header edit's business.
        let mut other = new.clone();
        *other.last_mut().unwrap() ^= 1;
        assert!(HeaderEdit::between(&old, &other, 7).is_none());
        let mut b = Vec::new();
        let Edit::Header(he) = e else { unreachable!() };
        he.encode(&mut b);
        assert_eq!(b.len(), he.encoded_len(), "the size edits are chosen by");
        let mut at = 0;
        assert_eq!(HeaderEdit::decode(&b, &mut at).unwrap(), he);
        assert_eq!(at, b.len());
    }

    #[test]
    fn a_delta_steps_over_a_trailer_either_side_has_alone() {
        let tuple: Vec<u8> = (0..100u8).collect();
        let base = [&[9u8; 15][..], &tuple].concat();
        let mut changed = tuple.clone();
        changed[10..14].copy_from_slice(&[0xAA; 4]);
        let root = [1u8, 2, 3, 4, 5, 6];
        // A chain's first version to a member: the member's root id is a
        // literal tail, the tuple's end still comes from the base.
        let member = [&[8u8; 16][..], &changed, &root].concat();
        let d = Delta::between(&member, 16, &base, 15).unwrap();
        assert_eq!((d.middle.len(), d.tail.len(), d.skip), (4, 6, 0), "{d:?}");
        assert_eq!(d.apply(&base).unwrap(), member);
        // A member to a version without the trailer: the base's is skipped.
        let base2 = [&[9u8; 15][..], &tuple, &root].concat();
        let plain = [&[8u8; 16][..], &changed].concat();
        let d = Delta::between(&plain, 16, &base2, 15).unwrap();
        assert_eq!((d.middle.len(), d.tail.len(), d.skip), (4, 0, 6), "{d:?}");
        assert_eq!(d.apply(&base2).unwrap(), plain);
        // Both with the same trailer: the plain suffix covers it.
        let member2 = [&[8u8; 16][..], &changed, &root].concat();
        let d = Delta::between(&member2, 16, &base2, 15).unwrap();
        assert_eq!((d.middle.len(), d.tail.len(), d.skip), (4, 0, 0), "{d:?}");
    }
}
