//! In-process engine tests: model-based, concurrency, checkpoints, crashes
//! and corruption. No server involved.
mod checkpoint;
mod concurrency;
mod corruption;
mod durability;
mod meta;
mod model;
mod recovery;

use crate::io::StdIo;
use crate::{Engine, Tree, TreeOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// SplitMix64: small, seedable, good enough to drive workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn key(i: u64) -> Vec<u8> {
    // Variable-length keys: a fixed big-endian prefix keeps the order numeric.
    let mut k = (i as u32).to_be_bytes().to_vec();
    k.extend(std::iter::repeat_n(b'k', (i % 7) as usize));
    k
}

/// A compressible value whose bytes depend on (i, version).
pub fn value(i: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}:{version}:").into_bytes();
    while v.len() < len {
        v.push(b'a' + ((i + version + v.len() as u64) % 4) as u8);
    }
    v.truncate(len);
    v
}

pub fn open(dir: &Path, nbuffers: usize) -> Engine {
    Engine::open(dir, nbuffers, Arc::new(StdIo::new())).unwrap()
}

pub fn tree(e: &Engine, id: u32, compress: i32) -> Tree {
    e.open_tree(
        id,
        TreeOptions {
            compress,
            ..Default::default()
        },
    )
    .unwrap()
}

pub fn contents(t: &Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
    t.scan().map(|r| r.unwrap()).collect()
}

pub fn assert_valid(t: &Tree) {
    if let Err(e) = t.check() {
        panic!("tree {} fails the checker: {e}", t.id());
    }
}
