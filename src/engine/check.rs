//! The structural checker: verifies a quiescent tree completely and names
//! the first violation.
//!
//! Checked: every page image on disk decodes (magic, lengths, checksum);
//! each level is a chain of right links from its leftmost page whose low
//! key equals the previous page's high key, ending in a page without a high
//! key; keys are strictly ascending and inside [low, high); every internal
//! page's downlinks, in order, are exactly the next level's chain, each
//! child's low key equal to its downlink key; every page that is not on the
//! free list is reachable exactly once.

use crate::buffer::PageIo;
use crate::engine::Tree;
use crate::error::Result;
use crate::latch::LatchMode;
use crate::page::{PageRef, NO_PAGE, PAGE_SIZE};
use std::cmp::Ordering;

/// What a successful check saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    pub levels: u16,
    pub pages: u64,
    pub keys: u64,
}

impl Tree {
    /// Checks the tree; `Err(description)` names the first violation.
    /// Engine errors (I/O, checksums) are reported the same way.
    pub fn check(&self) -> std::result::Result<CheckReport, String> {
        self.check_inner().unwrap_or_else(|e| Err(e.to_string()))
    }

    fn check_inner(&self) -> Result<std::result::Result<CheckReport, String>> {
        let cmp = self.cmp();
        let num = self.num;
        // 1. Every stored image must decode.
        let stored: Vec<u32> = {
            let f = self.file();
            (0..f.npages())
                .filter(|&p| f.entry(p).cur.is_some())
                .collect()
        };
        let mut buf = vec![0u8; PAGE_SIZE];
        for p in stored {
            if let Err(e) = self.inner.read_page(num, p, &mut buf) {
                return Ok(Err(format!("page {p}: {e}")));
            }
        }
        // 2. Structure, level by level from the root.
        let root = self.root();
        let mut report = CheckReport::default();
        let mut seen = vec![false; self.page_count() as usize];
        let mut level_start = root;
        let mut expected_children: Option<Vec<(u32, Option<Vec<u8>>)>> = None;
        let mut top = true;
        loop {
            let mut chain = Vec::new();
            let mut pno = level_start;
            let mut prev_high: Option<Vec<u8>> = None;
            let mut next_children = Vec::new();
            let mut level = None;
            let mut first = true;
            while pno != NO_PAGE {
                if pno as usize >= seen.len() || self.is_free(pno) {
                    return Ok(Err(format!(
                        "page {pno} is linked but free or beyond the tree"
                    )));
                }
                if seen[pno as usize] {
                    return Ok(Err(format!("page {pno} is reachable twice")));
                }
                seen[pno as usize] = true;
                chain.push(pno);
                let g = self.fetch(pno, LatchMode::Shared)?;
                let p: PageRef = g.page();
                if let Err(e) = crate::page::validate(g.data()) {
                    return Ok(Err(format!("page {pno}: {e}")));
                }
                if p.is_deleted() {
                    return Ok(Err(format!("page {pno} is linked but marked deleted")));
                }
                let lv = p.level();
                if *level.get_or_insert(lv) != lv {
                    return Ok(Err(format!(
                        "page {pno} has level {lv} inside level {}",
                        level.unwrap()
                    )));
                }
                if top && p.high().is_some() {
                    return Ok(Err(format!("root page {pno} has a high key")));
                }
                match (first, p.low(), &prev_high) {
                    (true, Some(_), _) => {
                        return Ok(Err(format!("leftmost page {pno} has a low key")))
                    }
                    (false, None, _) => return Ok(Err(format!("page {pno} lacks a low key"))),
                    (false, Some(l), Some(h)) if cmp.cmp(l, h) != Ordering::Equal => {
                        return Ok(Err(format!(
                            "page {pno}'s low key differs from its left sibling's high key"
                        )))
                    }
                    _ => {}
                }
                for i in 0..p.nitems() {
                    let k = p.key(i);
                    if i > 0 && cmp.cmp(p.key(i - 1), k) != Ordering::Less {
                        return Ok(Err(format!(
                            "page {pno}: keys {} and {i} out of order",
                            i - 1
                        )));
                    }
                    let skip_low = lv > 0 && i == 0;
                    if !skip_low && p.low().is_some_and(|l| cmp.cmp(k, l) == Ordering::Less) {
                        return Ok(Err(format!("page {pno}: key {i} below the low key")));
                    }
                    if p.high().is_some_and(|h| cmp.cmp(k, h) != Ordering::Less) {
                        return Ok(Err(format!("page {pno}: key {i} not below the high key")));
                    }
                    if lv > 0 {
                        let low = if i == 0 {
                            p.low().map(<[u8]>::to_vec)
                        } else {
                            Some(k.to_vec())
                        };
                        next_children.push((p.child(i), low));
                    } else {
                        report.keys += 1;
                    }
                }
                if lv > 0 && p.nitems() == 0 {
                    return Ok(Err(format!("internal page {pno} has no downlinks")));
                }
                if p.right() == NO_PAGE && p.high().is_some() {
                    return Ok(Err(format!(
                        "page {pno} has a high key but no right sibling"
                    )));
                }
                if p.right() != NO_PAGE && p.high().is_none() {
                    return Ok(Err(format!(
                        "page {pno} has a right sibling but no high key"
                    )));
                }
                prev_high = p.high().map(<[u8]>::to_vec);
                first = false;
                pno = p.right();
            }
            if let Some(exp) = &expected_children {
                if exp.len() != chain.len() || exp.iter().zip(&chain).any(|((c, _), p)| c != p) {
                    return Ok(Err(format!(
                        "downlinks of level {} do not match the chain below",
                        level.unwrap_or(0) + 1
                    )));
                }
                for ((c, low), _) in exp.iter().zip(&chain) {
                    let g = self.fetch(*c, LatchMode::Shared)?;
                    let clow = g.page().low().map(<[u8]>::to_vec);
                    let same = match (&clow, low) {
                        (None, None) => true,
                        (Some(a), Some(b)) => cmp.cmp(a, b) == Ordering::Equal,
                        _ => false,
                    };
                    if !same {
                        return Ok(Err(format!(
                            "page {c}'s low key differs from its downlink key"
                        )));
                    }
                }
            }
            report.levels += 1;
            report.pages += chain.len() as u64;
            if level == Some(0) {
                break;
            }
            level_start = match next_children.first() {
                Some((c, _)) => *c,
                None => return Ok(Err("internal level without children".into())),
            };
            expected_children = Some(next_children);
            top = false;
        }
        let f = self.file();
        for (p, s) in seen.iter().enumerate() {
            if !*s && !f.entry(p as u32).free {
                return Ok(Err(format!("page {p} is neither reachable nor free")));
            }
        }
        if u64::from(f.live_pages()) != report.pages {
            return Ok(Err(format!(
                "{} pages counted in use, {} reachable",
                f.live_pages(),
                report.pages
            )));
        }
        Ok(Ok(report))
    }
}
