//! How the extension raises PostgreSQL errors: every ERROR it raises, with
//! its SQLSTATE, goes through [`error`] (or the shorthands below), so each
//! carries the right code and our component name, and a detail or hint is
//! added the same way everywhere. Engine failures (`EngineError`) are
//! mapped to SQLSTATEs in `pg::engine::report`, which raises through here.
//! Notices and warnings go through pgrx's `notice!`/`warning!` macros.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// The function name PostgreSQL shows for our reports (`\set VERBOSITY
/// verbose`).
const COMPONENT: &str = "orioledb_rs";

/// A report being built: a SQLSTATE, a message and, optionally, a detail
/// and a hint. Invariant: nothing reaches the client until it is raised
/// (or reported at another level).
#[must_use = "an error does nothing until it is raised"]
pub struct Error(ErrorReport);

/// A report with `code` and `msg`, to be raised (after adding a detail or
/// a hint if need be). Its LOCATION is the caller's (`#[track_caller]`
/// down to pgrx's `ErrorReport::new`).
#[track_caller]
pub fn error(code: PgSqlErrorCode, msg: impl Into<String>) -> Error {
    Error(ErrorReport::new(code, msg.into(), COMPONENT))
}

impl Error {
    pub fn detail(self, detail: impl Into<String>) -> Error {
        Error(self.0.set_detail(detail.into()))
    }

    pub fn hint(self, hint: impl Into<String>) -> Error {
        Error(self.0.set_hint(hint.into()))
    }

    /// Raises the ERROR: the statement (and transaction) fails.
    pub fn raise(self) -> ! {
        self.report(PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }

    /// Reports it at `level` (a PANIC or FATAL does not return either; a
    /// WARNING or LOG does).
    pub fn report(self, level: PgLogLevel) {
        self.0.report(level);
    }
}

/// Raises an ERROR with `code` and `msg`.
#[track_caller]
pub fn raise(code: PgSqlErrorCode, msg: impl Into<String>) -> ! {
    error(code, msg).raise()
}

/// Raises `orioledb: <what> is not supported yet` (SQLSTATE 0A000): what
/// is refused on purpose.
#[track_caller]
pub fn not_supported(what: impl std::fmt::Display) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("orioledb: {what} is not supported yet"),
    )
}

/// Raises an internal error (SQLSTATE XX000), for what PostgreSQL itself
/// reports with `elog(ERROR)`: a state that should not happen, such as a
/// failed catalog lookup.
#[track_caller]
pub fn internal(msg: impl Into<String>) -> ! {
    raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, msg)
}
