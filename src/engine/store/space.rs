//! Free space of a data file, in 512-byte units.

use std::collections::BTreeMap;

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

/// Free extents below `end`, the file's length in units. Invariant: free
/// runs are disjoint, non-adjacent (merged) and lie below `end`.
#[derive(Debug, Default)]
pub struct FreeSpace {
    free: BTreeMap<u32, u32>,
    pub end: u32,
}

impl FreeSpace {
    /// Free space of a file whose used extents are `used` (any order).
    pub fn from_used(mut used: Vec<Extent>) -> FreeSpace {
        used.sort_by_key(|e| e.off);
        let mut fs = FreeSpace::default();
        for e in used {
            if e.off > fs.end {
                fs.free.insert(fs.end, e.off - fs.end);
            }
            fs.end = fs.end.max(e.end());
        }
        fs
    }

    /// First fit; grows the file when nothing fits.
    pub fn alloc(&mut self, len: u16) -> Extent {
        let want = len as u32;
        let found = self.free.iter().find(|(_, l)| **l >= want).map(|(o, l)| (*o, *l));
        if let Some((off, l)) = found {
            self.free.remove(&off);
            if l > want {
                self.free.insert(off + want, l - want);
            }
            return Extent { off, len };
        }
        let off = self.end;
        self.end += want;
        Extent { off, len }
    }

    pub fn release(&mut self, e: Extent) {
        let (mut off, mut len) = (e.off, e.len as u32);
        debug_assert!(e.end() <= self.end);
        if let Some((&po, &pl)) = self.free.range(..off).next_back() {
            debug_assert!(po + pl <= off, "double free of {e:?}");
            if po + pl == off {
                self.free.remove(&po);
                off = po;
                len += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(off + len)) {
            len += nl;
        }
        self.free.insert(off, len);
    }

    /// Drops trailing free space; returns the new end if it shrank.
    pub fn trim(&mut self) -> Option<u32> {
        let (&o, &l) = self.free.iter().next_back()?;
        (o + l == self.end).then(|| {
            self.free.remove(&o);
            self.end = o;
            o
        })
    }

    pub fn free_units(&self) -> u64 {
        self.free.values().map(|&l| l as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release_merge_trim() {
        let mut fs = FreeSpace::default();
        let a = fs.alloc(4);
        let b = fs.alloc(2);
        let c = fs.alloc(3);
        assert_eq!((a.off, b.off, c.off, fs.end), (0, 4, 6, 9));
        fs.release(a);
        fs.release(b);
        assert_eq!(fs.free_units(), 6);
        assert_eq!(fs.alloc(5).off, 0, "merged run is reused first-fit");
        fs.release(c);
        assert_eq!(fs.trim(), Some(5), "the leftover unit merges with the released tail");
        assert_eq!(fs.end, 5);
        let rebuilt = FreeSpace::from_used(vec![Extent { off: 10, len: 2 }, Extent { off: 0, len: 3 }]);
        assert_eq!(rebuilt.end, 12);
        assert_eq!(rebuilt.free_units(), 7);
    }
}
