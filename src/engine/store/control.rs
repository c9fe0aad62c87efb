//! The control file `control`: which checkpoint is durable, and which trees
//! it holds.
//!
//! ```text
//! version 8: 0 magic u32 "ORDC" | version u32 | checkpoint u64 | redo position u64 |
//!            24 ntrees u32 | ntrees x (db u32, rel u32, map checkpoint u64) | crc32c u32
//! version 7: the same with ntrees x (db u32, rel u32): every map of the checkpoint's
//! ```
//! A tree's map checkpoint names its map file `<rel>-<map checkpoint>.map`: a
//! checkpoint writes maps only for trees that changed since their last one, so
//! an idle tree keeps the map of the checkpoint that last changed it (version
//! 7 wrote every map at every checkpoint, so its trees' maps are the
//! checkpoint's own; it is read, and written back as version 8).
//! The version also names the format of everything the checkpoint holds:
//! version 3 came with the short row-version header (`version.rs`), version 4
//! with that header's 9 bytes (no `ctid`), version 5 with 7-byte row-id map
//! keys (`key_format::map_key`), version 6 with tuple tails without heap's padding
//! (`version::elided_pad`), version 7 with 3-byte item heads in pages
//! (`page.rs`); version 8 changed only this file. So the files of versions 1 to 6 (earlier builds; version 1
//! had no tree list) are refused with a message that says so, never
//! misread.
//! It is replaced atomically (write a temporary file, sync, rename, sync the
//! directory): the rename is the moment a checkpoint becomes durable.
//!
//! The tree list is what lets loading tell a lost map file from a leftover:
//! a data file of a listed tree is never removed (without its map the tree
//! is quarantined), one of an unlisted tree is garbage (created after the
//! checkpoint, so WAL replay recreates it, or dropped before it).

use crate::id::TreeId;

const MAGIC: u32 = u32::from_le_bytes(*b"ORDC");
const VERSION: u32 = 8;
/// The oldest version whose trees this build reads.
const OLDEST: u32 = 7;
/// Length of a version 1 file, and the smallest length of any version.
pub const CONTROL_LEN: usize = 28;

/// Contents of the control file. Invariant: `checkpoint` names a checkpoint
/// whose map files were all durable before this was written, and `trees`
/// lists every tree that checkpoint holds, sorted, each with the checkpoint
/// (at most `checkpoint`) whose map file describes it; a quarantined tree's
/// map may be missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub checkpoint: u64,
    /// Opaque to the engine: the server stores the WAL position to replay from.
    pub redo: u64,
    /// (tree, the checkpoint of its map file).
    pub trees: Vec<(TreeId, u64)>,
}

impl Control {
    /// What a directory without a control file has: no checkpoint, no trees.
    pub fn empty() -> Control {
        Control {
            checkpoint: 0,
            redo: 0,
            trees: Vec::new(),
        }
    }

    /// The current encoding.
    pub fn encode(&self) -> Vec<u8> {
        let trees = &self.trees;
        let mut b = Vec::with_capacity(CONTROL_LEN + 4 + trees.len() * 16);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.checkpoint.to_le_bytes());
        b.extend_from_slice(&self.redo.to_le_bytes());
        b.extend_from_slice(&(trees.len() as u32).to_le_bytes());
        for (t, map) in trees {
            b.extend_from_slice(&t.db.to_le_bytes());
            b.extend_from_slice(&t.rel.to_le_bytes());
            b.extend_from_slice(&map.to_le_bytes());
        }
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Control, String> {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        if b.len() < CONTROL_LEN {
            return Err(format!(
                "control file has {} bytes, expected at least {CONTROL_LEN}",
                b.len()
            ));
        }
        // The version decides where the checksum is; it is checked before
        // anything read here is trusted.
        let v = u32_at(4);
        let entry = if v >= 8 { 16 } else { 8 };
        let want = match v {
            1 => CONTROL_LEN,
            2..=VERSION if b.len() >= CONTROL_LEN + 4 => (u32_at(24) as usize)
                .checked_mul(entry)
                .and_then(|n| n.checked_add(CONTROL_LEN + 4))
                .unwrap_or(usize::MAX),
            2..=VERSION => CONTROL_LEN + 4,
            // A damaged version field: the checksum (at either place) says so.
            _ => b.len(),
        };
        if b.len() != want {
            return Err(format!(
                "control file has {} bytes, expected {want}",
                b.len()
            ));
        }
        let end = b.len() - 4;
        if crc32c::crc32c(&b[..end]) != u32_at(end) {
            return Err("control file checksum mismatch".into());
        }
        if u32_at(0) != MAGIC {
            return Err("bad control file magic".into());
        }
        if (1..OLDEST).contains(&v) {
            return Err(format!(
                "control file version {v} was written by an earlier build of orioledb_rs, whose \
                 row format this build does not read (it reads version {VERSION}): dump the \
                 orioledb tables with that build and restore them into a new cluster"
            ));
        }
        if !(OLDEST..=VERSION).contains(&v) {
            return Err(format!("unsupported control file version {v}"));
        }
        let checkpoint = u64_at(8);
        let trees: Vec<(TreeId, u64)> = (0..u32_at(24) as usize)
            .map(|i| {
                let at = 28 + i * entry;
                let map = if v >= 8 { u64_at(at + 8) } else { checkpoint };
                (TreeId::new(u32_at(at), u32_at(at + 4)), map)
            })
            .collect();
        if let Some((t, map)) = trees.iter().find(|(_, m)| *m > checkpoint) {
            return Err(format!(
                "control file names map checkpoint {map} of tree {}/{}, after its checkpoint {checkpoint}",
                t.db, t.rel
            ));
        }
        Ok(Control {
            checkpoint,
            redo: u64_at(16),
            trees,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        for trees in [vec![], vec![(TreeId::new(5, 16384), 42), (TreeId::new(7, 1), 3)]] {
            let c = Control {
                checkpoint: 42,
                redo: 0x1234_5678,
                trees,
            };
            let b = c.encode();
            assert_eq!(Control::decode(&b), Ok(c));
            for at in 0..b.len() {
                let mut bad = b.clone();
                bad[at] ^= 0x80;
                assert!(Control::decode(&bad).is_err(), "flip at {at}");
            }
            for cut in 0..b.len() {
                assert!(Control::decode(&b[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    /// Control files of earlier builds (version 1 without a tree list,
    /// version 2 with the long row header, version 3 with a `ctid` in the
    /// short one, version 4 with 9-byte map keys, version 5 with padded
    /// tuple tails, version 6 with 4-byte item heads) are refused, saying
    /// why.
    #[test]
    fn earlier_versions_are_refused_by_name() {
        for old in [2u32, 3, 4, 5, 6] {
            let mut b = Control::empty().encode();
            b[4..8].copy_from_slice(&old.to_le_bytes());
            let end = b.len() - 4;
            let c = crc32c::crc32c(&b[..end]);
            b[end..].copy_from_slice(&c.to_le_bytes());
            let e = Control::decode(&b).unwrap_err();
            assert!(e.contains("earlier build") && e.contains("dump"), "{e}");
        }
    }

    /// A tree count that disagrees with the length is an error even when
    /// the checksum matches (it is never read past the end).
    #[test]
    fn a_tree_count_beyond_the_file_is_refused() {
        let c = Control {
            checkpoint: 1,
            redo: 2,
            trees: vec![(TreeId::new(5, 16384), 1)],
        };
        for n in [2u32, 1000] {
            let mut b = c.encode();
            b[24..28].copy_from_slice(&n.to_le_bytes());
            let end = b.len() - 4;
            let crc = crc32c::crc32c(&b[..end]);
            b[end..].copy_from_slice(&crc.to_le_bytes());
            assert!(Control::decode(&b).unwrap_err().contains("bytes"), "{n} trees");
        }
    }

    /// Version 7 (every tree's map of the checkpoint's own number) is read.
    #[test]
    fn version_7_is_read_with_maps_of_its_checkpoint() {
        let mut b = Vec::new();
        b.extend_from_slice(b"ORDC");
        b.extend_from_slice(&7u32.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        b.extend_from_slice(&77u64.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        for (db, rel) in [(5u32, 16384u32), (7, 1)] {
            b.extend_from_slice(&db.to_le_bytes());
            b.extend_from_slice(&rel.to_le_bytes());
        }
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        let c = Control::decode(&b).unwrap();
        assert_eq!(c.checkpoint, 9);
        assert_eq!(c.trees, vec![(TreeId::new(5, 16384), 9), (TreeId::new(7, 1), 9)]);
    }

    /// A map checkpoint after the control file's own cannot be right.
    #[test]
    fn a_map_after_the_checkpoint_is_refused() {
        let c = Control {
            checkpoint: 4,
            redo: 0,
            trees: vec![(TreeId::new(5, 16384), 5)],
        };
        assert!(Control::decode(&c.encode()).unwrap_err().contains("after its checkpoint"));
    }

    #[test]
    fn version_1_is_refused() {
        let mut b = Vec::new();
        b.extend_from_slice(b"ORDC");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        b.extend_from_slice(&77u64.to_le_bytes());
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        assert!(Control::decode(&b).unwrap_err().contains("earlier build"));
        let mut bad = b.clone();
        bad[12] ^= 1;
        assert!(Control::decode(&bad).is_err());
    }
}
