//! Maintenance: VACUUM of orioledb tables (`vacuum`: index cleanup,
//! freezing, the visibility map, statistics) and the background pruning of
//! tables nobody changes any more (`quiet`, run by the orioledb
//! checkpointer). Row versions leave a table without it; this room is for
//! what only VACUUM can do and for trees no backend visits.
//!
//! It may call scans (`am::scan`), row versions (`am::rows`), the keyed
//! layout, the engine and `pg`.
pub mod quiet;
pub mod vacuum;
