//! Map files: `<tree>-<checkpoint>.map` describes one tree's checkpoint image.
//!
//! ```text
//! 0  magic u32 "ORDM" | version u32
//! 8  checkpoint u64
//! 16 root u32 | npages u32 | compress i32 | reserved u32
//! 32 id limit u64 (row ids below it may be in use)
//! 40 npages entries of 8 bytes: offset u32 (units) | length u16 (units) | flags u16
//! end: crc32c u32 of everything before it
//! ```
//! An entry with flag FREE is a page number on the free list; length 0 with no
//! flag is a page that was never written (only legal for free pages).

use crate::store::space::Extent;

const MAGIC: u32 = u32::from_le_bytes(*b"ORDM");
const VERSION: u32 = 2;
const HEAD: usize = 40;
const F_FREE: u16 = 1;

/// One tree's image at a checkpoint. Invariant: `pages.len()` is the
/// tree's page count at the checkpoint; `None` entries are free pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeMap {
    pub checkpoint: u64,
    pub root: u32,
    pub compress: i32,
    /// The tree's row-id allocation limit at the checkpoint.
    pub id_limit: u64,
    pub pages: Vec<Option<Extent>>,
}

impl TreeMap {
    /// Where page `page`'s entry starts in the file (for error offsets).
    pub const fn entry_offset(page: usize) -> u64 {
        (HEAD + 8 * page) as u64
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD + 8 * self.pages.len() + 4);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.checkpoint.to_le_bytes());
        out.extend_from_slice(&self.root.to_le_bytes());
        out.extend_from_slice(&(self.pages.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.compress.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.id_limit.to_le_bytes());
        for p in &self.pages {
            let (off, len, flags) = match p {
                Some(e) => (e.off, e.len, 0),
                None => (0, 0, F_FREE),
            };
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&flags.to_le_bytes());
        }
        let c = crc32c::crc32c(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out
    }

    /// Decodes and validates; the error describes the first problem.
    pub fn decode(b: &[u8]) -> Result<TreeMap, String> {
        if b.len() < HEAD + 4 {
            return Err(format!("map file too short ({} bytes)", b.len()));
        }
        let body = &b[..b.len() - 4];
        let stored = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap());
        if crc32c::crc32c(body) != stored {
            return Err("map file checksum mismatch".into());
        }
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        if u32at(0) != MAGIC {
            return Err("bad map file magic".into());
        }
        if u32at(4) != VERSION {
            return Err(format!("unsupported map file version {}", u32at(4)));
        }
        let checkpoint = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let root = u32at(16);
        let npages = u32at(20) as usize;
        let compress = u32at(24) as i32;
        let id_limit = u64::from_le_bytes(b[32..40].try_into().unwrap());
        if body.len() != HEAD + 8 * npages {
            return Err(format!("map file length does not match its {npages} pages"));
        }
        if npages == 0 || root as usize >= npages {
            return Err(format!("map root {root} outside its {npages} pages"));
        }
        if !(-1..=22).contains(&compress) {
            return Err(format!("map compression level {compress} out of range"));
        }
        let mut pages = Vec::with_capacity(npages);
        for i in 0..npages {
            let o = HEAD + 8 * i;
            let off = u32at(o);
            let len = u16::from_le_bytes(b[o + 4..o + 6].try_into().unwrap());
            let flags = u16::from_le_bytes(b[o + 6..o + 8].try_into().unwrap());
            pages.push(match flags {
                F_FREE => None,
                0 if len > 0
                    && len as usize <= crate::store::image::MAX_UNITS
                    && off.checked_add(len as u32).is_some() =>
                {
                    Some(Extent { off, len })
                }
                _ => return Err(format!("bad map entry for page {i}")),
            });
        }
        if pages[root as usize].is_none() {
            return Err(format!("map root {root} is a free page"));
        }
        Ok(TreeMap {
            checkpoint,
            root,
            compress,
            id_limit,
            pages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let m = TreeMap {
            checkpoint: 5,
            root: 1,
            compress: 3,
            id_limit: 4096,
            pages: vec![
                None,
                Some(Extent { off: 0, len: 17 }),
                Some(Extent { off: 17, len: 2 }),
            ],
        };
        let b = m.encode();
        assert_eq!(TreeMap::decode(&b).unwrap(), m);
        for at in 0..b.len() {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert!(TreeMap::decode(&bad).is_err(), "flip at {at}");
        }
        for cut in 0..b.len() {
            assert!(TreeMap::decode(&b[..cut]).is_err());
        }
    }
}
