//! The storage engine: pages, B-link trees, the page pool, data files and
//! checkpoints. No pgrx and no `pg_sys` here: the server supplies latches,
//! comparators and file I/O through the traits below.

pub mod buffer;
pub mod cmp;
pub mod error;
pub mod io;
pub mod latch;
pub mod page;

pub use error::{EngineError, Result};
pub mod store;
