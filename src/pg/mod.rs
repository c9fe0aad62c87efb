//! PostgreSQL glue: module initialisation, GUCs, table options and shared memory.
//!
//! Everything that talks to `pg_sys` about server-wide state lives here; the
//! engine (`orioledb_engine`) only ever sees the traits this layer implements.
pub mod checkpointer;
pub mod engine;
pub mod guc;
pub mod init;
pub mod options;
pub mod shmem;
pub mod wal;

pub use init::require_preloaded;
