//! Storage: the files and trees behind a relation. It owns the life of a
//! table's engine trees across transactions (`trees`: created with the
//! relation file, dropped at commit or abort, toast trees at their first
//! value, databases copied and dropped), their compression levels
//! (`levels`), and unlogged tables emptied after a crash (`unlogged`).
//!
//! It may call the keyed layout (`am::layout`), the engine and `pg`.
pub mod levels;
pub mod trees;
pub mod unlogged;
