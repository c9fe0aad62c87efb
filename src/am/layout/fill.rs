//! Heap's page fill, applied to blocks of row ids.
//!
//! A row id is a TID (291 ids per block), but how many of a block's ids a
//! table uses is ours to choose. We choose what heap would: a block takes
//! rows while a heap page of the same rows would still have room for the
//! next one under the table's `fillfactor` (hio.c's rules for picking the
//! target page of an insert). So an append-only table gets the TIDs heap
//! would give it, as many blocks as heap has pages, and block-based things
//! (TID ranges, `TABLESAMPLE SYSTEM`, BRIN ranges, `relpages`) behave as
//! they do on heap. The ids a block leaves unused are never handed out.
//!
//! The new version of an updated row stays in its old version's block
//! while the block has room, as heap keeps it on its page (`am::modify::
//! place`; the engine remembers the room of the last 128 blocks per table
//! or so). New rows fill forward only: heap also sends a row back to an
//! earlier page that has room for it (its free-space map), so rows of
//! varying widths may get later TIDs than heap would give them.

use orioledb_engine::meta::BlockFill;
use orioledb_engine::version::tid;
use pgrx::pg_sys;

const BLOCK: u32 = pg_sys::BLCKSZ;
/// `SizeOfPageHeaderData`.
const PAGE_HEADER: u32 = 24;
/// `sizeof(ItemIdData)`: a line pointer.
const LINE_POINTER: u32 = 4;
/// `MaxHeapTupleSize`: a page's room for one tuple.
const MAX_TUPLE: u32 = BLOCK - (PAGE_HEADER + LINE_POINTER).next_multiple_of(8);
/// hio.c's "nearly empty" free space: a row too large for the fillfactor
/// still shares a page that has at least this much room.
const NEARLY_EMPTY: u32 = MAX_TUPLE - (tid::PER_BLOCK as u32 / 8) * LINE_POINTER;

/// The block fill of a row whose heap tuple is `t_len` bytes, in a table
/// with `fillfactor` (10..=100): it takes its aligned length and a line
/// pointer, and joins a block whose free space (less the new line
/// pointer) is at least its length plus the fillfactor's reserve — or, for
/// rows that could never meet that, at least the "nearly empty" room.
pub fn heap_fill(t_len: usize, fillfactor: i32) -> BlockFill {
    let len = (t_len.min(u32::MAX as usize / 2) as u32).next_multiple_of(8);
    let reserve = BLOCK * (100 - fillfactor.clamp(10, 100)) as u32 / 100;
    let target = if len + reserve > MAX_TUPLE {
        len.max(NEARLY_EMPTY)
    } else {
        len + reserve
    };
    BlockFill {
        per_block: tid::PER_BLOCK,
        cap: BLOCK - PAGE_HEADER,
        take: len + LINE_POINTER,
        need: target + LINE_POINTER,
    }
}

/// The table's `fillfactor` (100 unless set).
///
/// # Safety
/// `rel` must be a valid open table (its `rd_options`, when set, are
/// heap's `StdRdOptions`, as for every table).
pub unsafe fn fillfactor(rel: pg_sys::Relation) -> i32 {
    // SAFETY: per the contract.
    unsafe {
        let opts = (*rel).rd_options.cast::<pg_sys::StdRdOptions>();
        if opts.is_null() {
            100
        } else {
            (*opts).fillfactor
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    /// Packs rows of the given lengths as heap would, returning the block
    /// of each (the engine's packing rule, restated).
    fn blocks(lens: &[usize], ff: i32) -> Vec<u32> {
        let (mut block, mut used, mut n) = (0u32, 0u32, 0u64);
        let mut out = Vec::new();
        for &l in lens {
            let f = heap_fill(l, ff);
            if n > 0 && (n == f.per_block || f.cap.saturating_sub(used) < f.need) {
                block += 1;
                used = 0;
                n = 0;
            }
            used += f.take;
            n += 1;
            out.push(block);
        }
        out
    }

    #[test]
    fn rows_fill_blocks_as_heap_pages() {
        // 129-byte tuples (int4 + 100-char text): heap puts 58 on a page.
        let b = blocks(&[129; 200], 100);
        assert_eq!(b.iter().filter(|&&x| x == 0).count(), 58);
        assert_eq!(b[199], 3);
        // fillfactor 10 with 232-byte rows (int4 + 200-char text, the
        // regression suite's `tablesample`): three per page, as on heap.
        let b = blocks(&[232; 10], 10);
        assert_eq!(b, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
        // fillfactor 10 with 800-byte rows: one per page.
        let b = blocks(&[800; 3], 10);
        assert_eq!(b, vec![0, 1, 2]);
        // A row larger than the fillfactor allows shares a nearly empty
        // page, and the next small row does not fit after it (the
        // `large_tuple_test` of the regression suite's `insert`).
        let b = blocks(&[28, 1032, 28], 10);
        assert_eq!(b, vec![0, 0, 1]);
        // Tiny rows: 291 line pointers at most.
        let b = blocks(&[24; 300], 100);
        assert_eq!(b[290], 0);
        assert_eq!(b[291], 1);
    }
}
