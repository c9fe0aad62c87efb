//! Integration tests: the extension as a whole, against a running server.
//! Run through `scripts/test.sh` (see tests/common/mod.rs for the environment).

#[macro_use]
mod common;

use common::*;
use std::time::Duration;

#[test]
fn create_extension_in_fresh_database() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_create_extension");
    // a second CREATE EXTENSION IF NOT EXISTS is a no-op, a plain one is an error
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS orioledb_rs")
        .unwrap();
    expect_sqlstate(&mut c, "CREATE EXTENSION orioledb_rs", "42710"); // duplicate_object
    let rows = c
        .query(
            "SELECT extname, extversion FROM pg_extension WHERE extname = 'orioledb_rs'",
            &[],
        )
        .unwrap();
    assert_eq!(
        rows.len(),
        1,
        "orioledb_rs should be listed once in pg_extension"
    );
    let version: String = rows[0].get(1);
    assert!(!version.is_empty(), "extension version is empty");
}

#[test]
fn access_method_is_registered() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_am");
    let rows = c
        .query(
            "SELECT amname, amtype::text FROM pg_am WHERE amname = 'orioledb'",
            &[],
        )
        .unwrap();
    assert_eq!(
        rows.len(),
        1,
        "expected exactly one access method named orioledb"
    );
    let amtype: String = rows[0].get(1);
    assert_eq!(
        amtype, "t",
        "orioledb must be a table access method (amtype 't')"
    );

    // The handler function belongs to the extension.
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_depend d JOIN pg_am a ON d.classid = 'pg_am'::regclass \
             AND d.objid = a.oid \
             WHERE a.amname = 'orioledb' AND d.refclassid = 'pg_extension'::regclass \
             AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'orioledb_rs')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        n, 1,
        "access method orioledb should be a member of extension orioledb_rs"
    );
}

#[test]
fn guc_defaults() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_guc_defaults");
    assert_eq!(show(&mut c, "orioledb.main_buffers"), "128MB");
    for name in [
        "orioledb.default_compress",
        "orioledb.default_primary_compress",
        "orioledb.default_toast_compress",
    ] {
        assert_eq!(show(&mut c, name), "-1", "default of {name}");
    }
    // main_buffers is fixed at server start; the compression levels are per session.
    let ctx = |c: &mut Client, name: &str| -> String {
        c.query_one("SELECT context FROM pg_settings WHERE name = $1", &[&name])
            .unwrap_or_else(|e| panic!("{name} missing from pg_settings: {}", describe(&e)))
            .get(0)
    };
    assert_eq!(ctx(&mut c, "orioledb.main_buffers"), "postmaster");
    for name in [
        "orioledb.default_compress",
        "orioledb.default_primary_compress",
        "orioledb.default_toast_compress",
    ] {
        assert_eq!(ctx(&mut c, name), "user", "context of {name}");
    }
}

#[test]
fn compress_gucs_accept_levels_and_reject_out_of_range() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_guc_range");
    for name in [
        "orioledb.default_compress",
        "orioledb.default_primary_compress",
        "orioledb.default_toast_compress",
    ] {
        for ok in ["-1", "0", "1", "22"] {
            c.batch_execute(&format!("SET {name} = {ok}"))
                .unwrap_or_else(|e| panic!("SET {name} = {ok}: {}", describe(&e)));
            assert_eq!(show(&mut c, name), ok);
        }
        expect_sqlstate(&mut c, &format!("SET {name} = 23"), "22023");
        expect_sqlstate(&mut c, &format!("SET {name} = -2"), "22023");
        // a failed SET leaves the previous value
        assert_eq!(show(&mut c, name), "22");
        c.batch_execute(&format!("RESET {name}")).unwrap();
        assert_eq!(show(&mut c, name), "-1");
    }
}

#[test]
fn main_buffers_cannot_change_at_runtime() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_main_buffers");
    expect_sqlstate(&mut c, "SET orioledb.main_buffers = '64MB'", "55P02"); // cant_change_runtime_param
    assert_eq!(show(&mut c, "orioledb.main_buffers"), "128MB");
}

#[test]
fn two_concurrent_sessions_see_the_access_method() {
    let (env, _g) = require_server!();
    drop(fresh_db(&env, "itest_concurrent"));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let env = env.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = connect(&env, "itest_concurrent");
                let mut tx = c.transaction().unwrap();
                // both sessions are inside a transaction at the same time
                barrier.wait();
                let n: i64 = tx
                    .query_one("SELECT count(*) FROM pg_am WHERE amname = 'orioledb'", &[])
                    .unwrap()
                    .get(0);
                assert_eq!(n, 1, "session {i} does not see the orioledb access method");
                let mb: String = tx
                    .query_one("SHOW orioledb.main_buffers", &[])
                    .unwrap()
                    .get(0);
                assert_eq!(mb, "128MB", "session {i}");
                barrier.wait();
                tx.commit().unwrap();
                c.query_one("SELECT pg_backend_pid()", &[])
                    .unwrap()
                    .get::<_, i32>(0)
            })
        })
        .collect();
    let pids: Vec<i32> = handles
        .into_iter()
        .map(|h| h.join().expect("session thread panicked"))
        .collect();
    assert_ne!(
        pids[0], pids[1],
        "the two sessions must be different backends"
    );
}

#[test]
fn extension_survives_server_restart() {
    let (env, _g) = require_server_exclusive!();
    drop(fresh_db(&env, "itest_restart"));
    restart_server(&env);
    let mut c = connect_retry(
        &env.host,
        env.port,
        "itest_restart",
        Duration::from_secs(30),
    );
    let n: i64 = c
        .query_one("SELECT count(*) FROM pg_am WHERE amname = 'orioledb'", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    assert_eq!(show(&mut c, "orioledb.main_buffers"), "128MB");
    let preload = show(&mut c, "shared_preload_libraries");
    assert!(
        preload.contains("orioledb_rs"),
        "shared_preload_libraries = {preload:?}"
    );
}

/// A cluster that does NOT preload the library: using the extension must raise a
/// clear ERROR (not crash the server, not silently work half-way).
#[test]
fn without_shared_preload_libraries_the_extension_refuses() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "nopreload", &[]);
    let mut c = cluster.connect("postgres");
    let preload = show(&mut c, "shared_preload_libraries");
    assert!(
        !preload.contains("orioledb_rs"),
        "scratch cluster must not preload: {preload:?}"
    );

    let created = c.batch_execute("CREATE EXTENSION orioledb_rs");
    match created {
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("CREATE EXTENSION: non-server error {e}"));
            assert!(
                db.message().contains(NOT_PRELOADED_MSG),
                "CREATE EXTENSION failed with an unexpected error: {}\nserver log:\n{}",
                describe(&e),
                cluster.log_tail()
            );
        }
        Ok(()) => {
            // Creating the extension was allowed; using the AM must then fail.
            expect_error_containing(
                &mut c,
                "CREATE TABLE not_preloaded (id int) USING orioledb",
                NOT_PRELOADED_MSG,
            );
        }
    }
    // The server is still up and serving new sessions.
    let mut c2 = cluster.connect("postgres");
    let one: i32 = c2.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

/// With the library preloaded, errors of statements it does not act on keep
/// what PostgreSQL reports with them (CONTEXT, constraint and table names):
/// they pass its utility hook without a Rust error boundary.
#[test]
fn errors_keep_their_context_and_fields() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_error_fields");
    let e = c
        .batch_execute("DO $$ BEGIN PERFORM 1/0; END $$")
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "22012");
    assert!(
        db.where_().is_some_and(|w| w.contains("PL/pgSQL")),
        "CONTEXT kept: {db:?}"
    );
    c.batch_execute(
        "CREATE TABLE ef (id int PRIMARY KEY) USING orioledb; INSERT INTO ef VALUES (1)",
    )
    .unwrap();
    let e = c
        .batch_execute("DO $$ BEGIN INSERT INTO ef VALUES (1); END $$")
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "23505");
    assert_eq!(db.constraint(), Some("ef_pkey"), "{db:?}");
    assert_eq!(db.table(), Some("ef"), "{db:?}");
    // Statements the extension acts on (options, re-keying) keep them too:
    // the cursor position of CREATE TABLE / CREATE TABLE AS, the
    // constraint and table of ALTER TABLE ADD PRIMARY KEY.
    for sql in [
        "CREATE TABLE ef2 (a no_such_type) USING orioledb",
        "CREATE TABLE ef3 USING orioledb AS SELECT no_such_column FROM ef",
    ] {
        let e = c.batch_execute(sql).unwrap_err();
        let db = e.as_db_error().expect("a server error");
        assert!(
            matches!(db.position(), Some(postgres::error::ErrorPosition::Original(_))),
            "cursor position kept for {sql}: {db:?}"
        );
    }
    c.batch_execute("CREATE TABLE ef4 (id int) USING orioledb; INSERT INTO ef4 VALUES (1), (1)")
        .unwrap();
    let e = c
        .batch_execute("ALTER TABLE ef4 ADD CONSTRAINT ef4_pkey PRIMARY KEY (id)")
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "23505");
    assert_eq!(db.constraint(), Some("ef4_pkey"), "{db:?}");
    assert_eq!(db.table(), Some("ef4"), "{db:?}");
    // And the table is left as it was.
    let n: i64 = c.query_one("SELECT count(*) FROM ef4", &[]).unwrap().get(0);
    assert_eq!(n, 2);
}
