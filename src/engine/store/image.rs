//! Page images: how one page is stored in a data file.
//!
//! ```text
//! 0  magic u32 "ORDI" | version u8 | flags u8 (1 = zstd) | reserved u16
//! 8  checkpoint u64   (the checkpoint epoch the content belongs to)
//! 16 page u32 | payload_len u32 | reserved u32 | crc32c u32
//! 32 payload: the 8 KB page, raw or zstd-compressed
//! ```
//! The image is padded to a multiple of [`UNIT`] bytes. The checksum covers
//! the first 28 header bytes and the *uncompressed* page, so damage to the
//! header, the compressed bytes or the decompressor's output is caught.

use crate::page::PAGE_SIZE;

pub const UNIT: usize = 512;
pub const IMAGE_HEADER: usize = 32;
pub const IMAGE_MAGIC: u32 = u32::from_le_bytes(*b"ORDI");
const VERSION: u8 = 1;
const F_ZSTD: u8 = 1;
/// The most units one image can take (a raw page plus header).
pub const MAX_UNITS: usize = (IMAGE_HEADER + PAGE_SIZE).div_ceil(UNIT);

type CompressorSlot = std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>>;

thread_local! {
    // zstd contexts are expensive to create (hundreds of KB each); one per
    // thread per direction is reused for every page.
    static COMPRESSOR: CompressorSlot = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

fn compress(page: &[u8], level: i32) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_none_or(|(l, _)| *l != level) {
            *c = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        c.as_mut().unwrap().1.compress(page).ok()
    })
}

fn decompress(payload: &[u8], page: &mut [u8]) -> std::io::Result<usize> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        d.as_mut().unwrap().decompress_to_buffer(payload, page)
    })
}

fn crc(header: &[u8], page: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header[..28]), page)
}

/// Encodes a page. `level` is -1 for raw, 0..=22 for zstd (0 = zstd's
/// default). A compressed image that would not be smaller is stored raw.
pub fn encode(page: &[u8], page_no: u32, checkpoint: u64, level: i32) -> Vec<u8> {
    debug_assert_eq!(page.len(), PAGE_SIZE);
    let compressed = if level >= 0 {
        compress(page, level).filter(|c| c.len() + UNIT <= PAGE_SIZE)
    } else {
        None
    };
    let payload: &[u8] = compressed.as_deref().unwrap_or(page);
    let total = (IMAGE_HEADER + payload.len()).div_ceil(UNIT) * UNIT;
    let mut out = vec![0u8; total];
    out[0..4].copy_from_slice(&IMAGE_MAGIC.to_le_bytes());
    out[4] = VERSION;
    out[5] = if compressed.is_some() { F_ZSTD } else { 0 };
    out[8..16].copy_from_slice(&checkpoint.to_le_bytes());
    out[16..20].copy_from_slice(&page_no.to_le_bytes());
    out[20..24].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let c = crc(&out[..IMAGE_HEADER], page);
    out[28..32].copy_from_slice(&c.to_le_bytes());
    out[IMAGE_HEADER..IMAGE_HEADER + payload.len()].copy_from_slice(payload);
    out
}

/// Decodes an image into `page`, checking everything. The error is a
/// description; the caller adds the file and offset.
pub fn decode(bytes: &[u8], page_no: u32, page: &mut [u8]) -> Result<u64, String> {
    if bytes.len() < IMAGE_HEADER {
        return Err("page image truncated".into());
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    if magic != IMAGE_MAGIC {
        return Err(format!("bad page image magic {magic:#010x}"));
    }
    if bytes[4] != VERSION {
        return Err(format!("unsupported page image version {}", bytes[4]));
    }
    let stored_page = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
    if stored_page != page_no {
        return Err(format!(
            "image holds page {stored_page}, expected page {page_no}"
        ));
    }
    let len = u32::from_le_bytes(bytes[20..24].try_into().unwrap()) as usize;
    if len > PAGE_SIZE || IMAGE_HEADER + len > bytes.len() {
        return Err(format!("page image payload length {len} out of range"));
    }
    let payload = &bytes[IMAGE_HEADER..IMAGE_HEADER + len];
    match bytes[5] {
        0 if len == PAGE_SIZE => page.copy_from_slice(payload),
        F_ZSTD => match decompress(payload, page) {
            Ok(n) if n == PAGE_SIZE => {}
            Ok(n) => return Err(format!("page decompressed to {n} bytes")),
            Err(e) => return Err(format!("page does not decompress: {e}")),
        },
        f => {
            return Err(format!(
                "bad page image flags {f:#x} for payload length {len}"
            ))
        }
    }
    let stored_crc = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
    if crc(bytes, page) != stored_crc {
        return Err("page checksum mismatch".into());
    }
    Ok(u64::from_le_bytes(bytes[8..16].try_into().unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..PAGE_SIZE).map(|i| (i / 64) as u8).collect()
    }

    #[test]
    fn roundtrip_raw_and_compressed() {
        let p = sample();
        for level in [-1, 0, 1, 3, 22] {
            let img = encode(&p, 7, 3, level);
            assert_eq!(img.len() % UNIT, 0);
            if level >= 0 {
                assert!(img.len() < PAGE_SIZE, "level {level} should compress");
            } else {
                assert_eq!(img.len(), MAX_UNITS * UNIT);
            }
            let mut out = vec![0u8; PAGE_SIZE];
            assert_eq!(decode(&img, 7, &mut out), Ok(3));
            assert_eq!(out, p);
        }
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let p = sample();
        for level in [-1, 1] {
            let img = encode(&p, 1, 1, level);
            let used = IMAGE_HEADER + u32::from_le_bytes(img[20..24].try_into().unwrap()) as usize;
            for at in (0..used).filter(|a| !(6..8).contains(a) && !(24..28).contains(a)) {
                let mut bad = img.clone();
                bad[at] ^= 0x5a;
                let mut out = vec![0u8; PAGE_SIZE];
                assert!(
                    decode(&bad, 1, &mut out).is_err(),
                    "flip at {at} (level {level}) undetected"
                );
            }
        }
    }

    #[test]
    fn wrong_page_and_garbage_are_errors() {
        let img = encode(&sample(), 1, 1, 1);
        let mut out = vec![0u8; PAGE_SIZE];
        assert!(decode(&img, 2, &mut out).is_err());
        assert!(decode(&img[..10], 1, &mut out).is_err());
        let mut seed = 99u64;
        for _ in 0..500 {
            let n = (seed % 9000) as usize;
            let junk: Vec<u8> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            assert!(decode(&junk, 0, &mut out).is_err());
        }
    }
}
