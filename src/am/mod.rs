//! The `orioledb` table access method.
//!
//! `handler` is the SQL entry point PostgreSQL calls to obtain the callback
//! table; `routine` holds the callbacks, which read rows in `scan`, write
//! them in `modify` and vacuum in `vacuum` (see docs/architecture.md).
pub mod collate;
pub mod fill;
pub mod handler;
pub mod hot;
pub mod levels;
pub mod logical;
pub mod modify;
pub mod pkey;
pub mod pkscan;
pub mod planner;
pub mod quiet;
pub mod rekey;
pub mod routine;
pub mod rows;
pub mod scan;
pub mod ssi;
pub mod storage;
pub mod table;
pub mod toast;
pub mod unlogged;
pub mod vacuum;
pub mod vismap;

pub use routine::ROUTINE;

/// Wires the access method into the server (from `_PG_init`): its
/// per-transaction queues and caches into `pg::xact`, in the order they
/// settle (rows' pre-commit work first, tree drops last); its planner and
/// primary-scan hooks; and what WAL replay needs from it.
pub(crate) fn install() {
    use crate::pg::xact::on_event;
    on_event(rows::at_event);
    on_event(table::at_event);
    on_event(toast::at_event);
    on_event(rekey::at_event);
    on_event(storage::at_event);
    planner::install();
    pkscan::install();
    crate::pg::wal::set_replay_hooks(crate::pg::wal::ReplayHooks {
        key_order: |tree, desc| {
            let d = pkey::KeyDesc::decode(desc)?;
            Some(table::ordered_by(tree, &d).cmp())
        },
        // Visibility maps are not WAL-logged: changes replayed now may
        // have lost their clears, so every map starts empty.
        at_startup: vismap::remove_all,
    });
}
