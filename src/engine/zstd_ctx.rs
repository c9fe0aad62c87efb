//! Per-thread zstd contexts, shared by everything in the engine that
//! compresses: page images (`store::image`) and bulk WAL records
//! (`wal::encode_put_run`).
//!
//! A zstd context costs hundreds of kilobytes to create, so each thread
//! keeps one compressor (for the level it used last) and one
//! decompressor, and reuses them for every call.

/// Compressors by level, most recently used last.
type Compressors = std::cell::RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>>;

/// How many levels a thread keeps a compressor for: a backend loading a
/// compressed table uses two (its WAL runs' and its pages'), and creating a
/// context per switch between them cost more than the compression.
const LEVELS_KEPT: usize = 3;

thread_local! {
    static COMPRESSORS: Compressors = const { std::cell::RefCell::new(Vec::new()) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `bytes` compressed at `level` (zstd's levels; 0 = its default), or
/// None when zstd refuses (it does not for valid levels).
pub fn compress(bytes: &[u8], level: i32) -> Option<Vec<u8>> {
    COMPRESSORS.with(|c| {
        let mut c = c.borrow_mut();
        match c.iter().position(|(l, _)| *l == level) {
            Some(i) => {
                let last = c.len() - 1;
                c.swap(i, last);
            }
            None => {
                if c.len() == LEVELS_KEPT {
                    c.remove(0);
                }
                c.push((level, zstd::bulk::Compressor::new(level).ok()?));
            }
        }
        c.last_mut().unwrap().1.compress(bytes).ok()
    })
}

/// Decompresses `payload` into `out`, returning the length written; an
/// error when the payload is damaged or does not fit `out`.
pub fn decompress_into(payload: &[u8], out: &mut [u8]) -> std::io::Result<usize> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        d.as_mut().unwrap().decompress_to_buffer(payload, out)
    })
}
