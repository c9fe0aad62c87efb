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
