//! Keyed layout: how a table's rows are laid out in its primary tree —
//! the room at the bottom of the access method. It owns the key of every
//! version (`table`: row-id or primary-key order, the row-id map, row-id
//! allocation), the primary-key descriptor and the encoding of key values
//! (`key_desc`, with ICU sort keys in `collate`), HOT-like chains (`hot`) and
//! heap's page fill applied to blocks of row ids (`fill`).
//!
//! It may call the engine and `pg`; nothing else of the access method.
pub mod collate;
pub mod fill;
pub mod hot;
pub mod key_desc;
pub mod table;
