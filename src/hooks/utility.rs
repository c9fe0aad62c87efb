//! Table options `compress`, `primary_compress` and `toast_compress`.
//!
//! PostgreSQL 15 gives table access methods no reloption callback, and adding
//! heap reloptions would change every `WITH (...)`. A `ProcessUtility_hook`
//! therefore handles these options itself (DESIGN decision 10):
//!
//! * `CREATE TABLE` / `CREATE TABLE AS` / `SELECT INTO` / `CREATE MATERIALIZED
//!   VIEW` for a relation whose access method is `orioledb` (explicit `USING`,
//!   or `default_table_access_method`): our options are validated and removed
//!   from the statement, PostgreSQL creates the relation, and the *effective*
//!   levels (given options, else the `orioledb.default_*compress` GUCs) are
//!   written into `pg_class.reloptions` as `compress=N`, `primary_compress=N`,
//!   `toast_compress=N`.
//! * `ALTER TABLE ... SET (...)` / `RESET (...)` on an orioledb relation: our
//!   options are taken out of the subcommands and applied to the stored levels.
//!   Because PostgreSQL validates the whole `reloptions` array when it runs the
//!   remaining `SET`/`RESET` (heap does not know `compress`), our entries are
//!   removed from `pg_class` before it runs and written back afterwards, all in
//!   the same transaction.
//! * On any other relation, the options raise SQLSTATE 22023; on indexes
//!   (`CREATE INDEX ... WITH`, `ALTER INDEX ... SET`) SQLSTATE 0A000.
//!
//! Levels are -1 (off), 0 (zstd's default level) or 1..=22 (zstd level).

//!
//! This is the hook; the levels themselves (storage, defaults, ALTER's
//! rules) are `am::storage::levels`.

use crate::am::storage::levels::{
    parse_level, stored_levels, write_levels, GivenLevels, Levels, Opt, AM_NAME,
    RANGE_DETAIL,
};
use pgrx::pg_sys;
use crate::pg::error::{error, internal, raise};
use pgrx::prelude::*;
use std::ffi::{c_char, c_void, CStr};


// ---------------------------------------------------------------------------
// Parse-tree helpers

/// The elements of a PostgreSQL `List` of pointers (NIL = null = empty).
///
/// # Safety
/// `list` must be null or a valid pointer `List`.
unsafe fn cells(list: *mut pg_sys::List) -> Vec<*mut c_void> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a valid List has `length` initialised cells at `elements`.
    unsafe {
        (0..(*list).length as usize)
            .map(|i| (*(*list).elements.add(i)).ptr_value)
            .collect()
    }
}

/// Builds a new `List` of the given pointers (null for none).
///
/// # Safety
/// Must run in a memory context that lives as long as the parse tree.
unsafe fn make_list(items: &[*mut c_void]) -> *mut pg_sys::List {
    let mut list: *mut pg_sys::List = std::ptr::null_mut();
    for &item in items {
        // SAFETY: lappend accepts NIL and returns the (possibly moved) list.
        list = unsafe { pg_sys::lappend(list, item) };
    }
    list
}

/// Lossy text of a C string (for messages; never fails).
///
/// # Safety
/// `s` must be null or NUL-terminated.
unsafe fn text_of(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: caller guarantees NUL termination.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// Which of our options a `DefElem` is (no namespace, exact name), if any.
///
/// # Safety
/// `def` must be a valid `DefElem`.
unsafe fn our_option(def: *mut pg_sys::DefElem) -> Option<Opt> {
    // SAFETY: a valid DefElem has a NUL-terminated defname.
    unsafe {
        if !(*def).defnamespace.is_null() || (*def).defname.is_null() {
            return None;
        }
        Opt::from_name(CStr::from_ptr((*def).defname).to_bytes())
    }
}

/// Our options in an options list, in order, with their `DefElem`s.
///
/// # Safety
/// `list` must be null or a valid `List` of `DefElem`.
unsafe fn ours_in(list: *mut pg_sys::List) -> Vec<(Opt, *mut pg_sys::DefElem)> {
    // SAFETY: see the function contract.
    unsafe {
        cells(list)
            .into_iter()
            .map(|p| p as *mut pg_sys::DefElem)
            .filter_map(|d| our_option(d).map(|o| (o, d)))
            .collect()
    }
}

/// `list` without our options (a new list; null if nothing is left).
///
/// # Safety
/// As [`ours_in`], in a memory context living as long as the parse tree.
unsafe fn without_ours(list: *mut pg_sys::List) -> *mut pg_sys::List {
    // SAFETY: see the function contract.
    unsafe {
        let rest: Vec<*mut c_void> = cells(list)
            .into_iter()
            .filter(|&p| our_option(p as *mut pg_sys::DefElem).is_none())
            .collect();
        make_list(&rest)
    }
}

/// Raises the "invalid value" error (SQLSTATE 22023) for `opt`.
fn invalid_value(opt: Opt, shown: &str) -> ! {
    error(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for orioledb option \"{}\": {shown}", opt.name()),
    )
    .detail(RANGE_DETAIL)
    .raise()
}

/// Validates the values of our options in a `SET`/`WITH` list.
///
/// # Safety
/// The `DefElem`s must be valid.
unsafe fn parse_given(defs: &[(Opt, *mut pg_sys::DefElem)]) -> GivenLevels {
    let mut given = GivenLevels::default();
    for &(opt, def) in defs {
        // SAFETY: valid DefElem; defGetString accepts every value node kind
        // the grammar produces (Integer, Float, String, Boolean, TypeName...)
        // once we have ruled out a missing value.
        let text = unsafe {
            if (*def).arg.is_null() {
                invalid_value(opt, "no value given");
            }
            text_of(pg_sys::defGetString(def))
        };
        let level =
            parse_level(&text).unwrap_or_else(|| invalid_value(opt, &format!("\"{text}\"")));
        if given.slot(opt).replace(level).is_some() {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("parameter \"{}\" specified more than once", opt.name()),
            );
        }
    }
    given
}

/// Raises SQLSTATE 22023: our option on a relation that is not orioledb.
fn not_orioledb(opt: Opt, detail: String) -> ! {
    error(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!(
            "option \"{}\" is only valid for tables using the orioledb access method",
            opt.name()
        ),
    )
    .detail(detail)
    .raise()
}

/// The tablespace a `CREATE DATABASE` / `ALTER DATABASE` option list names,
/// if it is one a database could move to other than `pg_default`. None
/// for `TABLESPACE DEFAULT` (no value) and for names PostgreSQL refuses
/// itself with its own error (a missing tablespace, `pg_global`).
///
/// # Safety
/// `options` is a valid list of `DefElem`s.
unsafe fn other_tablespace(options: *mut pg_sys::List) -> Option<String> {
    // SAFETY: per the contract.
    unsafe {
        cells(options).into_iter().find_map(|d| {
            let def = d as *mut pg_sys::DefElem;
            if text_of((*def).defname) != "tablespace" || (*def).arg.is_null() {
                return None;
            }
            let name = text_of(pg_sys::defGetString(def));
            let cname = std::ffi::CString::new(name.clone()).unwrap_or_default();
            let oid = pg_sys::get_tablespace_oid(cname.as_ptr(), true);
            let movable = ![
                pg_sys::InvalidOid,
                pg_sys::DEFAULTTABLESPACE_OID,
                pg_sys::GLOBALTABLESPACE_OID,
            ]
            .contains(&oid);
            movable.then_some(name)
        })
    }
}

/// Raises SQLSTATE 0A000 when database statement `options` name a
/// tablespace to put the orioledb tables of database `db` in (`what`
/// says what the statement would do there): the engine does not follow
/// them outside the default tablespace (it would take their trees for
/// those of dropped tables).
///
/// # Safety
/// `options` is a valid list of `DefElem`s.
unsafe fn tables_stay_in_default_tablespace(
    options: *mut pg_sys::List,
    db: &str,
    what: impl FnOnce(&str) -> String,
) {
    // SAFETY: per the contract.
    let Some(ts) = (unsafe { other_tablespace(options) }) else {
        return;
    };
    error(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("orioledb: {}", what(&ts)))
        .detail(format!(
            "Database \"{db}\" has orioledb tables, which stay in the default tablespace."
        ))
        .raise();
}

/// [`tables_stay_in_default_tablespace`] for a copy of `template` named
/// `name` made by CREATE DATABASE with `options`.
///
/// # Safety
/// `options` is a valid option list (or NULL), `name` a C string.
unsafe fn refuse_copy_elsewhere(options: *mut pg_sys::List, template: &str, name: *const c_char) {
    // SAFETY: per the contract.
    unsafe {
        let db = text_of(name);
        tables_stay_in_default_tablespace(options, template, |ts| {
            format!("cannot create database \"{db}\" in tablespace \"{ts}\"")
        });
    }
}

/// Raises SQLSTATE 0A000: our option on an index of a PostgreSQL index AM.
fn index_not_compressed(am: &str, table: &str) -> ! {
    let table = if table.is_empty() { "..." } else { table };
    error(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("orioledb: indexes using access method \"{am}\" are not compressed"),
    )
    .hint(format!(
        "Compression is a table option of orioledb tables (ALTER TABLE {table} SET (compress = N)); their non-unique indexes take compress as orioledb_btree indexes."
    ))
    .raise()
}

// ---------------------------------------------------------------------------
// Relations

/// What an existing relation is, as far as our options are concerned.
enum RelKind {
    /// A table or materialized view with access method orioledb.
    Orioledb,
    /// An index (or partitioned index) of the named index access method.
    Index { am: String, table: String },
    /// Anything else; the text is the DETAIL for [`not_orioledb`].
    Other(String),
}

/// Classifies relation `relid` (which must exist).
///
/// # Safety
/// Inside a transaction.
unsafe fn rel_kind(relid: pg_sys::Oid) -> RelKind {
    // SAFETY: syscache/lsyscache lookups in a transaction; the tuple is
    // released before returning and the strings are copied first.
    unsafe {
        let Some((relkind, relam, name)) =
            crate::pg::with_syscache(pg_sys::SysCacheIdentifier::RELOID, relid.into(), |tup| {
                let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tup);
                ((*form).relkind as u8, (*form).relam, text_of((*form).relname.data.as_ptr()))
            })
        else {
            internal(format!(
                "orioledb_rs: cache lookup failed for relation {}",
                relid.to_u32()
            ));
        };
        let am_name = if relam == pg_sys::InvalidOid {
            String::new()
        } else {
            text_of(pg_sys::get_am_name(relam))
        };
        match relkind {
            b'i' | b'I' => {
                let table_oid = pg_sys::IndexGetRelation(relid, true);
                let table = if table_oid == pg_sys::InvalidOid {
                    String::new()
                } else {
                    text_of(pg_sys::get_rel_name(table_oid))
                };
                RelKind::Index { am: am_name, table }
            }
            b'r' | b'm' if am_name == AM_NAME => RelKind::Orioledb,
            b'r' | b'm' => RelKind::Other(format!("Table \"{name}\" uses access method \"{am_name}\".")),
            b'p' => RelKind::Other(format!(
                "Partitioned table \"{name}\" has no access method; set the option on its partitions."
            )),
            _ => RelKind::Other(format!("\"{name}\" is not a table.")),
        }
    }
}

/// The access method a new relation will get: `USING` or the default.
///
/// # Safety
/// `explicit` must be null or NUL-terminated.
unsafe fn new_relation_am(explicit: *const c_char) -> String {
    // SAFETY: default_table_access_method is a GUC string, always set in a
    // backend; read in the backend's only thread.
    unsafe {
        if explicit.is_null() {
            text_of(pg_sys::default_table_access_method)
        } else {
            text_of(explicit)
        }
    }
}

/// Oid of the relation `rv` names in the namespace it would be created in
/// (InvalidOid if none): unlike a search-path lookup, this cannot find a
/// same-named relation in another schema.
///
/// # Safety
/// `rv` must be a valid `RangeVar`, inside a transaction.
unsafe fn created_relid(rv: *mut pg_sys::RangeVar) -> pg_sys::Oid {
    // SAFETY: see the function contract; both functions only read catalogs.
    unsafe {
        let nsp = pg_sys::RangeVarGetCreationNamespace(rv);
        pg_sys::get_relname_relid((*rv).relname, nsp)
    }
}

// ---------------------------------------------------------------------------
// The hook

/// The previous `ProcessUtility_hook`, called instead of
/// `standard_ProcessUtility` when set. Written only in [`install_hook`].
static mut PREV_PROCESS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

unsafe extern "C-unwind" {
    /// tablecmds.c's range-var callback that checks ownership (and refuses
    /// system catalogs) before the lock is taken; declared here because
    /// pgrx only exposes a guarded Rust wrapper, not the C function pointer.
    #[link_name = "RangeVarCallbackOwnsRelation"]
    fn range_var_callback_owns_relation(
        relation: *const pg_sys::RangeVar,
        rel_id: pg_sys::Oid,
        old_rel_id: pg_sys::Oid,
        arg: *mut c_void,
    );
}

/// Installs the hook in front of any previous one. Called once from
/// `_PG_init` during preload.
pub(crate) fn install_hook() {
    // SAFETY: _PG_init runs single-threaded in the postmaster before any
    // utility statement can run; this is the documented way to chain hooks.
    unsafe {
        PREV_PROCESS_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(process_utility_entry);
    }
}

unsafe extern "C-unwind" {
    /// utility.c's standard processing, unwrapped: pgrx's wrapper catches
    /// an ERROR and re-raises it without its CONTEXT, cursor position and
    /// schema/table/constraint fields.
    #[link_name = "standard_ProcessUtility"]
    fn raw_standard_process_utility(
        pstmt: *mut pg_sys::PlannedStmt,
        query: *const c_char,
        read_only: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// The statements the extension acts on (options, CHECKPOINT, databases,
/// index options); every other one passes straight through.
fn acted_on(tag: pg_sys::NodeTag) -> bool {
    use pg_sys::NodeTag::*;
    matches!(
        tag,
        T_CreateStmt
            | T_CreateTableAsStmt
            | T_AlterTableStmt
            | T_CreatedbStmt
            | T_AlterDatabaseStmt
            | T_DropdbStmt
            | T_CheckPointStmt
            | T_IndexStmt
            | T_AlterTableMoveAllStmt
    )
}

/// The hook PostgreSQL calls. Deliberately not `#[pg_guard]`: a statement
/// the extension does not act on goes straight to the next hook or
/// `standard_ProcessUtility`, so its ERROR reaches PostgreSQL's handler
/// untouched, with its CONTEXT and fields (a Rust error boundary here would
/// re-raise it without them, for every table, heap included). An ERROR
/// longjmps through this frame, which holds nothing that needs dropping;
/// all Rust work runs behind guarded functions.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility_entry(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const c_char,
    read_only: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: PostgreSQL passes a valid utility PlannedStmt; the previous
    // hook and standard_ProcessUtility take exactly these arguments.
    unsafe {
        if acted_on((*(*pstmt).utilityStmt).type_) {
            // Our checks and changes before and after run behind guarded
            // functions; the statement itself runs from here, unguarded, so
            // its ERRORs keep their fields too. `plan` is plain data: an
            // ERROR longjmps past it with nothing to drop.
            let plan = prepare(pstmt, query, read_only, context, params, env, dest, qc);
            if plan.run {
                next_process_utility(
                    plan.pstmt,
                    query,
                    plan.read_only,
                    context,
                    params,
                    env,
                    dest,
                    qc,
                );
            }
            return finish(plan.after);
        }
        if (*(*pstmt).utilityStmt).type_ == pg_sys::NodeTag::T_ViewStmt {
            // The view's query is stored: it keeps the stock size functions.
            crate::hooks::sizes::defining_view(query, (*pstmt).stmt_location, || {
                next_process_utility(pstmt, query, read_only, context, params, env, dest, qc)
            });
        } else {
            next_process_utility(pstmt, query, read_only, context, params, env, dest, qc);
        }
        if crate::am::rekey::has_pending() {
            finish_statement();
        }
    }
}

/// The previous hook, else `standard_ProcessUtility`, called without an
/// error boundary.
///
/// # Safety
/// The arguments of a `ProcessUtility` call; only from the unguarded entry.
#[allow(clippy::too_many_arguments)]
unsafe fn next_process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const c_char,
    read_only: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: see the function contract; both take exactly these arguments.
    unsafe {
        #[allow(static_mut_refs)]
        match PREV_PROCESS_UTILITY {
            Some(prev) => prev(pstmt, query, read_only, context, params, env, dest, qc),
            None => {
                raw_standard_process_utility(pstmt, query, read_only, context, params, env, dest, qc)
            }
        }
    }
}

/// Work left for the end of a statement that passed straight through
/// (REINDEX or TRUNCATE can build a primary key over rows).
#[pg_guard]
extern "C-unwind" fn finish_statement() {
    if crate::pg::preload::is_preloaded() {
        crate::am::rekey::run_pending();
    }
}

/// The statement of one `ProcessUtility` call as it will run: possibly a
/// modified copy, or not run at all.
struct UtilityCall {
    pstmt: *mut pg_sys::PlannedStmt,
    read_only: bool,
    /// Whether the (possibly modified) statement still runs.
    run: bool,
}

impl UtilityCall {
    /// The utility statement.
    fn stmt(&self) -> *mut pg_sys::Node {
        // SAFETY: PostgreSQL always passes a valid utility PlannedStmt.
        unsafe { (*self.pstmt).utilityStmt }
    }

    /// The utility statement, copied first if the tree is read-only, so it
    /// may be modified.
    fn stmt_mut(&mut self) -> *mut pg_sys::Node {
        if self.read_only {
            // SAFETY: copyObjectImpl deep-copies any node tree into the
            // current memory context, which lives for the statement.
            self.pstmt = unsafe { pg_sys::copyObjectImpl(self.pstmt as *const c_void) }
                as *mut pg_sys::PlannedStmt;
            self.read_only = false;
        }
        self.stmt()
    }
}

/// What [`prepare`] decided: the statement to run (if any) and what to do
/// after it. Plain `Copy` data, because it lives in the unguarded hook
/// frame that an ERROR of the statement longjmps through.
#[derive(Clone, Copy)]
struct Prepared {
    pstmt: *mut pg_sys::PlannedStmt,
    read_only: bool,
    run: bool,
    after: AfterStatement,
}

/// Work left for after the statement ran (see [`finish`]).
#[derive(Clone, Copy)]
enum AfterStatement {
    Nothing,
    /// Store the levels of the relation `rv` names, if the statement
    /// created it (it was `before` — InvalidOid or an existing relation
    /// left alone by IF NOT EXISTS — beforehand).
    Created {
        rv: *mut pg_sys::RangeVar,
        before: pg_sys::Oid,
        given: GivenLevels,
    },
    /// Write back the table's levels (taken out of `pg_class` while
    /// PostgreSQL validated the rest of its reloptions).
    Levels {
        relid: pg_sys::Oid,
        levels: Levels,
        /// The toast level before the statement (for a toast tree made
        /// later in the transaction, see `levels::toast_level_before`).
        toast_before: i32,
    },
    /// Drop the trees of the dropped database.
    DropDatabase(pg_sys::Oid),
    /// Copy the template's trees into the database named `name`, which
    /// PostgreSQL has just created from it (with the statement's
    /// `options`, for the tablespace check).
    CopyDatabase {
        template: pg_sys::Oid,
        name: *const c_char,
        options: *mut pg_sys::List,
    },
    /// Apply the `compress` option of `orioledb_btree` index `.0` (which
    /// PostgreSQL has just set or reset) to its tree.
    IndexLevel(pg_sys::Oid),
    /// Make the engine's trees durable too.
    Checkpoint {
        /// `pg::backup::checkpoints_ran()` before PostgreSQL's checkpoint.
        ran_before: u64,
    },
}

/// Checks and rewrites a statement the extension acts on, before it runs.
// Called only from Rust (the hook entry): the plain-Rust return type is
// fine; `extern "C-unwind"` is what #[pg_guard] requires.
#[pg_guard]
#[allow(clippy::too_many_arguments, improper_ctypes_definitions)]
unsafe extern "C-unwind" fn prepare(
    pstmt: *mut pg_sys::PlannedStmt,
    _query: *const c_char,
    read_only: bool,
    _context: pg_sys::ProcessUtilityContext::Type,
    _params: pg_sys::ParamListInfo,
    _env: *mut pg_sys::QueryEnvironment,
    _dest: *mut pg_sys::DestReceiver,
    _qc: *mut pg_sys::QueryCompletion,
) -> Prepared {
    let mut call = UtilityCall {
        pstmt,
        read_only,
        run: true,
    };
    // SAFETY: the statement is a valid node of the tag we dispatch on.
    let after = unsafe {
        match (*call.stmt()).type_ {
            pg_sys::NodeTag::T_CreateStmt => create_table(&mut call),
            pg_sys::NodeTag::T_CreateTableAsStmt => create_table_as(&mut call),
            pg_sys::NodeTag::T_AlterTableStmt => alter_table(&mut call),
            pg_sys::NodeTag::T_CreatedbStmt if crate::pg::preload::is_preloaded() => {
                // CREATE DATABASE copies base/ only: the template's trees are
                // copied once it has (`am::storage::trees::copy_database_trees`).
                let stmt = call.stmt() as *mut pg_sys::CreatedbStmt;
                let mut template = "template1".to_string();
                for d in cells((*stmt).options) {
                    let def = d as *mut pg_sys::DefElem;
                    // `TEMPLATE DEFAULT` has no value: template1.
                    if text_of((*def).defname) == "template" && !(*def).arg.is_null() {
                        template = text_of(pg_sys::defGetString(def));
                    }
                }
                let name = std::ffi::CString::new(template.clone()).unwrap_or_default();
                let oid = pg_sys::get_database_oid(name.as_ptr(), true);
                if oid == pg_sys::InvalidOid {
                    AfterStatement::Nothing
                } else {
                    // Refused before the copy when we can tell now; asked
                    // again after it (`finish`), when CREATE DATABASE holds
                    // the template locked: its trees may have come while it
                    // waited for the template's sessions to go.
                    if crate::am::storage::trees::database_has_trees(oid) {
                        refuse_copy_elsewhere((*stmt).options, &template, (*stmt).dbname);
                    }
                    AfterStatement::CopyDatabase {
                        template: oid,
                        name: (*stmt).dbname,
                        options: (*stmt).options,
                    }
                }
            }
            pg_sys::NodeTag::T_AlterDatabaseStmt if crate::pg::preload::is_preloaded() => {
                let stmt = call.stmt() as *mut pg_sys::AlterDatabaseStmt;
                let oid = pg_sys::get_database_oid((*stmt).dbname, true);
                if oid != pg_sys::InvalidOid && crate::am::storage::trees::database_has_trees(oid) {
                    let db = text_of((*stmt).dbname);
                    tables_stay_in_default_tablespace((*stmt).options, &db, |ts| {
                        format!("cannot move database \"{db}\" to tablespace \"{ts}\"")
                    });
                }
                AfterStatement::Nothing
            }
            pg_sys::NodeTag::T_DropdbStmt if crate::pg::preload::is_preloaded() => {
                let stmt = call.stmt() as *mut pg_sys::DropdbStmt;
                AfterStatement::DropDatabase(pg_sys::get_database_oid((*stmt).dbname, true))
            }
            // PostgreSQL 15 has no checkpoint hook: CHECKPOINT also makes
            // the engine's trees durable, and returns when they are.
            pg_sys::NodeTag::T_CheckPointStmt => AfterStatement::Checkpoint {
                ran_before: crate::pg::backup::checkpoints_ran(),
            },
            pg_sys::NodeTag::T_IndexStmt => {
                index_stmt(&mut call);
                AfterStatement::Nothing
            }
            pg_sys::NodeTag::T_AlterTableMoveAllStmt => {
                let stmt = call.stmt() as *mut pg_sys::AlterTableMoveAllStmt;
                if (*stmt).objtype == pg_sys::ObjectType::OBJECT_INDEX {
                    // orioledb_btree indexes live in the default tablespace only.
                    let from = pg_sys::get_tablespace_oid((*stmt).orig_tablespacename, true);
                    let default = from == pg_sys::DEFAULTTABLESPACE_OID || from == pg_sys::MyDatabaseTableSpace;
                    let ours = crate::pg::index_am_oid() != pg_sys::InvalidOid
                        && pgrx::Spi::get_one::<bool>(
                            "SELECT EXISTS (SELECT FROM pg_class c JOIN pg_am a ON a.oid = c.relam
                                             WHERE a.amname = 'orioledb_btree')",
                        )
                        .ok()
                        .flatten()
                        .unwrap_or(true);
                    if default && ours {
                        index_stays_in_default_tablespace();
                    }
                }
                AfterStatement::Nothing
            }
            _ => AfterStatement::Nothing,
        }
    };
    Prepared {
        pstmt: call.pstmt,
        read_only: call.read_only,
        run: call.run,
        after,
    }
}

/// `CREATE INDEX ... WITH (compress = N)`: a non-unique index of an
/// orioledb table, without a method or with btree's, becomes an
/// `orioledb_btree` index (whose `amoptions` takes the level); an index of
/// `orioledb_btree` takes the option itself. Our options elsewhere
/// (`primary_compress`, `toast_compress`, unique indexes, other methods,
/// other tables) are 0A000.
///
/// # Safety
/// `call`'s statement is a valid `IndexStmt`.
unsafe fn index_stmt(call: &mut UtilityCall) {
    // SAFETY: per the contract; the RangeVar is looked up without a lock
    // (DefineIndex takes its own).
    unsafe {
        let stmt = call.stmt() as *mut pg_sys::IndexStmt;
        let ours = ours_in((*stmt).options);
        if ours.is_empty() {
            return;
        }
        let am = if (*stmt).accessMethod.is_null() {
            "btree".to_string()
        } else {
            text_of((*stmt).accessMethod)
        };
        if am == INDEX_AM_NAME {
            return;
        }
        let table = if (*stmt).relation.is_null() {
            String::new()
        } else {
            text_of((*(*stmt).relation).relname)
        };
        let on_ours = !(*stmt).relation.is_null() && {
            let relid = pg_sys::RangeVarGetRelidExtended((*stmt).relation, pg_sys::NoLock as _, 1, None, std::ptr::null_mut());
            relid != pg_sys::InvalidOid && crate::pg::orioledb_relfile(relid).is_some()
        };
        // Unique indexes stay btrees: primary keys, unique constraints and
        // ON CONFLICT arbiters need one.
        let unique = (*stmt).unique || (*stmt).primary;
        if am == "btree" && on_ours && !unique && ours.iter().all(|(o, _)| *o == Opt::Compress) {
            // A copy when the tree is cached (a plan, a function's body):
            // the new name lives in the statement's memory context.
            let stmt = call.stmt_mut() as *mut pg_sys::IndexStmt;
            (*stmt).accessMethod = pg_sys::pstrdup(c"orioledb_btree".as_ptr());
            return;
        }
        index_not_compressed(&am, &table);
    }
}

/// Raises 0A000: an `orioledb_btree` index cannot move to another
/// tablespace (PostgreSQL would copy only its empty file; its tree stays
/// under the old file number).
fn index_stays_in_default_tablespace() -> ! {
    error(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        "orioledb: orioledb_btree indexes stay in the default tablespace",
    )
    .hint("Move other indexes one at a time with ALTER INDEX ... SET TABLESPACE.")
    .raise()
}

/// The index access method whose indexes take `compress`.
const INDEX_AM_NAME: &str = "orioledb_btree";

/// Finishes a statement the extension acts on, after it ran.
#[pg_guard]
#[allow(improper_ctypes_definitions)]
extern "C-unwind" fn finish(after: AfterStatement) {
    // `CALL` and `DO` may have started or stopped a low-level backup.
    crate::pg::backup::note_session_backup();
    // SAFETY: `rv` is the statement's RangeVar, alive for the statement.
    unsafe {
        match after {
            AfterStatement::Nothing => {}
            AfterStatement::Created { rv, before, given } => {
                let relid = created_relid(rv);
                if relid != pg_sys::InvalidOid && relid != before {
                    write_levels(relid, Some(Levels::for_new_table(&given)));
                }
            }
            AfterStatement::Levels { relid, levels, toast_before } => {
                let toast_now = levels.toast;
                write_levels(relid, Some(levels));
                if toast_now != toast_before {
                    crate::am::storage::levels::toast_level_before(relid, toast_before);
                }
            }
            AfterStatement::IndexLevel(relid) => {
                pg_sys::CommandCounterIncrement();
                let rel = pg_sys::RelationIdGetRelation(relid);
                if !rel.is_null() {
                    // An index whose concurrent build failed has no tree.
                    let level = crate::am::secondary::options::level_of(rel);
                    crate::am::storage::levels::set_tree_compression(relid, level);
                    pg_sys::RelationClose(rel);
                }
            }
            AfterStatement::DropDatabase(oid) => {
                if oid != pg_sys::InvalidOid {
                    crate::am::storage::trees::drop_database_trees(oid);
                }
            }
            AfterStatement::CopyDatabase {
                template,
                name,
                options,
            } => {
                if crate::am::storage::trees::database_has_trees(template) {
                    let t = pg_sys::get_database_name(template);
                    let t = if t.is_null() { String::new() } else { text_of(t) };
                    refuse_copy_elsewhere(options, &t, name);
                    let new = pg_sys::get_database_oid(name, false);
                    crate::am::storage::trees::copy_database_trees(template, new);
                }
            }
            AfterStatement::Checkpoint { ran_before } => {
                if crate::pg::preload::is_preloaded() {
                    // The worker checkpoints the engine inside PostgreSQL's
                    // checkpoint (`pg::backup`) when the checkpointer logs
                    // it; otherwise (log_checkpoints off, no worker) this
                    // backend does, unless a backup runs.
                    // A session injecting checkpoint faults runs its own:
                    // the injector is armed in this process only.
                    let faults = crate::pg::guc::debug_checkpoint_crash_at() > 0
                        || crate::pg::guc::debug_checkpoint_fail_at() > 0;
                    let done = crate::pg::backup::checkpoints_ran() > ran_before && !faults;
                    if !done && !crate::pg::backup::running() {
                        crate::pg::engine::checkpoint()
                            .unwrap_or_else(|e| crate::pg::engine::report(e));
                    }
                    // PostgreSQL's checkpoint has just unlinked the files of
                    // dropped relations: their trees go now (as the worker
                    // does after its checkpoints). Not on a standby: replay
                    // drops them (a drop logs, which recovery cannot).
                    if !pg_sys::RecoveryInProgress() {
                        crate::am::storage::trees::sweep_orphans();
                    }
                }
            }
        }
    }
    if crate::pg::preload::is_preloaded() {
        crate::am::rekey::run_pending();
    }
}

/// Shared part of CREATE TABLE and CREATE TABLE AS: `options` is the
/// statement's option list, `options_of` finds that list's field in a
/// statement (the original or its copy), `rv` the
/// new relation's name.
///
/// # Safety
/// Valid statement pointers; called from the hook.
unsafe fn create_relation(
    call: &mut UtilityCall,
    options: *mut pg_sys::List,
    am: Option<String>,
    rv: *mut pg_sys::RangeVar,
    if_not_exists: bool,
    options_of: impl Fn(*mut pg_sys::Node) -> *mut *mut pg_sys::List,
) -> AfterStatement {
    // SAFETY: valid nodes per the contract.
    unsafe {
        let ours = ours_in(options);
        let name = text_of((*rv).relname);
        let is_orioledb = match &am {
            Some(am) => am == AM_NAME,
            None => false,
        };
        if !is_orioledb {
            if let Some(&(opt, _)) = ours.first() {
                let detail = match am {
                    Some(am) => format!("Table \"{name}\" would use access method \"{am}\"."),
                    None => format!(
                        "Partitioned table \"{name}\" has no access method; set the option on its partitions."
                    ),
                };
                not_orioledb(opt, detail);
            }
            return AfterStatement::Nothing;
        }
        let given = parse_given(&ours);
        let before = if if_not_exists {
            created_relid(rv)
        } else {
            pg_sys::InvalidOid
        };
        if !ours.is_empty() {
            let stmt = call.stmt_mut();
            // Strip from the tree that will run (the copy, if one was made),
            // so it shares no nodes with a read-only original.
            let field = options_of(stmt);
            *field = without_ours(*field);
        }
        AfterStatement::Created { rv, before, given }
    }
}

/// CREATE TABLE (including PARTITION OF; a partitioned parent has no AM).
///
/// # Safety
/// Called from the hook with a `CreateStmt`.
unsafe fn create_table(call: &mut UtilityCall) -> AfterStatement {
    // SAFETY: the statement is a CreateStmt; after stmt_mut the copy has the
    // same shape, so the setter writes into the tree that will run.
    unsafe {
        let stmt = call.stmt() as *mut pg_sys::CreateStmt;
        let am = if (*stmt).partspec.is_null() {
            Some(new_relation_am((*stmt).accessMethod))
        } else {
            None
        };
        create_relation(
            call,
            (*stmt).options,
            am,
            (*stmt).relation,
            (*stmt).if_not_exists,
            |node| &raw mut (*(node as *mut pg_sys::CreateStmt)).options,
        )
    }
}

/// CREATE TABLE AS, SELECT INTO, CREATE MATERIALIZED VIEW.
///
/// # Safety
/// Called from the hook with a `CreateTableAsStmt`.
unsafe fn create_table_as(call: &mut UtilityCall) -> AfterStatement {
    // SAFETY: as create_table; `into` is always set for these statements.
    unsafe {
        let stmt = call.stmt() as *mut pg_sys::CreateTableAsStmt;
        let into = (*stmt).into;
        if into.is_null() || (*into).rel.is_null() {
            return AfterStatement::Nothing;
        }
        create_relation(
            call,
            (*into).options,
            Some(new_relation_am((*into).accessMethod)),
            (*into).rel,
            (*stmt).if_not_exists,
            |node| &raw mut (*(*(node as *mut pg_sys::CreateTableAsStmt)).into).options,
        )
    }
}

/// Whether a subcommand sets or resets reloptions.
fn is_reloption_cmd(subtype: pg_sys::AlterTableType::Type) -> bool {
    subtype == pg_sys::AlterTableType::AT_SetRelOptions
        || subtype == pg_sys::AlterTableType::AT_ResetRelOptions
}

/// ALTER TABLE / ALTER INDEX / ALTER MATERIALIZED VIEW.
///
/// # Safety
/// Called from the hook with an `AlterTableStmt`.
unsafe fn alter_table(call: &mut UtilityCall) -> AfterStatement {
    // SAFETY: valid AlterTableStmt; each cmd is an AlterTableCmd whose `def`
    // is a List of DefElem for the reloption subtypes.
    unsafe {
        let stmt = call.stmt() as *mut pg_sys::AlterTableStmt;
        let moves = cells((*stmt).cmds)
            .into_iter()
            .any(|c| (*(c as *mut pg_sys::AlterTableCmd)).subtype == pg_sys::AlterTableType::AT_SetTableSpace);
        if moves && orioledb_btree_index((*stmt).relation).is_some() {
            index_stays_in_default_tablespace();
        }
        let relopt_cmds: Vec<_> = cells((*stmt).cmds)
            .into_iter()
            .map(|p| p as *mut pg_sys::AlterTableCmd)
            .filter(|&c| is_reloption_cmd((*c).subtype))
            .collect();
        if relopt_cmds.is_empty() {
            return AfterStatement::Nothing;
        }
        let (sets, resets) = our_sets_and_resets(&relopt_cmds);
        let first_ours = sets.first().map(|s| s.0).or(resets.first().copied());
        if let Some(index) = orioledb_btree_index((*stmt).relation) {
            // PostgreSQL validates and stores the index's options itself
            // (`amoptions`); the tree takes the level afterwards.
            return AfterStatement::IndexLevel(index);
        }
        let Some(relid) = locked_target(stmt, first_ours) else {
            return AfterStatement::Nothing;
        };
        let given = parse_given(&sets);
        let before = stored_levels(relid);
        let toast_before = before.toast;
        let levels = before.altered(&given, &resets);
        if first_ours.is_none() {
            // Only PostgreSQL's own options: PostgreSQL validates the table's
            // whole reloptions array with heap's parser, which does not know
            // ours, so they step aside while it runs.
            write_levels(relid, None);
            return AfterStatement::Levels { relid, levels, toast_before };
        }
        remove_ours(call, relid);
        AfterStatement::Levels { relid, levels, toast_before }
    }
}

/// The `orioledb_btree` index `rv` names, if it names one (looked up
/// without a lock: ALTER INDEX takes its own).
///
/// # Safety
/// `rv` is null or a valid RangeVar.
unsafe fn orioledb_btree_index(rv: *mut pg_sys::RangeVar) -> Option<pg_sys::Oid> {
    if rv.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let relid = unsafe {
        pg_sys::RangeVarGetRelidExtended(rv, pg_sys::NoLock as _, 1, None, std::ptr::null_mut())
    };
    let am = crate::pg::index_am_oid();
    let is = relid != pg_sys::InvalidOid
        && am != pg_sys::InvalidOid
        // SAFETY: a syscache lookup of an existing relation.
        && unsafe {
            crate::pg::with_syscache(pg_sys::SysCacheIdentifier::RELOID, relid.into(), |tup| {
                (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_class>(tup)).relam == am
            })
        } == Some(true);
    is.then_some(relid)
}

/// Our options in reloption subcommands `cmds`: those SET (with their
/// values) and those RESET. A RESET with a value is a syntax error, as
/// PostgreSQL's own.
///
/// # Safety
/// `cmds` are reloption `AlterTableCmd`s (their `def` a DefElem list).
unsafe fn our_sets_and_resets(cmds: &[*mut pg_sys::AlterTableCmd]) -> (Vec<(Opt, *mut pg_sys::DefElem)>, Vec<Opt>) {
    let mut sets = Vec::new();
    let mut resets = Vec::new();
    // SAFETY: per the contract.
    unsafe {
        for &c in cmds {
            for (opt, def) in ours_in((*c).def as *mut pg_sys::List) {
                if (*c).subtype == pg_sys::AlterTableType::AT_SetRelOptions {
                    sets.push((opt, def));
                } else {
                    if !(*def).arg.is_null() {
                        raise(
                            PgSqlErrorCode::ERRCODE_SYNTAX_ERROR,
                            "RESET must not include values for parameters",
                        );
                    }
                    resets.push(opt);
                }
            }
        }
    }
    (sets, resets)
}

/// The orioledb relation `stmt` alters, locked as the statement will lock
/// it (at least ShareUpdateExclusiveLock, what SET (...) takes) after the
/// ownership check ALTER TABLE makes; None when it is missing (PostgreSQL
/// reports that, or skips it under IF EXISTS) or not ours. Our option
/// (`first_ours`) on an index or another kind of relation is an ERROR.
///
/// # Safety
/// `stmt` is a valid `AlterTableStmt`.
unsafe fn locked_target(stmt: *mut pg_sys::AlterTableStmt, first_ours: Option<Opt>) -> Option<pg_sys::Oid> {
    let check = |relid: pg_sys::Oid| -> bool {
        match rel_kind(relid) {
            RelKind::Orioledb => true,
            RelKind::Index { am, table } => {
                if first_ours.is_some() {
                    index_not_compressed(&am, &table);
                }
                false
            }
            RelKind::Other(detail) => {
                if let Some(opt) = first_ours {
                    not_orioledb(opt, detail);
                }
                false
            }
        }
    };
    // SAFETY: per the contract.
    unsafe {
        let rv = (*stmt).relation;
        // Unlocked look-up to classify first.
        let relid0 = pg_sys::RangeVarGetRelidExtended(
            rv,
            pg_sys::NoLock as i32,
            pg_sys::RVROption::RVR_MISSING_OK,
            None,
            std::ptr::null_mut(),
        );
        if relid0 == pg_sys::InvalidOid || !check(relid0) {
            return None;
        }
        let lockmode = pg_sys::AlterTableGetLockLevel((*stmt).cmds)
            .max(pg_sys::ShareUpdateExclusiveLock as i32);
        let flags = if (*stmt).missing_ok {
            pg_sys::RVROption::RVR_MISSING_OK
        } else {
            0
        };
        let relid = pg_sys::RangeVarGetRelidExtended(
            rv,
            lockmode,
            flags,
            Some(range_var_callback_owns_relation),
            std::ptr::null_mut(),
        );
        (relid != pg_sys::InvalidOid && (relid == relid0 || check(relid))).then_some(relid)
    }
}

/// Takes our options out of the statement, dropping subcommands left
/// empty (the statement does not run at all when none is left); when
/// PostgreSQL's own reloptions remain, ours step aside from `relid`'s
/// stored array while PostgreSQL validates it.
///
/// # Safety
/// `call` holds an `AlterTableStmt` on `relid`.
unsafe fn remove_ours(call: &mut UtilityCall, relid: pg_sys::Oid) {
    // SAFETY: per the contract.
    unsafe {
        let stmt = call.stmt_mut() as *mut pg_sys::AlterTableStmt;
        let mut rest_cmds: Vec<*mut c_void> = Vec::new();
        let mut rest_has_reloptions = false;
        for c in cells((*stmt).cmds) {
            let c = c as *mut pg_sys::AlterTableCmd;
            if is_reloption_cmd((*c).subtype) {
                let rest = without_ours((*c).def as *mut pg_sys::List);
                if rest.is_null() {
                    continue;
                }
                (*c).def = rest as *mut pg_sys::Node;
                rest_has_reloptions = true;
            }
            rest_cmds.push(c as *mut c_void);
        }
        if rest_cmds.is_empty() {
            call.run = false;
        } else {
            (*stmt).cmds = make_list(&rest_cmds);
            if rest_has_reloptions {
                write_levels(relid, None);
            }
        }
    }
}
