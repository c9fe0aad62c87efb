//! Pruning tables nobody changes any more, from the orioledb checkpointer
//! (a background worker connected to no database).
//!
//! Backends prune the leaves they change and sweep one more leaf every few
//! changes (`rows::sweep_step`), so a table that keeps being written stays
//! pruned. What the last changes of a table leave — a batch UPDATE of every
//! row, committed, then nothing — would wait for VACUUM. So every update
//! and delete counts its tree's superseded versions in shared memory
//! (`Tree::note_superseded`, with the transaction and relation), and once a
//! tree has at least as many as it has pages, its tally grew by at most a
//! 64th of its pages a second since the last round (nobody is writing it
//! much) and its last
//! superseding transaction is older than every snapshot of the cluster, this worker
//! sweeps it whole: prune every leaf, merge the emptied ones, then pack
//! the leaves to about fifteen sixteenths (a busy tree's sweeps leave them
//! half full at least, room for the next changes; nobody makes those here).
//!
//! The worker holds the relation's SHARE UPDATE EXCLUSIVE lock (taken only
//! if free at once, as a session lock by database and relation OID), so
//! DROP, TRUNCATE, rewrites and VACUUM never run beside it. It removes only
//! what needs nothing of a database: dead versions owning no toast values,
//! whose `xmax` is no MultiXactId (looking a multi up needs a backend id),
//! with their row-id map entries; the rest waits for the table's backends
//! or VACUUM. The horizon is the cluster's (`GetOldestNonRemovable...` of
//! shared relations), not the table's database's: a long transaction
//! anywhere holds these sweeps back. Pruning here is unlogged, as a
//! backend's is.

use crate::am::rows::{xid_precedes, PgXacts};
use crate::pg::lock::SessionLock;
use orioledb_engine::btree::{Prune, Pruner};
use orioledb_engine::version::{self, Header, Hints, VacuumState, Xid};
use orioledb_engine::{Superseded, TreeId};
use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// A tree's sweep under way: where the next leaf starts, whether this is
/// the second pass (packing the pruned leaves), and how many superseded
/// versions the tally had when the sweep began.
struct Sweep {
    next: Option<Vec<u8>>,
    packing: bool,
    count: u64,
}

thread_local! {
    /// Sweeps cut short by their round's deadline (or an ERROR), resumed
    /// where they stopped.
    static UNDER_WAY: RefCell<HashMap<TreeId, Sweep>> = RefCell::new(HashMap::new());
    /// Trees whose sweep failed, left alone until the time given, so that
    /// one failing tree neither takes every round nor keeps the others
    /// from their turn.
    static BACKED_OFF: RefCell<HashMap<TreeId, Instant>> = RefCell::new(HashMap::new());
    /// Each tree's tally (superseded versions) and when a round saw it,
    /// at least [`CALM_WINDOW`] before the latest round.
    static LAST_SEEN: RefCell<HashMap<TreeId, (u64, Instant)>> = RefCell::new(HashMap::new());
}

/// How long a tally is watched to tell its write rate: rounds come about
/// a second apart, but closer before a checkpoint or a backup's request,
/// when a busy table's few writes in between could pass for calm.
const CALM_WINDOW: std::time::Duration = std::time::Duration::from_millis(800);

/// Whether a tally that went from `before` to `now` over `elapsed` grew by
/// at most a 64th of the tree's `pages` a second: a whole sweep comes at
/// most every minute or so then, while a busy table's backends prune the
/// leaves they change and sweep the rest a leaf at a time.
fn is_calm(before: u64, now: u64, elapsed: std::time::Duration, pages: u32) -> bool {
    let grown = now.saturating_sub(before) as u128;
    grown * 64 * 1000 <= pages as u128 * elapsed.as_millis()
}

/// How long a tree whose sweep raised an ERROR is left alone.
const BACK_OFF: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether tree `t`'s tally asks for a whole sweep: at least as many
/// superseded versions as pages (and a few), so that a big table is read
/// whole only after a real share of its rows changed.
fn worth_sweeping(t: &Superseded) -> bool {
    t.count >= 64 && t.count >= t.pages as u64
}

/// One round: sweeps the trees that went quiet until `deadline`, leaving
/// the rest of a cut-short sweep for the next round.
pub fn sweep_quiet_trees(deadline: Instant) {
    let engine = crate::pg::engine::engine();
    // SAFETY: computes the proc array's horizons; any process with a PGPROC may.
    let horizon: Xid = unsafe { pg_sys::GetOldestNonRemovableTransactionId(std::ptr::null_mut()) }.into_inner();
    if horizon == 0 {
        return;
    }
    crate::am::rows::forget_committed();
    let trees = engine.superseded_trees();
    // Only calm trees ([`is_calm`]): a tally's transaction is older than the
    // horizon between two short transactions of a busy table too
    // (pgbench's accounts were read whole here every two seconds of
    // TPC-B, 3% of its CPU). A trickle of writes still lets a tree be swept.
    let now = Instant::now();
    let calm: std::collections::HashSet<TreeId> = LAST_SEEN.with(|l| {
        let mut l = l.borrow_mut();
        let calm = trees
            .iter()
            .filter(|t| {
                l.get(&t.id).is_some_and(|&(before, at)| {
                    let elapsed = now.saturating_duration_since(at);
                    elapsed >= CALM_WINDOW && is_calm(before, t.count, elapsed, t.pages)
                })
            })
            .map(|t| t.id)
            .collect();
        // A sighting younger than the window stays the baseline.
        *l = trees
            .iter()
            .map(|t| match l.get(&t.id) {
                Some(&(c, at)) if now.saturating_duration_since(at) < CALM_WINDOW => (t.id, (c, at)),
                _ => (t.id, (t.count, now)),
            })
            .collect();
        calm
    });
    for t in trees {
        if Instant::now() >= deadline {
            return;
        }
        let resuming = UNDER_WAY.with(|u| u.borrow().contains_key(&t.id));
        if !resuming && !(worth_sweeping(&t) && calm.contains(&t.id)) {
            continue;
        }
        // Quiet: the last transaction that superseded a version here is
        // older than every snapshot, so (but for multis and toast owners)
        // what the tally counts is removable.
        if t.xid == 0 || t.rel == 0 || !xid_precedes(t.xid, horizon) {
            continue;
        }
        if BACKED_OFF.with(|b| b.borrow().get(&t.id).is_some_and(|until| Instant::now() < *until)) {
            continue;
        }
        let Some(lock) = SessionLock::try_relation(t.id.db, t.rel, pg_sys::ShareUpdateExclusiveLock) else {
            continue;
        };
        let swept = pgrx::PgTryBuilder::new(|| {
            sweep_tree(&t, horizon, deadline);
            true
        })
        .catch_others(|e| {
            // This process runs no transaction whose abort would release
            // what PostgreSQL code raising the ERROR held (an SLRU's lock,
            // say): release it as PostgreSQL's auxiliary processes do.
            // Rust guards (engine latches) are released by the unwinding.
            // SAFETY: no LWLock is meant to be held here.
            unsafe { pg_sys::LWLockReleaseAll() };
            pgrx::warning!("orioledb: background sweep of tree {} stopped: {}", t.id, crate::pg::caught(&e));
            false
        })
        .execute();
        drop(lock);
        if !swept {
            BACKED_OFF.with(|b| b.borrow_mut().insert(t.id, Instant::now() + BACK_OFF));
        }
    }
}

/// Sweeps tree `t` from where its sweep stopped, until its end or the
/// deadline: a pass pruning every leaf (merging emptied ones), then one
/// packing them (a leaf below seven eighths full takes its right
/// sibling's first items); takes the versions the tally had at the
/// sweep's start off it when the second pass reaches the end.
fn sweep_tree(t: &Superseded, horizon: Xid, deadline: Instant) {
    let engine = crate::pg::engine::engine();
    let pruner = Arc::new(QuietPruner { tree: t.id, horizon });
    // The lock keeps DROP and TRUNCATE away; a tree gone before it was
    // taken (or never ours) is not swept.
    let Ok(tree) = engine.tree_pruned(t.id, pruner) else {
        UNDER_WAY.with(|u| u.borrow_mut().remove(&t.id));
        return;
    };
    let Some(tree) = crate::am::layout::table::ordered_quietly(tree) else {
        return;
    };
    let mut sweep = UNDER_WAY
        .with(|u| u.borrow_mut().remove(&t.id))
        .unwrap_or(Sweep {
            next: None,
            packing: false,
            count: t.count,
        });
    loop {
        // Kept at every step: an ERROR resumes here, not from the start.
        UNDER_WAY.with(|u| {
            u.borrow_mut().insert(
                t.id,
                Sweep {
                    next: sweep.next.clone(),
                    ..sweep
                },
            )
        });
        let at = sweep.next.as_deref();
        let next = if sweep.packing {
            tree.pack_leaf_at(at)
        } else {
            tree.prune_leaf_at(at)
        }
        .unwrap_or_else(|e| crate::pg::engine::report(e));
        crate::am::layout::table::delete_doomed_map_entries();
        match next {
            None if !sweep.packing => {
                sweep.packing = true;
                sweep.next = None;
            }
            None => {
                UNDER_WAY.with(|u| u.borrow_mut().remove(&t.id));
                engine.swept(t.id, sweep.count);
                return;
            }
            Some(k) if Instant::now() >= deadline => {
                sweep.next = Some(k);
                UNDER_WAY.with(|u| u.borrow_mut().insert(t.id, sweep));
                return;
            }
            Some(k) => sweep.next = Some(k),
        }
    }
}

/// Transaction states as this process may know them. It is in no proc
/// array slot, and `TransactionIdIsInProgress` skips the slot its PGPROC's
/// stale `pgxactoff` names — some backend's, whose running transaction it
/// then calls over (aborted: its versions were removed). So nothing here
/// asks the proc array: an id not older than the round's horizon (the
/// oldest xid or xmin of every slot, computed without that skip) may be
/// running; an older one has ended, and clog says how. Multis, which ask
/// the proc array too, count as running.
struct BeforeHorizon(Xid);

impl version::Xacts for BeforeHorizon {
    fn is_current(&self, _xid: Xid) -> bool {
        false
    }
    fn in_progress(&self, xid: Xid) -> bool {
        !xid_precedes(xid, self.0)
    }
    fn did_commit(&self, xid: Xid) -> bool {
        !self.in_progress(xid) && version::Xacts::did_commit(&PgXacts, xid)
    }
    fn multi_running(&self, _multi: Xid) -> bool {
        true
    }
    fn multi_update_xid(&self, _multi: Xid) -> Xid {
        // Never asked: multis are kept before the rules run (`prune`).
        0
    }
}

/// The pruner of a quiet sweep: removes what is dead to every snapshot of
/// the cluster and needs nothing but the tree itself (see the module
/// comment); keeps everything else as it is (no hints).
struct QuietPruner {
    tree: TreeId,
    horizon: Xid,
}

impl Pruner for QuietPruner {
    fn prune(&self, key: &[u8], value: &[u8]) -> Prune {
        if !crate::am::layout::table::is_version_key(key) {
            return Prune::Keep;
        }
        let Some(h) = Header::decode(value, orioledb_engine::key_format::own_id(key)) else {
            return Prune::Keep;
        };
        if h.is_multi() || !version::tail_and_toast(&h, value).1.is_empty() {
            return Prune::Keep;
        }
        let removable = |x: Xid| xid_precedes(x, self.horizon);
        let xacts = BeforeHorizon(self.horizon);
        if version::vacuum_state(&h, &xacts, &removable, &mut Hints::default()) != VacuumState::Dead {
            return Prune::Keep;
        }
        crate::am::layout::hot::version_pruned(self.tree, key, &h, value);
        Prune::Remove
    }
}
