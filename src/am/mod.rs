//! The `orioledb` table access method, in rooms that depend one way, from
//! the bottom (`scripts/layers.sh` fails on an import of a room above):
//!
//! - `layout` — keyed layout: version keys, the row-id map, primary-key
//!   encoding, HOT-like chains, row-id blocks;
//! - `storage` — the life of a table's trees, compression levels, unlogged
//!   tables after a crash;
//! - `toast` — values stored out of line, in the toast relation's tree;
//! - `rows` — row versions on the PostgreSQL side: format, visibility,
//!   table handles and pruning, SERIALIZABLE (`ssi`), the visibility map;
//! - `rekey` — keying a table by its primary key, CLUSTER, VACUUM FULL;
//! - `scan` — reading: sequential, TID, index and bitmap scans, index
//!   builds, the primary scan and its planner hook;
//! - `modify` — writing: insert, update, delete, row locks, and the row
//!   changes logical decoding reads;
//! - `maintenance` — VACUUM and the pruning of quiet tables;
//! - `secondary` — the `orioledb_btree` index access method: secondary
//!   indexes stored in engine trees.
//!
//! On top, `routine` fills PostgreSQL's `TableAmRoutine` with callbacks
//! into the rooms and `handler` hands it out; [`install`] wires the rooms
//! into the server. See docs/architecture.md.
pub mod handler;
pub mod layout;
pub mod maintenance;
pub mod modify;
pub mod rekey;
pub mod routine;
pub mod rows;
pub mod scan;
pub mod secondary;
pub mod storage;
pub mod toast;

pub use routine::ROUTINE;

/// Wires the access method into the server (from `_PG_init`): its
/// per-transaction queues and caches into `pg::xact`, in the order they
/// settle (rows' pre-commit work first, tree drops last); its planner and
/// primary-scan hooks; and what WAL replay needs from it.
pub(crate) fn install() {
    use crate::pg::xact::on_event;
    on_event(rows::at_event);
    on_event(layout::table::at_event);
    on_event(toast::at_event);
    on_event(rekey::at_event);
    on_event(storage::levels::at_event);
    on_event(storage::trees::at_event);
    scan::planner::install();
    scan::pkscan::install();
    crate::pg::wal::set_replay_hooks(crate::pg::wal::ReplayHooks {
        key_order: |tree, desc| {
            let d = layout::key_desc::KeyDesc::decode(desc)?;
            Some(layout::table::ordered_by(tree, &d).cmp_arc())
        },
        // Visibility maps are not WAL-logged: changes replayed now may
        // have lost their clears, so every map starts empty.
        at_startup: rows::vismap::remove_all,
        superseded_by: rows::superseded_by,
    });
}
