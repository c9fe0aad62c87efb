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
use crate::order::KeyCmp;
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

/// A check's outcome: `Ok(Err(description))` names a violation, `Err` an
/// engine error (I/O, checksums) that stopped the check.
type Checked<T> = Result<std::result::Result<T, String>>;

/// A child's page number and the low key it must have (None: leftmost).
type Downlink = (u32, Option<Vec<u8>>);

/// One level as [`Tree::check_chain`] walked it.
#[derive(Default)]
struct Level {
    /// Its pages, left to right.
    chain: Vec<u32>,
    /// Its level number (None: no page seen).
    level: Option<u16>,
    /// An internal level's downlinks, in order.
    children: Vec<Downlink>,
    /// A leaf level's keys.
    keys: u64,
}

impl Tree {
    /// Checks the tree; `Err(description)` names the first violation.
    /// Engine errors (I/O, checksums) are reported the same way.
    pub fn check(&self) -> std::result::Result<CheckReport, String> {
        self.check_inner().unwrap_or_else(|e| Err(e.to_string()))
    }

    /// The check proper: `Ok(Err(description))` for a violation, `Err`
    /// for an engine error that stopped it. Walks level by level from the
    /// root, each level's chain checked against the downlinks of the level
    /// above it.
    fn check_inner(&self) -> Checked<CheckReport> {
        if let Err(v) = self.check_images()? {
            return Ok(Err(v));
        }
        let root = self.root();
        let mut report = CheckReport::default();
        let mut seen = vec![false; self.page_count() as usize];
        let mut level_start = root;
        let mut expected_children: Option<Vec<Downlink>> = None;
        let mut top = true;
        loop {
            let level = match self.check_chain(level_start, top, &mut seen)? {
                Ok(level) => level,
                Err(v) => return Ok(Err(v)),
            };
            if let Some(exp) = &expected_children {
                if let Err(v) = self.check_downlinks(exp, &level)? {
                    return Ok(Err(v));
                }
            }
            report.levels += 1;
            report.pages += level.chain.len() as u64;
            report.keys += level.keys;
            if level.level == Some(0) {
                break;
            }
            level_start = match level.children.first() {
                Some((c, _)) => *c,
                None => return Ok(Err("internal level without children".into())),
            };
            expected_children = Some(level.children);
            top = false;
        }
        Ok(self.check_accounting(&seen, &report).map(|()| report))
    }

    /// Stage 1: every stored page image decodes (magic, lengths, checksum).
    fn check_images(&self) -> Checked<()> {
        let stored: Vec<u32> = {
            let f = self.file();
            (0..f.npages())
                .filter(|&p| f.entry(p).cur.is_some())
                .collect()
        };
        let mut buf = vec![0u8; PAGE_SIZE];
        for p in stored {
            if let Err(e) = self.inner.read_page(self.num, p, &mut buf) {
                return Ok(Err(format!("page {p}: {e}")));
            }
        }
        Ok(Ok(()))
    }

    /// Walks one level's chain of right links from `start` (its leftmost
    /// page; `top`: the root level), marking each page in `seen`, and
    /// checks each page's links and bounds against its left sibling. Each
    /// page is latched shared only while it is looked at.
    fn check_chain(&self, start: u32, top: bool, seen: &mut [bool]) -> Checked<Level> {
        let cmp = self.cmp();
        let mut out = Level::default();
        let mut pno = start;
        let mut prev_high: Option<Vec<u8>> = None;
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
            out.chain.push(pno);
            let g = self.fetch(pno, LatchMode::Shared)?;
            let p: PageRef = g.page();
            if let Err(e) = crate::page::validate(g.data()) {
                return Ok(Err(format!("page {pno}: {e}")));
            }
            if p.is_deleted() {
                return Ok(Err(format!("page {pno} is linked but marked deleted")));
            }
            let lv = p.level();
            if *out.level.get_or_insert(lv) != lv {
                return Ok(Err(format!(
                    "page {pno} has level {lv} inside level {}",
                    out.level.unwrap()
                )));
            }
            if top && p.high().is_some() {
                return Ok(Err(format!("root page {pno} has a high key")));
            }
            match (first, p.low(), &prev_high) {
                (true, Some(_), _) => return Ok(Err(format!("leftmost page {pno} has a low key"))),
                (false, None, _) => return Ok(Err(format!("page {pno} lacks a low key"))),
                (false, Some(l), Some(h)) if cmp.cmp(l, h) != Ordering::Equal => {
                    return Ok(Err(format!(
                        "page {pno}'s low key differs from its left sibling's high key"
                    )))
                }
                _ => {}
            }
            if let Err(v) = check_items(&*cmp, pno, p, &mut out) {
                return Ok(Err(v));
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
        Ok(Ok(out))
    }

    /// Checks that the downlinks `exp` of the level above are exactly
    /// `below`'s chain, in order, and that each child's low key equals its
    /// downlink key. Children are latched shared one at a time.
    fn check_downlinks(&self, exp: &[Downlink], below: &Level) -> Checked<()> {
        let cmp = self.cmp();
        let chain = &below.chain;
        if exp.len() != chain.len() || exp.iter().zip(chain).any(|((c, _), p)| c != p) {
            return Ok(Err(format!(
                "downlinks of level {} do not match the chain below",
                below.level.unwrap_or(0) + 1
            )));
        }
        for ((c, low), _) in exp.iter().zip(chain) {
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
        Ok(Ok(()))
    }

    /// The last stage: every page not reached is free, and the file's
    /// count of pages in use is the number reached.
    fn check_accounting(
        &self,
        seen: &[bool],
        report: &CheckReport,
    ) -> std::result::Result<(), String> {
        let f = self.file();
        for (p, s) in seen.iter().enumerate() {
            if !*s && !f.entry(p as u32).free {
                return Err(format!("page {p} is neither reachable nor free"));
            }
        }
        if u64::from(f.live_pages()) != report.pages {
            return Err(format!(
                "{} pages counted in use, {} reachable",
                f.live_pages(),
                report.pages
            ));
        }
        Ok(())
    }
}

/// Checks the items of page `pno` (`p`): keys strictly ascending and
/// inside [low, high) (but an internal page's first key, which is not
/// checked against the low key: its child's expected low key is the
/// page's own), and an internal page not empty. Adds a leaf's keys to
/// `out.keys`, an internal page's downlinks to `out.children`.
fn check_items(
    cmp: &dyn KeyCmp,
    pno: u32,
    p: PageRef,
    out: &mut Level,
) -> std::result::Result<(), String> {
    let lv = p.level();
    for i in 0..p.nitems() {
        let k = p.key(i);
        if i > 0 && cmp.cmp(p.key(i - 1), k) != Ordering::Less {
            return Err(format!("page {pno}: keys {} and {i} out of order", i - 1));
        }
        let skip_low = lv > 0 && i == 0;
        if !skip_low && p.low().is_some_and(|l| cmp.cmp(k, l) == Ordering::Less) {
            return Err(format!("page {pno}: key {i} below the low key"));
        }
        if p.high().is_some_and(|h| cmp.cmp(k, h) != Ordering::Less) {
            return Err(format!("page {pno}: key {i} not below the high key"));
        }
        if lv > 0 {
            let low = if i == 0 {
                p.low().map(<[u8]>::to_vec)
            } else {
                Some(k.to_vec())
            };
            out.children.push((p.child(i), low));
        } else {
            out.keys += 1;
        }
    }
    if lv > 0 && p.nitems() == 0 {
        return Err(format!("internal page {pno} has no downlinks"));
    }
    Ok(())
}
