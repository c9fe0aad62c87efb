//! Tree identity.

/// Names a tree: the database it belongs to and its relation file number.
/// Its files are `<dir>/<db>/<rel>` and `<dir>/<db>/<rel>-<checkpoint>.map`.
/// Database 0 holds trees that belong to no database (tests, tools);
/// `From<u32>` makes one of those.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TreeId {
    pub db: u32,
    pub rel: u32,
}

impl TreeId {
    pub const fn new(db: u32, rel: u32) -> TreeId {
        TreeId { db, rel }
    }
}

impl From<u32> for TreeId {
    fn from(rel: u32) -> TreeId {
        TreeId { db: 0, rel }
    }
}

impl std::fmt::Display for TreeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.db, self.rel)
    }
}

/// A hasher for maps keyed by tree and row ids (small integers, never
/// chosen by an attacker): one multiply per word, where the standard
/// SipHash showed up in profiles of point lookups (a map probe per tree
/// handle and per version key).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// [`IdHasher`] for `HashMap`s.
pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;
