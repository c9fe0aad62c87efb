//! Write-ahead logging, engine side: the record format, the sink the host
//! implements (in the server: `XLogInsert` with the extension's resource
//! manager), and redo.
//!
//! Records are logical and row-level — "tree T now maps key K to value V",
//! "K is gone", "T was created/dropped" — never page images: checkpoint
//! images are copy-on-write, so a page is never torn and structure changes
//! (splits, merges) are simply redone by replaying the row changes.
//!
//! Ordering: a tree modification logs its record while holding the leaf's
//! exclusive latch and the checkpoint barrier. So records of one key are in
//! the order their changes reached the page, and a checkpoint that asks the
//! sink for a redo point while holding the barrier exclusively splits the
//! log exactly: every change before it is in the image, none after it is.
//! Replaying from the redo point therefore yields the state at the end of
//! the log. Each record sets a final state, so replaying one twice is
//! harmless.
//!
//! ```text
//! kind u8 | db u32 | rel u32 | body
//!   1 create     compress i32
//!   2 drop, 6 truncate (nothing)
//!  10 put        klen u16 | key | value (to the end)
//!  11 delete     key (to the end)
//!   5 row-id limit  limit u64
//!   7 patch      klen u16 | key | vlen u16 | ranges to the end: offset u16 | n u8 | n bytes
//!   8 put pair   klen u16 | key | vlen u16 | value | klen u16 | key | value (to the end)
//!     (in 8, a first klen of 0xFFFF stands for the second key's
//!     row-id map entry, `key_format::map_entry_of`: neither key nor value follows)
//!   4 put pair, second value as a delta against a base key's value (v: a
//!                variable-length integer, `edit::put_var`; v-bytes: v length, bytes):
//!                flags u8 (4: the first entry is the key's map entry, 8: it is
//!                spelled out) | [v-bytes first key | v-bytes first value] |
//!                v-bytes key | v-bytes base key | delta
//!                delta: v-bytes head | v from | v prefix | v suffix | v skip |
//!                  v-bytes tail | middle (to the end)
//!  12 put run    (klen u16 | key | vlen u16 | value)* to the end
//!     or, compressed: 0xFFFF u16 (no key is that long) | len u32 | zstd frame
//!                of the items above (len bytes); written so when that saves an
//!                eighth or more
//!   3 update     v-bytes key | v len | flags u8 (bits 0-1 the edit's form, 4 and 8
//!                as in 4) | edit | [first] | v shared | v-bytes tail (new key:
//!                `shared` bytes of key, then tail) | delta
//!                edit 0 ranges: n u8 | n × (v offset | u8 count | bytes)  (same length)
//!                edit 1 splice: v prefix | v suffix | v-bytes middle
//!                edit 2 header: header fields (below)
//!   0 header     v-bytes key | v len | header fields: a version's header
//!                fields set, its tuple kept (`edit::HeaderEdit`: v mask, then
//!                infomask u16, infomask2 u16, xmax v, ctid v, cmax v, flags u8,
//!                spec v, xmin v, cmin v, hoff u8 as the mask names them)
//!  14 splice     klen u16 | key | vlen u16 | prefix u16 | suffix u16 | middle (to the end)
//! ```
//!
//! The kind is also the record's `info >> 4` in PostgreSQL's WAL, where 15
//! marks the engine's redo point: 14 is the last kind there is room for.
//!
//! Kinds 9 and 13 were the put pair delta and the update with fixed-width
//! lengths, written by earlier builds; they are refused, not misread.
//! (Kinds 3 and 4 were once a put and a delete with a checksum of their
//! own; WAL of those builds is not read.)
//!
//! No checksum: the host's log checksums its records (PostgreSQL's
//! `xl_crc` covers the record this is the main data of), and a second one
//! cost four bytes and a pass over every record. Decoding still checks
//! every length, so a damaged record is an error, never a panic.
//!
//! A change of a few bytes of a value (a version's header: a deleter, a
//! row lock, hint bits) is logged as a *patch*, which replay applies to the
//! value the key has then. That value is the one the change was made to,
//! because every change of a value is logged and replay never prunes; the
//! only unlogged changes (pruning, which removes dead items or rewrites
//! them at the same length with hints only) either remove what nobody
//! changes any more or are optional bits a patch may carry or drop.

use crate::edit::{get_var, put_var};
use crate::id::TreeId;

/// Position of a record in the log (opaque to the engine; ordered).
pub type Lsn = u64;

/// Where the engine writes its log. Implementations must make a record
/// durable before the transaction that made it reports commit (the server's
/// WAL does that), and must be cheap: they run under page latches.
pub trait WalSink: Send + Sync {
    /// Appends an encoded record; returns its position.
    fn log(&self, record: &[u8]) -> Lsn;
    /// The redo point of checkpoint `checkpoint`, asked for while the
    /// checkpoint holds the barrier exclusively (no record is being
    /// logged). Every record logged before the call must precede the
    /// returned position and none logged after it may, and `flush` of it
    /// must succeed. A sink may log a record of its own to get such a
    /// position (the server logs a marker: an insert position can lie
    /// where its log refuses to flush to, `src/pg/wal.rs`); its replay
    /// must then ignore that record.
    fn redo_point(&self, checkpoint: u64) -> Lsn;
    /// Makes everything logged before `upto` durable.
    fn flush(&self, _upto: Lsn) {}
    /// Entered where the log and the tree must not part: around logging a
    /// change already made to a latched page (a failure to log would leave
    /// the tree with a change the log lacks), and from logging a truncation
    /// until its pages are freed (an error there is reported as
    /// [`Self::fatal`]). A server makes every error in between fatal:
    /// PostgreSQL's critical section.
    fn enter_critical(&self) {}
    fn leave_critical(&self) {}
    /// A logged change could not be applied: this process must not go on
    /// (the server PANICs, and recovery applies the change from the log).
    fn fatal(&self, what: &str) -> ! {
        panic!("{what}")
    }
}

/// The kind of [`Record::Create`]: its first byte, and `info >> 4` of the
/// host WAL record it is the main data of.
pub const KIND_CREATE: u8 = 1;

/// One logged change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Create {
        tree: TreeId,
        compress: i32,
    },
    Drop {
        tree: TreeId,
    },
    Put {
        tree: TreeId,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        tree: TreeId,
        key: Vec<u8>,
    },
    /// The tree was emptied (row ids keep counting).
    Truncate {
        tree: TreeId,
    },
    /// Row ids below `limit` may be in use from now on.
    IdLimit {
        tree: TreeId,
        limit: u64,
    },
    /// `key`'s value, `len` bytes long, gets `edit`: byte ranges replaced
    /// (kind 7), or a splice (kind 14: a change of length, such as a row
    /// version getting its full header).
    Patch {
        tree: TreeId,
        key: Vec<u8>,
        len: u16,
        edit: Edit,
    },
    /// Two new keys written as one change (a row-id map entry and the
    /// version it locates).
    PutPair {
        tree: TreeId,
        first: (Vec<u8>, Vec<u8>),
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// A [`Record::PutPair`] whose second value is `delta` applied to the
    /// value `base` has at replay (a new row version against the one it
    /// replaces, whose bytes past the delta's head never change).
    PutPairDelta {
        tree: TreeId,
        first: (Vec<u8>, Vec<u8>),
        key: Vec<u8>,
        base: Vec<u8>,
        delta: Delta,
    },
    /// New keys in ascending order, put into one leaf by one change (a
    /// load's batch: `Tree::insert_run`).
    PutRun {
        tree: TreeId,
        items: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// A value replaced by a successor in one change (`Tree::update`: a row
    /// version's header changed and its new version inserted beside it,
    /// under one leaf latch): `key`'s value, `len` bytes before, gets
    /// `edit`; then `first` is put (a row-id map entry), if any; then
    /// `new_key` gets `delta` applied to `key`'s value as edited.
    Update {
        tree: TreeId,
        key: Vec<u8>,
        len: u16,
        edit: Edit,
        first: Option<(Vec<u8>, Vec<u8>)>,
        new_key: Vec<u8>,
        delta: Delta,
        /// When `new_key` held a dead value that the update overwrote (a
        /// row id taken back, unlogged as pruning is): the transaction
        /// id up to which snapshots could still see it, for replay on a
        /// hot standby to cancel those queries first; 0 otherwise.
        conflict: u32,
    },
}

pub use crate::edit::{apply_patch, apply_splice, diff, splice, Delta, Edit, HeaderEdit};

/// The encoding of a [`Record::PutRun`] of `items`, made from borrowed
/// items (a load logs a leaf's worth at a time without copying them twice).
pub fn encode_put_run<'a>(
    tree: TreeId,
    items: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(PAGE_SIZE_HINT);
    b.push(KIND_RUN);
    b.extend_from_slice(&tree.db.to_le_bytes());
    b.extend_from_slice(&tree.rel.to_le_bytes());
    for (k, v) in items {
        for x in [k, v] {
            b.extend_from_slice(&(x.len() as u16).to_le_bytes());
            b.extend_from_slice(x);
        }
    }
    squeeze_run(b)
}

/// A run's items take at least this many bytes before compressing them
/// is tried: below it zstd's frame costs about what it saves.
const SQUEEZE_FROM: usize = 512;
/// zstd level of compressed runs: a fast negative level, which finds
/// repeats only (no entropy coding of literals): a leaf's rows share
/// most of what compresses (key prefixes, headers, repeated values), and
/// level 1's entropy coding cost a re-key a seventh of its time.
const SQUEEZE_LEVEL: i32 = -1;
/// Items of one compressed run take at most this many bytes (a leaf's
/// worth is about 8 kB): a bound on what replay allocates.
const MAX_RUN_BYTES: usize = 64 << 10;
const KIND_RUN: u8 = 12;
/// In place of a run's first key length: its items follow compressed.
/// (The kind cannot say it: `info` has four bits for the kind, and the
/// last free one is the server's redo-point marker, `pg::wal`.)
const SQUEEZED: u16 = 0xFFFF;

/// A run record (kind 12) with its items zstd-compressed behind
/// [`SQUEEZED`] and their length (u32), when that saves at least an
/// eighth; else as it is.
/// Loads log every row once; a fresh cluster also writes each WAL segment
/// twice (zero-filled first), so each byte not logged saves more than one.
fn squeeze_run(raw: Vec<u8>) -> Vec<u8> {
    let body = &raw[9..];
    if body.len() < SQUEEZE_FROM || body.len() > MAX_RUN_BYTES {
        return raw;
    }
    match crate::zstd_ctx::compress(body, SQUEEZE_LEVEL) {
        Some(c) if c.len() + 4 <= body.len() - body.len() / 8 => {
            let mut b = Vec::with_capacity(15 + c.len());
            b.extend_from_slice(&raw[..9]);
            b.extend_from_slice(&SQUEEZED.to_le_bytes());
            b.extend_from_slice(&(body.len() as u32).to_le_bytes());
            b.extend_from_slice(&c);
            b
        }
        _ => raw,
    }
}

/// A run's items: (key, value) pairs in key order.
type Items = Vec<(Vec<u8>, Vec<u8>)>;

/// The items of a run record's body (kind 12's bytes after the tree).
fn decode_run_items(b: &[u8]) -> Result<Items, String> {
    let mut r = Reader { b, at: 0 };
    let mut items = Vec::new();
    while !r.done() {
        items.push((r.with_len()?, r.with_len()?));
    }
    Ok(items)
}

/// The items of a run record (kind 12) from the bytes after its tree,
/// compressed or not.
fn decode_run(r: &mut Reader) -> Result<Items, String> {
    if r.b.get(r.at..r.at + 2) != Some(&SQUEEZED.to_le_bytes()[..]) {
        return decode_run_items(&r.rest());
    }
    r.at += 2;
    let len = u32::from_le_bytes(r.take(4)?.try_into().unwrap()) as usize;
    if len > MAX_RUN_BYTES {
        return Err(format!("compressed run of {len} bytes is too long"));
    }
    let mut body = vec![0u8; len];
    let got = crate::zstd_ctx::decompress_into(&r.rest(), &mut body)
        .map_err(|e| format!("compressed run does not decompress: {e}"))?;
    if got != len {
        return Err(format!("compressed run holds {got} bytes, not {len}"));
    }
    decode_run_items(&body)
}

fn put_ranges(b: &mut Vec<u8>, ranges: &[(u16, Vec<u8>)]) {
    for (off, bytes) in ranges {
        b.extend_from_slice(&off.to_le_bytes());
        b.push(bytes.len() as u8);
        b.extend_from_slice(bytes);
    }
}

/// A delta, its middle running to the end of the record.
/// A delta; with `spell_head` false its head is left out (an empty one
/// in its place: the record implies it).
fn put_delta(b: &mut Vec<u8>, d: &Delta, spell_head: bool) {
    put_var_bytes(b, if spell_head { &d.head } else { &[] });
    for x in [d.from, d.prefix, d.suffix, d.skip] {
        put_var(b, x as u64);
    }
    put_var_bytes(b, &d.tail);
    b.extend_from_slice(&d.middle);
}

/// Bytes with their length in front, 16 bits (what [`Reader::with_len`]
/// reads).
fn put_with_len(b: &mut Vec<u8>, x: &[u8]) {
    b.extend_from_slice(&(x.len() as u16).to_le_bytes());
    b.extend_from_slice(x);
}

/// A pair's first entry (kind 8): a first entry that is the map entry of
/// the version key that follows it costs the marker alone.
fn put_first(b: &mut Vec<u8>, first: &(Vec<u8>, Vec<u8>), key: &[u8]) {
    if is_map_entry_of(first, key) {
        b.extend_from_slice(&DERIVED.to_le_bytes());
    } else {
        put_with_len(b, &first.0);
        put_with_len(b, &first.1);
    }
}

/// Bytes with their length in front, as a variable-length integer.
fn put_var_bytes(b: &mut Vec<u8>, x: &[u8]) {
    put_var(b, x.len() as u64);
    b.extend_from_slice(x);
}

/// Flag bits of a compact record (kinds 3 and 4) for its first entry:
/// [`FIRST_DERIVED`] when it is the map entry `key` implies (nothing of it
/// follows), [`FIRST_SPELLED`] when its key and value follow.
fn first_flags(first: Option<&(Vec<u8>, Vec<u8>)>, key: &[u8]) -> u8 {
    match first {
        None => 0,
        Some(f) if is_map_entry_of(f, key) => FIRST_DERIVED,
        Some(_) => FIRST_SPELLED,
    }
}

fn put_first_var(b: &mut Vec<u8>, first: Option<&(Vec<u8>, Vec<u8>)>, key: &[u8]) {
    if first_flags(first, key) == FIRST_SPELLED {
        let f = first.unwrap();
        put_var_bytes(b, &f.0);
        put_var_bytes(b, &f.1);
    }
}

const FIRST_DERIVED: u8 = 4;
const FIRST_SPELLED: u8 = 8;
/// Flag bits of an UPDATE record (kind 3) whose edit is a header edit: its
/// `ctid` is the new key's row id and not spelled ([`HeaderEdit::without_ctid_of`]);
/// the new version's header is [`crate::edit::successor_header`] and its
/// delta's head is empty.
const CTID_IMPLIED: u8 = 16;
const HEAD_IMPLIED: u8 = 32;
/// Flag of an UPDATE record: a conflict horizon (varint) follows the flags.
const CONFLICT: u8 = 64;

/// What a leaf's worth of items takes, to size the buffer once.
const PAGE_SIZE_HINT: usize = 8192 + 1024;

impl Record {
    pub fn tree(&self) -> TreeId {
        match self {
            Record::Create { tree, .. }
            | Record::Drop { tree }
            | Record::Put { tree, .. }
            | Record::Delete { tree, .. }
            | Record::IdLimit { tree, .. }
            | Record::Patch { tree, .. }
            | Record::PutPair { tree, .. }
            | Record::PutPairDelta { tree, .. }
            | Record::PutRun { tree, .. }
            | Record::Update { tree, .. }
            | Record::Truncate { tree } => *tree,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        if let Record::PutRun { tree, items } = self {
            return encode_put_run(*tree, items.iter().map(|(k, v)| (&k[..], &v[..])));
        }
        // Most records are an UPDATE's (about 120 bytes): one allocation
        // instead of growing from a small one three times.
        let mut b = Vec::with_capacity(160);
        let tree = self.tree();
        b.push(self.kind());
        b.extend_from_slice(&tree.db.to_le_bytes());
        b.extend_from_slice(&tree.rel.to_le_bytes());
        match self {
            Record::Create { compress, .. } => b.extend_from_slice(&compress.to_le_bytes()),
            Record::Drop { .. } | Record::Truncate { .. } => {}
            Record::IdLimit { limit, .. } => b.extend_from_slice(&limit.to_le_bytes()),
            Record::Put { key, value, .. } => {
                put_with_len(&mut b, key);
                b.extend_from_slice(value);
            }
            Record::Delete { key, .. } => b.extend_from_slice(key),
            Record::Patch { key, len, edit, .. } => encode_patch(&mut b, key, *len, edit),
            Record::PutPair {
                first, key, value, ..
            } => {
                put_first(&mut b, first, key);
                put_with_len(&mut b, key);
                b.extend_from_slice(value);
            }
            Record::PutPairDelta {
                first,
                key,
                base,
                delta,
                ..
            } => {
                b.push(first_flags(Some(first), key));
                put_first_var(&mut b, Some(first), key);
                put_var_bytes(&mut b, key);
                put_var_bytes(&mut b, base);
                put_delta(&mut b, delta, true);
            }
            Record::PutRun { .. } => unreachable!("encoded above"),
            Record::Update { .. } => encode_update(&mut b, self),
        }
        b
    }

    /// The record's kind, its first byte: a patch's depends on its edit.
    fn kind(&self) -> u8 {
        match self {
            Record::Create { .. } => KIND_CREATE,
            Record::Drop { .. } => 2,
            Record::Put { .. } => 10,
            Record::Delete { .. } => 11,
            Record::IdLimit { .. } => 5,
            Record::Truncate { .. } => 6,
            Record::Patch {
                edit: Edit::Ranges(_),
                ..
            } => 7,
            Record::Patch {
                edit: Edit::Splice { .. },
                ..
            } => 14,
            Record::Patch { .. } => 0,
            Record::PutPair { .. } => 8,
            Record::PutPairDelta { .. } => 4,
            Record::PutRun { .. } => KIND_RUN,
            Record::Update { .. } => 3,
        }
    }

    /// Decodes and checks a record; the error describes the damage.
    pub fn decode(b: &[u8]) -> Result<Record, String> {
        if b.len() < 9 {
            return Err(format!("log record of {} bytes is too short", b.len()));
        }
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let tree = TreeId::new(u32at(1), u32at(5));
        let mut r = Reader { b, at: 9 };
        let rec = match b[0] {
            1 => Record::Create {
                tree,
                compress: i32::from_le_bytes(r.take(4)?.try_into().unwrap()),
            },
            2 => Record::Drop { tree },
            6 => Record::Truncate { tree },
            5 => Record::IdLimit {
                tree,
                limit: u64::from_le_bytes(r.take(8)?.try_into().unwrap()),
            },
            9 | 13 => {
                return Err(
                    "log record of an earlier build of orioledb_rs (its format changed)".into(),
                )
            }
            14 => decode_splice(&mut r, tree)?,
            10 => Record::Put {
                tree,
                key: r.with_len()?,
                value: r.rest(),
            },
            11 => Record::Delete { tree, key: r.rest() },
            7 => decode_ranges(&mut r, tree)?,
            8 => {
                let first = r.first_of()?;
                let key = r.with_len()?;
                Record::PutPair {
                    tree,
                    first: derive_first(first, &key)?,
                    key,
                    value: r.rest(),
                }
            }
            4 => decode_pair_delta(&mut r, tree)?,
            0 => {
                let key = r.var_bytes()?;
                let len = r.u16var()?;
                Record::Patch {
                    tree,
                    key,
                    len,
                    edit: Edit::Header(HeaderEdit::decode(b, &mut r.at)?),
                }
            }
            KIND_RUN => Record::PutRun {
                tree,
                items: decode_run(&mut r)?,
            },
            3 => decode_update(&mut r, tree)?,
            k => return Err(format!("unknown log record kind {k}")),
        };
        if !r.done() {
            return Err("log record has trailing bytes".into());
        }
        Ok(rec)
    }
}

/// The body of a PATCH record after its kind and tree: kind 0 (a header
/// edit, lengths as variable-length integers) or kinds 7 and 14 (ranges, a
/// splice: 16-bit lengths, the last field running to the end).
fn encode_patch(b: &mut Vec<u8>, key: &[u8], len: u16, edit: &Edit) {
    if let Edit::Header(h) = edit {
        put_var_bytes(b, key);
        put_var(b, len as u64);
        h.encode(b);
        return;
    }
    put_with_len(b, key);
    b.extend_from_slice(&len.to_le_bytes());
    match edit {
        Edit::Ranges(ranges) => put_ranges(b, ranges),
        Edit::Splice {
            prefix,
            suffix,
            middle,
        } => {
            b.extend_from_slice(&prefix.to_le_bytes());
            b.extend_from_slice(&suffix.to_le_bytes());
            b.extend_from_slice(middle);
        }
        Edit::Header(_) => unreachable!("encoded above"),
    }
}

/// The body of an UPDATE record (kind 3) after its kind and tree. What
/// the record implies is left out: the old version's `ctid` when it is
/// the new key's row id, the new version's header when it is
/// [`crate::edit::successor_header`] (flags [`CTID_IMPLIED`],
/// [`HEAD_IMPLIED`]).
fn encode_update(b: &mut Vec<u8>, rec: &Record) {
    let Record::Update {
        key,
        len,
        edit,
        first,
        new_key,
        delta,
        conflict,
        ..
    } = rec
    else {
        unreachable!("an UPDATE record")
    };
    put_var_bytes(b, key);
    put_var(b, *len as u64);
    let edit_kind = match edit {
        Edit::Ranges(_) => 0,
        Edit::Splice { .. } => 1,
        Edit::Header(_) => 2,
    };
    let (implied, stripped) = match edit {
        Edit::Header(h) => {
            let head = crate::edit::successor_header(h, new_key).is_some_and(|p| p == delta.head);
            let ctid = h.without_ctid_of(new_key);
            let flags = if head { HEAD_IMPLIED } else { 0 } | if ctid.is_some() { CTID_IMPLIED } else { 0 };
            (flags, ctid)
        }
        _ => (0, None),
    };
    let conflict_flag = if *conflict != 0 { CONFLICT } else { 0 };
    b.push(edit_kind | first_flags(first.as_ref(), new_key) | implied | conflict_flag);
    if *conflict != 0 {
        put_var(b, *conflict as u64);
    }
    match edit {
        Edit::Ranges(ranges) => {
            b.push(ranges.len() as u8);
            for (off, bytes) in ranges {
                put_var(b, *off as u64);
                b.push(bytes.len() as u8);
                b.extend_from_slice(bytes);
            }
        }
        Edit::Splice {
            prefix,
            suffix,
            middle,
        } => {
            put_var(b, *prefix as u64);
            put_var(b, *suffix as u64);
            put_var_bytes(b, middle);
        }
        Edit::Header(h) => stripped.as_ref().unwrap_or(h).encode(b),
    }
    put_first_var(b, first.as_ref(), new_key);
    let shared = key.iter().zip(new_key).take_while(|(a, b)| a == b).count();
    put_var(b, shared as u64);
    put_var_bytes(b, &new_key[shared..]);
    put_delta(b, delta, implied & HEAD_IMPLIED == 0);
}

/// A record's bytes being decoded from `at` on. Invariant: `at <=
/// b.len()`; every read checks the length, so damage is an error, never a
/// panic.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self.b.get(self.at..self.at + n).ok_or("log record truncated")?;
        self.at += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()) as usize)
    }

    fn with_len(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u16()?;
        Ok(self.take(n)?.to_vec())
    }

    /// The bytes to the end.
    fn rest(&mut self) -> Vec<u8> {
        let r = self.b[self.at..].to_vec();
        self.at = self.b.len();
        r
    }

    fn var(&mut self, max: u64) -> Result<u64, String> {
        let x = get_var(self.b, &mut self.at)?;
        (x <= max)
            .then_some(x)
            .ok_or_else(|| format!("log record holds {x} where at most {max} fits"))
    }

    fn u16var(&mut self) -> Result<u16, String> {
        Ok(self.var(u16::MAX as u64)? as u16)
    }

    fn var_bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u16var()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    /// A pair's first entry: None for the marker (derived from the key
    /// that follows).
    fn first_of(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>, String> {
        if self.b.get(self.at..self.at + 2) == Some(&DERIVED.to_le_bytes()[..]) {
            self.at += 2;
            return Ok(None);
        }
        Ok(Some((self.with_len()?, self.with_len()?)))
    }

    /// A compact record's first entry, by its flag bits; derived from the
    /// key later.
    fn first_var(&mut self, flags: u8) -> Result<Option<Option<(Vec<u8>, Vec<u8>)>>, String> {
        Ok(match flags & (FIRST_DERIVED | FIRST_SPELLED) {
            0 => None,
            FIRST_DERIVED => Some(None),
            FIRST_SPELLED => Some(Some((self.var_bytes()?, self.var_bytes()?))),
            _ => return Err("log record's first entry is both derived and spelled".into()),
        })
    }

    fn delta(&mut self) -> Result<Delta, String> {
        let head = self.var_bytes()?;
        let (from, prefix, suffix, skip) = (self.u16var()?, self.u16var()?, self.u16var()?, self.u16var()?);
        let tail = self.var_bytes()?;
        Ok(Delta {
            head,
            from,
            prefix,
            middle: self.rest(),
            suffix,
            skip,
            tail,
        })
    }

    /// One changed range of a value of `len` bytes, its offset as `u16`
    /// (kind 7) or as a variable-length integer (kind 3).
    fn range(&mut self, len: usize, varint: bool) -> Result<(u16, Vec<u8>), String> {
        let off = if varint { self.u16var()? as usize } else { self.u16()? };
        let n = self.byte()? as usize;
        if n == 0 || off + n > len {
            return Err(format!("patch range {off}+{n} outside a value of {len} bytes"));
        }
        Ok((off as u16, self.take(n)?.to_vec()))
    }
}

/// Kind 14: a splice.
fn decode_splice(r: &mut Reader, tree: TreeId) -> Result<Record, String> {
    let key = r.with_len()?;
    let len = r.u16()?;
    let (prefix, suffix) = (r.u16()?, r.u16()?);
    if prefix + suffix > len {
        return Err(format!("splice keeps {prefix}+{suffix} bytes of a value of {len}"));
    }
    Ok(Record::Patch {
        tree,
        key,
        len: len as u16,
        edit: Edit::Splice {
            prefix: prefix as u16,
            suffix: suffix as u16,
            middle: r.rest(),
        },
    })
}

/// Kind 7: changed ranges to the end.
fn decode_ranges(r: &mut Reader, tree: TreeId) -> Result<Record, String> {
    let key = r.with_len()?;
    let len = r.u16()?;
    let mut ranges = Vec::new();
    while !r.done() {
        ranges.push(r.range(len, false)?);
    }
    Ok(Record::Patch {
        tree,
        key,
        len: len as u16,
        edit: Edit::Ranges(ranges),
    })
}

/// Kind 4: a pair whose second value is a delta.
fn decode_pair_delta(r: &mut Reader, tree: TreeId) -> Result<Record, String> {
    let flags = r.byte()?;
    if flags & !(FIRST_DERIVED | FIRST_SPELLED) != 0 {
        return Err(format!("pair record has unknown flags {flags:#x}"));
    }
    let first = r.first_var(flags)?.ok_or("log record's pair has no first entry")?;
    let key = r.var_bytes()?;
    let first = derive_first(first, &key)?;
    let base = r.var_bytes()?;
    Ok(Record::PutPairDelta {
        tree,
        first,
        key,
        base,
        delta: r.delta()?,
    })
}

/// Kind 3: an UPDATE, with what its flags say it implies restored.
fn decode_update(r: &mut Reader, tree: TreeId) -> Result<Record, String> {
    let key = r.var_bytes()?;
    let len = r.u16var()?;
    let flags = r.byte()?;
    if flags & !(3 | FIRST_DERIVED | FIRST_SPELLED | CTID_IMPLIED | HEAD_IMPLIED | CONFLICT) != 0 {
        return Err(format!("update record has unknown flags {flags:#x}"));
    }
    if flags & (CTID_IMPLIED | HEAD_IMPLIED) != 0 && flags & 3 != 2 {
        return Err(format!("update record implies header fields of no header edit ({flags:#x})"));
    }
    let conflict = if flags & CONFLICT != 0 {
        r.var(u32::MAX as u64)? as u32
    } else {
        0
    };
    let edit = match flags & 3 {
        0 => {
            let n = r.byte()?;
            let ranges = (0..n)
                .map(|_| r.range(len as usize, true))
                .collect::<Result<Vec<_>, _>>()?;
            Edit::Ranges(ranges)
        }
        1 => {
            let (prefix, suffix) = (r.u16var()?, r.u16var()?);
            if prefix as usize + suffix as usize > len as usize {
                return Err(format!("update keeps {prefix}+{suffix} bytes of a value of {len}"));
            }
            Edit::Splice {
                prefix,
                suffix,
                middle: r.var_bytes()?,
            }
        }
        2 => Edit::Header(HeaderEdit::decode(r.b, &mut r.at)?),
        e => return Err(format!("unknown edit kind {e} in an update record")),
    };
    let first = r.first_var(flags)?;
    let shared = r.u16var()? as usize;
    let mut new_key = key
        .get(..shared)
        .ok_or("update record shares more key bytes than there are")?
        .to_vec();
    new_key.extend_from_slice(&r.var_bytes()?);
    let first = first.map(|f| derive_first(f, &new_key)).transpose()?;
    let edit = match edit {
        Edit::Header(h) if flags & CTID_IMPLIED != 0 => Edit::Header(
            h.with_ctid_of(&new_key)
                .ok_or("update record implies a ctid its new key does not give")?,
        ),
        e => e,
    };
    let mut delta = r.delta()?;
    if let (Edit::Header(h), true) = (&edit, flags & HEAD_IMPLIED != 0) {
        if !delta.head.is_empty() {
            return Err("update record both implies and spells its new header".into());
        }
        delta.head = crate::edit::successor_header(h, &new_key)
            .ok_or("update record implies a new header its edit does not give")?;
    }
    Ok(Record::Update {
        tree,
        key,
        len,
        edit,
        first,
        new_key,
        delta,
        conflict,
    })
}

/// The length field that stands for a pair's first entry when that entry
/// is the row-id map entry of the version key beside it
/// (`key_format::map_entry_of`): no key is that long, so earlier records never
/// hold it.
const DERIVED: u16 = u16::MAX;

/// Whether `first` is the map entry `key` implies.
fn is_map_entry_of(first: &(Vec<u8>, Vec<u8>), key: &[u8]) -> bool {
    crate::key_format::map_entry_of(key).is_some_and(|(k, v)| first.0 == k && first.1 == v)
}

/// A decoded first entry, or (None: the marker) the one `key` implies.
fn derive_first(first: Option<(Vec<u8>, Vec<u8>)>, key: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    match first {
        Some(f) => Ok(f),
        None => crate::key_format::map_entry_of(key)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .ok_or_else(|| "log record derives a map entry from a key that has none".into()),
    }
}

/// An in-memory log (tests, tools): positions are 1-based indexes.
#[derive(Default)]
pub struct MemWal {
    records: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl MemWal {
    /// The position the next record will get.
    pub fn insert_position(&self) -> Lsn {
        self.records.lock().unwrap().len() as Lsn + 1
    }

    /// An independent copy of the log as it is now (tests: another
    /// "server" recovering from the same log, which its checkpoints may
    /// then extend).
    pub fn copy(&self) -> MemWal {
        MemWal {
            records: std::sync::Mutex::new(self.records.lock().unwrap().clone()),
        }
    }

    /// Records at or after `from`, in order.
    pub fn since(&self, from: Lsn) -> Vec<Vec<u8>> {
        let r = self.records.lock().unwrap();
        r[(from.max(1) - 1) as usize..].to_vec()
    }
}

impl WalSink for MemWal {
    fn log(&self, record: &[u8]) -> Lsn {
        let mut r = self.records.lock().unwrap();
        r.push(record.to_vec());
        r.len() as Lsn
    }
    fn redo_point(&self, _checkpoint: u64) -> Lsn {
        self.insert_position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Long because one table of every record kind, each encoded, decoded and
    // damaged the same way.
    #[test]
    fn records_roundtrip_and_damage_is_an_error() {
        let t = TreeId::new(5, 16384);
        let recs = [
            Record::Create {
                tree: t,
                compress: 3,
            },
            Record::Drop { tree: t },
            Record::Put {
                tree: t,
                key: b"k1".to_vec(),
                value: vec![7; 300],
            },
            Record::Delete {
                tree: t,
                key: b"k1".to_vec(),
            },
            Record::IdLimit {
                tree: t,
                limit: 1 << 40,
            },
            Record::Patch {
                tree: t,
                key: b"k2".to_vec(),
                len: 40,
                edit: Edit::Ranges(vec![(0, vec![1, 2]), (30, vec![9; 10])]),
            },
            Record::PutPair {
                tree: t,
                first: (b"a".to_vec(), b"bc".to_vec()),
                key: b"k3".to_vec(),
                value: vec![4; 20],
            },
            Record::PutPairDelta {
                tree: t,
                first: (b"a".to_vec(), b"bc".to_vec()),
                key: b"k4".to_vec(),
                base: b"k3".to_vec(),
                delta: Delta {
                    head: vec![1; 8],
                    from: 8,
                    prefix: 3,
                    middle: vec![5, 6],
                    suffix: 9,
                    skip: 0,
                    tail: vec![],
                },
            },
            Record::PutRun {
                tree: t,
                items: vec![(b"r1".to_vec(), vec![1; 30]), (b"r2".to_vec(), Vec::new())],
            },
            Record::Update {
                tree: t,
                key: b"k5-old".to_vec(),
                len: 40,
                edit: Edit::Ranges(vec![(4, vec![1; 4]), (20, vec![2; 8])]),
                first: Some((b"m".to_vec(), b"pfx".to_vec())),
                new_key: b"k5-new!".to_vec(),
                conflict: 77,
                delta: Delta {
                    head: vec![3; 32],
                    from: 32,
                    prefix: 2,
                    middle: vec![9],
                    suffix: 5,
                    skip: 6,
                    tail: vec![1, 2, 3, 4, 5, 6],
                },
            },
            Record::Update {
                tree: t,
                key: b"abc".to_vec(),
                len: 10,
                edit: Edit::Ranges(vec![]),
                first: None,
                new_key: b"x".to_vec(),
                conflict: 0,
                delta: Delta {
                    head: vec![],
                    from: 0,
                    prefix: 0,
                    middle: vec![],
                    suffix: 0,
                    skip: 0,
                    tail: vec![],
                },
            },
            Record::Update {
                tree: t,
                key: b"k6".to_vec(),
                len: 120,
                edit: Edit::Splice {
                    prefix: 0,
                    suffix: 104,
                    middle: vec![7; 32],
                },
                first: Some((b"m".to_vec(), b"p".to_vec())),
                new_key: b"k7".to_vec(),
                conflict: 0,
                delta: Delta {
                    head: vec![3; 15],
                    from: 32,
                    prefix: 100,
                    middle: vec![1],
                    suffix: 3,
                    skip: 0,
                    tail: vec![],
                },
            },
            Record::Patch {
                tree: t,
                key: b"k9".to_vec(),
                len: 55,
                edit: Edit::Header(HeaderEdit {
                    mask: crate::edit::header_field::ALL,
                    to: crate::version::Header {
                        xmin: 7,
                        xmax: u32::MAX,
                        cmin: 300,
                        cmax: 1,
                        infomask: 0xABCD,
                        infomask2: 0x4002,
                        ctid: (1 << 48) - 1,
                        hoff: 24,
                        flags: 9,
                        spec: 0,
                    },
                }),
            },
            Record::Update {
                tree: t,
                key: b"k10".to_vec(),
                len: 57,
                edit: Edit::Header(HeaderEdit {
                    mask: crate::edit::header_field::XMAX | crate::edit::header_field::CTID,
                    to: crate::version::Header {
                        xmax: 1234567,
                        ctid: 99,
                        ..Default::default()
                    },
                }),
                first: None,
                new_key: b"k11".to_vec(),
                conflict: u32::MAX,
                delta: Delta {
                    head: vec![3; 16],
                    from: 16,
                    prefix: 40,
                    middle: vec![1, 2],
                    suffix: 1,
                    skip: 0,
                    tail: vec![6; 6],
                },
            },
            Record::Patch {
                tree: t,
                key: b"k8".to_vec(),
                len: 120,
                edit: Edit::Splice {
                    prefix: 1,
                    suffix: 100,
                    middle: vec![5; 33],
                },
            },
        ];
        for r in &recs {
            let b = r.encode();
            // The server sends the kind in four bits of `info`, and 15 is
            // its own redo-point marker, which replay skips.
            assert!(b[0] < 15, "kind {} of {r:?}", b[0]);
            assert_eq!(&Record::decode(&b).unwrap(), r);
            // Any cut or flip decodes to an error or to some record, never a
            // panic (PostgreSQL's CRC catches damage before we see it).
            for at in 0..b.len() {
                let mut bad = b.clone();
                bad[at] ^= 0x10;
                let _ = Record::decode(&bad);
            }
            for cut in 0..9.min(b.len()) {
                assert!(Record::decode(&b[..cut]).is_err());
            }
        }
    }

    #[test]
    fn a_compressible_run_is_logged_compressed_and_decodes_to_the_same_items() {
        let t = TreeId::new(5, 16384);
        // A leaf's worth of load rows: keys sharing a prefix, values
        // sharing a header and padding, as a table's rows do.
        let items: Vec<(Vec<u8>, Vec<u8>)> = (0..60u64)
            .map(|i| {
                let mut v = vec![b' '; 100];
                v[..8].copy_from_slice(&i.to_be_bytes());
                (i.to_be_bytes().to_vec(), v)
            })
            .collect();
        let rec = Record::PutRun {
            tree: t,
            items: items.clone(),
        };
        let b = rec.encode();
        assert_eq!((b[0], &b[9..11]), (KIND_RUN, &SQUEEZED.to_le_bytes()[..]));
        let raw: usize = items.iter().map(|(k, v)| 4 + k.len() + v.len()).sum();
        assert!(b.len() < raw / 4, "{} bytes for {raw}", b.len());
        assert_eq!(Record::decode(&b).unwrap(), rec);
        // Damage anywhere is an error or another record, never a panic;
        // a cut frame never decodes.
        for at in 0..b.len() {
            let mut bad = b.clone();
            bad[at] ^= 0x10;
            let _ = Record::decode(&bad);
        }
        for cut in 11..b.len() {
            assert!(Record::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        // A length past the bound is refused before anything is allocated.
        let mut long = b.clone();
        long[11..15].copy_from_slice(&(MAX_RUN_BYTES as u32 + 1).to_le_bytes());
        assert!(Record::decode(&long).is_err());
    }

    #[test]
    fn an_incompressible_run_stays_as_it_is() {
        let t = TreeId::new(5, 16384);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        };
        let items: Vec<(Vec<u8>, Vec<u8>)> = (0..40u64)
            .map(|i| {
                (
                    i.to_be_bytes().to_vec(),
                    (0..16).flat_map(|_| noise()).collect(),
                )
            })
            .collect();
        let rec = Record::PutRun { tree: t, items };
        let b = rec.encode();
        assert_eq!((b[0], b.len() > 40 * 136), (KIND_RUN, true));
        assert_eq!(Record::decode(&b).unwrap(), rec);
    }

    /// In a row-id tree an update may store its new version under the
    /// chain root's own 8-byte key (a row id taken back): that key's id
    /// implies the old version's ctid and the new header as a suffix does.
    #[test]
    fn a_row_id_root_key_implies_the_ctid_and_header_too() {
        use crate::version::{self, bits, Header};
        let t = TreeId::new(5, 16384);
        let (root, member) = (4242u64, 900_001u64);
        let key = crate::key_format::member_key(root, member);
        let new_key = root.to_be_bytes().to_vec();
        let tuple: Vec<u8> = (0..97u8).collect();
        let old = Header {
            infomask: bits::XMAX_INVALID | bits::XMIN_COMMITTED | bits::HASVARWIDTH,
            infomask2: 4 | bits::HEAP_ONLY,
            hoff: 24,
            ..Header::new(1000, 0, member)
        }
        .with_tail(&tuple);
        let edited = |ctid: u64| {
            let mut h = Header::decode(&old, member).unwrap();
            h.set_deleter(2_000_000, 0, ctid, false);
            h.infomask2 |= bits::HOT_UPDATED;
            let mut val = old.clone();
            version::set_header(&mut val, &h);
            val
        };
        let mut new = Header {
            infomask: bits::XMAX_INVALID | bits::UPDATED | bits::HASVARWIDTH,
            infomask2: 4,
            hoff: 24,
            ..Header::new(2_000_000, 0, root)
        }
        .with_tail(&tuple);
        version::make_heap_only(&mut new, root);
        let record = |ctid: u64, new: &[u8]| {
            let val = edited(ctid);
            Record::Update {
                tree: t,
                key: key.to_vec(),
                len: old.len() as u16,
                edit: Edit::between(&old, &val, member).unwrap(),
                first: None,
                new_key: new_key.clone(),
                delta: Delta::between(new, version::header_len(new), &val, version::header_len(&val))
                    .unwrap(),
                conflict: 0,
            }
        };
        let implied = record(root, &new);
        let b = implied.encode();
        assert_eq!(Record::decode(&b).unwrap(), implied);
        // A ctid naming another row id is spelled out.
        let far = record(root + 1, &new);
        let f = far.encode();
        assert_eq!(Record::decode(&f).unwrap(), far);
        assert!(b.len() < f.len(), "{} vs {} bytes", b.len(), f.len());
        // So is a header other than the one the edit implies.
        let mut other = new.clone();
        let mut oh = Header::decode(&other, root).unwrap();
        oh.cmin = 3;
        version::set_header(&mut other, &oh);
        let spelled = record(root, &other);
        let s = spelled.encode();
        assert_eq!(Record::decode(&s).unwrap(), spelled);
        assert!(b.len() + 9 <= s.len(), "{} vs {} bytes", b.len(), s.len());
    }

    #[test]
    fn an_updates_new_header_and_ctid_are_implied_when_they_follow_from_its_edit() {
        use crate::version::{self, bits, Header};
        let t = TreeId::new(5, 16384);
        let mut key = vec![crate::key_format::VERSION_TAG, 1, 0x80, 0, 0, 7];
        let mut new_key = key.clone();
        crate::key_format::push_version_suffix(&mut key, 4242);
        crate::key_format::push_version_suffix(&mut new_key, 900_001);
        let tuple: Vec<u8> = (0..97u8).collect();
        let old = Header {
            infomask: bits::XMAX_INVALID | bits::XMIN_COMMITTED | bits::HASVARWIDTH,
            infomask2: 4,
            hoff: 24,
            ..Header::new(1000, 0, 4242)
        }
        .with_tail(&tuple);
        let mut h = Header::decode(&old, 4242).unwrap();
        h.set_deleter(2_000_000, 0, 900_001, false);
        h.infomask2 |= bits::HOT_UPDATED;
        let mut val = old.clone();
        version::set_header(&mut val, &h);
        let mut body = tuple.clone();
        body[9] ^= 1;
        let fresh = Header {
            infomask: bits::XMAX_INVALID | bits::UPDATED | bits::HASVARWIDTH,
            infomask2: 4,
            hoff: 24,
            ..Header::new(2_000_000, 0, 900_001)
        };
        let mut new = fresh.with_tail(&body);
        version::make_heap_only(&mut new, 4242);
        let record = |new: &[u8]| Record::Update {
            tree: t,
            key: key.clone(),
            len: old.len() as u16,
            edit: Edit::between(&old, &val, 4242).unwrap(),
            first: None,
            new_key: new_key.clone(),
            delta: Delta::between(new, version::header_len(new), &val, version::header_len(&val)).unwrap(),
            conflict: 0,
        };
        let implied = record(&new);
        let b = implied.encode();
        assert_eq!(Record::decode(&b).unwrap(), implied);
        // Another command id than the old version's cmax: spelled out.
        let mut other = new.clone();
        let mut oh = Header::decode(&other, 900_001).unwrap();
        oh.cmin = 3;
        version::set_header(&mut other, &oh);
        let spelled = record(&other);
        let s = spelled.encode();
        assert_eq!(Record::decode(&s).unwrap(), spelled);
        // The header (10 bytes) is not in the record.
        assert!(b.len() + 9 <= s.len(), "{} vs {} bytes", b.len(), s.len());
        // Nor is the ctid (3 bytes) when it names the new key's row id.
        let mut h2 = h;
        h2.ctid = 900_002;
        let mut val2 = old.clone();
        version::set_header(&mut val2, &h2);
        let mut far = record(&new);
        if let Record::Update { edit, .. } = &mut far {
            *edit = Edit::between(&old, &val2, 4242).unwrap();
        }
        let f = far.encode();
        assert_eq!(Record::decode(&f).unwrap(), far);
        assert!(b.len() + 3 <= f.len(), "{} vs {} bytes", b.len(), f.len());
        // A record implying a header of no header edit is damage.
        let mut bad = b.clone();
        let flags_at = 1 + 8 + 1 + key.len() + 1;
        assert_eq!(bad[flags_at] & 3, 2);
        bad[flags_at] &= !3;
        assert!(Record::decode(&bad).is_err());
    }

    #[test]
    fn a_versions_map_entry_costs_a_marker_and_decodes_back() {
        let t = TreeId::new(5, 16384);
        let mut vkey = vec![crate::key_format::VERSION_TAG, 1, 0x80, 0, 0, 7];
        crate::key_format::push_version_suffix(&mut vkey, 4242);
        let map = (crate::key_format::map_key(4242).to_vec(), vec![1, 0x80, 0, 0, 7]);
        let delta = Delta {
            head: vec![3; 15],
            from: 32,
            prefix: 100,
            middle: vec![1],
            suffix: 3,
            skip: 0,
            tail: vec![],
        };
        let pair = |first: (Vec<u8>, Vec<u8>)| Record::PutPair {
            tree: t,
            first,
            key: vkey.clone(),
            value: vec![4; 20],
        };
        let pair_delta = |first: (Vec<u8>, Vec<u8>)| Record::PutPairDelta {
            tree: t,
            first,
            key: vkey.clone(),
            base: b"base".to_vec(),
            delta: delta.clone(),
        };
        let update = |first: (Vec<u8>, Vec<u8>)| Record::Update {
            tree: t,
            key: vkey[..vkey.len() - 1].to_vec(),
            len: 120,
            edit: Edit::Ranges(vec![(4, vec![1; 4])]),
            first: Some(first),
            new_key: vkey.clone(),
            delta: delta.clone(),
            conflict: 0,
        };
        // The entry of another row id, or another prefix, is spelled out.
        let other_id = (crate::key_format::map_key(4243).to_vec(), map.1.clone());
        let other_prefix = (map.0.clone(), vec![1, 0x80, 0, 0, 8]);
        for make in [&pair as &dyn Fn(_) -> Record, &pair_delta, &update] {
            let derived = make(map.clone());
            let b = derived.encode();
            assert_eq!(Record::decode(&b).unwrap(), derived);
            for other in [other_id.clone(), other_prefix.clone()] {
                let spelled = make(other);
                let sb = spelled.encode();
                assert_eq!(Record::decode(&sb).unwrap(), spelled);
                // 2 length fields, the 7-byte key and the 5-byte prefix.
                assert_eq!(sb.len(), b.len() + 2 + crate::key_format::MAP_KEY + 5);
            }
        }
        // A marker before a key that implies no entry is damage.
        let mut bad = pair(map.clone()).encode();
        let k_at = 9 + 2 + 2;
        bad[k_at] = 0x07;
        assert!(Record::decode(&bad).is_err());
    }

    #[test]
    fn deltas_rebuild_the_value_and_keep_the_head() {
        let base: Vec<u8> = (0..120u32).map(|i| i as u8).collect();
        let mut new = base.clone();
        new[0..8].copy_from_slice(&[9; 8]);
        new[60..64].copy_from_slice(&[7; 4]);
        let d = Delta::between(&new, 8, &base, 8).unwrap();
        assert_eq!((d.head.len(), d.middle.len()), (8, 4));
        assert_eq!(d.apply(&base).unwrap(), new);
        // The base's head may differ at replay; the value does not.
        let mut other = base.clone();
        other[0..8].copy_from_slice(&[3; 8]);
        assert_eq!(d.apply(&other).unwrap(), new);
        let longer: Vec<u8> = new.iter().chain(&[1, 2, 3]).copied().collect();
        assert_eq!(Delta::between(&longer, 8, &base, 8).unwrap().apply(&base).unwrap(), longer);
        let unrelated = vec![0xEE; 120];
        assert!(Delta::between(&unrelated, 8, &base, 8).is_none());
        // A head of another length than the base's (a short version header
        // against a full one): the tuples still line up.
        let mut short = vec![4u8; 3];
        short.extend_from_slice(&new[8..]);
        let d = Delta::between(&short, 3, &base, 8).unwrap();
        assert_eq!((d.head.len(), d.middle.len()), (3, 4));
        assert_eq!(d.apply(&base).unwrap(), short);
        // Random values: whatever between returns rebuilds the value.
        let mut x = 99u64;
        for _ in 0..2000 {
            let mut step = || {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 33) as usize
            };
            let b: Vec<u8> = (0..step() % 200).map(|_| (step() % 3) as u8).collect();
            let mut n = b.clone();
            for _ in 0..step() % 4 {
                let at = step() % (n.len() + 1);
                n.insert(at, step() as u8);
            }
            if !n.is_empty() && step() % 2 == 0 {
                let at = step() % n.len();
                n.remove(at);
            }
            let h = step() % 16;
            let bf = (step() % 16).min(b.len());
            if let Some(d) = Delta::between(&n, h, &b, bf) {
                assert_eq!(d.apply(&b).unwrap(), n);
            }
            // Splices (and edits in general) rebuild the value too.
            if let Some(e) = Edit::between(&b, &n, 0) {
                assert_eq!(e.apply(&b, 0).unwrap(), n);
                assert!(matches!(e, Edit::Ranges(_)) == (b.len() == n.len()));
            }
        }
    }

    #[test]
    fn patches_are_small_and_exact() {
        let old: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let mut new = old.clone();
        new[4..8].copy_from_slice(&[1, 2, 3, 4]);
        new[10] ^= 1;
        new[150] ^= 0xff;
        let ranges = diff(&old, &new).unwrap();
        assert_eq!(ranges.len(), 2, "{ranges:?}");
        assert_eq!(apply_patch(&old, &ranges).unwrap(), new);
        assert_eq!(diff(&old, &old).unwrap(), vec![]);
        assert!(diff(&old, &old[1..]).is_none());
        let all: Vec<u8> = old.iter().map(|b| !b).collect();
        assert!(diff(&old, &all).is_none());
        // Random values: whatever diff returns reproduces the new value.
        let mut x = 12345u64;
        for _ in 0..2000 {
            let mut a = vec![0u8; 1 + (x % 300) as usize];
            for b in a.iter_mut() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                *b = (x >> 60) as u8 & 3;
            }
            let mut b = a.clone();
            for _ in 0..(x % 8) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                let i = (x >> 33) as usize % b.len();
                b[i] = (x >> 20) as u8;
            }
            if let Some(r) = diff(&a, &b) {
                assert_eq!(apply_patch(&a, &r).unwrap(), b);
                let rec = Record::Patch {
                    tree: TreeId::new(1, 2),
                    key: vec![1],
                    len: b.len() as u16,
                    edit: Edit::Ranges(r),
                };
                assert_eq!(Record::decode(&rec.encode()).unwrap(), rec);
            }
        }
    }
}
