//! Eight threads mixing inserts, deletes, gets and scans on one tree whose
//! data is much larger than the pool; then the checker and a comparison
//! with the union of the threads' models.

use super::*;
use crate::cursor::Direction;
use crate::io::{FileIo, StdIo};
use std::ops::Bound;
use std::sync::Arc;

const THREADS: u64 = 8;

/// Thread t owns keys i with i % THREADS == t, so keys of all threads
/// interleave on the same leaves while each thread can model its own keys.
fn owned(t: u64, j: u64) -> u64 {
    j * THREADS + t
}

#[test]
fn eight_threads_mixed_with_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 32);
    let tr = tree(&e, 1, 1);
    let models: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let tr = tr.clone();
                s.spawn(move || {
                    let mut rng = Rng(1000 + t);
                    let mut model = BTreeMap::new();
                    for step in 0..6000u64 {
                        let i = owned(t, rng.below(4000));
                        let k = key(i);
                        match rng.below(10) {
                            0..=4 => {
                                let v = value(i, step, 20 + rng.below(180) as usize);
                                tr.upsert(&k, &v).unwrap();
                                model.insert(k, v);
                            }
                            5..=6 => assert_eq!(tr.delete(&k).unwrap(), model.remove(&k).is_some()),
                            7..=8 => assert_eq!(
                                tr.get(&k).unwrap(),
                                model.get(&k).cloned(),
                                "thread {t} get {i}"
                            ),
                            _ => {
                                // A scan sees other threads' keys change, but our own
                                // keys in the range must be exactly our model's.
                                let a = rng.below(4000 * THREADS);
                                let (lo, hi) = (key(a), key(a + 400));
                                let dir = if rng.below(2) == 0 {
                                    Direction::Forward
                                } else {
                                    Direction::Backward
                                };
                                let got: Vec<_> = tr
                                    .range(
                                        Bound::Included(lo.clone()),
                                        Bound::Excluded(hi.clone()),
                                        dir,
                                    )
                                    .map(|r| r.unwrap())
                                    .collect();
                                let sorted = got.windows(2).all(|w| match dir {
                                    Direction::Forward => w[0].0 < w[1].0,
                                    Direction::Backward => w[0].0 > w[1].0,
                                });
                                assert!(sorted, "scan out of order");
                                let mine: Vec<_> = got
                                    .into_iter()
                                    .filter(|(k, _)| {
                                        u32::from_be_bytes(k[..4].try_into().unwrap()) as u64
                                            % THREADS
                                            == t
                                    })
                                    .collect();
                                let mut want: Vec<_> = model
                                    .range(lo..hi)
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect();
                                if dir == Direction::Backward {
                                    want.reverse();
                                }
                                assert_eq!(
                                    mine, want,
                                    "thread {t}: scan lost or invented own keys"
                                );
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_valid(&tr);
    let all: BTreeMap<_, _> = models.into_iter().flatten().collect();
    assert_eq!(contents(&tr), all);
    assert!(
        tr.stats().pages > 4 * 32,
        "the tree should be much larger than the pool"
    );
}

#[test]
fn concurrent_trees_share_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 32);
    std::thread::scope(|s| {
        for id in 1..=4u32 {
            let t = tree(&e, id, if id % 2 == 0 { 3 } else { -1 });
            s.spawn(move || {
                for i in 0..8000 {
                    t.insert(&key(i), &value(i, id as u64, 100)).unwrap();
                }
                for i in (0..8000).step_by(3) {
                    assert!(t.delete(&key(i)).unwrap());
                }
            });
        }
    });
    for id in 1..=4u32 {
        let t = e.tree(id).unwrap();
        assert_valid(&t);
        let c = contents(&t);
        assert_eq!(c.len(), 8000 - 8000usize.div_ceil(3));
        assert!(c.iter().all(|(k, v)| *v
            == value(
                u32::from_be_bytes(k[..4].try_into().unwrap()) as u64,
                id as u64,
                100
            )));
    }
}

/// Several engine handles over the same memory, as PostgreSQL backends
/// would have: each with its own file handles and slot cache. Nothing a
/// tree needs may live only in one handle.
#[test]
fn handles_like_processes_share_everything() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), 24);
    let handles: Vec<Engine> = (0..4)
        .map(|_| first.attach_another(Arc::new(StdIo::new())).unwrap())
        .collect();
    // Created through one handle, used through all.
    tree(&handles[0], 11, 1);
    std::thread::scope(|s| {
        for (h, e) in handles.iter().enumerate() {
            s.spawn(move || {
                let t = e.tree(11).unwrap();
                for i in 0..4000u64 {
                    let k = i * 4 + h as u64;
                    t.insert(&key(k), &value(k, 0, 150)).unwrap();
                }
                if h == 1 {
                    e.checkpoint(0).unwrap();
                }
                for i in (0..4000u64).step_by(2) {
                    assert!(t.delete(&key(i * 4 + h as u64)).unwrap());
                }
            });
        }
    });
    let t = handles[3].tree(11).unwrap();
    assert_valid(&t);
    assert_eq!(contents(&t).len(), 4 * 2000);
    // Drop through one handle: gone for every other one.
    handles[2].drop_tree(11).unwrap();
    assert!(handles[0].tree(11).is_err());
    assert!(first.tree(11).is_err());
    first.checkpoint(0).unwrap();
    assert!(StdIo::new().list(&dir.path().join("0")).unwrap().is_empty());
    // The slot is reusable, and a new tree starts empty.
    let t2 = tree(&handles[1], 12, -1);
    assert_eq!(contents(&t2).len(), 0);
}

/// A process that cached a data file's handle must not keep writing to the
/// deleted file after another process dropped the tree and a new tree took
/// the same name.
#[test]
fn recreated_tree_files_are_not_written_through_stale_handles() {
    let dir = tempfile::tempdir().unwrap();
    let a = open(dir.path(), 8);
    let b = a.attach_another(Arc::new(StdIo::new())).unwrap();
    let tb = tree(&b, 5, -1);
    for i in 0..2000 {
        tb.insert(&key(i), &value(i, 0, 100)).unwrap(); // b caches the file handle
    }
    drop(tb);
    a.drop_tree(5u32).unwrap();
    a.checkpoint(0).unwrap(); // removes the old file
    let ta = tree(&a, 5, -1);
    ta.insert(b"from a", b"1").unwrap();
    let tb = b.tree(5u32).unwrap();
    let mut want = BTreeMap::new();
    want.insert(b"from a".to_vec(), b"1".to_vec());
    for i in 0..2000 {
        let v = value(i, 1, 100);
        tb.insert(&key(i), &v).unwrap(); // evictions write through b's handles
        want.insert(key(i), v);
    }
    b.checkpoint(0).unwrap();
    drop((ta, tb));
    drop((a, b));
    let e = open(dir.path(), 8);
    let t = e.tree(5u32).unwrap();
    assert_valid(&t);
    assert!(contents(&t) == want);
}

/// Statements take the checkpoint barrier shared several times each, and
/// with many backends their holds overlap. PostgreSQL's LWLocks let a new
/// shared holder in whenever nobody holds the latch exclusively, even while
/// an exclusive waiter waits, so the number of holders need never drop to
/// zero and a checkpoint waiting for the barrier could starve. Four threads
/// hold the barrier almost all the time (a row change, then a longer hold
/// as a statement's further operations would); five checkpoints must still
/// finish within a bound. Run with LWLock-like (reader-preferring) latches
/// and with the writer-preferring test latches.
#[test]
fn checkpoint_is_not_starved_by_overlapping_writers() {
    for lwlock_like in [true, false] {
        starvation_run(lwlock_like);
    }
}

/// The barrier is several latches (a thread takes the one its id hashes
/// to): a checkpoint start must wait for an operation inside on each of
/// them. For every latch in turn a thread holds an entry on it, and a
/// checkpoint start must not get through until the entry is dropped.
/// Not scoped: a start that never finishes fails the test, not hangs it.
#[test]
fn checkpoint_start_waits_for_every_barrier_partition() {
    use crate::buffer::BARRIERS;
    use crate::engine::{set_barrier_slot, CheckpointBarrier, CheckpointStart};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let e = Arc::new(engine_with_latches(dir.path(), 16, true));
    for slot in 0..BARRIERS {
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let started = Arc::new(AtomicBool::new(false));
        let holder = e.clone();
        std::thread::spawn(move || {
            set_barrier_slot(slot);
            let _b = CheckpointBarrier::enter(&holder.inner.pool);
            entered_tx.send(()).unwrap();
            let _ = leave_rx.recv();
        });
        entered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (ck, flag) = (e.clone(), started.clone());
        std::thread::spawn(move || {
            let _c = CheckpointStart::enter(&ck.inner.pool);
            flag.store(true, Ordering::SeqCst);
            drop(_c);
            let _ = done_tx.send(());
        });
        std::thread::sleep(Duration::from_millis(30));
        let early = started.load(Ordering::SeqCst);
        leave_tx.send(()).unwrap();
        let finished = done_rx.recv_timeout(Duration::from_secs(10));
        assert!(!early, "barrier {slot}: a checkpoint started while an operation held it");
        assert!(finished.is_ok(), "barrier {slot}: the checkpoint start never finished");
    }
}

/// An engine over a private pool of `nbuf` buffers with LWLock-like
/// (reader-preferring) latches, or the writer-preferring test latches.
fn engine_with_latches(dir: &std::path::Path, nbuf: usize, lwlock_like: bool) -> Engine {
    use crate::buffer::{Pool, PoolRegion};
    use crate::engine::{PRIVATE_MAX_TREES, PRIVATE_META_CHUNKS};
    use crate::latch::{LatchSet, SpinLatches};
    use crate::meta::Meta;
    let n = PoolRegion::latch_count(nbuf);
    let latches: Arc<dyn LatchSet> = if lwlock_like {
        Arc::new(SpinLatches::reader_preferring(n))
    } else {
        Arc::new(SpinLatches::new(n))
    };
    Engine::open_with(
        dir,
        Pool::private_with(nbuf, latches),
        Meta::private(PRIVATE_MAX_TREES, PRIVATE_META_CHUNKS),
        Arc::new(StdIo::new()),
        None,
    )
    .unwrap()
}

fn starvation_run(lwlock_like: bool) {
    use crate::engine::CheckpointBarrier;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    const BOUND: Duration = Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with_latches(dir.path(), 16, lwlock_like);
    let tr = tree(&e, 1, -1);
    let stop = AtomicBool::new(false);
    let statements = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (e, tr, stop, statements) = (&e, &tr, &stop, &statements);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = t * 1_000_000 + i % 300;
                    tr.upsert(&key(k), &value(k, i, 40)).unwrap();
                    {
                        let _b = CheckpointBarrier::enter(&e.inner.pool);
                        let until = Instant::now() + Duration::from_micros(50);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                    }
                    i += 1;
                    statements.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let e = &e;
        s.spawn(move || {
            let started = Instant::now();
            let mut slowest = Duration::ZERO;
            for _ in 0..5 {
                let t0 = Instant::now();
                e.checkpoint(0).unwrap();
                slowest = slowest.max(t0.elapsed());
            }
            let _ = tx.send((started.elapsed(), slowest));
        });
        let done = rx.recv_timeout(BOUND);
        let ran = statements.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        let (total, slowest) = done.unwrap_or_else(|_| {
            panic!(
                "checkpoints starved for {BOUND:?} by {ran} statements \
                 (lwlock_like = {lwlock_like})"
            )
        });
        eprintln!(
            "lwlock_like = {lwlock_like}: 5 checkpoints in {total:?} (slowest {slowest:?}) \
             beside {ran} statements"
        );
        assert!(ran > 0, "the writers never ran");
    });
    assert_valid(&tr);
}

/// A thread that already holds the barrier and enters it again while a
/// checkpoint waits for it must not wait for that checkpoint (which waits
/// for this thread): with LWLock-like latches the nested entry passes.
/// (Writer-preferring test latches would block the nested shared
/// acquisition itself; nested entries take no latch, e.g. `Tree::update`'s
/// `apply` of the map entry inside its own entry.)
#[test]
fn nested_barrier_entry_does_not_wait_for_a_waiting_checkpoint() {
    use crate::engine::CheckpointBarrier;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let e = Arc::new(engine_with_latches(dir.path(), 16, true));
    tree(&e, 1, -1).upsert(b"k", b"v").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let e2 = e.clone();
    // Not scoped: if the nested entry deadlocks, the test still fails.
    std::thread::spawn(move || {
        let pool = &e2.inner.pool;
        let outer = CheckpointBarrier::enter(pool);
        std::thread::scope(|s| {
            let ck = s.spawn(|| e2.checkpoint(0).unwrap());
            while pool.checkpoint_wants().load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            let inner = CheckpointBarrier::enter(pool);
            let _ = tx.send("nested entry passed");
            drop(inner);
            drop(outer);
            ck.join().unwrap();
        });
        let _ = tx.send("checkpoint done");
    });
    let wait = Duration::from_secs(10);
    assert_eq!(rx.recv_timeout(wait), Ok("nested entry passed"));
    assert_eq!(rx.recv_timeout(wait), Ok("checkpoint done"));
    assert_eq!(e.pool().checkpoint_wants().load(Ordering::Acquire), 0);
}

/// Forward walks take each next leaf from the last one's right link when
/// that still covers the walk's next key, and a cursor may resume at
/// where the one before it ended (ANALYZE's consecutive blocks). Under
/// splits and merges from a writer, consecutive ranges read that way
/// still return every key nobody touches, once and in order.
#[test]
fn walks_resumed_at_right_links_see_every_stable_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let tr = tree(&e, 1, 1);
    const N: u64 = 6000;
    for i in 0..N {
        tr.upsert(&key(2 * i), &value(2 * i, 0, 60)).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tr2, stop) = (tr.clone(), &stop);
        s.spawn(move || {
            let mut rng = Rng(7);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Odd keys come and go in bursts: leaves split and merge.
                let base = rng.below(N);
                let len = 1 + rng.below(300) as usize;
                for j in 0..40 {
                    let k = key(2 * ((base + j) % N) + 1);
                    if rng.below(2) == 0 {
                        tr2.upsert(&k, &value(0, 0, len)).unwrap();
                    } else {
                        tr2.delete(&k).unwrap();
                    }
                }
            }
        });
        let number = |k: &[u8]| u32::from_be_bytes(k[..4].try_into().unwrap()) as u64;
        for round in 0..20u64 {
            let mut seen = Vec::new();
            let mut all = Vec::new();
            let mut resume = None;
            // Ranges edged at leaf starts, as ANALYZE's blocks are, so that
            // a range's first leaf is the one the last ended before (when no
            // split or merge came between), every `1 + round % 3` leaves.
            let starts = tr.leaf_starts(&key(0), None).unwrap();
            let mut edges: Vec<Vec<u8>> = starts.into_iter().step_by(1 + (round % 3) as usize).collect();
            edges.insert(0, key(0));
            for (n, lo) in edges.iter().enumerate() {
                let hi = edges.get(n + 1).map_or(Bound::Unbounded, |h| Bound::Excluded(h.clone()));
                let mut c = tr.range(Bound::Included(lo.clone()), hi, Direction::Forward);
                if let Some(p) = resume {
                    c = c.resume_at(p);
                }
                while let Some(leaf) = c.next_leaf() {
                    for (k, _) in leaf.unwrap().items() {
                        all.push(k.to_vec());
                        if number(k) % 2 == 0 {
                            seen.push(number(k));
                        }
                    }
                }
                resume = Some(c.right_hint());
            }
            // Every key at most once and in order, odd ones included.
            assert!(all.windows(2).all(|w| w[0] < w[1]), "round {round}: keys out of order or twice");
            let want: Vec<u64> = (0..N).map(|i| 2 * i).collect();
            assert_eq!(seen, want, "round {round}");
            // And one walk of the whole tree.
            let all: Vec<u64> = tr.scan().map(|r| number(&r.unwrap().0)).filter(|i| i % 2 == 0).collect();
            assert_eq!(all, want, "round {round}, whole walk");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_valid(&tr);
}

/// A walk resumed at a right link whose page was merged away meanwhile
/// (the leaf before it emptied and took it over, new keys inserted into
/// its range since) reads the range from where a descent finds it: the
/// merged page's tombstone, which still holds its old items, is turned
/// away.
#[test]
fn a_walk_resumed_at_a_page_merged_away_reads_the_range_anew() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let tr = tree(&e, 1, 1);
    for i in 0..3000u64 {
        tr.upsert(&key(2 * i), &value(i, 0, 60)).unwrap();
    }
    let starts = tr.leaf_starts(&key(0), None).unwrap();
    assert!(starts.len() > 4, "{} leaf starts", starts.len());
    let (s0, s1, s2) = (starts[0].clone(), starts[1].clone(), starts[2].clone());
    let range = |lo: &[u8], hi: &[u8]| tr.range(Bound::Included(lo.to_vec()), Bound::Excluded(hi.to_vec()), Direction::Forward);
    let mut c = range(&s0, &s1);
    let walked: Vec<Vec<u8>> = c.by_ref().map(|r| r.unwrap().0).collect();
    let hint = c.right_hint();
    // Empty the leaf just walked: it takes over its right sibling, the
    // page of the hint. Then add keys to that page's old range.
    for k in &walked {
        assert!(tr.delete(k).unwrap());
    }
    let kept: Vec<Vec<u8>> = range(&s1, &s2).map(|r| r.unwrap().0).collect();
    let fresh: Vec<Vec<u8>> = kept.iter().step_by(5).map(|k| [k.as_slice(), b"!"].concat()).collect();
    for k in &fresh {
        tr.upsert(k, b"new").unwrap();
    }
    let mut want: Vec<Vec<u8>> = kept.into_iter().chain(fresh).collect();
    want.sort();
    let mut c = range(&s1, &s2).resume_at(hint);
    let mut got = Vec::new();
    while let Some(leaf) = c.next_leaf() {
        got.extend(leaf.unwrap().items().map(|(k, _)| k.to_vec()));
    }
    assert_eq!(got, want);
    assert_valid(&tr);
}
