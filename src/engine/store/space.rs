//! Extents of a data file, in 512-byte units (free space itself is the
//! per-tree bitmap in `meta.rs`).

/// A run of units in a data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    pub off: u32,
    pub len: u16,
}

impl Extent {
    pub fn end(&self) -> u32 {
        self.off + self.len as u32
    }
}
