//! Row ids as TIDs: a row id is a TID (block, offset), and ranges of TIDs
//! are ranges of row ids.

use super::*;

/// Row id → ItemPointer.
pub fn to_item_pointer(id: u64, out: &mut pg_sys::ItemPointerData) {
    let (block, offset) = if id == MOVED {
        (pg_sys::InvalidBlockNumber, 0xFFFD)
    } else {
        tid::to_pointer(id)
    };
    out.ip_blkid.bi_hi = (block >> 16) as u16;
    out.ip_blkid.bi_lo = block as u16;
    out.ip_posid = offset;
}

/// Block number and offset of an ItemPointer.
pub(super) fn pointer_parts(p: &pg_sys::ItemPointerData) -> (u32, u16) {
    (
        ((p.ip_blkid.bi_hi as u32) << 16) | p.ip_blkid.bi_lo as u32,
        p.ip_posid,
    )
}

/// ItemPointer → row id; None if it names no possible row.
pub fn from_item_pointer(p: &pg_sys::ItemPointerData) -> Option<u64> {
    let (block, offset) = pointer_parts(p);
    if block == pg_sys::InvalidBlockNumber {
        return None;
    }
    tid::from_pointer(block, offset)
}

/// First row id at or after TID `(block, offset)`: the start of a TID
/// range whose inclusive lower bound is that TID. Bounds may be TIDs no row
/// has (offset 0, offsets above 291, block `InvalidBlockNumber`): offset 0
/// is before the block's first row, an offset above 291 after its last.
pub fn first_id_at_or_after(block: u32, offset: u16) -> u64 {
    let base = block as u64 * tid::PER_BLOCK;
    base + (offset as u64).saturating_sub(1).min(tid::PER_BLOCK)
}

/// One past the last row id at or before TID `(block, offset)`: the
/// (exclusive) end of a TID range whose inclusive upper bound is that TID.
pub fn end_id_through(block: u32, offset: u16) -> u64 {
    block as u64 * tid::PER_BLOCK + (offset as u64).min(tid::PER_BLOCK)
}

/// Row ids `first..end` of the TIDs from `min` to `max`, both inclusive
/// (`table_beginscan_tidrange`'s bounds); empty (`first == end`) when
/// `max < min`.
pub fn id_range_of_tids(
    min: &pg_sys::ItemPointerData,
    max: &pg_sys::ItemPointerData,
) -> (u64, u64) {
    let (b, o) = pointer_parts(min);
    let first = first_id_at_or_after(b, o);
    let (b, o) = pointer_parts(max);
    let end = end_id_through(b, o);
    (first, end.max(first))
}

/// `ctid` of a version moved to another partition by an UPDATE
/// (heap's MovedPartitions marker).
pub const MOVED: u64 = (1 << 48) - 1;
