//! Visibility rules against a model of transactions.
use super::*;
use std::collections::HashSet;

/// Transactions: `current` are ours, `running` others in progress,
/// `committed` the rest that committed; everything else aborted.
#[derive(Default)]
struct Model {
    current: HashSet<Xid>,
    running: HashSet<Xid>,
    committed: HashSet<Xid>,
    /// Multis with a running member.
    running_multis: HashSet<Xid>,
}

impl Xacts for Model {
    fn is_current(&self, xid: Xid) -> bool {
        self.current.contains(&xid)
    }
    fn in_progress(&self, xid: Xid) -> bool {
        self.current.contains(&xid) || self.running.contains(&xid)
    }
    fn did_commit(&self, xid: Xid) -> bool {
        self.committed.contains(&xid)
    }
    fn multi_running(&self, multi: Xid) -> bool {
        self.running_multis.contains(&multi)
    }
    fn multi_update_xid(&self, multi: Xid) -> Xid {
        // Multi 600 + u: updater u (and a locker).
        multi.saturating_sub(600)
    }
}

struct Snap {
    invisible: HashSet<Xid>,
    curcid: Cid,
}

impl Snapshot for Snap {
    fn in_snapshot(&self, xid: Xid) -> bool {
        self.invisible.contains(&xid)
    }
    fn curcid(&self) -> Cid {
        self.curcid
    }
}

fn model() -> Model {
    Model {
        current: [10].into(),
        running: [20].into(),
        committed: [5, 6, 30].into(),
        running_multis: [500].into(),
    }
}

fn snap(curcid: Cid) -> Snap {
    // 20 was running and 30 committed after the snapshot was taken.
    Snap {
        invisible: [10, 20, 30].into(),
        curcid,
    }
}

fn vis(h: &Header, curcid: Cid) -> bool {
    visible_mvcc(h, &model(), &snap(curcid), &mut Hints::default())
}

#[test]
fn mvcc_inserters() {
    assert!(
        vis(&Header::new(5, 0, 1), 0),
        "committed before the snapshot"
    );
    assert!(!vis(&Header::new(7, 0, 1), 0), "aborted");
    assert!(!vis(&Header::new(20, 0, 1), 0), "running");
    assert!(
        !vis(&Header::new(30, 0, 1), 0),
        "committed after the snapshot"
    );
    assert!(!vis(&Header::new(10, 3, 1), 3), "our current command");
    assert!(vis(&Header::new(10, 2, 1), 3), "our earlier command");
    let mut frozen = Header::new(30, 0, 1);
    frozen.infomask |= bits::XMIN_COMMITTED | bits::XMIN_INVALID;
    assert!(
        vis(&frozen, 0),
        "frozen is visible whatever the snapshot says"
    );
}

#[test]
fn mvcc_deleters() {
    let deleted_by = |xmax: Xid, cmax: Cid| {
        let mut h = Header::new(5, 0, 1);
        h.set_deleter(xmax, cmax, 1, true);
        h
    };
    assert!(!vis(&deleted_by(6, 0), 0), "deleted before the snapshot");
    assert!(vis(&deleted_by(7, 0), 0), "deleter aborted");
    assert!(vis(&deleted_by(20, 0), 0), "deleter running");
    assert!(
        vis(&deleted_by(30, 0), 0),
        "deleter committed after the snapshot"
    );
    assert!(!vis(&deleted_by(10, 1), 2), "we deleted it earlier");
    assert!(vis(&deleted_by(10, 2), 2), "we delete it in this command");
    let mut locked = Header::new(5, 0, 1);
    locked.set_lock(6, 0, LockMode::Exclusive);
    assert!(vis(&locked, 0), "a row lock is no delete");
    let mut h = Header::new(5, 0, 1);
    let mut hints = Hints::default();
    h.set_deleter(7, 0, 1, false);
    assert!(visible_mvcc(&h, &model(), &snap(0), &mut hints));
    assert_eq!(hints.0, bits::XMIN_COMMITTED | bits::XMAX_INVALID);
}

#[test]
fn update_checks() {
    let x = model();
    let chk = |h: &Header, cid| check_update(h, 1, &x, cid, &mut Hints::default());
    assert_eq!(chk(&Header::new(5, 0, 1), 0), UpdateCheck::Ok);
    assert_eq!(chk(&Header::new(20, 0, 1), 0), UpdateCheck::Invisible);
    assert_eq!(chk(&Header::new(10, 4, 1), 4), UpdateCheck::Invisible);
    let mut h = Header::new(5, 0, 1);
    h.set_deleter(20, 0, 2, false);
    assert_eq!(chk(&h, 0), UpdateCheck::BeingModified(20));
    h.set_deleter(30, 0, 2, false);
    assert_eq!(chk(&h, 0), UpdateCheck::Updated);
    h.set_deleter(30, 0, 1, true);
    assert_eq!(chk(&h, 0), UpdateCheck::Deleted);
    h.set_deleter(7, 0, 2, false);
    assert_eq!(chk(&h, 0), UpdateCheck::Ok, "updater aborted");
    h.set_deleter(10, 5, 2, false);
    assert_eq!(chk(&h, 5), UpdateCheck::SelfModified);
    assert_eq!(chk(&h, 6), UpdateCheck::Invisible);
    h.set_lock(30, 0, LockMode::Share);
    assert_eq!(
        chk(&h, 0),
        UpdateCheck::Ok,
        "a finished locker holds nothing"
    );
    h.set_lock(10, 0, LockMode::Share);
    assert_eq!(chk(&h, 0), UpdateCheck::BeingModified(10));
}

#[test]
fn dirty_reports_running_transactions() {
    let x = model();
    let mut info = DirtyInfo::default();
    let mut h = Header::new(20, 0, 1);
    h.flags = SPECULATIVE;
    h.spec = 77;
    assert!(visible_dirty(&h, &x, &mut info, &mut Hints::default()));
    assert_eq!(
        info,
        DirtyInfo {
            xmin: 20,
            xmax: 0,
            spec: 77
        }
    );
    let mut h = Header::new(5, 0, 1);
    h.set_deleter(20, 0, 1, true);
    assert!(visible_dirty(&h, &x, &mut info, &mut Hints::default()));
    assert_eq!(info.xmax, 20);
    h.set_deleter(30, 0, 1, true);
    assert!(!visible_dirty(&h, &x, &mut info, &mut Hints::default()));
    assert!(!visible_self(
        &Header::new(20, 0, 1),
        &x,
        &mut Hints::default()
    ));
}

#[test]
fn vacuum_states() {
    let x = model();
    let old = |xid: Xid| xid < 10;
    let st = |h: &Header| vacuum_state(h, &x, &old, &mut Hints::default());
    assert_eq!(st(&Header::new(7, 0, 1)), VacuumState::Dead);
    assert_eq!(st(&Header::new(5, 0, 1)), VacuumState::Live);
    assert_eq!(st(&Header::new(20, 0, 1)), VacuumState::InsertInProgress);
    let mut h = Header::new(5, 0, 1);
    h.set_deleter(6, 0, 1, true);
    assert_eq!(st(&h), VacuumState::Dead);
    h.set_deleter(30, 0, 1, true);
    assert_eq!(st(&h), VacuumState::RecentlyDead);
    h.set_deleter(20, 0, 1, true);
    assert_eq!(st(&h), VacuumState::DeleteInProgress);
    h.set_lock(6, 0, LockMode::Exclusive);
    assert_eq!(
        st(&h),
        VacuumState::Live,
        "locks never make a row removable"
    );
}

#[test]
fn lock_modes() {
    use LockMode::*;
    let all = [KeyShare, Share, NoKeyExclusive, Exclusive];
    let expect = [
        [false, false, false, true],
        [false, false, true, true],
        [false, true, true, true],
        [true, true, true, true],
    ];
    for (i, a) in all.iter().enumerate() {
        for (j, b) in all.iter().enumerate() {
            assert_eq!(a.conflicts(*b), expect[i][j], "{a:?} vs {b:?}");
        }
        let mut h = Header::new(5, 0, 1);
        h.set_lock(6, 0, *a);
        assert_eq!(h.xmax_mode(), *a);
    }
}

#[test]
fn header_round_trip_and_tids() {
    let mut h = Header::new(1234, 7, (1 << 47) + 5);
    h.set_deleter(99, 3, (1 << 40) + 1, true);
    h.hoff = 24;
    h.flags = SPECULATIVE;
    h.spec = 0xDEAD;
    let v = h.with_tail(&[0xAA]);
    assert_eq!(Header::decode(&v, (1 << 47) + 5), Some(h));
    // The natural hoff's padding is not stored: an empty tail will do.
    assert_eq!(Header::decode(&v[..HEADER], (1 << 47) + 5), Some(h));
    let odd = Header { hoff: 32, ..h };
    let w = odd.with_tail(&[0; 9]);
    assert_eq!(Header::decode(&w, 1), Some(odd));
    assert_eq!(Header::decode(&w[..HEADER + 8], 1), None, "tail shorter than hoff says");
    for id in [0, 1, 290, 291, 292, 123_456_789, tid::LIMIT - 1] {
        let (b, o) = tid::to_pointer(id);
        assert!((1..=291).contains(&o));
        assert_eq!(tid::from_pointer(b, o), Some(id));
        assert_eq!(tid::from_key(&tid::key(id)), Some(id));
    }
    assert_eq!(tid::from_pointer(0, 0), None);
    assert_eq!(tid::from_pointer(0, 292), None);
}

#[test]
fn fresh_versions_have_the_short_header_and_changes_widen_it() {
    // 3 columns, a null among them: a 1-byte bitmap, hoff 24.
    let mut h = Header::new(1234, 0, 77);
    h.infomask |= bits::HASNULL;
    h.infomask2 = 3;
    h.hoff = 24;
    let tail = [0b101u8, 0, 1, 2, 3, 4];
    let v = h.with_tail(&tail);
    assert_eq!(v.len(), SHORT_HEADER + tail.len(), "no deleter: short");
    assert_eq!((header_len(&v), Header::decode(&v, 77)), (SHORT_HEADER, Some(h)));
    assert_eq!(tail_and_toast(&h, &v).0, &tail[..]);
    // A command id below 256 takes one more byte; above, the full header.
    for (cmin, len) in [(7, SHORT_HEADER + 1), (255, SHORT_HEADER + 1), (256, HEADER)] {
        let h2 = Header { cmin, ..h };
        let v2 = h2.with_tail(&tail);
        assert_eq!(v2.len() - tail.len(), len, "cmin {cmin}");
        assert_eq!(Header::decode(&v2, 77), Some(h2));
    }
    // A deleter widens it in place of the old header; the tail stays.
    let mut v3 = v.clone();
    let mut d = h;
    d.set_deleter(99, 3, 78, false);
    set_header(&mut v3, &d);
    assert_eq!((v3.len(), header_len(&v3)), (HEADER + tail.len(), HEADER));
    assert_eq!(Header::decode(&v3, 77), Some(d));
    assert_eq!(&v3[HEADER..], &tail[..]);
    // The full form stores ctid; the short one has none to set.
    set_own_id(&mut v3, 77);
    assert_eq!(Header::decode(&v3, 77).unwrap().ctid, 77);
    assert_eq!(Header::decode(&v3, 12).unwrap().ctid, 77);
    let mut v5 = v.clone();
    set_own_id(&mut v5, 5000);
    assert_eq!(v5, v);
    assert_eq!(Header::decode(&v, 5000).unwrap().ctid, 5000, "the own id");
    // Freezing away the deleter gives the short header back (a ctid with
    // no xmax names nothing: it reads back as the own id).
    set_header(&mut v3, &Header { ctid: 5000, ..h });
    assert_eq!(v3, v);
    // A hoff heap would not compute, a speculative token: full header.
    for odd in [Header { hoff: 32, ..h }, Header { flags: SPECULATIVE, spec: 9, ..h }] {
        let v4 = odd.with_tail(&[0; 16]);
        assert_eq!(header_len(&v4), HEADER);
        assert_eq!(Header::decode(&v4, 77), Some(odd));
    }
    // Form bytes no encoder writes are refused.
    let mut bad = v.clone();
    bad[0] |= 0x40;
    assert_eq!(Header::decode(&bad, 77), None);
    let mut bad = v.clone();
    bad[0] |= SPECULATIVE;
    assert_eq!(Header::decode(&bad, 77), None, "a short header has no token");
    assert_eq!(Header::decode(&v[..SHORT_HEADER - 1], 77), None);
    assert_eq!(Header::decode(&[], 77), None);
}

/// A stored tail leaves out heap's padding before the data when the hoff
/// is the natural one; the tuple it stands for has it back (zeros).
#[test]
fn padding_of_a_natural_hoff_is_not_stored() {
    // 3 columns, no nulls: hoff 24, one byte of padding.
    let mut h = Header::new(5, 0, 1);
    h.infomask2 = 3;
    h.hoff = 24;
    assert_eq!(elided_pad(&h), 1);
    let data = [1u8, 2, 3, 4];
    assert_eq!(tail_parts(&h, &data), (&[][..], 1, &data[..]));
    assert_eq!(tuple_len(&h, &data), 24 + 4);
    // 10 columns with a null: a 2-byte bitmap, 7 bytes of padding.
    h.infomask |= bits::HASNULL;
    h.infomask2 = 10;
    h.hoff = 32;
    let tail = [0xFF, 0x01, 9, 9];
    assert_eq!(elided_pad(&h), 7);
    assert_eq!(tail_parts(&h, &tail), (&tail[..2], 7, &tail[2..]));
    assert_eq!(tuple_len(&h, &tail), 32 + 2);
    // Another hoff (only a full header holds one): stored as it came.
    let odd = Header { hoff: 40, ..h };
    assert_eq!(elided_pad(&odd), 0);
    assert_eq!(tail_parts(&odd, &tail), (&tail[..], 0, &[][..]));
}

#[test]
fn toast_list_trailer() {
    let mut h = Header::new(5, 0, 1);
    h.hoff = 24;
    let mut v = h.with_tail(&[1, 2, 3]);
    assert_eq!(tail_and_toast(&h, &v), (&[1u8, 2, 3][..], vec![]));
    push_toast_list(&mut v, &[(100, 7), (100, 8)]);
    let h2 = Header::decode(&v, 1).unwrap();
    assert_eq!(h2.flags & TOAST_LIST, TOAST_LIST);
    assert_eq!(
        tail_and_toast(&h2, &v),
        (&[1u8, 2, 3][..], vec![(100, 7), (100, 8)])
    );
}

#[test]
fn hot_root_trailer_follows_the_toast_list() {
    let mut h = Header::new(5, 0, 1);
    h.hoff = 24;
    let mut v = h.with_tail(&[1, 2, 3]);
    push_toast_list(&mut v, &[(100, 7)]);
    let plain = v.clone();
    assert_eq!(hot_root(&Header::decode(&v, 1).unwrap(), &v), None);
    make_heap_only(&mut v, 0x1234_5678_9abc);
    let h2 = Header::decode(&v, 1).unwrap();
    assert_eq!(h2.infomask2 & bits::HEAP_ONLY, bits::HEAP_ONLY);
    assert_eq!(hot_root(&h2, &v), Some(0x1234_5678_9abc));
    assert_eq!(tail_and_toast(&h2, &v), (&[1u8, 2, 3][..], vec![(100, 7)]));
    let mut updated = v.clone();
    let mut h3 = h2;
    h3.infomask2 |= bits::HOT_UPDATED;
    set_header(&mut updated, &h3);
    assert_eq!(without_hot(updated), plain);
}

#[test]
fn lock_only_multis() {
    let x = model();
    let mut h = Header::new(5, 0, 1);
    h.set_multi_lock(500, LockMode::Share);
    assert!(h.is_multi() && h.lock_only());
    assert_eq!(h.xmax_mode(), LockMode::Share);
    assert!(vis(&h, 0), "lockers never hide a row");
    let chk = |h: &Header| check_update(h, 1, &x, 0, &mut Hints::default());
    assert_eq!(chk(&h), UpdateCheck::BeingModified(500));
    h.set_multi_lock(501, LockMode::KeyShare);
    assert_eq!(chk(&h), UpdateCheck::Ok, "all members finished");
    let old = |_: Xid| true;
    let mut hints = Hints::default();
    assert_eq!(vacuum_state(&h, &x, &old, &mut hints), VacuumState::Live);
    assert_eq!(hints.0 & bits::XMAX_INVALID, bits::XMAX_INVALID);
}

#[test]
fn update_multis_are_judged_by_their_updater() {
    let mut x = model();
    let mut h = Header::new(5, 0, 1);
    // Updater 30 (committed after the snapshot) with lockers: visible to the
    // snapshot, updated for writers.
    h.set_update_multi(630, 0, 2);
    assert!(vis(&h, 0));
    assert_eq!(update_xid(&h, &x), 30);
    assert_eq!(
        check_update(&h, 1, &x, 0, &mut Hints::default()),
        UpdateCheck::Updated
    );
    // Updater 6 committed long ago: dead once removable.
    h.set_update_multi(606, 0, 2);
    assert!(!vis(&h, 0));
    let old = |_: Xid| true;
    assert_eq!(
        vacuum_state(&h, &x, &old, &mut Hints::default()),
        VacuumState::Dead
    );
    // Updater aborted (7) while a locker still runs: the row is held.
    h.set_update_multi(607, 0, 2);
    x.running_multis.insert(607);
    assert!(vis(&h, 0));
    assert_eq!(
        check_update(&h, 1, &x, 0, &mut Hints::default()),
        UpdateCheck::BeingModified(607)
    );
    // The aborted updater's "xmax invalid" must not be stored on the multi:
    // its locker still holds the row.
    let mut hints = Hints::default();
    assert_eq!(vacuum_state(&h, &x, &old, &mut hints), VacuumState::Live);
    assert_eq!(hints.0 & bits::XMAX_INVALID, 0, "hints {:#x}", hints.0);
    x.running_multis.clear();
    assert_eq!(
        check_update(&h, 1, &x, 0, &mut Hints::default()),
        UpdateCheck::Ok
    );
    assert_eq!(
        vacuum_state(&h, &x, &old, &mut Hints::default()),
        VacuumState::Live
    );
}

#[test]
fn freezing() {
    let m = model();
    // Cutoff: everything below 8 is old.
    let old = |x: Xid| x < 8;
    // Committed before the cutoff: frozen, then visible to any snapshot.
    let f = freeze(&Header::new(5, 0, 1), &m, &old);
    let h = f.header.expect("frozen");
    assert_eq!(h.infomask & (bits::XMIN_COMMITTED | bits::XMIN_INVALID), bits::XMIN_COMMITTED | bits::XMIN_INVALID);
    assert_eq!(f.oldest_xid, None);
    let all_invisible = Snap { invisible: [5].into(), curcid: 0 };
    assert!(visible_mvcc(&h, &m, &all_invisible, &mut Hints::default()), "frozen ignores the snapshot");
    assert_eq!(vacuum_state(&h, &m, &|_| true, &mut Hints::default()), VacuumState::Live);
    // Freezing twice changes nothing.
    assert_eq!(freeze(&h, &m, &old).header, None);
    // Aborted before the cutoff: not frozen (dead; the pruner's), kept as oldest.
    let f = freeze(&Header::new(7, 0, 1), &m, &old);
    assert_eq!(f.header, None);
    assert_eq!(f.oldest_xid, Some(7));
    // Newer than the cutoff: left, and it holds the horizon.
    let f = freeze(&Header::new(30, 0, 1), &m, &old);
    assert_eq!((f.header, f.oldest_xid), (None, Some(30)));
    // Old lock-only xmax and old aborted deleter: removed.
    let mut h = Header::new(5, 0, 1);
    h.set_lock(6, 0, LockMode::Share);
    let f = freeze(&h, &m, &old);
    let n = f.header.unwrap();
    assert!(n.xmax_invalid() && !n.lock_only(), "{n:?}");
    assert_eq!(f.oldest_xid, None);
    let mut h = Header::new(5, 0, 1);
    h.set_deleter(7, 0, 2, true);
    let n = freeze(&h, &m, &old).header.unwrap();
    assert!(n.xmax_invalid() && !n.keys_updated());
    assert!(vis(&n, 0), "an aborted deleter's version stays visible");
    // Committed old deleter: left for the pruner, still named.
    let mut h = Header::new(5, 0, 1);
    h.set_deleter(6, 0, 2, false);
    let f = freeze(&h, &m, &old);
    assert_eq!(f.oldest_xid, Some(6));
    assert!(f.header.unwrap().xmax == 6);
    // A running deleter is kept; a multi is reported.
    let mut h = Header::new(30, 0, 1);
    h.set_deleter(20, 0, 2, false);
    assert_eq!(freeze(&h, &m, &old).oldest_xid, Some(20));
    let mut h = Header::new(5, 0, 1);
    h.set_multi_lock(500, LockMode::Share);
    let f = freeze(&h, &m, &old);
    assert_eq!(f.multi, Some(500), "a multi with a running member stays");
    // Multis without running members: lock-only, or an aborted updater
    // (601 = updater 1, aborted) are cleared; a committed updater (606)
    // stays for the pruner and names its updater.
    let mut h = Header::new(5, 0, 1);
    h.set_multi_lock(501, LockMode::Share);
    let n = freeze(&h, &m, &old).header.unwrap();
    assert!(n.xmax_invalid() && !n.is_multi() && n.xmax == INVALID_XID, "{n:?}");
    let mut h = Header::new(5, 0, 1);
    h.set_update_multi(601, 0, 2);
    let f = freeze(&h, &m, &old);
    assert!(f.header.unwrap().xmax_invalid() && f.multi.is_none());
    let mut h = Header::new(5, 0, 1);
    h.set_update_multi(606, 0, 2);
    let f = freeze(&h, &m, &old);
    assert_eq!((f.multi, f.oldest_xid), (Some(606), Some(6)));
    // An xmax a hint calls invalid is cleared for good (hints are not logged).
    let mut h = Header::new(30, 0, 1);
    h.set_deleter(20, 0, 2, false);
    h.infomask |= bits::XMAX_INVALID;
    let n = freeze(&h, &m, &old).header.unwrap();
    assert_eq!(n.xmax, INVALID_XID);
    // Wrapped ids: 4294967000 is older than 10 when both are recent.
    let f = freeze(&Header::new(4_294_967_000, 0, 1), &m, &|_| false);
    assert_eq!(f.oldest_xid, Some(4_294_967_000));
}
