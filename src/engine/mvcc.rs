//! Row versions and their visibility, with PostgreSQL's transaction
//! semantics but no PostgreSQL: the server answers questions about
//! transactions through [`XactOracle`] (backed by `XidInMVCCSnapshot`,
//! `TransactionIdIsCurrentTransactionId`, `TransactionIdDidCommit`, ...), and
//! tests answer them from a model.
//!
//! A key's versions form a chain, newest first, stored as one value:
//!
//! ```text
//! chain:   nversions u16 | version...
//! version: xmin u32 | xmax u32 | cmin u32 | cmax u32 | flags u16 | len u32 | data
//! ```
//! `cmin`/`cmax` are kept separately (no combo ids): a version's inserting
//! and deleting command ids are only ever compared within their own
//! transaction, and storing both is cheaper than a combo-id map.
//!
//! The rules mirror heap's (`heapam_visibility.c`): a version is visible to
//! an MVCC snapshot when its inserter is visible and its deleter (if any) is
//! not; "visible" for a transaction id means committed and not in the
//! snapshot, or the current transaction with an earlier command id.

/// Transaction id (32-bit, as in PostgreSQL). 0 = invalid.
pub type Xid = u32;
/// Command id within a transaction.
pub type Cid = u32;

pub const INVALID_XID: Xid = 0;

/// Hint and state bits of a version.
pub mod flags {
    /// xmin is known committed (hint; saves a clog lookup).
    pub const XMIN_COMMITTED: u16 = 1;
    /// xmin is known aborted: the version never existed.
    pub const XMIN_ABORTED: u16 = 2;
    /// xmax is known committed (hint).
    pub const XMAX_COMMITTED: u16 = 4;
    /// xmax is known aborted: treat as no xmax.
    pub const XMAX_ABORTED: u16 = 8;
    /// xmax only locks the row (SELECT ... FOR ...), it did not delete it.
    pub const XMAX_LOCK_ONLY: u16 = 16;
    /// The deleter changed key columns (or deleted the row): FOR KEY SHARE conflicts.
    pub const KEYS_UPDATED: u16 = 32;
    /// This version was replaced by a newer one in the same chain (UPDATE),
    /// rather than deleted.
    pub const UPDATED: u16 = 64;
}

/// What the engine needs to know about transactions. Implementations must
/// be consistent within one call (the server's answers come from one
/// snapshot and the transaction's own state).
pub trait XactOracle {
    /// Is `xid` the current transaction or one of its live subtransactions?
    fn is_current(&self, xid: Xid) -> bool;
    /// Does the snapshot consider `xid` still running (so its effects are
    /// invisible)?
    fn in_snapshot(&self, xid: Xid) -> bool;
    /// Is `xid` still running right now (any backend)?
    fn in_progress(&self, xid: Xid) -> bool;
    /// Did `xid` commit? Only asked once `in_progress` is false.
    fn did_commit(&self, xid: Xid) -> bool;
    /// The scan's command id: versions made by the current transaction at
    /// or after it are not visible yet.
    fn current_cid(&self) -> Cid;
}

/// One row version (header fields decoded; `data` is the tuple's bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub xmin: Xid,
    pub xmax: Xid,
    pub cmin: Cid,
    pub cmax: Cid,
    pub flags: u16,
    pub data: Vec<u8>,
}

const VERSION_HEADER: usize = 22;

impl Version {
    pub fn new(xmin: Xid, cmin: Cid, data: Vec<u8>) -> Version {
        Version {
            xmin,
            xmax: INVALID_XID,
            cmin,
            cmax: 0,
            flags: 0,
            data,
        }
    }

    fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }

    /// Has a (possibly uncommitted) deleter or updater, not just a locker?
    pub fn has_deleter(&self) -> bool {
        self.xmax != INVALID_XID
            && !self.has(flags::XMAX_LOCK_ONLY)
            && !self.has(flags::XMAX_ABORTED)
    }
}

/// Encodes a chain (newest version first).
pub fn encode_chain(chain: &[Version]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        2 + chain
            .iter()
            .map(|v| VERSION_HEADER + v.data.len())
            .sum::<usize>(),
    );
    out.extend_from_slice(&(chain.len() as u16).to_le_bytes());
    for v in chain {
        out.extend_from_slice(&v.xmin.to_le_bytes());
        out.extend_from_slice(&v.xmax.to_le_bytes());
        out.extend_from_slice(&v.cmin.to_le_bytes());
        out.extend_from_slice(&v.cmax.to_le_bytes());
        out.extend_from_slice(&v.flags.to_le_bytes());
        out.extend_from_slice(&(v.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&v.data);
    }
    out
}

/// Decodes a chain; a description of the problem for malformed bytes.
pub fn decode_chain(b: &[u8]) -> Result<Vec<Version>, String> {
    let rd32 = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    if b.len() < 2 {
        return Err("version chain truncated".into());
    }
    let n = u16::from_le_bytes([b[0], b[1]]) as usize;
    let mut at = 2;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if at + VERSION_HEADER > b.len() {
            return Err(format!("version {i} header truncated"));
        }
        let len = rd32(at + 18) as usize;
        if at + VERSION_HEADER + len > b.len() {
            return Err(format!("version {i} data truncated"));
        }
        out.push(Version {
            xmin: rd32(at),
            xmax: rd32(at + 4),
            cmin: rd32(at + 8),
            cmax: rd32(at + 12),
            flags: u16::from_le_bytes([b[at + 16], b[at + 17]]),
            data: b[at + VERSION_HEADER..at + VERSION_HEADER + len].to_vec(),
        });
        at += VERSION_HEADER + len;
    }
    if at != b.len() {
        return Err(format!("{} bytes after the last version", b.len() - at));
    }
    Ok(out)
}

/// Status of a transaction id as far as this snapshot is concerned.
enum Seen {
    /// Committed and visible to the snapshot.
    Committed,
    /// The current transaction (command ids decide).
    Current,
    /// Running, or committed after the snapshot was taken.
    Invisible,
    Aborted,
}

fn judge(o: &dyn XactOracle, xid: Xid, committed_hint: bool, aborted_hint: bool) -> Seen {
    if aborted_hint {
        return Seen::Aborted;
    }
    if !committed_hint && o.is_current(xid) {
        return Seen::Current;
    }
    if o.in_snapshot(xid) {
        return Seen::Invisible;
    }
    if committed_hint {
        return Seen::Committed;
    }
    if o.in_progress(xid) {
        // Not in the snapshot yet running: started after it; invisible.
        return Seen::Invisible;
    }
    if o.did_commit(xid) {
        Seen::Committed
    } else {
        Seen::Aborted
    }
}

/// Hint bits learned while judging a version, to store back when the page
/// is modified anyway (or under the page latch, as heap does with hints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    pub set: u16,
}

/// MVCC visibility of one version (heap's `HeapTupleSatisfiesMVCC`).
pub fn visible(v: &Version, o: &dyn XactOracle, hints: &mut Hints) -> bool {
    match judge(
        o,
        v.xmin,
        v.has(flags::XMIN_COMMITTED),
        v.has(flags::XMIN_ABORTED),
    ) {
        Seen::Aborted => {
            hints.set |= flags::XMIN_ABORTED;
            return false;
        }
        Seen::Invisible => return false,
        Seen::Current => {
            if v.cmin >= o.current_cid() {
                return false; // inserted by a later command of ours
            }
        }
        Seen::Committed => {
            if !v.has(flags::XMIN_COMMITTED) && !o.in_progress(v.xmin) {
                hints.set |= flags::XMIN_COMMITTED;
            }
        }
    }
    if !v.has_deleter() {
        return true;
    }
    match judge(o, v.xmax, v.has(flags::XMAX_COMMITTED), false) {
        Seen::Aborted => {
            hints.set |= flags::XMAX_ABORTED;
            true
        }
        Seen::Invisible => true,
        // Deleted by an earlier command of ours: gone; by this or a later one: still there.
        Seen::Current => v.cmax >= o.current_cid(),
        Seen::Committed => {
            hints.set |= flags::XMAX_COMMITTED;
            false
        }
    }
}

/// The version of a chain an MVCC snapshot sees, if any.
pub fn visible_version<'a>(
    chain: &'a [Version],
    o: &dyn XactOracle,
) -> Option<(usize, &'a Version)> {
    chain
        .iter()
        .enumerate()
        .find(|(_, v)| visible(v, o, &mut Hints::default()))
}

/// Outcome of trying to update, delete or lock the newest version
/// (heap's `TM_Result` from `HeapTupleSatisfiesUpdate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateCheck {
    /// Free to modify.
    Ok,
    /// The version is not visible to the command at all (inserted later).
    Invisible,
    /// Already modified by this transaction in this or a later command.
    SelfModified,
    /// Replaced by a committed transaction.
    Updated,
    /// Deleted by a committed transaction.
    Deleted,
    /// A running transaction holds it (modified or locked): wait for `xid`.
    BeingModified(Xid),
}

/// Can the current transaction modify the newest version `v`?
/// Committed-ness is judged by clog (not the snapshot): like heap, the
/// caller rechecks visibility itself and, in READ COMMITTED, follows the
/// chain to the newest version (EvalPlanQual).
pub fn check_update(v: &Version, o: &dyn XactOracle) -> UpdateCheck {
    let xmin_ok = if v.has(flags::XMIN_ABORTED) {
        false
    } else if v.has(flags::XMIN_COMMITTED) {
        true
    } else if o.is_current(v.xmin) {
        if v.cmin >= o.current_cid() {
            return UpdateCheck::Invisible;
        }
        true
    } else if o.in_progress(v.xmin) {
        return UpdateCheck::Invisible;
    } else {
        o.did_commit(v.xmin)
    };
    if !xmin_ok {
        return UpdateCheck::Invisible;
    }
    if v.xmax == INVALID_XID || v.has(flags::XMAX_ABORTED) {
        return UpdateCheck::Ok;
    }
    if o.is_current(v.xmax) {
        if v.has(flags::XMAX_LOCK_ONLY) {
            return UpdateCheck::Ok; // our own lock
        }
        return if v.cmax >= o.current_cid() {
            UpdateCheck::SelfModified
        } else {
            UpdateCheck::Invisible
        };
    }
    if !v.has(flags::XMAX_COMMITTED) && o.in_progress(v.xmax) {
        return UpdateCheck::BeingModified(v.xmax);
    }
    if v.has(flags::XMAX_LOCK_ONLY) || !(v.has(flags::XMAX_COMMITTED) || o.did_commit(v.xmax)) {
        return UpdateCheck::Ok; // lock released, or deleter aborted
    }
    if v.has(flags::UPDATED) {
        UpdateCheck::Updated
    } else {
        UpdateCheck::Deleted
    }
}

/// Removes versions no snapshot can see any more, and returns whether the
/// key is dead (no version left). `horizon`: every transaction id that
/// `precedes` it has finished, and those that committed are visible to every
/// snapshot that exists or will exist (PostgreSQL's oldest non-removable xid).
///
/// Removable: versions whose inserter aborted, and versions whose deleter
/// or updater committed before the horizon. Row locks never make a version
/// removable. Heap's chains prune the same way (`heap_prune_satisfies_vacuum`).
pub fn prune(
    chain: &mut Vec<Version>,
    o: &dyn XactOracle,
    horizon: Xid,
    precedes: impl Fn(Xid, Xid) -> bool,
) -> bool {
    let settled = |xid: Xid, hint: bool| {
        precedes(xid, horizon) && (hint || (!o.in_progress(xid) && o.did_commit(xid)))
    };
    let aborted = |v: &Version| {
        v.has(flags::XMIN_ABORTED)
            || (!v.has(flags::XMIN_COMMITTED)
                && !o.is_current(v.xmin)
                && !o.in_progress(v.xmin)
                && !o.did_commit(v.xmin))
    };
    let dead = |v: &Version| {
        aborted(v) || (v.has_deleter() && settled(v.xmax, v.has(flags::XMAX_COMMITTED)))
    };
    chain.retain(|v| !dead(v));
    chain.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashSet};

    /// A model of PostgreSQL's transaction state as one observer sees it.
    #[derive(Clone, Default)]
    struct Model {
        committed: HashSet<Xid>,
        running: BTreeSet<Xid>,
        /// The observer's snapshot: xids >= `snap_next` or in `snap_running` are invisible.
        snap_next: Xid,
        snap_running: BTreeSet<Xid>,
        current: Option<Xid>,
        cid: Cid,
    }

    impl XactOracle for Model {
        fn is_current(&self, xid: Xid) -> bool {
            self.current == Some(xid)
        }
        fn in_snapshot(&self, xid: Xid) -> bool {
            xid >= self.snap_next || self.snap_running.contains(&xid)
        }
        fn in_progress(&self, xid: Xid) -> bool {
            self.running.contains(&xid)
        }
        fn did_commit(&self, xid: Xid) -> bool {
            self.committed.contains(&xid)
        }
        fn current_cid(&self) -> Cid {
            self.cid
        }
    }

    /// A random running transaction of `world`, if any.
    fn pick_running(world: &Model, rnd: &mut impl FnMut(u64) -> u64) -> Option<Xid> {
        let n = world.running.len() as u64;
        (n > 0).then(|| *world.running.iter().nth(rnd(n) as usize).unwrap())
    }

    fn model(next: Xid) -> Model {
        Model {
            snap_next: next,
            ..Default::default()
        }
    }

    #[test]
    fn own_changes_follow_command_ids() {
        let mut m = model(10);
        m.running.insert(10);
        m.current = Some(10);
        m.snap_next = 11;
        let mut v = Version::new(10, 3, b"a".to_vec());
        m.cid = 3;
        assert!(
            !visible(&v, &m, &mut Hints::default()),
            "inserted by the running command"
        );
        m.cid = 4;
        assert!(visible(&v, &m, &mut Hints::default()));
        v.xmax = 10;
        v.cmax = 4;
        assert!(
            visible(&v, &m, &mut Hints::default()),
            "deleted by the running command: still seen"
        );
        assert_eq!(check_update(&v, &m), UpdateCheck::SelfModified);
        m.cid = 5;
        assert!(!visible(&v, &m, &mut Hints::default()));
    }

    #[test]
    fn other_transactions_follow_the_snapshot() {
        let mut m = model(20);
        m.committed.insert(5);
        m.running.insert(20);
        let v = Version::new(20, 0, b"x".to_vec());
        assert!(
            !visible(&v, &m, &mut Hints::default()),
            "uncommitted insert"
        );
        assert_eq!(check_update(&v, &m), UpdateCheck::Invisible);
        // 20 commits; the old snapshot still does not see it, a new one does.
        m.running.remove(&20);
        m.committed.insert(20);
        assert!(!visible(&v, &m, &mut Hints::default()));
        let mut fresh = m.clone();
        fresh.snap_next = 21;
        let mut h = Hints::default();
        assert!(visible(&v, &fresh, &mut h));
        assert_eq!(h.set, flags::XMIN_COMMITTED);
        // A committed delete hides it from new snapshots only.
        let mut d = v.clone();
        d.xmax = 21;
        fresh.committed.insert(21);
        assert!(
            visible(&d, &fresh, &mut Hints::default()),
            "deleter after the snapshot"
        );
        let mut newer = fresh.clone();
        newer.snap_next = 22;
        assert!(!visible(&d, &newer, &mut Hints::default()));
        assert_eq!(check_update(&d, &newer), UpdateCheck::Deleted);
        d.flags |= flags::UPDATED;
        assert_eq!(check_update(&d, &newer), UpdateCheck::Updated);
    }

    #[test]
    fn aborted_and_running_deleters_and_lockers() {
        let mut m = model(50);
        m.committed.insert(1);
        let mut v = Version::new(1, 0, b"r".to_vec());
        v.xmax = 40; // aborted (neither running nor committed)
        let mut h = Hints::default();
        assert!(visible(&v, &m, &mut h));
        assert_eq!(h.set & flags::XMAX_ABORTED, flags::XMAX_ABORTED);
        assert_eq!(check_update(&v, &m), UpdateCheck::Ok);
        v.xmax = 45;
        m.running.insert(45);
        assert_eq!(check_update(&v, &m), UpdateCheck::BeingModified(45));
        v.flags |= flags::XMAX_LOCK_ONLY;
        assert!(
            visible(&v, &m, &mut Hints::default()),
            "a lock does not hide the row"
        );
        assert_eq!(check_update(&v, &m), UpdateCheck::BeingModified(45));
        m.running.remove(&45);
        m.committed.insert(45);
        assert_eq!(
            check_update(&v, &m),
            UpdateCheck::Ok,
            "a released lock no longer blocks"
        );
        let mut gone = Version::new(30, 0, vec![]);
        gone.flags |= flags::XMIN_ABORTED;
        assert!(!visible(&gone, &m, &mut Hints::default()));
    }

    #[test]
    fn chain_bytes_roundtrip_and_reject_garbage() {
        let mut a = Version::new(7, 1, b"new".to_vec());
        a.flags = flags::XMIN_COMMITTED;
        let mut b = Version::new(3, 0, vec![0; 300]);
        b.xmax = 7;
        b.cmax = 1;
        b.flags = flags::UPDATED | flags::XMAX_COMMITTED;
        let bytes = encode_chain(&[a.clone(), b.clone()]);
        assert_eq!(decode_chain(&bytes).unwrap(), vec![a, b]);
        for cut in 0..bytes.len() {
            assert!(decode_chain(&bytes[..cut]).is_err());
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_chain(&extra).is_err());
    }

    /// Random single-key histories: pruning at the horizon never changes
    /// what any live snapshot sees, and dead versions do go away.
    #[test]
    fn pruning_preserves_every_live_snapshot() {
        let mut seed = 1u64;
        let mut rnd = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut removed_total = 0;
        for _ in 0..3000 {
            let mut chain: Vec<Version> = Vec::new();
            let mut world = model(1);
            let mut next: Xid = 1;
            let mut snaps: Vec<(Xid, BTreeSet<Xid>)> = Vec::new();
            for _ in 0..(5 + rnd(25)) {
                match rnd(6) {
                    0 => {
                        world.running.insert(next);
                        next += 1;
                    }
                    1 | 2 => {
                        // A running transaction writes the key if it may.
                        let Some(x) = pick_running(&world, &mut rnd) else {
                            continue;
                        };
                        let mut me = world.clone();
                        me.current = Some(x);
                        me.cid = 1;
                        me.snap_next = next;
                        me.snap_running =
                            world.running.iter().copied().filter(|&r| r != x).collect();
                        let head_ok = chain.first().map(|h| check_update(h, &me));
                        match head_ok {
                            None => chain.insert(0, Version::new(x, 0, vec![x as u8])),
                            Some(UpdateCheck::Ok)
                                if visible(&chain[0], &me, &mut Hints::default()) =>
                            {
                                let delete = rnd(3) == 0;
                                chain[0].xmax = x;
                                chain[0].cmax = 0;
                                if !delete {
                                    chain[0].flags |= flags::UPDATED;
                                    chain.insert(0, Version::new(x, 0, vec![x as u8, 1]));
                                }
                            }
                            Some(UpdateCheck::Ok) if !chain[0].has_deleter() => {}
                            Some(UpdateCheck::Ok) => {
                                chain.insert(0, Version::new(x, 0, vec![x as u8, 2]))
                            }
                            _ => {}
                        }
                    }
                    3 | 4 => {
                        let Some(x) = pick_running(&world, &mut rnd) else {
                            continue;
                        };
                        world.running.remove(&x);
                        if rnd(4) != 0 {
                            world.committed.insert(x);
                        }
                    }
                    _ => snaps.push((next, world.running.clone())),
                }
            }
            snaps.push((next, world.running.clone()));
            // Horizon: nothing at or after the oldest live snapshot's xmin,
            // nor any running transaction.
            let horizon = snaps
                .iter()
                .map(|(n, r)| r.iter().next().copied().unwrap_or(*n))
                .chain(world.running.iter().copied())
                .min()
                .unwrap_or(next);
            let sees = |chain: &[Version], (n, r): &(Xid, BTreeSet<Xid>)| {
                let mut o = world.clone();
                o.snap_next = *n;
                o.snap_running = r.clone();
                visible_version(chain, &o).map(|(_, v)| v.data.clone())
            };
            let before: Vec<_> = snaps.iter().map(|s| sees(&chain, s)).collect();
            let mut pruned = chain.clone();
            prune(&mut pruned, &world, horizon, |a, b| a < b);
            let after: Vec<_> = snaps.iter().map(|s| sees(&pruned, s)).collect();
            assert_eq!(
                before, after,
                "pruning at horizon {horizon} changed a snapshot's view of {chain:?}"
            );
            removed_total += chain.len() - pruned.len();
        }
        assert!(
            removed_total > 300,
            "pruning removed only {removed_total} versions"
        );
    }
}
