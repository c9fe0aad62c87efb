//! The 8 KB page layout shared by leaves and internal pages of a B-link tree.
//!
//! ```text
//! 0   magic u16 | flags u16 | level u16 | nitems u16
//! 8   upper u16 | garbage u16 | right u32
//! 16  low_off u16 | low_len u16 | high_off u16 | high_len u16
//! 24  reserved u64 (zero; a raw page image keeps its checksum and page
//!     number here on disk, `store/image.rs`)
//! 32  slot array: nitems x u16 item offsets, in key order (grows up)
//! ... free space ...
//! upper..8192: item data (grows down): lengths u24 (klen in bits 0-10,
//!               vlen in bits 11-23) | key | value,
//!              plus the low and high keys as raw bytes
//! ```
//! A page covers the key range `[low, high)`; a missing low key is minus
//! infinity, a missing high key plus infinity (the rightmost page of a level).
//! Internal items carry a 4-byte child page number as their value; the first
//! item's key is ignored (it stands for the page's low key).
//! All integers are little-endian.

use crate::order::KeyCmp;
use std::cmp::Ordering;

pub const PAGE_SIZE: usize = 8192;
pub const HEADER: usize = 32;
pub const PAGE_MAGIC: u16 = 0x4F50;
/// Longest key: two keys (low, high) plus two maximal items must fit a page.
pub const MAX_KEY: usize = 1024;
/// Longest key + value: about a third of a page, so a split always succeeds.
pub const MAX_ITEM: usize = 2600;
pub const NO_PAGE: u32 = u32::MAX;

pub const F_DELETED: u16 = 1;
const F_HAS_LOW: u16 = 2;
const F_HAS_HIGH: u16 = 4;

fn rd16(p: &[u8], at: usize) -> usize {
    u16::from_le_bytes([p[at], p[at + 1]]) as usize
}
fn wr16(p: &mut [u8], at: usize, v: usize) {
    debug_assert!(v <= u16::MAX as usize);
    p[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
}
fn rd32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

/// Bytes in front of an item's key: its key length (11 bits: keys are at
/// most [`MAX_KEY`]) and value length (13 bits: items at most
/// [`MAX_ITEM`]) in three bytes, little-endian.
const ITEM_HEAD: usize = 3;
const KLEN_BITS: u32 = 11;
const _: () = assert!(MAX_KEY < 1 << KLEN_BITS && MAX_ITEM < 1 << (24 - KLEN_BITS));

/// The (key, value) lengths of the item at `o`.
fn rd_lens(p: &[u8], o: usize) -> (usize, usize) {
    let x = u32::from_le_bytes([p[o], p[o + 1], p[o + 2], 0]) as usize;
    (x & ((1 << KLEN_BITS) - 1), x >> KLEN_BITS)
}

fn wr_lens(p: &mut [u8], o: usize, klen: usize, vlen: usize) {
    // Every put checks the limits first; a head that wrapped would be
    // silent corruption, so the check stays in release builds.
    assert!(klen < 1 << KLEN_BITS && vlen < 1 << (24 - KLEN_BITS));
    let x = (klen | vlen << KLEN_BITS) as u32;
    p[o..o + ITEM_HEAD].copy_from_slice(&x.to_le_bytes()[..ITEM_HEAD]);
}

/// Bytes an item occupies in the data area plus its slot.
pub fn item_space(klen: usize, vlen: usize) -> usize {
    ITEM_HEAD + klen + vlen + 2
}

/// Read-only view of a page. Invariant: the bytes passed [`validate`] (or
/// were produced by this module), so every offset below is in bounds.
#[derive(Clone, Copy)]
pub struct PageRef<'a>(pub &'a [u8]);

impl<'a> PageRef<'a> {
    pub fn flags(&self) -> u16 {
        rd16(self.0, 2) as u16
    }
    pub fn is_deleted(&self) -> bool {
        self.flags() & F_DELETED != 0
    }
    pub fn level(&self) -> u16 {
        rd16(self.0, 4) as u16
    }
    pub fn is_leaf(&self) -> bool {
        self.level() == 0
    }
    pub fn nitems(&self) -> usize {
        rd16(self.0, 6)
    }
    fn upper(&self) -> usize {
        rd16(self.0, 8)
    }
    fn garbage(&self) -> usize {
        rd16(self.0, 10)
    }
    pub fn right(&self) -> u32 {
        rd32(self.0, 12)
    }
    pub fn low(&self) -> Option<&'a [u8]> {
        (self.flags() & F_HAS_LOW != 0).then(|| {
            let (o, l) = (rd16(self.0, 16), rd16(self.0, 18));
            &self.0[o..o + l]
        })
    }
    pub fn high(&self) -> Option<&'a [u8]> {
        (self.flags() & F_HAS_HIGH != 0).then(|| {
            let (o, l) = (rd16(self.0, 20), rd16(self.0, 22));
            &self.0[o..o + l]
        })
    }
    #[inline]
    fn item_off(&self, i: usize) -> usize {
        rd16(self.0, HEADER + 2 * i)
    }
    #[inline]
    pub fn key(&self, i: usize) -> &'a [u8] {
        let o = self.item_off(i);
        let (kl, _) = rd_lens(self.0, o);
        &self.0[o + ITEM_HEAD..o + ITEM_HEAD + kl]
    }
    pub fn value(&self, i: usize) -> &'a [u8] {
        let o = self.item_off(i);
        let (kl, vl) = rd_lens(self.0, o);
        let at = o + ITEM_HEAD + kl;
        &self.0[at..at + vl]
    }
    pub fn child(&self, i: usize) -> u32 {
        rd32(self.value(i), 0)
    }
    /// Free bytes between the slot array and the item data.
    pub fn contiguous_free(&self) -> usize {
        self.upper() - (HEADER + 2 * self.nitems())
    }
    /// Free bytes after compaction.
    pub fn total_free(&self) -> usize {
        self.contiguous_free() + self.garbage()
    }
    /// Bytes used by items and their slots (not counting low/high keys).
    /// From the header, as `validate` checks it: the data area is items,
    /// bound keys and counted garbage (summing the items was 0.6% of
    /// pgbench TPC-B's CPU, once per deleted row-id map entry).
    pub fn live_bytes(&self) -> usize {
        let bounds = self.low().map_or(0, <[u8]>::len) + self.high().map_or(0, <[u8]>::len);
        PAGE_SIZE - self.upper() - self.garbage() - bounds + 2 * self.nitems()
    }

    /// Binary search: `Ok(i)` if item i has the key, else `Err(insertion point)`.
    pub fn search(&self, cmp: &dyn KeyCmp, key: &[u8]) -> Result<usize, usize> {
        if cmp.bytewise() {
            self.search_by(|k| k.cmp(key))
        } else {
            self.search_by(|k| cmp.cmp(k, key))
        }
    }

    #[inline(always)]
    fn search_by(&self, order: impl Fn(&[u8]) -> Ordering) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.nitems());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match order(self.key(mid)) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Internal pages: the last item whose key is <= `key` (or < `key` when
    /// `strict`); item 0 counts as minus infinity.
    pub fn child_index(&self, cmp: &dyn KeyCmp, key: &[u8], strict: bool) -> usize {
        if cmp.bytewise() {
            self.child_index_by(|k| k.cmp(key), strict)
        } else {
            self.child_index_by(|k| cmp.cmp(k, key), strict)
        }
    }

    #[inline(always)]
    fn child_index_by(&self, order: impl Fn(&[u8]) -> Ordering, strict: bool) -> usize {
        let (mut lo, mut hi) = (1, self.nitems());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let o = order(self.key(mid));
            if o == Ordering::Less || (!strict && o == Ordering::Equal) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - 1
    }

    pub fn items(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        (0..self.nitems()).map(move |i| (self.key(i), self.value(i)))
    }

    /// Writes this page without garbage into `out` (a page-sized buffer),
    /// with item `i`'s value replaced by `val` when `replace` is given.
    /// False if the items do not fit, which the free-space accounting of a
    /// valid page rules out; `out` is then unspecified, this page untouched.
    fn rebuild_into(&self, out: &mut [u8], replace: Option<(usize, &[u8])>) -> bool {
        let items = self.items().enumerate().map(|(j, (k, v))| match replace {
            Some((i, nv)) if i == j => (k, nv),
            _ => (k, v),
        });
        let mut q = PageMut(out);
        if !q.build(self.level(), self.low(), self.high(), self.right(), items) {
            return false;
        }
        q.set_flag(F_DELETED, self.is_deleted());
        true
    }
}

/// Mutable access to a page. Invariant as for [`PageRef`]; every method
/// keeps the layout valid or returns `false` and changes nothing (not a
/// byte), in release builds too: a failed step of a multi-step change is
/// built aside and never reaches the page. ([`PageMut::build`] is the
/// exception: it formats a page from scratch, so callers build into a
/// scratch buffer unless the page is new.)
pub struct PageMut<'a>(pub &'a mut [u8]);

impl<'a> PageMut<'a> {
    pub fn as_ref(&self) -> PageRef<'_> {
        PageRef(self.0)
    }

    /// Formats an empty page.
    pub fn init(&mut self, level: u16, low: Option<&[u8]>, high: Option<&[u8]>, right: u32) {
        let p = &mut *self.0;
        p[..HEADER].fill(0);
        wr16(p, 0, PAGE_MAGIC as usize);
        wr16(p, 4, level as usize);
        wr16(p, 8, PAGE_SIZE);
        p[12..16].copy_from_slice(&right.to_le_bytes());
        let mut flags = 0;
        let mut upper = PAGE_SIZE;
        if let Some(h) = high {
            upper -= h.len();
            p[upper..upper + h.len()].copy_from_slice(h);
            wr16(p, 20, upper);
            wr16(p, 22, h.len());
            flags |= F_HAS_HIGH;
        }
        if let Some(l) = low {
            upper -= l.len();
            p[upper..upper + l.len()].copy_from_slice(l);
            wr16(p, 16, upper);
            wr16(p, 18, l.len());
            flags |= F_HAS_LOW;
        }
        wr16(p, 8, upper);
        wr16(p, 2, flags as usize);
    }

    /// Builds a page from items already in key order. Returns false if they
    /// do not fit (the page is then unspecified; callers size splits first).
    pub fn build<'k>(
        &mut self,
        level: u16,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        right: u32,
        items: impl Iterator<Item = (&'k [u8], &'k [u8])>,
    ) -> bool {
        self.init(level, low, high, right);
        for (k, v) in items {
            let n = self.as_ref().nitems();
            if !self.insert_at(n, k, v) {
                return false;
            }
        }
        true
    }

    pub fn set_flag(&mut self, f: u16, on: bool) {
        let cur = rd16(self.0, 2) as u16;
        wr16(self.0, 2, (if on { cur | f } else { cur & !f }) as usize);
    }

    pub fn set_right(&mut self, right: u32) {
        self.0[12..16].copy_from_slice(&right.to_le_bytes());
    }

    /// Inserts an item at slot `i`, compacting if needed. False (and the
    /// page unchanged) if it cannot fit.
    pub fn insert_at(&mut self, i: usize, key: &[u8], val: &[u8]) -> bool {
        let need = item_space(key.len(), val.len());
        let pr = self.as_ref();
        if pr.contiguous_free() < need {
            if pr.total_free() < need {
                return false;
            }
            let mut tmp = [0u8; PAGE_SIZE];
            if !pr.rebuild_into(&mut tmp, None) || PageRef(&tmp).contiguous_free() < need {
                // Only if the free-space accounting lies: refuse, unchanged.
                return false;
            }
            self.0.copy_from_slice(&tmp);
        }
        let p = &mut *self.0;
        let n = rd16(p, 6);
        let upper = rd16(p, 8) - (ITEM_HEAD + key.len() + val.len());
        wr_lens(p, upper, key.len(), val.len());
        let at = upper + ITEM_HEAD;
        p[at..at + key.len()].copy_from_slice(key);
        p[at + key.len()..at + key.len() + val.len()].copy_from_slice(val);
        let s = HEADER + 2 * i;
        p.copy_within(s..HEADER + 2 * n, s + 2);
        wr16(p, s, upper);
        wr16(p, 6, n + 1);
        wr16(p, 8, upper);
        true
    }

    pub fn remove_at(&mut self, i: usize) {
        let pr = self.as_ref();
        let freed = ITEM_HEAD + pr.key(i).len() + pr.value(i).len();
        let n = pr.nitems();
        let g = pr.garbage();
        let p = &mut *self.0;
        let s = HEADER + 2 * i;
        p.copy_within(s + 2..HEADER + 2 * n, s);
        wr16(p, 6, n - 1);
        wr16(p, 10, g + freed);
    }

    /// Replaces the value of item `i`. False if the new value does not fit
    /// even after compaction; the page is then unchanged, byte for byte, so
    /// a caller may go on to split it with item `i` where it was.
    ///
    /// A value no longer than the old one is written in place (a shorter
    /// one leaves the rest of the old bytes as garbage); a longer one goes
    /// to the free space if it fits there (the old item's bytes become
    /// garbage), else the page is rebuilt without garbage in a scratch
    /// buffer that replaces the page only once the whole rebuild fit.
    pub fn replace_value(&mut self, i: usize, val: &[u8]) -> bool {
        let pr = self.as_ref();
        let o = pr.item_off(i);
        let (kl, old_len) = rd_lens(pr.0, o);
        let garbage = pr.garbage();
        if val.len() <= old_len {
            let p = &mut *self.0;
            let at = o + ITEM_HEAD + kl;
            p[at..at + val.len()].copy_from_slice(val);
            if val.len() < old_len {
                wr_lens(p, o, kl, val.len());
                wr16(p, 10, garbage + old_len - val.len());
            }
            return true;
        }
        let len = ITEM_HEAD + kl + val.len();
        if pr.contiguous_free() >= len {
            let upper = pr.upper() - len;
            let p = &mut *self.0;
            wr_lens(p, upper, kl, val.len());
            p.copy_within(o + ITEM_HEAD..o + ITEM_HEAD + kl, upper + ITEM_HEAD);
            p[upper + ITEM_HEAD + kl..upper + len].copy_from_slice(val);
            wr16(p, HEADER + 2 * i, upper);
            wr16(p, 8, upper);
            wr16(p, 10, garbage + ITEM_HEAD + kl + old_len);
            return true;
        }
        // Room once the old item's bytes and the garbage are reclaimed?
        if pr.total_free() + old_len < val.len() {
            return false;
        }
        let mut tmp = [0u8; PAGE_SIZE];
        if !pr.rebuild_into(&mut tmp, Some((i, val))) {
            // Only if the free-space accounting lies: refuse, unchanged.
            return false;
        }
        self.0.copy_from_slice(&tmp);
        true
    }

    /// Rewrites the data area without garbage. False (and the page
    /// unchanged) only if the items do not fit a fresh page, which the
    /// free-space accounting of a valid page rules out.
    #[must_use]
    pub fn compact(&mut self) -> bool {
        let mut tmp = [0u8; PAGE_SIZE];
        if !self.as_ref().rebuild_into(&mut tmp, None) {
            return false;
        }
        self.0.copy_from_slice(&tmp);
        true
    }
}

/// Which bytes of a page [`validate`] has found in use. Invariant: bit
/// `b` of `used` is set exactly when byte `b` belongs to a range claimed so
/// far, and bit `b` of `starts` when such a range begins at `b`.
struct Claimed {
    used: [u64; PAGE_SIZE / 64],
    starts: [u64; PAGE_SIZE / 64],
}

impl Default for Claimed {
    fn default() -> Claimed {
        Claimed {
            used: [0; PAGE_SIZE / 64],
            starts: [0; PAGE_SIZE / 64],
        }
    }
}

impl Claimed {
    /// Marks bytes `o..o + l` (within the page, `l > 0`) as used; false,
    /// with nothing marked, when one of them was already.
    fn claim(&mut self, o: usize, l: usize) -> bool {
        if Self::words(o, o + l).any(|(w, mask)| self.used[w] & mask != 0) {
            return false;
        }
        for (w, mask) in Self::words(o, o + l) {
            self.used[w] |= mask;
        }
        self.starts[o / 64] |= 1 << (o % 64);
        true
    }

    /// Whether offset `o` lies inside a claimed range, past its first byte
    /// (where an empty range overlaps it).
    fn inside(&self, o: usize) -> bool {
        let bit = |a: &[u64; PAGE_SIZE / 64]| o < PAGE_SIZE && a[o / 64] & (1 << (o % 64)) != 0;
        bit(&self.used) && !bit(&self.starts)
    }

    /// The words bytes `from..to` fall into, each with the mask of its
    /// bits among them.
    fn words(from: usize, to: usize) -> impl Iterator<Item = (usize, u64)> {
        (from / 64..to.div_ceil(64)).map(move |w| {
            let lo = from.max(w * 64) - w * 64;
            let hi = to.min((w + 1) * 64) - w * 64;
            let ones = if hi - lo == 64 { u64::MAX } else { (1u64 << (hi - lo)) - 1 };
            (w, ones << lo)
        })
    }
}

/// Checks that arbitrary bytes form a structurally valid page, so that no
/// later accessor can index out of bounds. Returns a description of the
/// first problem.
pub fn validate(p: &[u8]) -> Result<(), String> {
    if p.len() != PAGE_SIZE {
        return Err(format!(
            "page has {} bytes, expected {}",
            p.len(),
            PAGE_SIZE
        ));
    }
    if rd16(p, 0) as u16 != PAGE_MAGIC {
        return Err("bad page magic".into());
    }
    let flags = rd16(p, 2) as u16;
    if flags & !(F_DELETED | F_HAS_LOW | F_HAS_HIGH) != 0 {
        return Err(format!("unknown page flags {flags:#x}"));
    }
    let n = rd16(p, 6);
    let upper = rd16(p, 8);
    if HEADER + 2 * n > upper || upper > PAGE_SIZE {
        return Err(format!("item count {n} and data start {upper} overlap"));
    }
    let in_data = |o: usize, l: usize| o >= upper && o + l <= PAGE_SIZE;
    if flags & F_HAS_LOW != 0 && !in_data(rd16(p, 16), rd16(p, 18)) {
        return Err("low key out of bounds".into());
    }
    if flags & F_HAS_HIGH != 0 && !in_data(rd16(p, 20), rd16(p, 22)) {
        return Err("high key out of bounds".into());
    }
    let level = rd16(p, 4);
    // Every byte of the data area is an item, a bound key or counted garbage,
    // and nothing overlaps: otherwise a later insert could write over data.
    // A bit per byte of the page (2 kB on the stack) finds overlaps in one
    // pass; sorting the ranges was a fifth of reading a page from its file.
    // An overlap is reported after every item's own checks, and an empty
    // bound key overlaps a range it lies inside (past its first byte), as
    // when the ranges were sorted.
    let mut claimed = Claimed::default();
    let mut used = 0usize;
    let mut overlap = false;
    let mut empty_bounds = [None; 2];
    for (k, (flag, at)) in [(F_HAS_LOW, 16), (F_HAS_HIGH, 20)].into_iter().enumerate() {
        if flags & flag != 0 {
            let (o, l) = (rd16(p, at), rd16(p, at + 2));
            used += l;
            if l == 0 {
                empty_bounds[k] = Some(o);
            } else {
                overlap |= !claimed.claim(o, l);
            }
        }
    }
    for i in 0..n {
        let o = rd16(p, HEADER + 2 * i);
        if !in_data(o, ITEM_HEAD) {
            return Err(format!("item {i} offset {o} out of bounds"));
        }
        let (kl, vl) = rd_lens(p, o);
        if !in_data(o, ITEM_HEAD + kl + vl) {
            return Err(format!("item {i} length out of bounds"));
        }
        if level > 0 && vl != 4 {
            return Err(format!("internal item {i} has a {vl}-byte child pointer"));
        }
        used += ITEM_HEAD + kl + vl;
        overlap |= !claimed.claim(o, ITEM_HEAD + kl + vl);
    }
    if overlap || empty_bounds.into_iter().flatten().any(|o| claimed.inside(o)) {
        return Err("items overlap".into());
    }
    if used + rd16(p, 10) != PAGE_SIZE - upper {
        return Err(format!(
            "garbage count {} does not match the data area",
            rd16(p, 10)
        ));
    }
    if level > 0 && n == 0 && flags & F_DELETED == 0 {
        return Err("internal page without items".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::Bytewise;

    fn page() -> Vec<u8> {
        vec![0u8; PAGE_SIZE]
    }

    #[test]
    fn insert_search_remove_compact() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, Some(b"a"), Some(b"z"), NO_PAGE);
        for (i, k) in [b"m", b"c", b"x", b"e"].iter().enumerate() {
            let pos = p.as_ref().search(&Bytewise, *k).unwrap_err();
            assert!(p.insert_at(pos, *k, &[i as u8; 10]));
        }
        let keys: Vec<_> = p.as_ref().items().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(
            keys,
            vec![b"c".to_vec(), b"e".to_vec(), b"m".to_vec(), b"x".to_vec()]
        );
        assert_eq!(p.as_ref().search(&Bytewise, b"m"), Ok(2));
        assert!(p.replace_value(2, &[9; 100]));
        assert_eq!(p.as_ref().value(2), &[9; 100][..]);
        p.remove_at(0);
        assert_eq!(p.as_ref().low(), Some(&b"a"[..]));
        assert_eq!(p.as_ref().high(), Some(&b"z"[..]));
        let before = p.as_ref().total_free();
        assert!(p.compact());
        assert_eq!(p.as_ref().total_free(), before);
        assert_eq!(p.as_ref().contiguous_free(), before);
        validate(&buf).unwrap();
    }

    /// The header's live-byte figure is the items' own sum through inserts,
    /// removals, value replacements (shorter, longer, rebuilding) and
    /// compaction, with and without bound keys.
    #[test]
    fn live_bytes_match_the_items() {
        let sum = |p: PageRef| -> usize {
            (0..p.nitems())
                .map(|i| item_space(p.key(i).len(), p.value(i).len()))
                .sum()
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for bounds in [(None, None), (Some(&b"a"[..]), Some(&b"zz"[..])), (Some(&b""[..]), None)] {
            let mut buf = page();
            let mut p = PageMut(&mut buf);
            p.init(0, bounds.0, bounds.1, NO_PAGE);
            for step in 0..4000 {
                let n = p.as_ref().nitems();
                match rnd(5) {
                    0 | 1 => {
                        let key = [b'b', rnd(250) as u8, rnd(250) as u8];
                        if let Err(at) = p.as_ref().search(&Bytewise, &key) {
                            p.insert_at(at, &key, &vec![1; rnd(200)]);
                        }
                    }
                    2 if n > 0 => p.remove_at(rnd(n)),
                    3 if n > 0 => {
                        p.replace_value(rnd(n), &vec![2; rnd(400)]);
                    }
                    4 if step % 97 == 0 => {
                        let _ = p.compact();
                    }
                    _ => {}
                }
                assert_eq!(p.as_ref().live_bytes(), sum(p.as_ref()), "step {step}");
            }
            validate(&buf).unwrap();
        }
    }

    #[test]
    fn fills_until_full_and_reuses_garbage() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, None, None, NO_PAGE);
        let mut n = 0u32;
        while p.insert_at(n as usize, &n.to_be_bytes(), &[0; 100]) {
            n += 1;
        }
        assert!(n > 70);
        p.remove_at(0);
        p.remove_at(0);
        assert!(
            p.insert_at(0, &[0, 0, 0, 0], &[1; 100]),
            "garbage must be reusable"
        );
    }

    /// Bytes the items, their slots and the bound keys need on a page.
    fn needed(items: &[(Vec<u8>, Vec<u8>)], low: &[u8], high: &[u8]) -> usize {
        HEADER
            + low.len()
            + high.len()
            + items
                .iter()
                .map(|(k, v)| item_space(k.len(), v.len()))
                .sum::<usize>()
    }

    #[test]
    fn replace_value_that_does_not_fit_leaves_the_page_byte_identical() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, Some(b"a"), Some(b"z"), NO_PAGE);
        let mut n = 0u16;
        while p.insert_at(n as usize, &[b'b', n as u8], &[7; 300]) {
            n += 1;
        }
        // Garbage in the middle, so a fit would need compaction.
        p.remove_at(3);
        p.remove_at(5);
        let r = p.as_ref();
        let (free, old) = (r.total_free(), r.value(4).len());
        assert!(r.contiguous_free() < free);
        let before = buf.clone();
        let mut p = PageMut(&mut buf);
        assert!(!p.replace_value(4, &vec![1; free + old + 1]));
        assert!(buf == before, "a failed replace changed the page");
        // One byte less fits exactly (after compaction).
        let mut p = PageMut(&mut buf);
        assert!(p.replace_value(4, &vec![1; free + old]));
        assert_eq!(p.as_ref().total_free(), 0);
        assert_eq!(p.as_ref().value(4), &vec![1; free + old][..]);
        assert_eq!(p.as_ref().key(4), &[b'b', 5]);
        validate(&buf).unwrap();
        // Nothing fits now: neither a longer value nor a new item.
        let before = buf.clone();
        let mut p = PageMut(&mut buf);
        assert!(!p.replace_value(0, &[2; 301]));
        assert!(!p.insert_at(0, b"a", b""));
        assert!(buf == before, "a failed change changed the page");
    }

    /// The room checks trust the page's garbage count; if a bug elsewhere
    /// ever left it too high, a change that then turns out not to fit must
    /// still be refused without touching the page (the old code removed
    /// the item and wrote the new one over the slot array).
    #[test]
    fn changes_are_refused_unchanged_when_the_free_space_accounting_lies() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, None, None, NO_PAGE);
        let mut n = 0u16;
        while p.insert_at(n as usize, &n.to_be_bytes(), &[3; 200]) {
            n += 1;
        }
        let real = p.as_ref().total_free();
        assert!(real < 300);
        // Claim 1000 bytes of garbage that are not there.
        let g = rd16(&buf, 10);
        wr16(&mut buf, 10, g + 1000);
        assert!(validate(&buf).is_err());
        let before = buf.clone();
        let mut p = PageMut(&mut buf);
        assert!(!p.replace_value(1, &vec![4; 200 + real + 100]));
        assert!(buf == before, "a refused replace changed the page");
        let mut p = PageMut(&mut buf);
        assert!(!p.insert_at(0, b"new", &[5; 500]));
        assert!(buf == before, "a refused insert changed the page");
    }

    /// Random inserts, removals and replacements (shorter, equal, longer)
    /// against a model: every change keeps the page valid, succeeds
    /// exactly when the items fit a page, and a refused one changes no byte.
    #[test]
    fn replace_and_insert_agree_with_a_model() {
        let mut seed = 777u64;
        let mut rnd = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let (low, high) = (b"0".to_vec(), b"zzzz".to_vec());
        let mut buf = page();
        PageMut(&mut buf).init(0, Some(&low), Some(&high), NO_PAGE);
        let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let (mut refused, mut rebuilt) = (0, 0);
        for step in 0..20_000usize {
            let before = buf.clone();
            let mut p = PageMut(&mut buf);
            let op = rnd(10);
            let big = rnd(4) == 0;
            let len = rnd(if big { 2000 } else { 200 });
            let val = vec![(step % 251) as u8; len];
            if model.is_empty() || op < 3 {
                let k = format!("k{:05}", rnd(100_000)).into_bytes();
                let Err(i) = p.as_ref().search(&crate::order::Bytewise, &k) else {
                    continue;
                };
                let mut m = model.clone();
                m.insert(i, (k.clone(), val.clone()));
                let fits = needed(&m, &low, &high) <= PAGE_SIZE;
                assert_eq!(p.insert_at(i, &k, &val), fits, "step {step}: insert");
                if fits {
                    model = m;
                }
            } else if op < 5 {
                let i = rnd(model.len());
                p.remove_at(i);
                model.remove(i);
            } else {
                let i = rnd(model.len());
                let mut m = model.clone();
                m[i].1 = val.clone();
                let fits = needed(&m, &low, &high) <= PAGE_SIZE;
                let needs_rebuild = val.len() > model[i].1.len()
                    && p.as_ref().contiguous_free() < ITEM_HEAD + model[i].0.len() + val.len();
                assert_eq!(p.replace_value(i, &val), fits, "step {step}: replace");
                if fits {
                    model = m;
                    rebuilt += needs_rebuild as usize;
                }
            }
            if buf == before {
                refused += 1;
            }
            validate(&buf).unwrap_or_else(|e| panic!("step {step}: {e}"));
            let got: Vec<_> = PageRef(&buf)
                .items()
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect();
            assert!(got == model, "step {step}: contents differ from the model");
        }
        assert!(
            refused > 100 && rebuilt > 100,
            "{refused} refused, {rebuilt} rebuilt"
        );
    }

    #[test]
    fn child_index_semantics() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(1, None, None, NO_PAGE);
        for (i, k) in [&b""[..], b"d", b"m"].iter().enumerate() {
            assert!(p.insert_at(i, k, &(i as u32).to_le_bytes()));
        }
        let r = p.as_ref();
        assert_eq!(r.child_index(&Bytewise, b"a", false), 0);
        assert_eq!(r.child_index(&Bytewise, b"d", false), 1);
        assert_eq!(r.child_index(&Bytewise, b"d", true), 0);
        assert_eq!(r.child_index(&Bytewise, b"z", false), 2);
    }

    #[test]
    fn an_empty_bound_key_overlaps_only_inside_an_item() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, Some(b"a"), None, NO_PAGE);
        assert!(p.insert_at(0, b"b", b"one"));
        validate(&buf).unwrap();
        let item = rd16(&buf, HEADER);
        // The low key made empty (its byte counted as garbage) and moved.
        let with_empty_low = |at: usize| {
            let mut b = buf.clone();
            b[16..18].copy_from_slice(&(at as u16).to_le_bytes());
            b[18..20].copy_from_slice(&0u16.to_le_bytes());
            let garbage = rd16(&b, 10) + 1;
            b[10..12].copy_from_slice(&(garbage as u16).to_le_bytes());
            b
        };
        validate(&with_empty_low(item)).unwrap();
        assert_eq!(validate(&with_empty_low(item + 1)), Err("items overlap".to_string()));
    }

    #[test]
    fn an_overlap_is_reported_after_every_items_own_checks() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, Some(b"a"), None, NO_PAGE);
        assert!(p.insert_at(0, b"b", b"one"));
        assert!(p.insert_at(1, b"c", b"two"));
        assert!(p.insert_at(2, b"d", b"three"));
        validate(&buf).unwrap();
        // Item 1 onto item 0's bytes, item 2 out of bounds.
        let mut bad = buf.clone();
        bad.copy_within(HEADER..HEADER + 2, HEADER + 2);
        bad[HEADER + 4..HEADER + 6].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(validate(&bad), Err("item 2 offset 1 out of bounds".to_string()));
        // Alone, the overlap is reported.
        let mut bad = buf.clone();
        bad.copy_within(HEADER..HEADER + 2, HEADER + 2);
        assert_eq!(validate(&bad), Err("items overlap".to_string()));
    }

    #[test]
    fn overlapping_items_and_wrong_garbage_are_rejected() {
        let mut buf = page();
        let mut p = PageMut(&mut buf);
        p.init(0, Some(b"a"), None, NO_PAGE);
        assert!(p.insert_at(0, b"b", b"one"));
        assert!(p.insert_at(1, b"c", b"two"));
        p.remove_at(0);
        validate(&buf).unwrap();
        let mut bad = buf.clone();
        bad[10] ^= 1; // garbage count
        assert!(validate(&bad).is_err());
        let mut bad = buf.clone();
        // Point item 0 at the low key's bytes.
        let low_off = rd16(&buf, 16);
        bad[HEADER..HEADER + 2].copy_from_slice(&(low_off as u16).to_le_bytes());
        assert!(validate(&bad).is_err());
    }

    #[test]
    fn random_bytes_never_validate_into_panics() {
        let mut seed = 12345u64;
        for _ in 0..2000 {
            let mut buf = page();
            for b in buf.iter_mut() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (seed >> 56) as u8;
            }
            // Make some of them look plausible so validation goes deep.
            buf[0..2].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
            buf[2] &= 7;
            buf[3] = 0;
            buf[6] = (seed % 40) as u8;
            buf[7] = 0;
            if validate(&buf).is_ok() {
                let r = PageRef(&buf);
                for i in 0..r.nitems() {
                    let _ = (r.key(i), r.value(i));
                }
                let _ = (r.low(), r.high(), r.total_free());
            }
        }
    }
}
