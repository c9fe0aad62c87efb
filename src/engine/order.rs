//! Key order. The tree never interprets key bytes itself; it asks a
//! [`KeyCmp`]. The server plugs in the btree operator class's comparison
//! function so the tree's order is exactly the btree index's.

use std::cmp::Ordering;

/// A total order on encoded keys. Invariant: consistent for the life of a
/// tree (changing it re-keys the tree, which is a rebuild, not a swap).
pub trait KeyCmp: Send + Sync {
    fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering;
    /// True when [`KeyCmp::cmp`] is plain byte order: searches then
    /// compare slices inline instead of calling through the trait object
    /// at every step (most trees are byte-ordered).
    fn bytewise(&self) -> bool {
        false
    }
}

/// `cmp.cmp(a, b)`, inline when `cmp` is byte order.
#[inline]
pub fn compare(cmp: &dyn KeyCmp, a: &[u8], b: &[u8]) -> Ordering {
    if cmp.bytewise() {
        a.cmp(b)
    } else {
        cmp.cmp(a, b)
    }
}

/// Plain byte order (memcmp, then length): the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bytewise;

impl KeyCmp for Bytewise {
    fn cmp(&self, a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }
    fn bytewise(&self) -> bool {
        true
    }
}
