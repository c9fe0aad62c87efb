//! The one place that hears PostgreSQL's transaction and subtransaction
//! ends. Every per-transaction queue and cache of the extension registers a
//! [`Hook`] here when the library loads (`on_event`, from `_PG_init`), and
//! is told of each [`Event`] in registration order: the layer that owns a
//! queue clears it, so nothing above has to know the queue exists.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// A transaction event, as PostgreSQL's xact and subxact callbacks report
/// it (parallel workers' commit and abort count as commit and abort).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The transaction is about to commit and can still run statements.
    PreCommit,
    /// PREPARE TRANSACTION is about to hand the transaction over (an
    /// ERROR here refuses it).
    PrePrepare,
    /// PREPARE TRANSACTION has handed the transaction over; this session
    /// goes on without it.
    Prepare,
    Commit,
    Abort,
    /// Subtransaction `sub` committed into `parent`.
    SubCommit {
        sub: pg_sys::SubTransactionId,
        parent: pg_sys::SubTransactionId,
    },
    /// Subtransaction `sub` rolled back.
    SubAbort { sub: pg_sys::SubTransactionId },
    /// Any other point PostgreSQL reports (a subtransaction's start, ...).
    Other,
}

/// Told of every [`Event`]; ERRORs raised in it behave as in any
/// PostgreSQL transaction callback.
pub type Hook = fn(Event);

const MAX_HOOKS: usize = 16;

/// Hooks in registration order. Written only by [`on_event`] while the
/// library loads (single-threaded `_PG_init`), read-only afterwards.
static mut HOOKS: [Option<Hook>; MAX_HOOKS] = [None; MAX_HOOKS];

/// Registers `hook` (from `_PG_init` only); the first registration also
/// registers the callbacks with PostgreSQL.
pub fn on_event(hook: Hook) {
    // SAFETY: single-threaded `_PG_init` (see HOOKS); the callbacks are
    // registered once, the way every extension registers them.
    unsafe {
        let hooks = &mut *std::ptr::addr_of_mut!(HOOKS);
        if hooks[0].is_none() {
            pg_sys::RegisterXactCallback(Some(xact_callback), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(subxact_callback), std::ptr::null_mut());
        }
        let free = hooks.iter_mut().find(|h| h.is_none()).expect("too many transaction hooks");
        *free = Some(hook);
    }
}

fn tell(event: Event) {
    // SAFETY: read-only after `_PG_init` (see HOOKS).
    let hooks = unsafe { &*std::ptr::addr_of!(HOOKS) };
    for hook in hooks.iter().map_while(|h| *h) {
        hook(event);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn xact_callback(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    tell(match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT => Event::PreCommit,
        XACT_EVENT_PRE_PREPARE => Event::PrePrepare,
        XACT_EVENT_PREPARE => Event::Prepare,
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => Event::Commit,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => Event::Abort,
        _ => Event::Other,
    });
}

#[pg_guard]
unsafe extern "C-unwind" fn subxact_callback(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    tell(match event {
        SUBXACT_EVENT_COMMIT_SUB => Event::SubCommit { sub, parent },
        SUBXACT_EVENT_ABORT_SUB => Event::SubAbort { sub },
        _ => Event::Other,
    });
}
