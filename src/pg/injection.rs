//! Testing aids: one-shot fault injections named by files in the engine
//! directory. A file, not a setting: the code they steer runs in processes
//! a session cannot reach (the startup process, the orioledb checkpointer
//! at shutdown), and the file is removed as it is read, so the restart that
//! follows a PANIC runs normally. No file, no effect; nothing creates them
//! but tests.

/// The next replay of the engine's records from its redo point fails with
/// an ERROR before the N-th record (the file holds N; `pg::wal`).
pub const REPLAY_FAIL_AT: &str = "debug_replay_fail_at";

/// The orioledb checkpointer's next clean shutdown exits without its
/// engine checkpoint (`hooks::checkpointer`), as if it had failed: the
/// next start finds no PostgreSQL redo to do, and the first process to use
/// the engine replays its records.
pub const SKIP_SHUTDOWN_CHECKPOINT: &str = "debug_skip_shutdown_checkpoint";

/// The contents of injection file `name`, consuming it (None: no file).
pub fn take(name: &str) -> Option<String> {
    let path = std::path::Path::new(crate::pg::engine::DATA_DIR).join(name);
    let text = std::fs::read_to_string(&path).ok()?;
    std::fs::remove_file(&path).ok()?;
    Some(text)
}
