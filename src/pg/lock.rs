//! Heavyweight locks held as session locks by processes that may have no
//! database or transaction (the orioledb checkpointer): tags built from
//! numbers, released by dropping the value.

use pgrx::pg_sys;

/// A lock held as a session lock. Invariant: held in `mode` while the
/// value lives; dropping it releases it.
pub struct SessionLock {
    tag: pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
}

impl SessionLock {
    /// Relation `rel` of database `db` in `mode`, only if free at once.
    pub fn try_relation(db: u32, rel: u32, mode: u32) -> Option<SessionLock> {
        let tag = pg_sys::LOCKTAG {
            locktag_field1: db,
            locktag_field2: rel,
            locktag_field3: 0,
            locktag_field4: 0,
            locktag_type: pg_sys::LockTagType::LOCKTAG_RELATION as u8,
            locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
        };
        Self::take(tag, mode as pg_sys::LOCKMODE, true)
    }

    /// The extension's own exclusive lock number `n`, once it is free: an
    /// advisory tag of no database, in a class (field 4) that
    /// `pg_advisory_lock` never uses (it uses 1 and 2). Polled, never
    /// waited for in the lock manager: a process that did not run
    /// `InitPostgres` (the orioledb checkpointer) has no deadlock-timeout
    /// handler, and a wait longer than `deadlock_timeout` would call a
    /// null one. Held only for short steps (creating the WAL slot).
    pub fn ours(n: u32) -> SessionLock {
        let tag = pg_sys::LOCKTAG {
            locktag_field1: 0,
            locktag_field2: 0x4F52_4442, // "ORDB"
            locktag_field3: n,
            locktag_field4: 201,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        };
        loop {
            if let Some(l) = Self::take(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true) {
                return l;
            }
            pgrx::check_for_interrupts!();
            // SAFETY: a plain sleep.
            unsafe { pg_sys::pg_usleep(5_000) };
        }
    }

    fn take(mut tag: pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE, dont_wait: bool) -> Option<SessionLock> {
        // SAFETY: a session lock needs no transaction or resource owner;
        // with dont_wait it never sleeps (every caller passes it).
        let r = unsafe { pg_sys::LockAcquire(&mut tag, mode, true, dont_wait) };
        // Built only when taken: `then_some` would build one for a lock not
        // taken too, and dropping it released a lock this process did not
        // hold (PostgreSQL's "you don't own a lock" WARNING at every busy
        // try of the quiet sweep).
        (r != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL).then(|| SessionLock { tag, mode })
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // SAFETY: the lock this value holds, as a session lock.
        unsafe {
            pg_sys::LockRelease(&mut self.tag, self.mode, true);
        }
    }
}
