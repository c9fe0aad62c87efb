//! Page images: how one page is stored in a data file. Two forms:
//!
//! ```text
//! compressed (starts with "ORDI"):
//! 0  magic u32 "ORDI" | version u8 | flags u8 (1 = zstd) | reserved u16
//! 8  checkpoint u64   (the checkpoint epoch the content belongs to)
//! 16 page u32 | payload_len u32 | reserved u32 | crc32c u32
//! 32 payload: the 8 KB page, zstd-compressed (or raw, written by
//!    earlier builds), padded to a multiple of UNIT bytes
//! raw (starts with the page's own magic):
//! the 8 KB page itself, its reserved header bytes 24..32 holding
//! crc32c u32 | page u32 (zero in memory)
//! ```
//! A raw page takes exactly 16 units: with a separate header it took 17
//! (6% more file), and images fell off the file system's 4 kB boundaries.
//! The compressed form's checksum covers the first 28 header bytes and the
//! *uncompressed* page, so damage to the header, the compressed bytes or
//! the decompressor's output is caught; the raw form's covers the page
//! number and the page but its checksum field.

use crate::page::{PAGE_MAGIC, PAGE_SIZE};
use crate::zstd_ctx::{compress, decompress_into as decompress};

pub const UNIT: usize = 512;
pub const IMAGE_HEADER: usize = 32;
pub const IMAGE_MAGIC: u32 = u32::from_le_bytes(*b"ORDI");
const VERSION: u8 = 1;
const F_ZSTD: u8 = 1;
/// The most units one image can take (a raw page with a header, as
/// earlier builds wrote it).
pub const MAX_UNITS: usize = (IMAGE_HEADER + PAGE_SIZE).div_ceil(UNIT);
/// Where a raw image keeps its checksum and page number: the page
/// header's reserved bytes (`page.rs`).
const RAW_CRC: usize = 24;
const RAW_END: usize = 32;

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
    let Some(payload) = compressed.as_deref() else {
        return encode_raw(page, page_no);
    };
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

/// The raw form of `page` (see the module comment).
fn encode_raw(page: &[u8], page_no: u32) -> Vec<u8> {
    let mut out = page.to_vec();
    out[RAW_CRC..RAW_END].fill(0);
    out[RAW_CRC + 4..RAW_END].copy_from_slice(&page_no.to_le_bytes());
    let c = raw_crc(&out);
    out[RAW_CRC..RAW_CRC + 4].copy_from_slice(&c.to_le_bytes());
    out
}

/// A raw image's checksum: the page without its checksum field (page
/// number included).
fn raw_crc(img: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&img[..RAW_CRC]), &img[RAW_CRC + 4..])
}

/// Whether `bytes` start like a raw image (a page's magic).
pub fn is_raw(bytes: &[u8]) -> bool {
    bytes.len() >= 2 && u16::from_le_bytes([bytes[0], bytes[1]]) == PAGE_MAGIC
}

/// Decodes a raw image in place (`img` is the page buffer it was read
/// into), checking it; the reserved bytes are zero again afterwards.
pub fn decode_raw_in_place(img: &mut [u8], page_no: u32) -> Result<(), String> {
    if img.len() != PAGE_SIZE {
        return Err(format!("raw page image of {} bytes", img.len()));
    }
    let stored_crc = u32::from_le_bytes(img[RAW_CRC..RAW_CRC + 4].try_into().unwrap());
    if raw_crc(img) != stored_crc {
        return Err("page checksum mismatch".into());
    }
    let stored_page = u32::from_le_bytes(img[RAW_CRC + 4..RAW_END].try_into().unwrap());
    if stored_page != page_no {
        return Err(format!("image holds page {stored_page}, expected page {page_no}"));
    }
    img[RAW_CRC..RAW_END].fill(0);
    Ok(())
}

/// Decodes an image of either form into `page`, checking everything. The
/// error is a description; the caller adds the file and offset.
pub fn decode(bytes: &[u8], page_no: u32, page: &mut [u8]) -> Result<(), String> {
    if is_raw(bytes) {
        if bytes.len() < PAGE_SIZE {
            return Err("page image truncated".into());
        }
        page.copy_from_slice(&bytes[..PAGE_SIZE]);
        return decode_raw_in_place(page, page_no);
    }
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page as the pool holds it: its magic first, reserved bytes zero.
    fn sample() -> Vec<u8> {
        let mut p: Vec<u8> = (0..PAGE_SIZE).map(|i| (i / 64) as u8 | 1).collect();
        p[0..2].copy_from_slice(&PAGE_MAGIC.to_le_bytes());
        p[RAW_CRC..RAW_END].fill(0);
        p
    }

    /// The image an earlier build wrote for a raw page: header, then page.
    fn old_raw(page: &[u8], page_no: u32) -> Vec<u8> {
        let mut out = vec![0u8; MAX_UNITS * UNIT];
        out[0..4].copy_from_slice(&IMAGE_MAGIC.to_le_bytes());
        out[4] = VERSION;
        out[8..16].copy_from_slice(&3u64.to_le_bytes());
        out[16..20].copy_from_slice(&page_no.to_le_bytes());
        out[20..24].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        let c = crc(&out[..IMAGE_HEADER], page);
        out[28..32].copy_from_slice(&c.to_le_bytes());
        out[IMAGE_HEADER..IMAGE_HEADER + PAGE_SIZE].copy_from_slice(page);
        out
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
                assert_eq!(img.len(), PAGE_SIZE, "a raw page takes 16 units");
            }
            let mut out = vec![0u8; PAGE_SIZE];
            assert_eq!(decode(&img, 7, &mut out), Ok(()));
            assert_eq!(out, p);
        }
        // In place, as the pool reads a raw extent.
        let mut img = encode(&p, 9, 1, -1);
        assert_eq!(decode_raw_in_place(&mut img, 9), Ok(()));
        assert_eq!(img, p);
        // Images of earlier builds (header and raw page) still read.
        let mut out = vec![0u8; PAGE_SIZE];
        assert_eq!(decode(&old_raw(&p, 4), 4, &mut out), Ok(()));
        assert_eq!(out, p);
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let p = sample();
        for level in [-1, 1] {
            let img = encode(&p, 1, 1, level);
            let (used, unchecked) = if is_raw(&img) {
                (PAGE_SIZE, 0..0)
            } else {
                let n = u32::from_le_bytes(img[20..24].try_into().unwrap()) as usize;
                (IMAGE_HEADER + n, 24..28)
            };
            for at in (0..used).filter(|a| !(6..8).contains(a) || is_raw(&img)) {
                if unchecked.contains(&at) {
                    continue;
                }
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
        for level in [-1, 1] {
            let img = encode(&sample(), 1, 1, level);
            let mut out = vec![0u8; PAGE_SIZE];
            assert!(decode(&img, 2, &mut out).is_err());
            assert!(decode(&img[..10], 1, &mut out).is_err());
        }
        let mut out = vec![0u8; PAGE_SIZE];
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
