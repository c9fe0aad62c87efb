//! Latches: short-term reader/writer locks on pages and pool partitions.
//!
//! The engine never names a lock implementation; it asks a [`LatchSet`] for
//! latch number `i`. In the server the set is an LWLock tranche in shared
//! memory (released automatically on ERROR); in tests it is [`SpinLatches`].

use std::sync::atomic::{AtomicU32, Ordering};

/// How a latch is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatchMode {
    Shared,
    Exclusive,
}

/// A fixed-size, indexable set of reader/writer latches.
///
/// Invariant: latch `i` exists for `i < len()`; a holder releases exactly the
/// latches it acquired, and never waits for a latch while holding one that
/// comes later in the engine's lock order (tree level top-down, then left to
/// right within a level, then pool partitions).
pub trait LatchSet: Send + Sync {
    fn len(&self) -> usize;
    fn acquire(&self, i: usize, mode: LatchMode);
    /// Acquire without waiting; returns whether the latch was taken.
    fn try_acquire(&self, i: usize, mode: LatchMode) -> bool;
    fn release(&self, i: usize, mode: LatchMode);
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const WRITER: u32 = 1 << 31;
/// Set by a waiting writer so that new readers queue behind it (only in
/// writer-preferring sets). The engine does not rely on it: PostgreSQL's
/// LWLocks have no such preference, so the checkpoint barrier keeps its
/// exclusive acquirer from starving by itself (`engine::CheckpointBarrier`).
const WAITING: u32 = 1 << 30;

/// Reader/writer spin latches on plain atomics, for tests and benchmarks.
///
/// Invariant: the low bits count readers, `WRITER` marks the one writer
/// (never together with readers), `WAITING` only blocks new readers (and is
/// never set when `prefer_writers` is off).
pub struct SpinLatches {
    words: Vec<AtomicU32>,
    prefer_writers: bool,
}

impl SpinLatches {
    /// Writer-preferring latches: a waiting writer holds off new readers.
    pub fn new(n: usize) -> Self {
        SpinLatches {
            words: (0..n).map(|_| AtomicU32::new(0)).collect(),
            prefer_writers: true,
        }
    }

    /// Reader-preferring latches, as PostgreSQL's LWLocks are: a shared
    /// acquisition succeeds whenever no writer holds the latch, even while
    /// a writer waits, so a steady stream of overlapping readers can keep a
    /// writer out indefinitely. Tests use them to model the server.
    pub fn reader_preferring(n: usize) -> Self {
        SpinLatches {
            prefer_writers: false,
            ..Self::new(n)
        }
    }
}

impl LatchSet for SpinLatches {
    fn len(&self) -> usize {
        self.words.len()
    }

    fn acquire(&self, i: usize, mode: LatchMode) {
        let mut spins = 0u32;
        while !self.try_acquire(i, mode) {
            if mode == LatchMode::Exclusive && self.prefer_writers {
                let w = &self.words[i];
                w.fetch_or(WAITING, Ordering::Relaxed);
                if w.compare_exchange(WAITING, WRITER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn try_acquire(&self, i: usize, mode: LatchMode) -> bool {
        let w = &self.words[i];
        match mode {
            LatchMode::Exclusive => w
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok(),
            LatchMode::Shared => {
                let cur = w.load(Ordering::Relaxed);
                cur & (WRITER | WAITING) == 0
                    && w.compare_exchange(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
            }
        }
    }

    fn release(&self, i: usize, mode: LatchMode) {
        let w = &self.words[i];
        match mode {
            LatchMode::Exclusive => w.store(0, Ordering::Release),
            LatchMode::Shared => {
                w.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn readers_share_writers_exclude() {
        let l = SpinLatches::new(1);
        assert!(l.try_acquire(0, LatchMode::Shared));
        assert!(l.try_acquire(0, LatchMode::Shared));
        assert!(!l.try_acquire(0, LatchMode::Exclusive));
        l.release(0, LatchMode::Shared);
        l.release(0, LatchMode::Shared);
        assert!(l.try_acquire(0, LatchMode::Exclusive));
        assert!(!l.try_acquire(0, LatchMode::Shared));
        l.release(0, LatchMode::Exclusive);
    }

    /// With a writer waiting, a new reader is held off by the default
    /// latches and let in by the LWLock-like ones.
    #[test]
    fn waiting_writer_and_new_readers() {
        for lwlock_like in [false, true] {
            let l = Arc::new(if lwlock_like {
                SpinLatches::reader_preferring(1)
            } else {
                SpinLatches::new(1)
            });
            assert!(l.try_acquire(0, LatchMode::Shared));
            let l2 = l.clone();
            let w = std::thread::spawn(move || {
                l2.acquire(0, LatchMode::Exclusive);
                l2.release(0, LatchMode::Exclusive);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            let admitted = l.try_acquire(0, LatchMode::Shared);
            assert_eq!(admitted, lwlock_like);
            if admitted {
                l.release(0, LatchMode::Shared);
            }
            l.release(0, LatchMode::Shared);
            w.join().unwrap();
        }
    }

    #[test]
    fn exclusive_protects_counter() {
        let l = Arc::new(SpinLatches::new(1));
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (l, c) = (l.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        l.acquire(0, LatchMode::Exclusive);
                        // Non-atomic read-modify-write: only correct under the latch.
                        let v = c.load(Ordering::Relaxed);
                        c.store(v + 1, Ordering::Relaxed);
                        l.release(0, LatchMode::Exclusive);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(counter.load(Ordering::Relaxed), 80_000);
    }
}
