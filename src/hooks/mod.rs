//! The top layer: what PostgreSQL calls into besides the access method's
//! callbacks — `_PG_init`, the utility hook (table options, re-keying
//! after a primary key is added, CHECKPOINT, databases), the object-access
//! hook (DROP), the parse-analysis hook that makes PostgreSQL's size
//! functions count engine trees (`sizes`), and the checkpointer background
//! worker. It may use every layer below (`am`, `pg`, the engine); nothing
//! below imports from it. The SQL-callable functions live beside it in
//! `lib.rs`.
pub mod checkpointer;
pub mod init;
pub mod object_access;
pub mod sizes;
pub mod utility;
