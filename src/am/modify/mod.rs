//! Writing rows: insert, delete, update and row locks with heap's
//! semantics (`heapam.c:heap_insert/heap_delete/heap_update/
//! heap_lock_tuple`), on versions that each have their own row id.
//!
//! Every change of an existing version is decided under its leaf's latch
//! ([`Tree::modify`]): the closure only looks at transaction state and
//! returns what to do. Waiting for another transaction (a heavyweight
//! lock) always happens after the latch is released, then we look again.
//! Beside it in the room: the row changes logged for logical decoding
//! (`logical`).
//!
//! It may call `toast`, row versions, the keyed layout, the engine and `pg`.
// The `pub unsafe fn`s here implement `TableAmRoutine` callbacks (called from
// `routine.rs`): their safety contract is PostgreSQL's for that callback
// (valid, open relations, slots and snapshots), and their argument lists
// are the callbacks'.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod logical;

use crate::am::rows::{
    self, decode, from_item_pointer, get_version, store_version, table_of, to_item_pointer,
    PgXacts,
};
use crate::am::layout::table::Table;
use orioledb_engine::btree::Change;
use orioledb_engine::version::{self, bits, tid, Header, Hints, LockMode, UpdateCheck, Xid};
use crate::pg::error::raise;
use pgrx::pg_sys;
use pgrx::prelude::*;

fn current_xid() -> Xid {
    // SAFETY: assigns an xid if needed (ERRORs in read-only contexts).
    unsafe { pg_sys::GetCurrentTransactionId() }.into_inner()
}

/// Workers are read-only; the leader of a parallel plan may write (CREATE
/// TABLE AS over a parallel query), as on heap.
fn refuse_in_parallel_worker() {
    // SAFETY: a plain read of this process's worker number.
    if unsafe { pg_sys::ParallelWorkerNumber } >= 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            "cannot insert tuples in a parallel worker",
        );
    }
}

/// The ERROR for a new version whose row id the tree holds already (row
/// ids are never handed out twice: damage).
///
/// # Safety
/// `rel` is an open relation.
unsafe fn id_in_use(rel: pg_sys::Relation, id: u64) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!(
            "orioledb: row id {id} of table \"{}\" is already in use",
            // SAFETY: per the contract.
            unsafe { crate::pg::rel_name(rel) }
        ),
    )
}

/// Inserts the slot's row as a new version; sets the slot's TID.
///
/// # Safety
/// Valid relation and slot of its row type.
pub unsafe fn insert(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    spec_token: Option<u32>,
) {
    // SAFETY: caller guarantees valid pointers.
    unsafe {
        refuse_in_parallel_worker();
        let tree = table_of(rel);
        let xid = current_xid();
        let mut h = Header::new(xid, cid, 0);
        if let Some(token) = spec_token {
            h.flags = version::SPECULATIVE;
            h.spec = token;
        }
        crate::am::toast::begin_version();
        let (mut v, prefix) = rows::form_version(rel, &tree, slot, h);
        let id = place(rel, &tree, &mut v, None);
        h.ctid = id;
        let fresh = tree.insert(id, &prefix, &v);
        crate::am::toast::placed();
        if !fresh {
            id_in_use(rel, id);
        }
        crate::am::rows::vismap::clear(rel, id);
        // After the write, not before: no page lock orders us against a
        // scan, so a reader that locks the relation later must already find
        // this version (and report the conflict out itself).
        crate::am::rows::ssi::check_in(rel, None);
        set_slot_header(rel, slot, id, &h);
        pg_sys::pgstat_count_heap_insert(rel, 1);
        rows::after_change_of(rel, tree.tree.id());
        // A speculative insertion is logged once confirmed.
        if spec_token.is_none() {
            crate::am::modify::logical::inserted(rel, slot);
        }
    }
}

/// Inserts the slots' rows as new versions (`multi_insert`: COPY, and
/// the executor's batches of INSERT into foreign tables' peers): formed
/// and placed one by one as [`insert`] does, then written as one batch
/// (`Table::insert_many`: a descent and a log record per leaf instead of
/// per row). Sets each slot's TID.
///
/// # Safety
/// Valid relation and slots of its row type.
pub unsafe fn insert_many(
    rel: pg_sys::Relation,
    slots: &[*mut pg_sys::TupleTableSlot],
    cid: pg_sys::CommandId,
    frozen: bool,
) {
    // SAFETY: caller guarantees valid pointers.
    unsafe {
        refuse_in_parallel_worker();
        let tree = table_of(rel);
        let mut h = Header::new(current_xid(), cid, 0);
        if frozen {
            // COPY FREEZE (the table's file is new in this subtransaction,
            // so an abort takes the rows with it): inserted frozen, as heap
            // does — visible to every snapshot, never looked up in clog.
            h.infomask |= bits::XMIN_COMMITTED | bits::XMIN_INVALID;
        }
        crate::am::toast::begin_version();
        let formed: Vec<(Vec<u8>, Vec<u8>)> = slots
            .iter()
            .map(|&slot| rows::form_version(rel, &tree, slot, h))
            .collect();
        let fills: Vec<_> = formed.iter().map(|(v, _)| fill_of(rel, v)).collect();
        let ids = tree
            .tree
            .alloc_packed_ids(&fills)
            .unwrap_or_else(|e| crate::pg::engine::report(e));
        let mut rows = Vec::with_capacity(slots.len());
        for ((mut v, prefix), id) in formed.into_iter().zip(ids) {
            check_id_limit(rel, id);
            version::set_own_id(&mut v, id);
            rows.push((id, prefix, v));
        }
        if let Some(id) = tree.insert_many(&rows) {
            id_in_use(rel, id);
        }
        crate::am::toast::placed();
        let mut cleared = None;
        for (&slot, (id, _, _)) in slots.iter().zip(&rows) {
            let block = id / tid::PER_BLOCK;
            if cleared != Some(block) {
                if !frozen {
                    crate::am::rows::vismap::clear(rel, *id);
                } else if id % tid::PER_BLOCK == 0 && crate::am::rows::vismap::loads_may_set() {
                    // A block COPY FREEZE fills from empty is all-visible
                    // (what it continues, an earlier batch began, or a
                    // change in this transaction, which cleared it).
                    crate::am::rows::vismap::set_loaded_frozen(rel, block);
                }
                cleared = Some(block);
            }
            set_slot_header(rel, slot, *id, &Header { ctid: *id, ..h });
        }
        crate::am::rows::ssi::check_in(rel, None);
        pg_sys::pgstat_count_heap_insert(rel, slots.len() as _);
        rows::after_change_of(rel, tree.tree.id());
        if crate::am::modify::logical::wanted(rel) {
            for &slot in slots {
                crate::am::modify::logical::inserted(rel, slot);
            }
        }
    }
}

/// Gives new version `v` (formed with row id 0) its row id, and writes it
/// into the version's header: the TID heap would give a row of this size,
/// filling blocks of row ids as heap fills pages (`am::layout::fill`), so TIDs,
/// block counts and TID-based sampling look as they do on heap. The new
/// version of an updated row (`near` = the old version's row id) stays in
/// the old version's block while it has room, as heap keeps it on its page
/// (which keeps BRIN ranges and index correlation as they were).
///
/// # Safety
/// `rel` is the open relation of `tree`; `v` was formed by `form_version`.
unsafe fn place(rel: pg_sys::Relation, tree: &Table, v: &mut [u8], near: Option<u64>) -> u64 {
    // SAFETY: per the contract.
    let fill = unsafe { fill_of(rel, v) };
    let id = match near {
        Some(old) => tree.tree.alloc_near_id(old, fill.take, fill),
        None => tree.tree.alloc_packed_id(fill),
    }
    .unwrap_or_else(|e| crate::pg::engine::report(e));
    // SAFETY: per the contract.
    unsafe { check_id_limit(rel, id) };
    version::set_own_id(v, id);
    id
}

/// How new version `v` fills a block of row ids: as a heap tuple of its
/// size fills a page under the table's fillfactor.
///
/// # Safety
/// `rel` is an open relation; `v` was formed by `form_version`.
unsafe fn fill_of(rel: pg_sys::Relation, v: &[u8]) -> orioledb_engine::meta::BlockFill {
    // Only the flags and data bits are used: any own id does.
    let h = Header::decode(v, 0).expect("a version formed just now");
    let t_len = version::tuple_len(&h, version::tail_and_toast(&h, v).0);
    // SAFETY: per the contract.
    crate::am::layout::fill::heap_fill(t_len, unsafe { crate::am::layout::fill::fillfactor(rel) })
}

/// Raises the "ran out of row ids" error for an id past the TID space.
///
/// # Safety
/// `rel` is an open relation.
unsafe fn check_id_limit(rel: pg_sys::Relation, id: u64) {
    if id >= tid::LIMIT {
        raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            // SAFETY: caller passes an open relation.
            format!("orioledb: table \"{}\" ran out of row ids", unsafe {
                crate::pg::rel_name(rel)
            }),
        );
    }
}

/// A delete or update of a version that owns toast values holds the toast
/// relation as heap does when it deletes the old values (heap_toast_delete):
/// so REINDEX CONCURRENTLY of the toast relation waits for the transaction.
fn lock_toast_relation(rel: pg_sys::Relation) {
    // SAFETY: an open relation; locking an existing relation's OID.
    unsafe {
        let toast = (*(*rel).rd_rel).reltoastrelid;
        if toast != pg_sys::InvalidOid {
            pg_sys::LockRelationOid(toast, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        }
    }
}

/// Confirms (`succeeded`) or withdraws a speculative insertion.
pub unsafe fn complete_speculative(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    succeeded: bool,
) {
    // SAFETY: the slot holds the row we inserted, with its TID.
    unsafe {
        let Some(id) = from_item_pointer(&(*slot).tts_tid) else {
            return;
        };
        let tree = table_of(rel);
        tree.modify(id, |cur| {
            let Some(v) = cur else {
                return (Change::Keep, ());
            };
            if !succeeded {
                // Nobody may ever see it: the inserter was speculative.
                if let Some(h) = Header::decode(v, id) {
                    crate::am::toast::queue_deletion(version::tail_and_toast(&h, v).1, 0);
                }
                tree.forget_map_entry(id);
                return (Change::Delete, ());
            }
            let mut h = Header::decode(v, id).expect("our own version");
            h.flags &= !version::SPECULATIVE;
            h.spec = 0;
            let mut nv = v.to_vec();
            version::set_header(&mut nv, &h);
            (Change::Put(nv), ())
        });
        rows::after_change();
        if succeeded {
            crate::am::modify::logical::inserted(rel, slot);
        }
    }
}

/// What the decision under the latch came to.
enum Decision {
    /// Applied; what the caller learns of the version.
    Done(Applied),
    Wait(Xid),
    Fail(UpdateCheck, Header),
    Missing,
    /// An update taking its chain's root row id back could not (the slot
    /// is not free, or not on the old version's leaf); nothing changed.
    Taken,
}

/// What a change learns of the version it changed.
#[derive(Default)]
struct Applied {
    /// For an update: the row locks still running on the old version,
    /// which the new version must carry (heap keeps them too, so a FOR KEY
    /// SHARE of a foreign-key check still protects the key).
    carried: Vec<(Xid, LockMode)>,
    /// A delete or update dropped a version that owns toast values.
    toasted: bool,
    /// The version's chain root (`am::layout::hot`; its own row id unless
    /// heap-only).
    root: u64,
    /// An update's new version as stored with the change; empty otherwise.
    new: Vec<u8>,
}

/// What to do with the version once it may be changed.
#[derive(Clone, Copy)]
enum Action {
    Delete { moved: bool },
    /// `hot`: the new version joins the old one's chain (`am::layout::hot`).
    /// `reuse`: `successor` is the chain's root row id, taken back.
    Update {
        successor: u64,
        reuse: bool,
        keys: bool,
        hot: bool,
    },
    Lock(LockMode),
}

/// Decides and applies one change of version `id` under its leaf latch.
///
/// Row holders (`xmax` a locker, an updater, or a MultiXactId of lockers
/// and at most one updater) are compared with the strength this change
/// needs: a running holder it conflicts with must be waited for; holders it
/// does not conflict with keep their locks in a (new) MultiXactId beside
/// ours — so FOR SHARE lockers share a row, a key-preserving UPDATE passes
/// FOR KEY SHARE lockers (foreign-key checks), and a KEY SHARE lock joins a
/// key-preserving updater, as on heap. `newer`: the version is a newer one
/// of a row being KEY SHARE-locked, which is locked even while its inserter
/// still runs (the lock must hold once that commits).
fn decide_and_apply(
    tree: &Table,
    id: u64,
    cid: u32,
    xid: Xid,
    crosscheck: pg_sys::Snapshot,
    action: Action,
    newer: bool,
    new: Option<&NewVersion>,
) -> Decision {
    let decide = |cur: Option<&[u8]>| decide(cur, id, cid, xid, crosscheck, action, newer);
    let (Action::Update { successor, reuse, .. }, Some(new)) = (action, new) else {
        return tree.modify(id, decide);
    };
    let mut stored = None;
    let r = tree.update(id, successor, reuse, &new.prefix, |cur| {
        let (change, d) = decide(cur);
        let value = match (&change, &d) {
            (Change::Put(_), Decision::Done(a)) => Some(new.value_after(successor, cid, a)),
            _ => None,
        };
        stored.clone_from(&value);
        (change, value, d)
    });
    match r {
        Some(Decision::Done(mut a)) => {
            a.new = stored.unwrap_or_default();
            Decision::Done(a)
        }
        Some(other) => other,
        None => Decision::Taken,
    }
}

/// An UPDATE's new version, formed before the old one is changed.
struct NewVersion {
    prefix: Vec<u8>,
    /// As formed: without the locks it carries over or its chain root.
    value: Vec<u8>,
    hot: bool,
}

impl NewVersion {
    /// The value stored under row id `own`, once the old version's change
    /// is decided.
    fn value_after(&self, own: u64, cid: u32, a: &Applied) -> Vec<u8> {
        let mut v = carry_locks(self.value.clone(), own, cid, &a.carried);
        if self.hot {
            version::make_heap_only(&mut v, a.root);
        }
        v
    }
}

/// The decision of [`decide_and_apply`] on version `id`'s value `cur`.
fn decide(
    cur: Option<&[u8]>,
    id: u64,
    cid: u32,
    xid: Xid,
    crosscheck: pg_sys::Snapshot,
    action: Action,
    newer: bool,
) -> (Change, Decision) {
    let Some(v) = cur else {
        return (Change::Keep, Decision::Missing);
    };
    let Some(mut h) = Header::decode(v, id) else {
        return (Change::Keep, Decision::Missing);
    };
    let mut hints = Hints::default();
    let chk = check_change(&h, id, cid, newer, &mut hints);
    let want = match action {
        Action::Lock(mode) => mode,
        Action::Update { keys: true, .. } | Action::Delete { .. } => LockMode::Exclusive,
        Action::Update { keys: false, .. } => LockMode::NoKeyExclusive,
    };
    let held = match sharers(&h, v, id, xid, action, want, chk) {
        Ok(held) => held,
        Err(stop) => return stop,
    };
    h.infomask |= hints.0 & (bits::XMIN_COMMITTED | bits::XMIN_INVALID);
    if !crosscheck.is_null() {
        let snap = rows::PgSnapshot(crosscheck);
        if !version::visible_mvcc(&h, &PgXacts, &snap, &mut Hints::default()) {
            return (Change::Keep, Decision::Fail(UpdateCheck::Updated, h));
        }
    }
    set_changer(&mut h, id, cid, xid, action, &held);
    let mut nv = v.to_vec();
    version::set_header(&mut nv, &h);
    let Held { keep, mut carried, .. } = held;
    if matches!(action, Action::Update { .. }) {
        carried.extend(keep.iter().map(|&(m, held, _)| (m, held)));
    } else {
        carried.clear();
    }
    // Only a delete or update drops the version's values.
    let toasted = !matches!(action, Action::Lock(_))
        && !version::tail_and_toast(&h, v).1.is_empty();
    let applied = Applied {
        carried,
        toasted,
        root: crate::am::layout::hot::root_of(&h, v, id),
        new: Vec::new(),
    };
    (Change::Put(nv), Decision::Done(applied))
}

/// `check_update` of version `id` (header `h`) for command `cid`. A newer
/// version of a row being KEY SHARE-locked (`newer`) is locked even while
/// its inserter still runs; its xmax (that inserter updating it again, or
/// other lockers) must then be kept like any holder's, never overwritten
/// (heap_lock_updated_tuple_rec).
fn check_change(h: &Header, id: u64, cid: u32, newer: bool, hints: &mut Hints) -> UpdateCheck {
    let chk = version::check_update(h, id, &PgXacts, cid, hints);
    let mine = |x: Xid| version::Xacts::is_current(&PgXacts, x);
    match chk {
        UpdateCheck::Invisible
            if newer && version::Xacts::in_progress(&PgXacts, h.xmin) && !mine(h.xmin) =>
        {
            if h.xmax_invalid() {
                UpdateCheck::Ok
            } else {
                UpdateCheck::BeingModified(h.xmax)
            }
        }
        other => other,
    }
}

/// Who keeps holding the row beside a change that may go ahead.
#[derive(Default)]
struct Held {
    /// Running holders other than us that keep the row with us
    /// (transaction, mode, whether it is the updater).
    keep: Vec<(Xid, LockMode, bool)>,
    /// Our own row lock on the old version (carried over by an update).
    carried: Vec<(Xid, LockMode)>,
    /// Our own lock at this level was FOR UPDATE: an update keeps that
    /// strength (heap marks such an update as changing the key).
    own_exclusive: bool,
}

/// The holders of version `id` (header `h`, value `v`) that a change by
/// `xid` wanting `want` leaves in place, or the decision that stops it
/// (a wait, a failure, or a lock already held).
fn sharers(
    h: &Header,
    v: &[u8],
    id: u64,
    xid: Xid,
    action: Action,
    want: LockMode,
    chk: UpdateCheck,
) -> Result<Held, (Change, Decision)> {
    let mine = |x: Xid| version::Xacts::is_current(&PgXacts, x);
    let mut held = Held::default();
    match chk {
        UpdateCheck::Ok => {}
        UpdateCheck::BeingModified(_) => {
            // An updater that committed since check_update looked still
            // counts: the row is no longer ours to change (waiting returns
            // at once and the next look says Updated). One that aborted,
            // and lockers that finished, hold nothing.
            let running: Vec<_> = holders(h)
                .into_iter()
                .filter(|&(m, _, updater)| {
                    mine(m)
                        || version::Xacts::in_progress(&PgXacts, m)
                        || (updater && version::Xacts::did_commit(&PgXacts, m))
                })
                .collect();
            for &(m, mode, updater) in &running {
                if mine(m) {
                    if let Action::Lock(asked) = action {
                        if mode >= asked && !updater {
                            // Already held at least as strongly.
                            let applied = Applied {
                                root: crate::am::layout::hot::root_of(h, v, id),
                                ..Applied::default()
                            };
                            return Err((Change::Keep, Decision::Done(applied)));
                        }
                    }
                    if updater {
                        continue;
                    }
                    if m == xid {
                        // Our lock at this level: this change replaces
                        // it (an update carries it to the new version).
                        if matches!(action, Action::Update { .. }) {
                            held.carried.push((m, mode));
                            held.own_exclusive |= mode == LockMode::Exclusive;
                        }
                    } else {
                        // A parent (sub)transaction's lock must survive
                        // a ROLLBACK TO SAVEPOINT of this one.
                        held.keep.push((m, mode, false));
                    }
                    continue;
                }
                if updater && want == LockMode::KeyShare && !h.keys_updated() {
                    // KEY SHARE never conflicts with a key-preserving update.
                    held.keep.push((m, LockMode::NoKeyExclusive, true));
                    continue;
                }
                if updater || want.conflicts(mode) {
                    return Err((Change::Keep, Decision::Wait(m)));
                }
                held.keep.push((m, mode, false));
            }
        }
        // A committed key-preserving update does not stop KEY SHARE: the
        // lock joins the updater in a MultiXactId (the caller has locked
        // the newer versions first, as heap_lock_tuple does).
        UpdateCheck::Updated if want == LockMode::KeyShare && !h.keys_updated() => {
            for (m, mode, updater) in holders(h) {
                if updater || (!mine(m) && version::Xacts::in_progress(&PgXacts, m)) {
                    held.keep.push((m, mode, updater));
                }
            }
        }
        other => return Err((Change::Keep, Decision::Fail(other, *h))),
    }
    Ok(held)
}

/// Writes the change by `xid` (command `cid`) into header `h` of version
/// `id`: its xmax (a MultiXactId when others keep holding the row), the
/// lock or update bits, and the command id of a delete or update.
fn set_changer(h: &mut Header, id: u64, cid: u32, xid: Xid, action: Action, held: &Held) {
    let keep = &held.keep;
    let our_status = match action {
        Action::Lock(mode) => rows::lock_status(mode),
        Action::Update { keys: false, .. } => {
            pg_sys::MultiXactStatus::MultiXactStatusNoKeyUpdate
        }
        _ => pg_sys::MultiXactStatus::MultiXactStatusUpdate,
    };
    let multi = (!keep.is_empty()).then(|| {
        let members = keep.iter().map(|&(m, mode, updater)| {
            let status = if updater {
                pg_sys::MultiXactStatus::MultiXactStatusNoKeyUpdate
            } else {
                rows::lock_status(mode)
            };
            (m, status)
        });
        create_multi(members.chain([(xid, our_status)]))
    });
    let joins_updater = keep.iter().any(|k| k.2);
    if !matches!(action, Action::Lock(_)) {
        // Only an updater that aborted can have left it: this change
        // starts the version's life as a chain member anew.
        h.infomask2 &= !bits::HOT_UPDATED;
    }
    match (action, multi) {
        (Action::Delete { moved }, None) => {
            h.set_deleter(xid, cid, if moved { rows::MOVED } else { id }, true)
        }
        (Action::Delete { moved }, Some(m)) => {
            h.set_update_multi(m, cid, if moved { rows::MOVED } else { id });
            h.infomask2 |= bits::KEYS_UPDATED;
        }
        (Action::Lock(_), Some(m)) if joins_updater => h.join_updater(m),
        (
            Action::Update {
                successor, keys, ..
            },
            None,
        ) => h.set_deleter(xid, cid, successor, keys || held.own_exclusive),
        (Action::Update { successor, .. }, Some(m)) => h.set_update_multi(m, cid, successor),
        (Action::Lock(mode), None) => h.set_lock(xid, cid, mode),
        (Action::Lock(mode), Some(m)) => {
            let strongest = keep
                .iter()
                .map(|&(_, mode, _)| mode)
                .fold(mode, LockMode::max);
            h.set_multi_lock(m, strongest);
        }
    }
    if let Action::Update { hot: true, .. } = action {
        h.infomask2 |= bits::HOT_UPDATED;
    }
    if !matches!(action, Action::Lock(_)) {
        // SAFETY: a write in a transaction, outside parallel mode.
        unsafe { rows::set_raw_cid(h) };
    }
}

/// Fills `tmfd` for a failed change (heap's conventions). `traversed` is
/// the lock's to say (set where it starts and where it follows a chain).
unsafe fn fill_tmfd(tmfd: *mut pg_sys::TM_FailureData, h: &Header, id: u64, chk: UpdateCheck) {
    // SAFETY: the executor passes a valid failure struct.
    unsafe {
        let succ = if h.xmax_invalid() || h.lock_only() {
            id
        } else {
            h.ctid
        };
        to_item_pointer(succ, &mut (*tmfd).ctid);
        (*tmfd).xmax = version::update_xid(h, &PgXacts).into();
        (*tmfd).cmax = if chk == UpdateCheck::SelfModified {
            h.cmax
        } else {
            pg_sys::InvalidCommandId
        };
    }
}

fn tm_result(chk: UpdateCheck) -> pg_sys::TM_Result::Type {
    match chk {
        UpdateCheck::Ok => pg_sys::TM_Result::TM_Ok,
        UpdateCheck::Invisible => pg_sys::TM_Result::TM_Invisible,
        UpdateCheck::SelfModified => pg_sys::TM_Result::TM_SelfModified,
        UpdateCheck::Updated => pg_sys::TM_Result::TM_Updated,
        UpdateCheck::Deleted => pg_sys::TM_Result::TM_Deleted,
        UpdateCheck::BeingModified(_) => pg_sys::TM_Result::TM_BeingModified,
    }
}

/// The heavyweight tuple lock heap takes before it sleeps on a row's holder
/// (`heap_acquire_tuplock`): waiters for one row queue on it in arrival
/// order, so the first to wait is the next to change the row and later ones
/// wait for that change (PostgreSQL's isolation spec
/// tuplelock-upgrade-no-deadlock), and the deadlock detector sees the queue.
/// Invariant: `held` is true exactly while this backend holds `LockTuple` on
/// `tid` in `mode`'s heavyweight mode; the caller releases it with
/// [`TupLock::release`] before returning normally (an ERROR releases it with
/// the transaction's other locks).
struct TupLock {
    rel: pg_sys::Relation,
    tid: pg_sys::ItemPointerData,
    mode: pg_sys::LOCKMODE,
    held: bool,
}

impl TupLock {
    fn new(rel: pg_sys::Relation, id: u64, mode: LockMode) -> TupLock {
        let mut tid = pg_sys::ItemPointerData::default();
        to_item_pointer(id, &mut tid);
        // tupleLockExtraInfo in heapam.c: the lock manager mode per row mode.
        let mode = match mode {
            LockMode::KeyShare => pg_sys::AccessShareLock,
            LockMode::Share => pg_sys::RowShareLock,
            LockMode::NoKeyExclusive => pg_sys::ExclusiveLock,
            LockMode::Exclusive => pg_sys::AccessExclusiveLock,
        } as pg_sys::LOCKMODE;
        TupLock { rel, tid, mode, held: false }
    }

    /// Takes the lock before sleeping on a holder of version `id`, unless
    /// held already or this transaction holds a row lock on the version
    /// (an upgrade must not queue behind waiters that wait for us).
    /// False: not available under `policy` (SKIP LOCKED).
    unsafe fn before_wait(
        &mut self,
        tree: &Table,
        id: u64,
        policy: pg_sys::LockWaitPolicy::Type,
    ) -> bool {
        if self.held || holds_row_lock(tree, id) {
            return true;
        }
        // SAFETY: an open relation; the lock manager may ERROR (deadlock,
        // cancel), which releases the lock with the transaction.
        unsafe {
            match policy {
                pg_sys::LockWaitPolicy::LockWaitBlock => {
                    pg_sys::LockTuple(self.rel, &mut self.tid, self.mode)
                }
                _ => {
                    if !pg_sys::ConditionalLockTuple(self.rel, &mut self.tid, self.mode) {
                        if policy == pg_sys::LockWaitPolicy::LockWaitError {
                            raise(
                                PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                                format!(
                                    "could not obtain lock on row in relation \"{}\"",
                                    crate::pg::rel_name(self.rel)
                                ),
                            );
                        }
                        return false;
                    }
                }
            }
        }
        self.held = true;
        true
    }

    fn release(&mut self) {
        if self.held {
            // SAFETY: we hold exactly this lock (invariant).
            unsafe { pg_sys::UnlockTuple(self.rel, &mut self.tid, self.mode) };
            self.held = false;
        }
    }
}

/// Whether this transaction (or a live subtransaction) is among the row
/// holders recorded in version `id`'s xmax.
fn holds_row_lock(tree: &Table, id: u64) -> bool {
    let Some(h) = get_version(tree, id).and_then(|v| Header::decode(&v, id)) else {
        return false;
    };
    !h.xmax_invalid()
        && holders(&h)
            .iter()
            .any(|&(m, _, _)| version::Xacts::is_current(&PgXacts, m))
}

/// The ERROR for a change other than an update that reports a row id not
/// taken back (only updates take one).
fn unreachable_taken() -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        "orioledb: a change that takes no row id reported one taken",
    )
}

/// Shared loop of delete and update: decide, wait for the holder, repeat.
/// None: an update could not take its chain's root row id back (nothing
/// changed; it goes again with a new one).
// Long because it is heap_update's and heap_delete's retry loop (decide
// under the latch, wait without it, look again), kept in one body so the
// tuple lock's state is never split across functions; each step is a call.
unsafe fn change_with_wait(
    rel: pg_sys::Relation,
    tidp: pg_sys::ItemPointer,
    cid: u32,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    action: Action,
    new: Option<&NewVersion>,
    what: &str,
    applied: &mut Applied,
) -> Option<pg_sys::TM_Result::Type> {
    // SAFETY: caller passes valid pointers.
    unsafe {
        let tree = table_of(rel);
        let Some(id) = from_item_pointer(&*tidp) else {
            raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("orioledb: invalid TID in {what}"),
            );
        };
        let xid = current_xid();
        let oper = if matches!(action, Action::Delete { .. }) {
            pg_sys::XLTW_Oper::XLTW_Delete
        } else {
            pg_sys::XLTW_Oper::XLTW_Update
        };
        let mode = match action {
            Action::Update { keys: false, .. } => LockMode::NoKeyExclusive,
            _ => LockMode::Exclusive,
        };
        let mut tuplock = TupLock::new(rel, id, mode);
        // A delete or update never follows a chain itself.
        (*tmfd).traversed = false;
        let r = loop {
            pgrx::check_for_interrupts!();
            match decide_and_apply(&tree, id, cid, xid, crosscheck, action, false, new) {
                Decision::Done(done) => {
                    if done.toasted {
                        lock_toast_relation(rel);
                    }
                    crate::am::rows::vismap::clear(rel, id);
                    if done.root != id {
                        // Index-only scans read the map of the block the
                        // index entries name: the root's.
                        crate::am::rows::vismap::clear(rel, done.root);
                    }
                    *applied = done;
                    // After the write, as in insert: a reader that locks
                    // this row id later finds the new xmax when it reads.
                    // An UPDATE checks once its new version is in the tree
                    // too (`update`), for readers of the new key.
                    if !matches!(action, Action::Update { .. }) {
                        crate::am::rows::ssi::check_in(rel, Some(id));
                    }
                    let weight = match action {
                        Action::Update { hot: true, .. } => rows::SweepWeight::Beside,
                        _ => rows::SweepWeight::Leaves,
                    };
                    if !matches!(action, Action::Lock(_)) {
                        rows::note_superseded(&tree.tree, (*rel).rd_id.into(), xid);
                    }
                    rows::sweep_step(&tree.tree, weight);
                    rows::report_pruned(rel, tree.tree.id());
                    break pg_sys::TM_Result::TM_Ok;
                }
                Decision::Taken => {
                    tuplock.release();
                    return None;
                }
                Decision::Missing => {
                    // Pruned: it was dead to every snapshot, so deleted.
                    to_item_pointer(id, &mut (*tmfd).ctid);
                    (*tmfd).xmax = pg_sys::InvalidTransactionId;
                    (*tmfd).cmax = pg_sys::InvalidCommandId;
                    break pg_sys::TM_Result::TM_Deleted;
                }
                Decision::Wait(x) => {
                    if !wait {
                        let v = get_version(&tree, id).unwrap_or_default();
                        if let Some(h) = Header::decode(&v, id) {
                            fill_tmfd(tmfd, &h, id, UpdateCheck::BeingModified(x));
                        }
                        break pg_sys::TM_Result::TM_BeingModified;
                    }
                    tuplock.before_wait(&tree, id, pg_sys::LockWaitPolicy::LockWaitBlock);
                    let mut t = *tidp;
                    pg_sys::XactLockTableWait(x.into(), rel, &mut t, oper);
                }
                Decision::Fail(UpdateCheck::Invisible, _) => raise(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("attempted to {what} invisible tuple"),
                ),
                Decision::Fail(chk, h) => {
                    fill_tmfd(tmfd, &h, id, chk);
                    break tm_result(chk);
                }
            }
        };
        tuplock.release();
        Some(r)
    }
}

pub unsafe fn delete(
    rel: pg_sys::Relation,
    tidp: pg_sys::ItemPointer,
    cid: pg_sys::CommandId,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    changing_part: bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: caller passes valid pointers.
    let r = unsafe {
        change_with_wait(
            rel,
            tidp,
            cid,
            crosscheck,
            wait,
            tmfd,
            Action::Delete {
                moved: changing_part,
            },
            None,
            "delete",
            &mut Applied::default(),
        )
    }
    .unwrap_or_else(|| unreachable_taken());
    if r == pg_sys::TM_Result::TM_Ok {
        // SAFETY: valid relation and TID; the deleted version stays in the
        // tree while our transaction runs (its xmax is ours).
        unsafe {
            pg_sys::pgstat_count_heap_delete(rel);
            log_old_version(rel, &*tidp, |old, id| crate::am::modify::logical::deleted(rel, old, id));
        }
    }
    r
}

/// Runs `log` on the version at `tid` (just changed by this transaction)
/// when `rel`'s changes are logged for logical decoding.
///
/// # Safety
/// `rel` is an open orioledb table.
unsafe fn log_old_version(rel: pg_sys::Relation, tid: &pg_sys::ItemPointerData, log: impl FnOnce(&[u8], u64)) {
    // SAFETY: per the contract.
    unsafe {
        if !crate::am::modify::logical::wanted(rel) {
            return;
        }
        let Some(id) = from_item_pointer(tid) else {
            return;
        };
        if let Some(v) = get_version(&table_of(rel), id).filter(|v| Header::decode(v, id).is_some()) {
            log(&v, id);
        }
    }
}

// Long because it follows heap_update's steps in PostgreSQL's order (form
// the row, decide HOT, place it, change under the latch, then the
// after-effects: caches, visibility map, SSI, statistics, logical decoding),
// each a call.
pub unsafe fn update(
    rel: pg_sys::Relation,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    crosscheck: pg_sys::Snapshot,
    wait: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    lockmode: *mut pg_sys::LockTupleMode::Type,
    update_indexes: *mut bool,
) -> pg_sys::TM_Result::Type {
    // SAFETY: caller passes valid pointers.
    unsafe {
        let tree = table_of(rel);
        let xid = current_xid();
        let mut h = Header::new(xid, cid, 0);
        h.infomask |= bits::UPDATED;
        // Formed (and any ERROR raised) before the old version is touched.
        crate::am::toast::begin_version();
        let (v, mut prefix) = rows::form_version(rel, &tree, slot, h);
        let changed = columns_changed(rel, &tree, otid, slot, &prefix);
        *lockmode = if changed.keys {
            pg_sys::LockTupleMode::LockTupleExclusive
        } else {
            pg_sys::LockTupleMode::LockTupleNoKeyExclusive
        };
        // HOT-like (am::layout::hot) when no indexed column (so not the key)
        // changed. A row-id tree keys a chain member under its root.
        let old_id = from_item_pointer(&*otid);
        let mut hot = !changed.indexed;
        if hot && tree.desc().is_none() {
            match old_id.and_then(|old| crate::am::layout::hot::root_of_id(&tree, old)) {
                Some(root) => prefix = tid::key(root).to_vec(),
                None => hot = false,
            }
        }
        *update_indexes = !hot;
        let mut reuse = old_id
            .filter(|_| hot)
            .and_then(|old| crate::am::layout::hot::reusable_root(&tree, old));
        let mut applied = Applied::default();
        // Stored with the old version's change (decide_and_apply), under
        // its leaf latch where the two share a leaf.
        let mut new = NewVersion {
            prefix,
            value: v,
            hot,
        };
        let (new_id, r) = loop {
            let new_id = match reuse {
                Some(root) => {
                    version::set_own_id(&mut new.value, root);
                    root
                }
                None => place(rel, &tree, &mut new.value, old_id),
            };
            let action = Action::Update {
                successor: new_id,
                reuse: reuse.is_some(),
                keys: changed.keys,
                hot,
            };
            let r = change_with_wait(
                rel, otid, cid, crosscheck, wait, tmfd, action, Some(&new), "update", &mut applied,
            );
            match r {
                Some(r) => break (new_id, r),
                // The root's slot was not free after all: a new row id.
                None => reuse = None,
            }
        };
        h.ctid = new_id;
        if r != pg_sys::TM_Result::TM_Ok {
            crate::am::toast::unplaced();
            return r;
        }
        let v = applied.new;
        tree.remember_version(new_id, &new.prefix);
        crate::am::toast::placed();
        // The insert may have pruned its leaf.
        rows::after_change_of(rel, tree.tree.id());
        crate::am::rows::vismap::clear(rel, new_id);
        // (The root's block was cleared with the old version's change.)
        // After both writes: a point lookup that found the new key empty
        // and locks the table afterwards reads it again and finds this
        // version (see am::rows::ssi).
        crate::am::rows::ssi::check_in(rel, Some(from_item_pointer(&*otid).unwrap_or(new_id)));
        let h = Header::decode(&v, new_id).unwrap_or(h);
        set_slot_header(rel, slot, new_id, &h);
        pg_sys::pgstat_count_heap_update(rel, hot);
        log_old_version(rel, &*otid, |old, id| crate::am::modify::logical::updated(rel, old, id, slot));
        r
    }
}

/// Locks a row (`heapam_tuple_lock`): waits per `wait_policy`, and with
/// `TUPLE_LOCK_FLAG_FIND_LAST_VERSION` follows updates to the newest
/// version, writing its TID back to `*tidp`.
pub unsafe fn lock(
    rel: pg_sys::Relation,
    tidp: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    mode: pg_sys::LockTupleMode::Type,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    flags: u8,
    tmfd: *mut pg_sys::TM_FailureData,
) -> pg_sys::TM_Result::Type {
    // SAFETY: caller passes valid pointers.
    unsafe {
        let tree = table_of(rel);
        let xid = current_xid();
        let mode = LockMode::from_u32(mode);
        let find_last = flags & pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION as u8 != 0;
        (*tmfd).traversed = false;
        let Some(id) = from_item_pointer(&*tidp) else {
            return pg_sys::TM_Result::TM_Deleted;
        };
        let mut tuplock = TupLock::new(rel, id, mode);
        let r = lock_chain(
            rel, &tree, tidp, slot, id, cid, xid, mode, wait_policy, find_last, tmfd, &mut tuplock,
        );
        tuplock.release();
        r
    }
}

/// The loop of [`lock`] from version `id`: lock it, or wait, or follow its
/// updates to the newest version. `tuplock` is the heavyweight tuple lock
/// of the version being locked; following an update moves it to the newer
/// version as heap's retry does.
// Long because it is heap_lock_tuple's retry loop (lock, wait, follow the
// update chain), kept in one body so the tuple lock and the version it
// covers change together; each step is a call.
#[allow(clippy::too_many_arguments)]
unsafe fn lock_chain(
    rel: pg_sys::Relation,
    tree: &Table,
    tidp: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    mut id: u64,
    cid: u32,
    xid: Xid,
    mode: LockMode,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    find_last: bool,
    tmfd: *mut pg_sys::TM_FailureData,
    tuplock: &mut TupLock,
) -> pg_sys::TM_Result::Type {
    // SAFETY: caller passes valid pointers.
    unsafe {
        let follow = |h: Header, id: &mut u64, tuplock: &mut TupLock| {
            (*tmfd).traversed = true;
            // Heap ends its lock attempt (and the tuple lock) before it
            // follows the chain.
            tuplock.release();
            let next = follow_update(rel, tree, h, cid, wait_policy, tmfd)?;
            *tuplock = TupLock::new(rel, next, mode);
            *id = next;
            Ok(())
        };
        loop {
            pgrx::check_for_interrupts!();
            if mode == LockMode::KeyShare {
                // A newer version whose key changed under a committed
                // updater stops the chain lock with Updated; heap's
                // heapam_tuple_lock then follows the chain from this
                // version, as for an Updated lock attempt.
                match lock_successors(rel, tree, id, cid, xid, wait_policy) {
                    Ok(()) => {}
                    Err(r) => {
                        let h = get_version(tree, id).map(|v| decode(rel, id, &v));
                        let Some(h) = h else {
                            return pg_sys::TM_Result::TM_Deleted;
                        };
                        if r == pg_sys::TM_Result::TM_Updated && find_last {
                            if let Err(r) = follow(h, &mut id, tuplock) {
                                return r;
                            }
                            continue;
                        }
                        if r != pg_sys::TM_Result::TM_WouldBlock {
                            fill_tmfd(tmfd, &h, id, UpdateCheck::Updated);
                        }
                        return r;
                    }
                }
            }
            match decide_and_apply(
                tree,
                id,
                cid,
                xid,
                std::ptr::null_mut(),
                Action::Lock(mode),
                false,
                None,
            ) {
                Decision::Done(..) => {
                    let v = get_version(tree, id).expect("locked version exists");
                    store_version(rel, slot, id, &v);
                    to_item_pointer(id, &mut *tidp);
                    return pg_sys::TM_Result::TM_Ok;
                }
                Decision::Missing => return pg_sys::TM_Result::TM_Deleted,
                Decision::Taken => unreachable_taken(),
                Decision::Wait(x) => {
                    if !tuplock.before_wait(tree, id, wait_policy)
                        || !wait_for(rel, x, id, wait_policy)
                    {
                        let v = get_version(tree, id).unwrap_or_default();
                        if let Some(h) = Header::decode(&v, id) {
                            fill_tmfd(tmfd, &h, id, UpdateCheck::BeingModified(x));
                        }
                        return pg_sys::TM_Result::TM_WouldBlock;
                    }
                }
                Decision::Fail(UpdateCheck::Invisible, h) => {
                    // Only ON CONFLICT DO UPDATE locks a version it cannot
                    // see (one its own command inserted); it reads xmin from
                    // the slot to raise "cannot affect row a second time".
                    if let Some(v) = get_version(tree, id) {
                        store_version(rel, slot, id, &v);
                    }
                    fill_tmfd(tmfd, &h, id, UpdateCheck::Invisible);
                    return pg_sys::TM_Result::TM_Invisible;
                }
                Decision::Fail(UpdateCheck::Updated, h) if find_last => {
                    if let Err(r) = follow(h, &mut id, tuplock) {
                        return r;
                    }
                }
                Decision::Fail(chk, h) => {
                    fill_tmfd(tmfd, &h, id, chk);
                    return tm_result(chk);
                }
            }
        }
    }
}

/// Waits for `xid` per the lock wait policy; false = would block (SKIP LOCKED).
unsafe fn wait_for(
    rel: pg_sys::Relation,
    xid: Xid,
    id: u64,
    policy: pg_sys::LockWaitPolicy::Type,
) -> bool {
    // SAFETY: valid relation; lock waits may ERROR (deadlock, cancel).
    unsafe {
        match policy {
            pg_sys::LockWaitPolicy::LockWaitSkip => {
                pg_sys::ConditionalXactLockTableWait(xid.into())
            }
            pg_sys::LockWaitPolicy::LockWaitError => {
                if !pg_sys::ConditionalXactLockTableWait(xid.into()) {
                    raise(
                        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
                        format!(
                            "could not obtain lock on row in relation \"{}\"",
                            crate::pg::rel_name(rel)
                        ),
                    );
                }
                true
            }
            _ => {
                let mut t = pg_sys::ItemPointerData::default();
                to_item_pointer(id, &mut t);
                pg_sys::XactLockTableWait(xid.into(), rel, &mut t, pg_sys::XLTW_Oper::XLTW_Lock);
                true
            }
        }
    }
}

/// From version `h` (updated by a committed transaction), walks the update
/// chain to the newest version that still exists for a dirty snapshot;
/// returns its row id, or the TM result the caller must report.
unsafe fn follow_update(
    rel: pg_sys::Relation,
    tree: &Table,
    mut h: Header,
    cid: u32,
    wait_policy: pg_sys::LockWaitPolicy::Type,
    tmfd: *mut pg_sys::TM_FailureData,
) -> Result<u64, pg_sys::TM_Result::Type> {
    // SAFETY: caller passes valid pointers.
    unsafe {
        loop {
            pgrx::check_for_interrupts!();
            if h.ctid == rows::MOVED {
                raise(
                    PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                    "tuple to be locked was already moved to another partition due to concurrent update",
                );
            }
            let prior = version::update_xid(&h, &PgXacts);
            let next = h.ctid;
            let Some(v) = get_version(tree, next) else {
                return Err(pg_sys::TM_Result::TM_Deleted);
            };
            let nh = decode(rel, next, &v);
            if nh.xmin != prior {
                return Err(pg_sys::TM_Result::TM_Deleted);
            }
            let mut info = version::DirtyInfo::default();
            let visible = version::visible_dirty(&nh, &PgXacts, &mut info, &mut Hints::default());
            if info.xmin != 0 {
                // Its inserter is still running: wait, then look again.
                if !wait_for(rel, info.xmin, next, wait_policy) {
                    return Err(pg_sys::TM_Result::TM_WouldBlock);
                }
                continue;
            }
            if visible {
                if version::Xacts::is_current(&PgXacts, nh.xmin) && nh.cmin >= cid {
                    to_item_pointer(next, &mut (*tmfd).ctid);
                    (*tmfd).xmax = prior.into();
                    (*tmfd).cmax = nh.cmin;
                    return Err(pg_sys::TM_Result::TM_SelfModified);
                }
                return Ok(next);
            }
            if nh.xmax_invalid() || nh.lock_only() || nh.ctid == next {
                return Err(pg_sys::TM_Result::TM_Deleted);
            }
            h = nh;
        }
    }
}

/// What an UPDATE changes, comparing binary images as heap does.
struct Changed {
    /// A column some unique index or foreign key could reference
    /// (`INDEX_ATTR_BITMAP_KEY`): then it needs the exclusive row lock
    /// (and conflicts with KEY SHARE lockers), else the no-key one.
    keys: bool,
    /// A column any index uses (`INDEX_ATTR_BITMAP_ALL`: key columns,
    /// expressions, predicates), or the version's key prefix: then the new
    /// version needs index entries of its own (no HOT).
    indexed: bool,
}

/// [`Changed`] for replacing the version at `otid` by the slot's row,
/// whose key prefix is `prefix`. The old version's data never changes, so
/// reading it before latching is exact.
unsafe fn columns_changed(
    rel: pg_sys::Relation,
    tree: &Table,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    prefix: &[u8],
) -> Changed {
    // SAFETY: valid relation, TID pointer and slot of its row type; the
    // bitmaps are copies made for us, freed here as heap_update does (an
    // UPDATE of many rows would otherwise keep them all).
    unsafe {
        let bitmap = |kind| pg_sys::RelationGetIndexAttrBitmap(rel, kind);
        let keys = bitmap(pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_KEY);
        let indexed = bitmap(pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_ALL);
        let changed = compare_columns(rel, tree, otid, slot, prefix, keys, indexed);
        pg_sys::bms_free(keys);
        pg_sys::bms_free(indexed);
        changed
    }
}

/// Version `id` of `tree` for its tuple only (its header may be older):
/// the copy the scan that found it kept will do; None when it is gone or
/// not a version.
fn old_tuple(tree: &Table, id: u64) -> Option<Vec<u8>> {
    let old = crate::am::layout::table::last_read(tree.tree.id(), id).or_else(|| {
        let v = get_version(tree, id)?;
        // Read once: the HOT decision's root lookup (`hot::root_of_id`)
        // finds it there too.
        crate::am::layout::table::remember_read(tree.tree.id(), id, &v);
        Some(v)
    })?;
    Header::decode(&old, id).is_some().then_some(old)
}

/// [`columns_changed`] for the columns in `keys` and `indexed`.
///
/// # Safety
/// As `columns_changed`; the bitmaps are valid (or NULL).
unsafe fn compare_columns(
    rel: pg_sys::Relation,
    tree: &Table,
    otid: pg_sys::ItemPointer,
    slot: *mut pg_sys::TupleTableSlot,
    prefix: &[u8],
    keys: *mut pg_sys::Bitmapset,
    indexed: *mut pg_sys::Bitmapset,
) -> Changed {
    let all = Changed {
        keys: true,
        indexed: true,
    };
    // SAFETY: per the contract; the old tuple is freed after the last use
    // of the datums deformed from it.
    unsafe {
        let Some(id) = from_item_pointer(&*otid) else {
            return all;
        };
        // A row-id tree's versions have no key prefix.
        let same_key = match tree.desc() {
            None => true,
            Some(_) => match tree.key_of(id) {
                Some(old_key) => tree.prefix_of(&old_key) == prefix,
                None => return all,
            },
        };
        if keys.is_null() && indexed.is_null() && same_key {
            return Changed {
                keys: false,
                indexed: false,
            };
        }
        let Some(old) = old_tuple(tree, id) else {
            return all;
        };
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let tup = rows::build_tuple(&old, id, (*rel).rd_id, pg_sys::CurrentMemoryContext);
        let mut ovals = vec![pg_sys::Datum::from(0usize); natts];
        let mut onulls = vec![true; natts];
        pg_sys::heap_deform_tuple(tup, desc, ovals.as_mut_ptr(), onulls.as_mut_ptr());
        pg_sys::slot_getallattrs(slot);
        let nvals = std::slice::from_raw_parts((*slot).tts_values, natts);
        let nnulls = std::slice::from_raw_parts((*slot).tts_isnull, natts);
        let attrs = (*desc).attrs.as_slice(natts);
        let differs = |set: *mut pg_sys::Bitmapset| {
            let mut x = -1;
            loop {
                x = pg_sys::bms_next_member(set, x);
                if x < 0 {
                    return false;
                }
                let attnum = x + pg_sys::FirstLowInvalidHeapAttributeNumber;
                if attnum <= 0 {
                    // A whole-row reference or a system column: heap
                    // counts it as changed too.
                    return true;
                }
                if attnum as usize > natts {
                    continue;
                }
                let i = attnum as usize - 1;
                if onulls[i] != nnulls[i] {
                    return true;
                }
                if !onulls[i] && !datum_image_equal(ovals[i], nvals[i], &attrs[i]) {
                    return true;
                }
            }
        };
        let changed = Changed {
            keys: differs(keys),
            indexed: !same_key || differs(indexed),
        };
        pg_sys::heap_freetuple(tup);
        changed
    }
}

/// Binary equality of two datums of one attribute (`datumIsEqual`).
unsafe fn datum_image_equal(
    a: pg_sys::Datum,
    b: pg_sys::Datum,
    att: &pg_sys::FormData_pg_attribute,
) -> bool {
    // SAFETY: both datums are valid values of the attribute's type.
    unsafe {
        if att.attbyval {
            return a == b;
        }
        let (pa, pb) = (a.cast_mut_ptr::<u8>(), b.cast_mut_ptr::<u8>());
        let len = |p: *mut u8| -> usize {
            match att.attlen {
                -1 => crate::am::toast::varsize_any(p),
                -2 => std::ffi::CStr::from_ptr(p.cast()).to_bytes().len() + 1,
                n => n as usize,
            }
        };
        let (la, lb) = (len(pa), len(pb));
        la == lb && std::slice::from_raw_parts(pa, la) == std::slice::from_raw_parts(pb, lb)
    }
}

/// After storing a new version: the slot names it (TID, table), and a heap
/// tuple slot's tuple carries its header, as heap_insert leaves it — so
/// `RETURNING xmin, xmax, cmin` (and `xmax = 0` upsert idioms) read right.
unsafe fn set_slot_header(
    rel: pg_sys::Relation,
    slot: *mut pg_sys::TupleTableSlot,
    id: u64,
    h: &Header,
) {
    // SAFETY: valid relation and slot; for a heap tuple slot
    // ExecFetchSlotHeapTuple materializes and returns the slot's own tuple.
    unsafe {
        (*slot).tts_tableOid = (*rel).rd_id;
        to_item_pointer(id, &mut (*slot).tts_tid);
        if !std::ptr::eq((*slot).tts_ops, &raw const pg_sys::TTSOpsHeapTuple) {
            return;
        }
        let tup = pg_sys::ExecFetchSlotHeapTuple(slot, true, std::ptr::null_mut());
        let d = (*tup).t_data;
        (*d).t_choice.t_heap.t_xmin = h.xmin.into();
        (*d).t_choice.t_heap.t_xmax = h.xmax.into();
        (*d).t_choice.t_heap.t_field3.t_cid = h.cmin;
        (*d).t_infomask = ((*d).t_infomask & bits::DATA_MASK) | (h.infomask & !bits::DATA_MASK);
        to_item_pointer(id, &mut (*d).t_ctid);
        to_item_pointer(id, &mut (*tup).t_self);
        (*tup).t_tableOid = (*rel).rd_id;
    }
}

/// The new version of an update (row id `own`) keeps the old one's running
/// row locks as its xmax (lock-only), like heap's `heap_update`.
fn carry_locks(mut v: Vec<u8>, own: u64, cid: u32, locks: &[(Xid, LockMode)]) -> Vec<u8> {
    let Some(&(first, mode)) = locks.first() else {
        return v;
    };
    let mut h = Header::decode(&v, own).expect("a version we formed");
    if locks.len() == 1 {
        h.set_lock(first, cid, mode);
    } else {
        let multi = create_multi(locks.iter().map(|&(m, held)| (m, rows::lock_status(held))));
        let strongest = locks.iter().map(|&(_, m)| m).max().unwrap_or(mode);
        h.set_multi_lock(multi, strongest);
    }
    version::set_header(&mut v, &h);
    v
}

/// Successor `next` of a version that updater `prior` replaced. Where the
/// two do not share a leaf, `Tree::update` writes the old version's header
/// before it inserts the successor (in another leaf), so while the updater
/// runs a missing successor is about to appear: wait for it, or for the
/// updater to end — committed, it had inserted it; aborted, it never will.
/// A HOT-like update may reuse its chain's root row id (`am::layout::hot`), which
/// then holds the dead version the successor replaces until it does: only
/// a version `prior` inserted is the successor.
fn successor(tree: &Table, next: u64, prior: Xid) -> Option<Vec<u8>> {
    loop {
        if let Some(v) = get_version(tree, next)
            .filter(|v| Header::decode(v, next).is_some_and(|h| h.xmin == prior))
        {
            return Some(v);
        }
        if !version::Xacts::in_progress(&PgXacts, prior) {
            return get_version(tree, next);
        }
        pgrx::check_for_interrupts!();
        // SAFETY: a plain sleep; the successor's insert takes microseconds.
        unsafe { pg_sys::pg_usleep(100) };
    }
}

/// Before a KEY SHARE lock on a version whose key-preserving update is
/// committed or running: KEY SHARE-locks the newer versions too
/// (`heap_lock_updated_tuple`), so that whoever later deletes the row or
/// changes its key waits for us. Stops at the end of the chain, at a version
/// whose inserter still runs, or where the key changed (the caller's lock
/// attempt then reports that).
unsafe fn lock_successors(
    rel: pg_sys::Relation,
    tree: &Table,
    id: u64,
    cid: u32,
    xid: Xid,
    wait_policy: pg_sys::LockWaitPolicy::Type,
) -> Result<(), pg_sys::TM_Result::Type> {
    // SAFETY: valid relation; versions are read and locked one at a time.
    unsafe {
        let Some(v) = get_version(tree, id) else {
            return Ok(());
        };
        let mut h = decode(rel, id, &v);
        let mut cur = id;
        loop {
            pgrx::check_for_interrupts!();
            if h.xmax_invalid() || h.lock_only() || h.ctid == cur || h.ctid == rows::MOVED {
                return Ok(());
            }
            if h.keys_updated() {
                return Ok(());
            }
            let prior = version::update_xid(&h, &PgXacts);
            let next = h.ctid;
            let Some(nv) = successor(tree, next, prior) else {
                return Ok(());
            };
            if decode(rel, next, &nv).xmin != prior {
                return Ok(());
            }
            loop {
                pgrx::check_for_interrupts!();
                match decide_and_apply(
                    tree,
                    next,
                    cid,
                    xid,
                    std::ptr::null_mut(),
                    Action::Lock(LockMode::KeyShare),
                    true,
                    None,
                ) {
                    Decision::Done(..) => break,
                    Decision::Taken => unreachable_taken(),
                    Decision::Missing | Decision::Fail(UpdateCheck::Invisible, _) => return Ok(()),
                    Decision::Wait(x) => {
                        if !wait_for(rel, x, next, wait_policy) {
                            return Err(pg_sys::TM_Result::TM_WouldBlock);
                        }
                    }
                    Decision::Fail(chk, _) => return Err(tm_result(chk)),
                }
            }
            let Some(nv) = get_version(tree, next) else {
                return Ok(());
            };
            h = decode(rel, next, &nv);
            cur = next;
        }
    }
}

/// The row holders recorded in a version's xmax: (xid, lock mode held, is
/// the updater), one entry unless xmax is a MultiXactId.
fn holders(h: &Header) -> Vec<(Xid, LockMode, bool)> {
    if h.is_multi() {
        rows::multi_members(h.xmax)
    } else {
        vec![(h.xmax, h.xmax_mode(), !h.lock_only())]
    }
}

/// A new MultiXactId of `members` (xid, status). Every caller goes through
/// here, so this transaction's oldest possible membership is always
/// recorded first, as `multixact.c` requires of MultiXactId creators
/// (updates and deletes create them too, not only row locks).
fn create_multi(members: impl Iterator<Item = (Xid, pg_sys::MultiXactStatus::Type)>) -> Xid {
    let mut members: Vec<pg_sys::MultiXactMember> = members
        .map(|(xid, status)| pg_sys::MultiXactMember {
            xid: xid.into(),
            status,
        })
        .collect();
    // SAFETY: both take MultiXactGenLock and SLRU locks only (never a
    // heavyweight lock), so they may run under a leaf latch.
    unsafe {
        pg_sys::MultiXactIdSetOldestMember();
        pg_sys::MultiXactIdCreateFromMembers(members.len() as i32, members.as_mut_ptr())
    }
    .into_inner()
}
