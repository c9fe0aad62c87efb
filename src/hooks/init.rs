//! `_PG_init`: registers everything when the library is preloaded (the
//! settings, shared memory, the WAL resource manager, the access method's
//! callbacks, the utility hook and the checkpointer worker). Loaded any
//! other way it registers nothing, and every SQL entry point refuses to run
//! (`pg::preload`).

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a plain read of a server global that is only written by the
    // postmaster while it loads libraries, in this same (main) thread.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    if !preloading {
        // Defining PGC_POSTMASTER GUCs or requesting shared memory now would
        // either fail or silently do nothing; the entry points report it instead.
        return;
    }
    crate::pg::preload::mark_preloaded();
    // Before anything is registered: a damaged control file stops the
    // postmaster here, so `pg_ctl start` fails and the log names the file.
    crate::pg::engine::check_control_at_start();
    crate::pg::guc::register();
    crate::pg::shmem::install_hooks();
    crate::pg::backup::install_hooks();
    crate::hooks::utility::install_hook();
    crate::am::install();
    crate::hooks::object_access::install();
    crate::hooks::sizes::install();
    crate::hooks::checkpointer::register();
    crate::pg::wal::register();
}
