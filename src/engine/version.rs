//! Row versions: one tree item per version, keyed by the version's own row
//! id (its TID), and their visibility under PostgreSQL's transaction rules.
//!
//! The value of an item is a header followed by the tail of a heap tuple
//! (null bitmap and data exactly as `heap_fill_tuple` lays them out after
//! the 23 fixed header bytes; the padding between them only where `hoff`
//! is not heap's natural one, [`elided_pad`]), so the server rebuilds a
//! real `HeapTuple` with two copies and PostgreSQL deforms it with its own
//! code.
//! The header has two forms sharing their first 9 bytes:
//!
//! ```text
//! 0  form u8: flags (bits 0-4: SPECULATIVE, TOAST_LIST, COMBO, RAW_CID,
//!    HOT_ROOT) | 0x20 short with cmin | 0x80 short
//! 1  infomask u16 | 3 infomask2 u16      (heap's bit values, see `bits`)
//! 5  xmin u32
//! short (9 or 10 bytes): [cmin u8 if 0x20]; xmax, cmax and the
//!    speculative token are 0, hoff is heap's for the tuple (bitmap,
//!    MAXALIGN), ctid is the version's own row id
//! full (32 bytes):
//! 9  ctid u48   successor's row id after an UPDATE, else the own row id
//! 15 xmax u32 | 19 cmin u32 | 23 cmax u32 | 27 hoff u8
//! 28 speculative token, or heap's raw command id u32
//! then the tuple tail (t_bits onwards, without heap's padding before the
//! data when hoff is the natural one: [`elided_pad`])
//! ```
//! A version nobody deleted, updated or locked — most rows of most tables —
//! has the short header (23 bytes less per row). Its `ctid` would be its own
//! row id, which its key holds, so it is not stored: decoding takes the row
//! id ([`Header::decode`]). The first deleter, updater
//! or locker gives it the full one ([`Header::encode`] picks the form from
//! the fields, so a value's form is a function of its header). Size limits
//! count every version with the full header ([`HEADER`]), so that change
//! always fits. `cmin` and `cmax` are stored separately; heap's single
//! command id field is kept only for display ([`RAW_CID`]).
//!
//! The rules are heap's (`heapam_visibility.c`), over a [`Xacts`] oracle
//! the server implements with clog/procarray calls and tests with a model.
//! An `xmax` is a transaction id, or a MultiXactId (`XMAX_IS_MULTI`) when
//! several transactions hold compatible row locks, possibly together with
//! one key-preserving updater (KEY SHARE lockers do not block it). The rules
//! judge an update multi by its updater ([`resolve`]).

/// Transaction id (32-bit, as in PostgreSQL). 0 = invalid.
pub type Xid = u32;
/// Command id within a transaction.
pub type Cid = u32;
pub const INVALID_XID: Xid = 0;
/// Bytes of the full version header, the longest a version can have:
/// size limits count every version with it.
pub const HEADER: usize = 32;
/// Bytes of the short header without its `cmin` byte.
pub const SHORT_HEADER: usize = 9;
/// Form byte: the header is short.
const SHORT: u8 = 0x80;
/// Form byte of a short header: a `cmin` byte follows.
const SHORT_CMIN: u8 = 0x20;
/// Form byte bits that no header has.
const FORM_UNUSED: u8 = 0x40;
/// Form byte bits holding `Header::flags`.
const FLAG_BITS: u8 = 0x1F;
/// Flags whose field only the full header has.
const FULL_ONLY_FLAGS: u8 = SPECULATIVE | RAW_CID | COMBO;
/// Offsets of the fields both forms have.
const AT_INFOMASK2: usize = 3;
/// Bytes of a heap tuple header before `t_bits` (`offsetof(t_bits)`).
pub const HEAP_FIXED: usize = 23;

/// `t_infomask` / `t_infomask2` bits, with heap's values (htup_details.h),
/// so the rebuilt tuple's system columns read exactly like heap's.
pub mod bits {
    pub const HASNULL: u16 = 0x0001;
    pub const HASVARWIDTH: u16 = 0x0002;
    pub const HASEXTERNAL: u16 = 0x0004;
    pub const XMAX_KEYSHR_LOCK: u16 = 0x0010;
    pub const XMAX_EXCL_LOCK: u16 = 0x0040;
    pub const XMAX_LOCK_ONLY: u16 = 0x0080;
    pub const XMAX_SHR_LOCK: u16 = XMAX_EXCL_LOCK | XMAX_KEYSHR_LOCK;
    pub const XMAX_LOCK_MASK: u16 = XMAX_SHR_LOCK;
    pub const XMIN_COMMITTED: u16 = 0x0100;
    pub const XMIN_INVALID: u16 = 0x0200;
    pub const XMAX_COMMITTED: u16 = 0x0400;
    pub const XMAX_INVALID: u16 = 0x0800;
    pub const XMAX_IS_MULTI: u16 = 0x1000;
    pub const UPDATED: u16 = 0x2000;
    /// Bits describing the data, not the transactions.
    pub const DATA_MASK: u16 = HASNULL | HASVARWIDTH | HASEXTERNAL;
    /// Everything about xmax.
    pub const XMAX_BITS: u16 = XMAX_KEYSHR_LOCK
        | XMAX_EXCL_LOCK
        | XMAX_LOCK_ONLY
        | XMAX_COMMITTED
        | XMAX_INVALID
        | XMAX_IS_MULTI;
    // infomask2
    pub const NATTS_MASK: u16 = 0x07FF;
    pub const KEYS_UPDATED: u16 = 0x2000;
    /// Updated by a HOT-like update: the successor is in this version's
    /// chain and has no index entries of its own.
    pub const HOT_UPDATED: u16 = 0x4000;
    /// A HOT-like update's new version (heap's `HEAP_ONLY_TUPLE`): no index
    /// entry names it; the value ends with its chain root's row id.
    pub const HEAP_ONLY: u16 = 0x8000;
}

/// `flags` byte: the version is a speculative insertion (INSERT ... ON
/// CONFLICT) not yet confirmed; `spec` holds its token.
pub const SPECULATIVE: u8 = 1;

/// `flags` byte: `spec` holds the command id heap's tuple header would
/// show (its raw `t_cid`), set when the version got a deleter or updater:
/// that command id, or — deleted by the transaction that inserted it — a
/// combo command id ([`COMBO`] then set too). Heap overwrites its one
/// command id field then and keeps it (row locks leave it alone, aborts do
/// not restore it); only the `cmin`/`cmax` system columns read it here, as
/// visibility uses the separate `cmin` and `cmax`.
pub const RAW_CID: u8 = 8;

/// `flags` byte (with [`RAW_CID`]): the raw command id is a combo id.
pub const COMBO: u8 = 4;

/// `flags` byte: the value ends with a list of the toast values the
/// version owns (`n × (toast relation u32, value id u32) | n u32`, little
/// endian), so pruning can delete them without the row type.
pub const TOAST_LIST: u8 = 2;

/// `flags` byte: the value ends with the row id (u48, little endian) of
/// the version's HOT chain root, after any toast list. Set exactly on
/// versions with [`bits::HEAP_ONLY`].
pub const HOT_ROOT: u8 = 16;

/// Bytes of the [`HOT_ROOT`] trailer.
pub const ROOT_LEN: usize = 6;

/// The chain root of a heap-only version (its [`HOT_ROOT`] trailer).
pub fn hot_root(h: &Header, value: &[u8]) -> Option<u64> {
    if h.flags & HOT_ROOT == 0 || value.len() < header_len(value) + ROOT_LEN {
        return None;
    }
    let mut b = [0u8; 8];
    b[..ROOT_LEN].copy_from_slice(&value[value.len() - ROOT_LEN..]);
    Some(u64::from_le_bytes(b))
}

/// Makes version `value` heap-only in the chain of `root`: sets the flag
/// bits and appends the root trailer (see [`HOT_ROOT`]).
pub fn make_heap_only(value: &mut Vec<u8>, root: u64) {
    value.extend_from_slice(&root.to_le_bytes()[..ROOT_LEN]);
    value[0] |= HOT_ROOT;
    let i2 = u16_at(value, AT_INFOMASK2) | bits::HEAP_ONLY;
    value[AT_INFOMASK2..AT_INFOMASK2 + 2].copy_from_slice(&i2.to_le_bytes());
}

/// Whether `h` carries anything [`without_hot`] removes.
pub fn has_hot_marks(h: &Header) -> bool {
    h.flags & HOT_ROOT != 0 || h.infomask2 & (bits::HEAP_ONLY | bits::HOT_UPDATED) != 0
}

/// Version `value` as an ordinary one: HOT bits and root trailer removed
/// (a rewrite that rebuilds every index gives each version its own
/// entries).
pub fn without_hot(mut value: Vec<u8>) -> Vec<u8> {
    // Only the flags and infomask2 are used: any own id does.
    let Some(h) = Header::decode(&value, 0) else {
        return value;
    };
    if h.flags & HOT_ROOT != 0 && value.len() >= header_len(&value) + ROOT_LEN {
        value.truncate(value.len() - ROOT_LEN);
    }
    value[0] &= !HOT_ROOT;
    let i2 = h.infomask2 & !(bits::HEAP_ONLY | bits::HOT_UPDATED);
    value[AT_INFOMASK2..AT_INFOMASK2 + 2].copy_from_slice(&i2.to_le_bytes());
    value
}

/// The tuple tail of version `value` (decoded as `h`) and the toast values
/// it owns.
pub fn tail_and_toast<'a>(h: &Header, value: &'a [u8]) -> (&'a [u8], Vec<(u32, u32)>) {
    let mut body = &value[header_len(value).min(value.len())..];
    if h.flags & HOT_ROOT != 0 && body.len() >= ROOT_LEN {
        body = &body[..body.len() - ROOT_LEN];
    }
    if h.flags & TOAST_LIST == 0 || body.len() < 4 {
        return (body, Vec::new());
    }
    let n = u32_at(body, body.len() - 4) as usize;
    let Some(start) = body.len().checked_sub(4 + 8 * n) else {
        return (body, Vec::new());
    };
    let list = (0..n)
        .map(|i| (u32_at(body, start + 8 * i), u32_at(body, start + 8 * i + 4)))
        .collect();
    (&body[..start], list)
}

/// Appends the toast list trailer (see [`TOAST_LIST`]) to a version value.
pub fn push_toast_list(value: &mut Vec<u8>, list: &[(u32, u32)]) {
    for (rel, id) in list {
        value.extend_from_slice(&rel.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    value.extend_from_slice(&(list.len() as u32).to_le_bytes());
    value[0] |= TOAST_LIST;
}

/// Row lock strength (PostgreSQL's `LockTupleMode`, same numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockMode {
    KeyShare = 0,
    Share = 1,
    NoKeyExclusive = 2,
    Exclusive = 3,
}

impl LockMode {
    pub fn from_u32(v: u32) -> LockMode {
        match v {
            0 => LockMode::KeyShare,
            1 => LockMode::Share,
            2 => LockMode::NoKeyExclusive,
            _ => LockMode::Exclusive,
        }
    }

    /// Heap's conflict table (README.tuplock): KEY SHARE only conflicts
    /// with the exclusive key lock; SHARE with both exclusive modes.
    pub fn conflicts(self, other: LockMode) -> bool {
        use LockMode::*;
        match (self, other) {
            (Exclusive, _) | (_, Exclusive) => true,
            (KeyShare, _) | (_, KeyShare) => false,
            (Share, Share) => false,
            _ => true,
        }
    }
}

/// A decoded version header. Invariant (of encoded values): `hoff >=
/// HEAP_FIXED` and the tail is `hoff - HEAP_FIXED - elided_pad` bytes of
/// bitmap (and padding, for a `hoff` that is not the natural one) followed
/// by the data area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub xmin: Xid,
    pub xmax: Xid,
    pub cmin: Cid,
    pub cmax: Cid,
    pub infomask: u16,
    pub infomask2: u16,
    pub ctid: u64,
    pub hoff: u8,
    pub flags: u8,
    pub spec: u32,
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes(b[i..i + 2].try_into().unwrap())
}

/// The `t_hoff` heap gives a tuple with these infomask bits (HASNULL) and
/// attribute count: the fixed part, the null bitmap if any, MAXALIGNed.
pub(crate) fn natural_hoff(infomask: u16, infomask2: u16) -> usize {
    (HEAP_FIXED + bitmap_len(infomask, infomask2)).next_multiple_of(8)
}

/// Bytes of the null bitmap of a tuple with these infomask bits (HASNULL)
/// and attribute count.
fn bitmap_len(infomask: u16, infomask2: u16) -> usize {
    if infomask & bits::HASNULL != 0 {
        ((infomask2 & bits::NATTS_MASK) as usize).div_ceil(8)
    } else {
        0
    }
}

/// Bytes of heap's padding between the null bitmap and the data that a
/// version with header `h` does not store: all of it when `hoff` is the
/// natural one (zeros, so a function of the header), none for another
/// `hoff` (only the full header holds one; it is stored as it came).
pub fn elided_pad(h: &Header) -> usize {
    let natural = natural_hoff(h.infomask, h.infomask2);
    if h.hoff as usize == natural {
        natural - HEAP_FIXED - bitmap_len(h.infomask, h.infomask2)
    } else {
        0
    }
}

/// The heap tuple that stored tuple tail `tail` (of header `h`) stands
/// for, after its fixed header, as (`before`, `pad`, `after`): `before`
/// at offset [`HEAP_FIXED`], `pad` zero bytes, then `after` at `hoff`.
pub fn tail_parts<'a>(h: &Header, tail: &'a [u8]) -> (&'a [u8], usize, &'a [u8]) {
    let pad = elided_pad(h);
    let split = if pad == 0 {
        tail.len()
    } else {
        bitmap_len(h.infomask, h.infomask2).min(tail.len())
    };
    (&tail[..split], pad, &tail[split..])
}

/// Length of the heap tuple (`t_len`) that stored tuple tail `tail` of
/// header `h` stands for.
pub fn tuple_len(h: &Header, tail: &[u8]) -> usize {
    HEAP_FIXED + tail.len() + elided_pad(h)
}

/// Bytes of the header `value` starts with, read from its form byte (0
/// for an empty value; `Header::decode` tells whether it is whole).
pub fn header_len(value: &[u8]) -> usize {
    match value.first() {
        None => 0,
        Some(f) if f & SHORT == 0 => HEADER,
        Some(f) if f & SHORT_CMIN != 0 => SHORT_HEADER + 1,
        Some(_) => SHORT_HEADER,
    }
}

/// Length of version `value` once it has the full header (what size
/// limits count: any version may get it later).
pub fn full_len(value: &[u8]) -> usize {
    value.len() - header_len(value).min(value.len()) + HEADER
}

/// Replaces the header `value` starts with by `h`, whose form may differ
/// (the tail moves with it).
pub fn set_header(value: &mut Vec<u8>, h: &Header) {
    let old = header_len(value).min(value.len());
    let (b, n) = h.encode();
    value.splice(..old, b[..n].iter().copied());
}

/// Sets the `ctid` of the version `value` to `own`, its own row id, once
/// that is known (a version is formed before its id is chosen). The short
/// form stores no `ctid` (it is always the own id), so the form stays.
pub fn set_own_id(value: &mut [u8], own: u64) {
    if value[0] & SHORT == 0 {
        value[9..15].copy_from_slice(&own.to_le_bytes()[..6]);
    }
}

impl Header {
    /// A fresh version inserted by `xmin` at command `cmin`, with its own
    /// row id as `ctid`.
    pub fn new(xmin: Xid, cmin: Cid, tid: u64) -> Header {
        Header {
            xmin,
            cmin,
            infomask: bits::XMAX_INVALID,
            ctid: tid,
            ..Header::default()
        }
    }

    /// Whether the short form holds this header: no deleter, locker or
    /// speculative token, heap's own `hoff`, a `cmin` below 256. (Its
    /// `ctid` then means nothing — only a valid `xmax` makes it name a
    /// successor — and is read back as the own row id.)
    fn is_short(&self) -> bool {
        self.xmax == INVALID_XID
            && self.cmax == 0
            && self.spec == 0
            && self.flags & (FULL_ONLY_FLAGS | !FLAG_BITS) == 0
            && self.cmin <= u8::MAX as u32
            && self.hoff as usize == natural_hoff(self.infomask, self.infomask2)
    }

    /// The encoded header: its bytes are the first `n` of the array.
    pub fn encode(&self) -> ([u8; HEADER], usize) {
        let mut b = [0u8; HEADER];
        let short = self.is_short();
        b[0] = self.flags & FLAG_BITS;
        b[1..3].copy_from_slice(&self.infomask.to_le_bytes());
        b[3..5].copy_from_slice(&self.infomask2.to_le_bytes());
        b[5..9].copy_from_slice(&self.xmin.to_le_bytes());
        if short {
            b[0] |= SHORT;
            if self.cmin == 0 {
                return (b, SHORT_HEADER);
            }
            b[0] |= SHORT_CMIN;
            b[SHORT_HEADER] = self.cmin as u8;
            return (b, SHORT_HEADER + 1);
        }
        b[9..15].copy_from_slice(&self.ctid.to_le_bytes()[..6]);
        b[15..19].copy_from_slice(&self.xmax.to_le_bytes());
        b[19..23].copy_from_slice(&self.cmin.to_le_bytes());
        b[23..27].copy_from_slice(&self.cmax.to_le_bytes());
        b[27] = self.hoff;
        b[28..32].copy_from_slice(&self.spec.to_le_bytes());
        (b, HEADER)
    }

    /// Decodes the header of the version whose own row id is `own` (its
    /// key's; the short form's `ctid`); None if `b` is too short, its form
    /// byte unknown or `hoff` impossible.
    pub fn decode(b: &[u8], own: u64) -> Option<Header> {
        let form = *b.first()?;
        let len = header_len(b);
        if form & FORM_UNUSED != 0 || b.len() < len {
            return None;
        }
        let mut h = Header {
            xmin: u32_at(b, 5),
            infomask: u16_at(b, 1),
            infomask2: u16_at(b, 3),
            ctid: own,
            flags: form & FLAG_BITS,
            ..Header::default()
        };
        if form & SHORT != 0 {
            if h.flags & FULL_ONLY_FLAGS != 0 {
                return None;
            }
            h.cmin = if form & SHORT_CMIN != 0 { b[SHORT_HEADER] as u32 } else { 0 };
            h.hoff = natural_hoff(h.infomask, h.infomask2) as u8;
        } else {
            if form & SHORT_CMIN != 0 {
                return None;
            }
            let mut ctid = [0u8; 8];
            ctid[..6].copy_from_slice(&b[9..15]);
            h.ctid = u64::from_le_bytes(ctid);
            h.xmax = u32_at(b, 15);
            h.cmin = u32_at(b, 19);
            h.cmax = u32_at(b, 23);
            h.hoff = b[27];
            h.spec = u32_at(b, 28);
        }
        (h.hoff as usize >= HEAP_FIXED
            && b.len() + elided_pad(&h) >= len + h.hoff as usize - HEAP_FIXED)
            .then_some(h)
    }

    /// A whole item value: this header, then `tail`.
    pub fn with_tail(&self, tail: &[u8]) -> Vec<u8> {
        let (b, n) = self.encode();
        let mut v = Vec::with_capacity(n + tail.len());
        v.extend_from_slice(&b[..n]);
        v.extend_from_slice(tail);
        v
    }

    pub fn xmax_invalid(&self) -> bool {
        self.infomask & bits::XMAX_INVALID != 0 || self.xmax == INVALID_XID
    }

    pub fn lock_only(&self) -> bool {
        self.infomask & bits::XMAX_LOCK_ONLY != 0
    }

    /// The deleter/updater changed the key (or holds FOR UPDATE).
    pub fn keys_updated(&self) -> bool {
        self.infomask2 & bits::KEYS_UPDATED != 0
    }

    pub fn is_multi(&self) -> bool {
        self.infomask & bits::XMAX_IS_MULTI != 0
    }

    /// xmax is a MultiXactId holding an updater (beside lockers).
    pub fn is_update_multi(&self) -> bool {
        self.is_multi() && !self.lock_only()
    }

    /// Sets xmax to a lock-only MultiXactId whose strongest member mode is
    /// `strongest`.
    pub fn set_multi_lock(&mut self, multi: Xid, strongest: LockMode) {
        self.set_lock(multi, self.cmax, strongest);
        self.infomask |= bits::XMAX_IS_MULTI;
    }

    /// The lock strength the xmax transaction holds (an updater or deleter
    /// holds an exclusive lock, a key-preserving updater the no-key one).
    pub fn xmax_mode(&self) -> LockMode {
        let keys = self.keys_updated();
        if self.lock_only() {
            match self.infomask & bits::XMAX_LOCK_MASK {
                bits::XMAX_KEYSHR_LOCK => LockMode::KeyShare,
                bits::XMAX_SHR_LOCK => LockMode::Share,
                _ if keys => LockMode::Exclusive,
                _ => LockMode::NoKeyExclusive,
            }
        } else if keys {
            LockMode::Exclusive
        } else {
            LockMode::NoKeyExclusive
        }
    }

    /// Sets xmax to a row lock of `xid` in `mode` (command `cid`).
    pub fn set_lock(&mut self, xid: Xid, cid: Cid, mode: LockMode) {
        self.xmax = xid;
        self.cmax = cid;
        self.infomask &= !bits::XMAX_BITS;
        self.infomask2 &= !bits::KEYS_UPDATED;
        self.infomask |= bits::XMAX_LOCK_ONLY
            | match mode {
                LockMode::KeyShare => bits::XMAX_KEYSHR_LOCK,
                LockMode::Share => bits::XMAX_SHR_LOCK,
                LockMode::NoKeyExclusive | LockMode::Exclusive => bits::XMAX_EXCL_LOCK,
            };
        if mode == LockMode::Exclusive {
            self.infomask2 |= bits::KEYS_UPDATED;
        }
    }

    /// Replaces an updater's xmax by an update multi holding it and new
    /// lockers; the successor (`ctid`) and key flag stay.
    pub fn join_updater(&mut self, multi: Xid) {
        self.xmax = multi;
        self.infomask &= !bits::XMAX_BITS;
        self.infomask |= bits::XMAX_IS_MULTI;
    }

    /// Sets xmax to an update multi (`multi`: the updater `cid` plus lockers).
    pub fn set_update_multi(&mut self, multi: Xid, cid: Cid, successor: u64) {
        self.set_deleter(multi, cid, successor, false);
        self.infomask |= bits::XMAX_IS_MULTI;
    }

    /// Sets xmax to a delete (`successor` = own row id) or an update.
    pub fn set_deleter(&mut self, xid: Xid, cid: Cid, successor: u64, keys_updated: bool) {
        self.xmax = xid;
        self.cmax = cid;
        self.ctid = successor;
        self.infomask &= !bits::XMAX_BITS;
        self.infomask2 &= !bits::KEYS_UPDATED;
        if keys_updated {
            self.infomask2 |= bits::KEYS_UPDATED;
        }
    }
}

/// What visibility rules ask about transactions. Answers must be
/// consistent within one call; `in_progress` must be asked before
/// `did_commit` (a transaction marks clog committed before it leaves the
/// proc array), which every rule here does.
pub trait Xacts {
    /// The current transaction or one of its live subtransactions.
    fn is_current(&self, xid: Xid) -> bool;
    fn in_progress(&self, xid: Xid) -> bool;
    fn did_commit(&self, xid: Xid) -> bool;
    /// A member of the MultiXactId is still running (ours included).
    fn multi_running(&self, multi: Xid) -> bool;
    /// The updating member of a MultiXactId (0 if none).
    fn multi_update_xid(&self, multi: Xid) -> Xid;
}

/// The transaction that updated or deleted the version (resolving an
/// update multi to its updater); for lock-only xmax the raw value.
pub fn update_xid(h: &Header, x: &dyn Xacts) -> Xid {
    if h.is_update_multi() {
        x.multi_update_xid(h.xmax)
    } else {
        h.xmax
    }
}

/// Runs a rule on `h`, or, for an update multi, on the header as if its
/// updater alone were xmax (the lockers beside it never hide or remove a
/// version). Hints learned about that updater describe no bit of the stored
/// multi (its lockers may still run), so only xmin hints come back.
fn judged_by_updater<T>(
    h: &Header,
    x: &dyn Xacts,
    hints: &mut Hints,
    rule: impl FnOnce(&Header, &mut Hints) -> T,
) -> T {
    if !h.is_update_multi() {
        return rule(h, hints);
    }
    let mut learned = Hints::default();
    let out = rule(&resolve(h, x), &mut learned);
    hints.0 |= learned.0 & (bits::XMIN_COMMITTED | bits::XMIN_INVALID);
    out
}

/// The header of an update multi as if its updater alone were xmax.
fn resolve(h: &Header, x: &dyn Xacts) -> Header {
    let mut r = *h;
    if h.is_update_multi() {
        r.xmax = x.multi_update_xid(h.xmax);
        r.infomask &= !(bits::XMAX_IS_MULTI | bits::XMAX_COMMITTED | bits::XMAX_INVALID);
        if r.xmax == INVALID_XID {
            r.infomask |= bits::XMAX_INVALID;
        }
    }
    r
}

/// Whether a lock-only xmax still holds the row.
fn locker_running(h: &Header, x: &dyn Xacts) -> bool {
    if h.is_multi() {
        x.multi_running(h.xmax)
    } else {
        x.is_current(h.xmax) || x.in_progress(h.xmax)
    }
}

/// An MVCC snapshot as the rules need it.
pub trait Snapshot {
    /// The xid's effects are invisible to the snapshot (it was running, or
    /// started after the snapshot was taken).
    fn in_snapshot(&self, xid: Xid) -> bool;
    fn curcid(&self) -> Cid;
}

/// Hint bits learned while judging a version, worth storing when the item
/// is rewritten anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints(pub u16);

/// The inserter's state relative to the current transaction and clog.
enum Inserter {
    Invisible,
    Current,
    InProgress,
    Committed,
}

fn inserter(h: &Header, x: &dyn Xacts, hints: &mut Hints) -> Inserter {
    let m = h.infomask;
    if m & bits::XMIN_INVALID != 0 && m & bits::XMIN_COMMITTED == 0 {
        return Inserter::Invisible;
    }
    if m & bits::XMIN_COMMITTED != 0 {
        return Inserter::Committed;
    }
    if x.is_current(h.xmin) {
        Inserter::Current
    } else if x.in_progress(h.xmin) {
        Inserter::InProgress
    } else if x.did_commit(h.xmin) {
        hints.0 |= bits::XMIN_COMMITTED;
        Inserter::Committed
    } else {
        hints.0 |= bits::XMIN_INVALID;
        Inserter::Invisible
    }
}

/// For a version inserted by the current transaction: is it still there
/// for command `curcid` (not deleted by an earlier command of ours)?
fn own_version_alive(h: &Header, x: &dyn Xacts, curcid: Cid) -> bool {
    if h.xmax_invalid() || h.lock_only() || !x.is_current(h.xmax) {
        // Deleted by an aborted subtransaction, or never.
        return true;
    }
    h.cmax >= curcid
}

/// `HeapTupleSatisfiesMVCC`.
pub fn visible_mvcc(h: &Header, x: &dyn Xacts, s: &dyn Snapshot, hints: &mut Hints) -> bool {
    judged_by_updater(h, x, hints, |h, hints| mvcc_plain(h, x, s, hints))
}

fn mvcc_plain(h: &Header, x: &dyn Xacts, s: &dyn Snapshot, hints: &mut Hints) -> bool {
    let m = h.infomask;
    if m & bits::XMIN_INVALID != 0 && m & bits::XMIN_COMMITTED == 0 {
        return false;
    }
    if m & bits::XMIN_COMMITTED == 0 {
        if x.is_current(h.xmin) {
            if h.cmin >= s.curcid() {
                return false;
            }
            return own_version_alive(h, x, s.curcid());
        }
        if s.in_snapshot(h.xmin) {
            return false;
        }
        if x.did_commit(h.xmin) {
            hints.0 |= bits::XMIN_COMMITTED;
        } else {
            hints.0 |= bits::XMIN_INVALID;
            return false;
        }
    } else if m & bits::XMIN_INVALID == 0 && s.in_snapshot(h.xmin) {
        // Committed, but after the snapshot was taken (frozen = both bits).
        return false;
    }
    if h.xmax_invalid() || h.lock_only() {
        return true;
    }
    if m & bits::XMAX_COMMITTED == 0 {
        if x.is_current(h.xmax) {
            return h.cmax >= s.curcid();
        }
        if s.in_snapshot(h.xmax) {
            return true;
        }
        if !x.did_commit(h.xmax) {
            hints.0 |= bits::XMAX_INVALID;
            return true;
        }
        hints.0 |= bits::XMAX_COMMITTED;
        false
    } else {
        s.in_snapshot(h.xmax)
    }
}

/// `HeapTupleSatisfiesSelf`: every committed transaction and every command
/// of ours counts.
pub fn visible_self(h: &Header, x: &dyn Xacts, hints: &mut Hints) -> bool {
    judged_by_updater(h, x, hints, |h, hints| self_plain(h, x, hints))
}

fn self_plain(h: &Header, x: &dyn Xacts, hints: &mut Hints) -> bool {
    match inserter(h, x, hints) {
        Inserter::Invisible | Inserter::InProgress => false,
        Inserter::Current => !own_deleted(h, x),
        Inserter::Committed => deleter_counts_not(h, x, hints, &mut |_| {}),
    }
}

fn own_deleted(h: &Header, x: &dyn Xacts) -> bool {
    !(h.xmax_invalid() || h.lock_only() || !x.is_current(h.xmax))
}

/// After a committed inserter: true if the version is not (committed-ly or
/// by us) deleted. `running` is told about an in-progress deleter, which
/// does not count.
fn deleter_counts_not(
    h: &Header,
    x: &dyn Xacts,
    hints: &mut Hints,
    running: &mut dyn FnMut(Xid),
) -> bool {
    if h.xmax_invalid() || h.lock_only() {
        return true;
    }
    if h.infomask & bits::XMAX_COMMITTED != 0 {
        return false;
    }
    if x.is_current(h.xmax) {
        return false;
    }
    if x.in_progress(h.xmax) {
        running(h.xmax);
        return true;
    }
    if !x.did_commit(h.xmax) {
        hints.0 |= bits::XMAX_INVALID;
        return true;
    }
    hints.0 |= bits::XMAX_COMMITTED;
    false
}

/// What a dirty snapshot learns besides the verdict: the transactions
/// still running on the version, and a pending speculative insertion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyInfo {
    pub xmin: Xid,
    pub xmax: Xid,
    pub spec: u32,
}

/// `HeapTupleSatisfiesDirty`: like "self", but running inserters and
/// deleters count as done (reported in `info` so callers can wait).
pub fn visible_dirty(h: &Header, x: &dyn Xacts, info: &mut DirtyInfo, hints: &mut Hints) -> bool {
    judged_by_updater(h, x, hints, |h, hints| dirty_plain(h, x, info, hints))
}

fn dirty_plain(h: &Header, x: &dyn Xacts, info: &mut DirtyInfo, hints: &mut Hints) -> bool {
    *info = DirtyInfo::default();
    match inserter(h, x, hints) {
        Inserter::Invisible => false,
        Inserter::Current => !own_deleted(h, x),
        Inserter::InProgress => {
            if h.flags & SPECULATIVE != 0 {
                info.spec = h.spec;
            }
            info.xmin = h.xmin;
            true
        }
        Inserter::Committed => deleter_counts_not(h, x, hints, &mut |xid| info.xmax = xid),
    }
}

/// Result of asking whether the current transaction may update, delete or
/// lock a version (`HeapTupleSatisfiesUpdate`, with PostgreSQL's TM_Result
/// meanings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateCheck {
    Ok,
    Invisible,
    /// Already updated or deleted by a later command of ours.
    SelfModified,
    /// Updated (ctid points elsewhere) by a committed transaction.
    Updated,
    /// Deleted by a committed transaction.
    Deleted,
    /// `xid` (maybe ours, as a row lock) holds the row.
    BeingModified(Xid),
}

/// `HeapTupleSatisfiesUpdate` for a version whose own row id is `tid`.
pub fn check_update(
    h: &Header,
    tid: u64,
    x: &dyn Xacts,
    curcid: Cid,
    hints: &mut Hints,
) -> UpdateCheck {
    let chk = judged_by_updater(h, x, hints, |r, hints| {
        check_update_plain(r, tid, x, curcid, hints)
    });
    // An update multi holds the row while any member runs (lockers too).
    match chk {
        UpdateCheck::Ok | UpdateCheck::BeingModified(_)
            if h.is_update_multi() && x.multi_running(h.xmax) =>
        {
            UpdateCheck::BeingModified(h.xmax)
        }
        other => other,
    }
}

// Long because it is HeapTupleSatisfiesUpdate's case analysis, kept in
// heapam_visibility.c's order so the two can be read side by side.
fn check_update_plain(
    h: &Header,
    tid: u64,
    x: &dyn Xacts,
    curcid: Cid,
    hints: &mut Hints,
) -> UpdateCheck {
    let gone = || {
        if h.ctid != tid {
            UpdateCheck::Updated
        } else {
            UpdateCheck::Deleted
        }
    };
    match inserter(h, x, hints) {
        Inserter::Invisible | Inserter::InProgress => return UpdateCheck::Invisible,
        Inserter::Current => {
            if h.cmin >= curcid {
                return UpdateCheck::Invisible;
            }
            if h.xmax_invalid() {
                return UpdateCheck::Ok;
            }
            if h.lock_only() {
                return if locker_running(h, x) {
                    UpdateCheck::BeingModified(h.xmax)
                } else {
                    UpdateCheck::Ok
                };
            }
            if !x.is_current(h.xmax) {
                // Deleted by a subtransaction that aborted.
                hints.0 |= bits::XMAX_INVALID;
                return UpdateCheck::Ok;
            }
            return if h.cmax >= curcid {
                UpdateCheck::SelfModified
            } else {
                UpdateCheck::Invisible
            };
        }
        Inserter::Committed => {}
    }
    if h.xmax_invalid() {
        return UpdateCheck::Ok;
    }
    if h.infomask & bits::XMAX_COMMITTED != 0 {
        return if h.lock_only() {
            UpdateCheck::Ok
        } else {
            gone()
        };
    }
    if h.is_multi() {
        return if locker_running(h, x) {
            UpdateCheck::BeingModified(h.xmax)
        } else {
            hints.0 |= bits::XMAX_INVALID;
            UpdateCheck::Ok
        };
    }
    if x.is_current(h.xmax) {
        if h.lock_only() {
            return UpdateCheck::BeingModified(h.xmax);
        }
        return if h.cmax >= curcid {
            UpdateCheck::SelfModified
        } else {
            UpdateCheck::Invisible
        };
    }
    if x.in_progress(h.xmax) {
        return UpdateCheck::BeingModified(h.xmax);
    }
    if !x.did_commit(h.xmax) || h.lock_only() {
        hints.0 |= bits::XMAX_INVALID;
        return UpdateCheck::Ok;
    }
    hints.0 |= bits::XMAX_COMMITTED;
    gone()
}

/// What pruning and index builds need to know (`HTSV_Result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VacuumState {
    /// No snapshot can ever see it.
    Dead,
    Live,
    /// Deleted by a committed transaction some snapshot may predate.
    RecentlyDead,
    InsertInProgress,
    DeleteInProgress,
}

/// `HeapTupleSatisfiesVacuum`: `removable(xid)` says a committed xid is
/// older than every running snapshot (PostgreSQL's GlobalVis test).
pub fn vacuum_state(
    h: &Header,
    x: &dyn Xacts,
    removable: &dyn Fn(Xid) -> bool,
    hints: &mut Hints,
) -> VacuumState {
    judged_by_updater(h, x, hints, |h, hints| vacuum_plain(h, x, removable, hints))
}

fn vacuum_plain(
    h: &Header,
    x: &dyn Xacts,
    removable: &dyn Fn(Xid) -> bool,
    hints: &mut Hints,
) -> VacuumState {
    let m = h.infomask;
    if m & bits::XMIN_INVALID != 0 && m & bits::XMIN_COMMITTED == 0 {
        return VacuumState::Dead;
    }
    if m & bits::XMIN_COMMITTED == 0 {
        if x.is_current(h.xmin) {
            return if own_deleted(h, x) {
                VacuumState::DeleteInProgress
            } else {
                VacuumState::InsertInProgress
            };
        }
        if x.in_progress(h.xmin) {
            return VacuumState::InsertInProgress;
        }
        if x.did_commit(h.xmin) {
            hints.0 |= bits::XMIN_COMMITTED;
        } else {
            hints.0 |= bits::XMIN_INVALID;
            return VacuumState::Dead;
        }
    }
    if h.xmax_invalid() {
        return VacuumState::Live;
    }
    if h.lock_only() {
        if m & bits::XMAX_COMMITTED == 0 && !locker_running(h, x) {
            hints.0 |= bits::XMAX_INVALID;
        }
        return VacuumState::Live;
    }
    if m & bits::XMAX_COMMITTED == 0 {
        if x.is_current(h.xmax) || x.in_progress(h.xmax) {
            return VacuumState::DeleteInProgress;
        }
        if x.did_commit(h.xmax) {
            hints.0 |= bits::XMAX_COMMITTED;
        } else {
            hints.0 |= bits::XMAX_INVALID;
            return VacuumState::Live;
        }
    }
    if removable(h.xmax) {
        VacuumState::Dead
    } else {
        VacuumState::RecentlyDead
    }
}

/// Row ids as PostgreSQL TIDs: `MaxHeapTuplesPerPage` (291) ids per block,
/// offsets from 1, so every id is a valid ItemPointer that bitmap code
/// would accept too.
pub mod tid {
    pub const PER_BLOCK: u64 = 291;
    /// First id that would need block `InvalidBlockNumber`.
    pub const LIMIT: u64 = PER_BLOCK * 0xFFFF_FFFF;

    pub fn to_pointer(id: u64) -> (u32, u16) {
        ((id / PER_BLOCK) as u32, (id % PER_BLOCK) as u16 + 1)
    }

    /// None for offsets outside 1..=291 (no id maps there).
    pub fn from_pointer(block: u32, offset: u16) -> Option<u64> {
        (1..=PER_BLOCK as u16)
            .contains(&offset)
            .then(|| block as u64 * PER_BLOCK + offset as u64 - 1)
    }

    /// The tree key of a version: its id, big-endian (tree order = id order).
    pub fn key(id: u64) -> [u8; 8] {
        id.to_be_bytes()
    }

    pub fn from_key(k: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(k.try_into().ok()?))
    }
}

/// First ordinary transaction id (0..=2 are invalid, bootstrap, frozen).
pub const FIRST_NORMAL_XID: Xid = 3;

/// What freezing decided for one version (see [`freeze`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freeze {
    /// The header to store instead, when something changed.
    pub header: Option<Header>,
    /// The oldest transaction id the (new) header still names: xmin if not
    /// frozen, xmax if still valid. None when it names none.
    pub oldest_xid: Option<Xid>,
    /// The MultiXactId left in xmax, if any: the table's relfrozenxid
    /// cannot be computed past it here (its members are not looked at),
    /// and its relminmxid must not pass it.
    pub multi: Option<Xid>,
}

/// VACUUM's freezing of one version (`heap_prepare_freeze_tuple`, for what
/// this engine stores): an xmin that committed before the cutoff
/// (`old(x)`: x precedes VACUUM's freeze limit, so it is neither running
/// nor in any snapshot) is marked frozen (both xmin hint bits), so
/// visibility never compares it again and its clog may go; an xmax that
/// no longer means anything is removed: one a hint already calls invalid,
/// an old single locker or aborted deleter, a MultiXactId without running
/// members whose updater (if any) aborted. A committed deleter is left
/// alone: that version is dead to everyone and the pruner removes it. A
/// multi still in use is reported.
pub fn freeze(h: &Header, x: &dyn Xacts, old: &dyn Fn(Xid) -> bool) -> Freeze {
    let mut n = *h;
    let m = h.infomask;
    let frozen = m & bits::XMIN_COMMITTED != 0 && m & bits::XMIN_INVALID != 0;
    let mut oldest: Option<Xid> = None;
    let mut keep = |xid: Xid| {
        if xid >= FIRST_NORMAL_XID {
            oldest = Some(match oldest {
                // Both lie within 2^31 of each other (the caller's cutoffs
                // guarantee it), so the wrapped difference orders them.
                Some(o) if (xid.wrapping_sub(o) as i32) >= 0 => o,
                _ => xid,
            });
        }
    };
    if !frozen && h.xmin >= FIRST_NORMAL_XID {
        let committed = m & bits::XMIN_COMMITTED != 0
            || (m & bits::XMIN_INVALID == 0 && old(h.xmin) && x.did_commit(h.xmin));
        if old(h.xmin) && committed {
            n.infomask |= bits::XMIN_COMMITTED | bits::XMIN_INVALID;
        } else {
            keep(h.xmin);
        }
    }
    let mut multi = None;
    if h.xmax != INVALID_XID {
        // Whether xmax says nothing any more: a hint already says so (hints
        // are not logged, so the raw id is cleared for good), a multi none
        // of whose members runs and whose updater (if any) aborted, or an
        // old single locker or aborted deleter.
        let gone = if m & bits::XMAX_INVALID != 0 {
            true
        } else if h.is_multi() {
            if x.multi_running(h.xmax) {
                false
            } else if h.lock_only() {
                true
            } else {
                let u = x.multi_update_xid(h.xmax);
                u == INVALID_XID || !x.did_commit(u)
            }
        } else {
            old(h.xmax) && (h.lock_only() || !x.did_commit(h.xmax))
        };
        if gone {
            n.xmax = INVALID_XID;
            n.cmax = 0;
            n.infomask = (n.infomask & !bits::XMAX_BITS) | bits::XMAX_INVALID;
            n.infomask2 &= !bits::KEYS_UPDATED;
        } else if h.is_multi() {
            multi = Some(h.xmax);
            keep(x.multi_update_xid(h.xmax));
        } else {
            keep(h.xmax);
        }
    }
    Freeze {
        header: (n != *h).then_some(n),
        oldest_xid: oldest,
        multi,
    }
}

#[cfg(test)]
mod tests;
