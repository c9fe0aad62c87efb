//! PostgreSQL's cost-based VACUUM delay for engine pages.
//!
//! PostgreSQL throttles VACUUM and ANALYZE (`vacuum_cost_delay`, and
//! autovacuum's `autovacuum_vacuum_cost_delay`, 2 ms by default) through
//! its buffer manager: every buffer hit, read and first dirtying adds
//! `vacuum_cost_page_hit` / `_miss` / `_dirty` to a balance, and
//! `vacuum_delay_point` sleeps once it passes `vacuum_cost_limit`. Engine
//! pages never pass through that buffer manager, so without this an
//! autovacuum of an orioledb table ran at full speed beside the
//! foreground work, and `vacuum_cost_delay` did nothing. The engine
//! counts the pages a thread reads from their files and dirties
//! (`buffer::io_counts`); the page visits are the caller's to count.
use orioledb_engine::buffer::{io_counts, IoCounts};
use pgrx::pg_sys;

/// Charges a VACUUM's or ANALYZE's engine page work as PostgreSQL charges
/// buffers. Invariant: `seen` is this thread's [`IoCounts`] at the last
/// charge (or the meter's creation), so each read and dirtying is charged
/// once.
pub struct CostMeter {
    seen: IoCounts,
}

impl Default for CostMeter {
    fn default() -> Self {
        CostMeter { seen: io_counts() }
    }
}

impl CostMeter {
    /// Adds `pages` page visits (reads from the files among them) and the
    /// pages dirtied since the last charge to the balance (when cost-based
    /// delay is active) and to the counts autovacuum's log reports.
    pub fn charge(&mut self, pages: u64) {
        let now = io_counts();
        let read = now.read - self.seen.read;
        let dirtied = now.dirtied - self.seen.dirtied;
        self.seen = now;
        let hits = pages.saturating_sub(read);
        // SAFETY: the vacuum cost globals, read and written by this
        // single-threaded backend as bufmgr.c does.
        unsafe {
            pg_sys::VacuumPageHit += hits as i64;
            pg_sys::VacuumPageMiss += read as i64;
            pg_sys::VacuumPageDirty += dirtied as i64;
            if pg_sys::VacuumCostActive {
                let cost = hits as i64 * pg_sys::VacuumCostPageHit as i64
                    + read as i64 * pg_sys::VacuumCostPageMiss as i64
                    + dirtied as i64 * pg_sys::VacuumCostPageDirty as i64;
                let balance = pg_sys::VacuumCostBalance as i64 + cost;
                pg_sys::VacuumCostBalance = balance.min(i32::MAX as i64) as i32;
            }
        }
    }

    /// [`CostMeter::charge`], then PostgreSQL's delay point: it sleeps
    /// while the balance is over the limit and checks for interrupts.
    pub fn charge_and_pause(&mut self, pages: u64) {
        self.charge(pages);
        // SAFETY: a plain call; it may raise (a cancel), through the guard.
        unsafe { pg_sys::vacuum_delay_point() };
    }
}

/// Pages between two checks of [`failsafe`], as heap's VACUUM checks
/// every 4 GB of table.
pub const FAILSAFE_EVERY_PAGES: u64 = 4 * 1024 * 1024 * 1024 / 8192;

/// Heap's wraparound failsafe (`lazy_check_wraparound_failsafe`): once the
/// table's `relfrozenxid` or `relminmxid` is dangerously old
/// (`vacuum_failsafe_age`), the rest of this VACUUM runs without the
/// cost-based delay, with heap's WARNING.
///
/// # Safety
/// `rel` is the open relation VACUUM works on.
pub unsafe fn failsafe(rel: pg_sys::Relation) {
    // SAFETY: per the contract; the vacuum cost globals belong to this
    // single-threaded backend.
    unsafe {
        if !pg_sys::VacuumCostActive {
            return;
        }
        let class = (*rel).rd_rel;
        if !pg_sys::vacuum_xid_failsafe_check((*class).relfrozenxid, (*class).relminmxid) {
            return;
        }
        pg_sys::VacuumCostActive = false;
        pg_sys::VacuumCostBalance = 0;
        let name = super::rel_name(rel);
        pgrx::warning!(
            "bypassing the cost-based delay of table \"{name}\" as a failsafe against transaction id wraparound"
        );
    }
}
