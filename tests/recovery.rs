//! Crash recovery of orioledb tables through PostgreSQL's WAL: committed
//! changes survive `kill -9` of the postmaster (replayed from the engine's
//! redo point by the extension and by PostgreSQL's redo), uncommitted ones
//! stay invisible, and pgbench's books still balance after crashes under
//! load. Knob: `ORIOLEDB_CRASH_CYCLES` (10).

#[macro_use]
mod common;

use common::*;
use std::time::Duration;

/// Table `t`'s rows as one text: count, sum of ids, digest of the values.
const SNAPSHOT: &str = "SELECT count(*) || ' ' || coalesce(sum(id), 0) || ' ' || \
                        coalesce(md5(string_agg(v, ',' ORDER BY id)), '') FROM t";

fn snapshot(c: &mut Client) -> String {
    query_text(c, SNAPSHOT)
}

fn check_tree(c: &mut Client, table: &str) {
    let r = query_text(c, &format!("SELECT orioledb_check('{table}'::regclass)"));
    assert!(r.starts_with("ok"), "checker on {table}: {r}");
}

#[test]
fn committed_changes_survive_a_crash() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_crash_rows";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 5000) g;",
    )
    .unwrap();
    // Part of the history before an engine checkpoint (replayed by the
    // extension from its redo point), part after (PostgreSQL's redo).
    c.batch_execute("CHECKPOINT").unwrap();
    c.batch_execute(
        "UPDATE t SET v = v || '-u' WHERE id % 7 = 0;
         DELETE FROM t WHERE id % 11 = 0;
         INSERT INTO t VALUES (100000, repeat('toast me ', 5000));
         BEGIN; INSERT INTO t VALUES (100001, 'sub'); SAVEPOINT s; INSERT INTO t VALUES (100002, 'gone');
         ROLLBACK TO s; COMMIT;
         CREATE TABLE t2 (id int) USING orioledb; INSERT INTO t2 SELECT generate_series(1, 100);
         CREATE TABLE t3 (id int) USING orioledb; INSERT INTO t3 VALUES (1); DROP TABLE t3;
         TRUNCATE t2; INSERT INTO t2 VALUES (42);",
    )
    .unwrap();
    let before = snapshot(&mut c);
    // An open transaction's rows must not come back.
    let mut open = connect(&env, db);
    open.batch_execute(
        "BEGIN; INSERT INTO t VALUES (200000, 'uncommitted'); UPDATE t SET v = 'x' WHERE id = 1",
    )
    .unwrap();
    crash_and_restart(&env);
    drop(open);
    let mut c = connect(&env, db);
    assert_eq!(snapshot(&mut c), before, "contents after crash recovery");
    assert_eq!(
        query_text(&mut c, "SELECT count(*)::text FROM t WHERE id = 200000"),
        "0"
    );
    assert_eq!(query_text(&mut c, "SELECT v FROM t WHERE id = 1"), "v1");
    assert_eq!(
        query_text(&mut c, "SELECT string_agg(id::text, ',') FROM t2"),
        "42"
    );
    assert_eq!(
        query_text(&mut c, "SELECT length(v)::text FROM t WHERE id = 100000"),
        "45000"
    );
    check_tree(&mut c, "t");
    // The slot keeps WAL from the engine's redo point.
    assert_eq!(
        query_text(
            &mut c,
            "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'orioledb_rs'"
        ),
        "1"
    );
    // Writing goes on after recovery, and a second crash recovers again.
    c.batch_execute(
        "INSERT INTO t VALUES (300000, 'after'); UPDATE t SET v = 'again' WHERE id = 2",
    )
    .unwrap();
    let before = snapshot(&mut c);
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(snapshot(&mut c), before, "contents after a second crash");
    // An immediate stop skips every shutdown checkpoint (ours included).
    c.batch_execute("UPDATE t SET v = 'immediate' WHERE id = 4")
        .unwrap();
    let before = snapshot(&mut c);
    immediate_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(
        snapshot(&mut c),
        before,
        "contents after pg_ctl stop -m immediate"
    );
}

/// Row headers change form through WAL: row locks, deletes and updates
/// widen a version's short header to the full one (splices, also inside
/// UPDATE records), freezing away a lock gives the short one back; after a
/// crash the rows, their locks' effects and the tree are as committed.
#[test]
fn header_forms_survive_a_crash() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_crash_headers";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
         CREATE TABLE r (id int, v text) USING orioledb;
         INSERT INTO t SELECT g, repeat('v', 60) || g FROM generate_series(1, 3000) g;
         INSERT INTO r SELECT g, repeat('r', 60) || g FROM generate_series(1, 3000) g;
         CHECKPOINT;",
    )
    .unwrap();
    for tbl in ["t", "r"] {
        c.batch_execute(&format!(
            "BEGIN; SELECT id FROM {tbl} WHERE id % 5 = 0 FOR KEY SHARE; COMMIT;
             BEGIN; SELECT id FROM {tbl} WHERE id % 7 = 0 FOR UPDATE; COMMIT;
             UPDATE {tbl} SET v = v || '-u' WHERE id % 3 = 0;
             DELETE FROM {tbl} WHERE id % 11 = 0;
             BEGIN; DELETE FROM {tbl} WHERE id % 13 = 0; ROLLBACK;"
        ))
        .unwrap();
        c.batch_execute(&format!("VACUUM (FREEZE) {tbl}")).unwrap();
        c.batch_execute(&format!(
            "UPDATE {tbl} SET v = v || '-w' WHERE id % 10 = 0;
             BEGIN; SELECT id FROM {tbl} WHERE id % 4 = 0 FOR NO KEY UPDATE; COMMIT;"
        ))
        .unwrap();
    }
    let shot = |c: &mut Client| {
        query_text(
            c,
            "SELECT (SELECT count(*) || md5(string_agg(v, ',' ORDER BY id)) FROM t) || \
                    (SELECT count(*) || md5(string_agg(v, ',' ORDER BY id)) FROM r)",
        )
    };
    let before = shot(&mut c);
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(shot(&mut c), before, "contents after crash recovery");
    check_tree(&mut c, "t");
    check_tree(&mut c, "r");
    // Every row can still be locked, changed and deleted.
    c.batch_execute(
        "SELECT id FROM t FOR UPDATE; UPDATE r SET v = v || '!'; DELETE FROM t; DELETE FROM r",
    )
    .unwrap();
    assert_eq!(query_text(&mut c, "SELECT ((SELECT count(*) FROM t) + (SELECT count(*) FROM r))::text"), "0");
}

/// A table keyed by text under a libc language collation (here the
/// database default) is stored in the collation's order — the tree compares
/// keys with strcoll_l under the locale named in its descriptor — and WAL
/// replay after a crash, which has no catalog, uses the same order.
#[test]
fn libc_collated_keys_keep_their_order_through_recovery() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_libc_keys";
    let mut c = fresh_db_with(
        &env,
        db,
        "TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'en_US.UTF-8' LC_CTYPE 'en_US.UTF-8'",
    );
    let words = "SELECT w || g AS s, g AS n FROM unnest(ARRAY['apple', 'Apple', 'APPLE', 'éclair', 'eclair', 'Zebra', 'zebra', 'co-op', 'coop', '_x', '10', '9']) w, generate_series(1, 1500) g";
    c.batch_execute(&format!(
        "CREATE TABLE lt (s text PRIMARY KEY, n int) USING orioledb;
         CREATE TABLE ht (s text PRIMARY KEY, n int) USING heap;
         INSERT INTO lt {words} ORDER BY md5(w || g);
         INSERT INTO ht SELECT * FROM lt;
         CHECKPOINT;
         UPDATE lt SET n = -n WHERE n % 5 = 0; UPDATE ht SET n = -n WHERE n % 5 = 0;
         DELETE FROM lt WHERE n % 7 = 0; DELETE FROM ht WHERE n % 7 = 0;
         INSERT INTO lt SELECT s || '!', n FROM ({words}) x WHERE n % 3 = 0;
         INSERT INTO ht SELECT s || '!', n FROM ({words}) x WHERE n % 3 = 0;
         UPDATE lt SET s = 'Ä' || s WHERE n % 11 = 1; UPDATE ht SET s = 'Ä' || s WHERE n % 11 = 1;"
    ))
    .unwrap_or_else(|e| panic!("en_US.UTF-8 database (scripts/setup.sh generates the locale): {}", describe(&e)));
    let same = |c: &mut Client, what: &str| {
        for q in [
            "SELECT md5(string_agg(s || ':' || n, ',' ORDER BY s)) FROM {}",
            "SELECT md5(string_agg(s, ',')) FROM (SELECT s FROM {} WHERE s > 'apple9' AND s <= 'Zebra2' ORDER BY s DESC) x",
            "SELECT string_agg(s, ',') FROM (SELECT s FROM {} ORDER BY s LIMIT 5) x",
            "SELECT string_agg(s || n, ',' ORDER BY s) FROM {} WHERE s IN ('coop17', 'Apple3', 'ECLAIR12', 'nope')",
        ] {
            assert_eq!(
                query_text(c, &q.replace("{}", "lt")),
                query_text(c, &q.replace("{}", "ht")),
                "{what}: {q}"
            );
        }
    };
    same(&mut c, "before the crash");
    for q in [
        "SELECT * FROM lt ORDER BY s LIMIT 5",
        "SELECT * FROM lt WHERE s >= 'b' AND s < 'd' ORDER BY s DESC",
    ] {
        let p = plan(&mut c, q);
        assert!(p.contains("OrioleDB Primary Scan") && !p.contains("Sort"), "{q}:\n{p}");
    }
    let sorted = query_text(&mut c, "SELECT md5(string_agg(s, ',')) FROM (SELECT s FROM lt) x");
    assert_eq!(
        sorted,
        query_text(&mut c, "SELECT md5(string_agg(s, ',' ORDER BY s)) FROM ht"),
        "a sequential scan returns the collation's order"
    );
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    check_tree(&mut c, "lt");
    same(&mut c, "after the crash");
    c.batch_execute("INSERT INTO lt VALUES ('Apple0', 0), ('apple0', 0); INSERT INTO ht VALUES ('Apple0', 0), ('apple0', 0);")
        .unwrap();
    same(&mut c, "after more inserts");
}

fn pgbench(env: &TestEnv, db: &str, args: &[&str]) -> std::process::Child {
    client_command(env, "pgbench")
        .args(args)
        .arg(db)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start pgbench")
}

#[test]
fn pgbench_balances_after_crashes_under_load() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_crash_pgbench";
    let mut c = fresh_db(&env, db);
    c.batch_execute(&format!(
        "ALTER DATABASE {db} SET default_table_access_method = orioledb"
    ))
    .unwrap();
    let status = pgbench(&env, db, &["-i", "-s", "1", "-q"]).wait().unwrap();
    assert!(status.success(), "pgbench -i");
    let cycles: u64 = std::env::var("ORIOLEDB_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for cycle in 0..cycles {
        // -n: no VACUUM and no TRUNCATE of the history between cycles.
        let mut run = pgbench(&env, db, &["-n", "-c", "4", "-j", "2", "-T", "30"]);
        // A different moment each cycle, also across engine checkpoints.
        std::thread::sleep(Duration::from_millis(1500 + 700 * cycle));
        if cycle % 2 == 1 {
            let mut k = connect(&env, db);
            k.batch_execute("CHECKPOINT").unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        crash_and_restart(&env);
        let _ = run.kill();
        let _ = run.wait();
        let mut c = connect(&env, db);
        let sums = query_text(
            &mut c,
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || \
                    (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || \
                    (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || \
                    (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
        );
        let parts: Vec<&str> = sums.split(' ').collect();
        assert_eq!(parts.len(), 4, "sums: {sums}");
        assert!(
            parts.iter().all(|p| *p == parts[3]),
            "cycle {cycle}: balances differ after crash recovery: {sums}"
        );
        for t in [
            "pgbench_accounts",
            "pgbench_branches",
            "pgbench_tellers",
            "pgbench_history",
        ] {
            check_tree(&mut c, t);
        }
        eprintln!("crash cycle {cycle}: balances {sums}");
    }
}

/// DROP TABLE and TRUNCATE are crash safe: after `kill -9` right after
/// they commit, no tree of the dropped/replaced relation file is left
/// (the sweep after recovery removes trees whose relation file is gone) and
/// no row comes back.
#[test]
fn drop_and_truncate_leave_nothing_after_a_crash() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_crash_drop";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE TABLE gone (id int, v text) USING orioledb;
         CREATE TABLE kept (id int) USING orioledb;
         INSERT INTO gone SELECT g, repeat('x', 3000) FROM generate_series(1, 20) g;
         INSERT INTO kept SELECT generate_series(1, 50);
         CHECKPOINT;
         DROP TABLE gone;
         TRUNCATE kept;
         INSERT INTO kept VALUES (7);",
    )
    .unwrap();
    // The state a crash between a DROP's commit and its logged tree drop
    // leaves: a tree whose relation file is gone. Made directly (the window
    // is too small to hit), by removing a relation's main fork.
    c.batch_execute(
        "CREATE TABLE lost (id int) USING orioledb; INSERT INTO lost VALUES (1); CHECKPOINT",
    )
    .unwrap();
    let lost_node = query_text(
        &mut c,
        "SELECT relfilenode::text FROM pg_class WHERE relname = 'lost'",
    );
    let lost_file = env
        .pgdata
        .as_ref()
        .expect("ORIOLEDB_TEST_PGDATA")
        .join(query_text(&mut c, "SELECT pg_relation_filepath('lost')"));
    std::fs::remove_file(&lost_file)
        .unwrap_or_else(|e| panic!("remove {}: {e}", lost_file.display()));
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(
        query_text(&mut c, "SELECT string_agg(id::text, ',') FROM kept"),
        "7"
    );
    // The checkpointer sweeps orphans once recovery is over.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while query_text(
        &mut c,
        &format!("SELECT count(*)::text FROM orioledb_trees WHERE relnode = {lost_node}"),
    ) != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the tree of relation file {lost_node} outlived its file"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    c.batch_execute("DROP TABLE lost").unwrap();
    wait_for_one_tree_per_relation(&mut c);
}

/// Waits (up to 30 s) until the database has no orphan trees and exactly
/// one tree per orioledb relation file in use.
fn wait_for_one_tree_per_relation(c: &mut Client) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let orphans = query_text(
            c,
            "SELECT count(*)::text FROM orioledb_trees WHERE reloid IS NULL",
        );
        let total = query_text(c, "SELECT count(*)::text FROM orioledb_trees");
        if orphans == "0" {
            // Every table has its primary tree; a toast relation has one
            // once a value was toasted, so at most one each.
            let count = |c: &mut Client, kind: char| {
                let files = query_text(
                    c,
                    &format!(
                        "SELECT count(*)::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam \
                         WHERE a.amname = 'orioledb' AND c.relkind = '{kind}'"
                    ),
                );
                let trees = query_text(
                    c,
                    &format!(
                        "SELECT count(*)::text FROM orioledb_trees t JOIN pg_class c ON c.oid = t.reloid \
                         WHERE c.relkind = '{kind}'"
                    ),
                );
                (files.parse::<i64>().unwrap(), trees.parse::<i64>().unwrap())
            };
            let (tables, primary) = count(c, 'r');
            assert_eq!(primary, tables, "one tree per orioledb table ({total} trees)");
            let (toast_rels, toast_trees) = count(c, 't');
            assert!(toast_trees <= toast_rels, "{toast_trees} toast trees, {toast_rels} toast relations");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orphan trees left: {orphans} of {total}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// PREPARE TRANSACTION after CREATE, DROP and TRUNCATE of orioledb tables:
/// COMMIT PREPARED from another session and ROLLBACK PREPARED after a crash
/// leave the rows and tables the transactions' outcomes say, and exactly
/// the trees of the relations that exist.
#[test]
fn prepared_transactions_create_drop_and_truncate_tables() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_2pc";
    let mut c = fresh_db(&env, db);
    if show(&mut c, "max_prepared_transactions") == "0" {
        eprintln!("SKIP: max_prepared_transactions = 0 on the test server");
        return;
    }
    c.batch_execute(
        "CREATE TABLE old1 (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO old1 SELECT g, 'o' || g FROM generate_series(1, 100) g;
         CREATE TABLE old2 (id int) USING orioledb;
         INSERT INTO old2 VALUES (1), (2);",
    )
    .unwrap();
    // Each its own query string: statements before a BEGIN in one string
    // would join its transaction.
    c.batch_execute(
        "BEGIN;
         CREATE TABLE new1 (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO new1 SELECT g, repeat('n', 3000) FROM generate_series(1, 5) g;
         DROP TABLE old1;
         PREPARE TRANSACTION 'orioledb_p1';",
    )
    .unwrap();
    c.batch_execute(
        "BEGIN;
         CREATE TABLE new2 (id int) USING orioledb;
         INSERT INTO new2 VALUES (5);
         TRUNCATE old2;
         INSERT INTO old2 VALUES (9);
         PREPARE TRANSACTION 'orioledb_p2';",
    )
    .unwrap();
    let mut other = connect(&env, db);
    other.batch_execute("COMMIT PREPARED 'orioledb_p1'").unwrap();
    assert_eq!(
        query_text(&mut other, "SELECT count(*) || ':' || sum(length(v)) FROM new1"),
        "5:15000"
    );
    expect_sqlstate(&mut other, "SELECT * FROM old1", "42P01");
    drop(other);
    drop(c);
    // The second one outlives a crash, and is rolled back after it.
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    c.batch_execute("ROLLBACK PREPARED 'orioledb_p2'").unwrap();
    assert_eq!(
        query_text(&mut c, "SELECT string_agg(id::text, ',' ORDER BY id) FROM old2"),
        "1,2"
    );
    expect_sqlstate(&mut c, "SELECT * FROM new2", "42P01");
    assert_eq!(query_text(&mut c, "SELECT count(*)::text FROM new1"), "5");
    // CHECKPOINT unlinks the files of the dropped relations and sweeps
    // their trees.
    c.batch_execute("CHECKPOINT").unwrap();
    wait_for_one_tree_per_relation(&mut c);
}

/// A table larger than the page pool comes back whole after an immediate
/// stop and after a clean restart.
#[test]
fn tables_larger_than_the_pool_survive_restarts() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_crash_big";
    let mut c = fresh_db(&env, db);
    let buffers = query_text(
        &mut c,
        "SELECT setting FROM pg_settings WHERE name = 'orioledb.main_buffers'",
    );
    // Rows of ~200 bytes: enough for the tree to outgrow the pool.
    let rows: i64 = buffers.parse::<i64>().unwrap() * 8192 / 150;
    c.batch_execute(&format!(
        "CREATE TABLE big (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO big SELECT g, md5(g::text) || repeat('y', 160) FROM generate_series(1, {rows}) g;"
    ))
    .unwrap();
    let pages: i64 = c
        .query_one(
            "SELECT pages FROM orioledb_trees WHERE reloid = 'big'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        pages > buffers.parse::<i64>().unwrap(),
        "{pages} pages, pool {buffers}"
    );
    let sum =
        "SELECT count(*) || ' ' || sum(id) || ' ' || md5(string_agg(v, '' ORDER BY id)) FROM big";
    let before = query_text(&mut c, sum);
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(query_text(&mut c, sum), before, "after kill -9");
    restart_server(&env);
    let mut c = connect(&env, db);
    assert_eq!(query_text(&mut c, sum), before, "after a clean restart");
    check_tree(&mut c, "big");
}

/// The engine's WAL records are readable in the server's WAL inspection
/// (`pg_walinspect` calls our `rm_identify` / `rm_desc`; a frontend
/// `pg_waldump` cannot load them).
#[test]
fn wal_records_are_described() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_wal_desc");
    c.batch_execute("CREATE EXTENSION pg_walinspect; CREATE TABLE w (id int, v text) USING orioledb")
        .unwrap();
    let lsn = query_text(&mut c, "SELECT pg_current_wal_lsn()::text");
    c.batch_execute("INSERT INTO w VALUES (1, repeat('x', 100)); DELETE FROM w")
        .unwrap();
    let kinds = query_text(
        &mut c,
        &format!(
            "SELECT string_agg(DISTINCT record_type, ',' ORDER BY record_type) || ' ' || \
                    bool_and(description LIKE 'tree %') \
             FROM pg_get_wal_records_info('{lsn}', pg_current_wal_lsn()) \
             WHERE resource_manager = 'orioledb_rs' AND record_type <> 'MARKER'"
        ),
    );
    // (Markers — an engine checkpoint's redo point, a row change for
    // logical decoding under wal_level = logical — are not engine records.)
    // The first row id hands out a batch (logged limit); a DELETE changes
    // the version's header only: its short header becomes the full one,
    // logged as the header fields it set (HEADER), not the row.
    assert_eq!(
        kinds, "HEADER,PUT,ROW_ID_LIMIT true",
        "engine records in WAL: {kinds}"
    );
}

/// Settings of the small clusters the tests below make for themselves: a
/// server of their own, so failed starts, damaged files and crashes touch
/// nothing else, and a checkpoint's I/O steps are only their own trees'.
const OWN_CLUSTER: &[&str] = &[
    "shared_preload_libraries = 'orioledb_rs'",
    "shared_buffers = 16MB",
    "orioledb.main_buffers = 16MB",
];

fn cluster_path(env: &TestEnv, rel: &str) -> std::path::PathBuf {
    env.pgdata
        .as_ref()
        .expect("a scratch cluster has a data directory")
        .join(rel)
}

/// A damaged, truncated or missing `orioledb_data/control` stops the server
/// at start (FATAL from the library's preload, naming the file); with the
/// original bytes back it starts and every row is there.
#[test]
fn damaged_control_file_stops_the_server_at_start() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "badcontrol", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let before = snapshot(&mut c);
    drop(c);
    stop_server(cenv);
    let control = cluster_path(cenv, "orioledb_data/control");
    let orig = std::fs::read(&control).unwrap();
    let mut flipped = orig.clone();
    flipped[10] ^= 0x55;
    flipped[20] ^= 0x55;
    let damages: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        ("flipped", Some(flipped), "checksum"),
        ("truncated", Some(orig[..orig.len() / 2].to_vec()), "bytes"),
        ("empty", Some(Vec::new()), "bytes"),
        ("missing", None, "missing"),
    ];
    for (what, bytes, reason) in damages {
        match &bytes {
            Some(b) => write_cluster_file(cenv, &control, b),
            None => std::fs::remove_file(&control).unwrap(),
        }
        let from = log_len(cenv);
        let started = try_start_server(cenv);
        let log = log_since(cenv, from);
        assert!(
            started.is_err(),
            "the server started with a {what} control file\nlog:\n{log}"
        );
        let line = log
            .lines()
            .find(|l| l.contains("FATAL") && l.contains("orioledb_data/control"))
            .unwrap_or_else(|| {
                panic!(
                    "{what} control file: no FATAL naming orioledb_data/control in the log:\n{log}"
                )
            });
        assert!(line.contains(reason), "{what} control file: {line}");
    }
    write_cluster_file(cenv, &control, &orig);
    start_server(cenv);
    let mut c = cluster.connect("postgres");
    assert_eq!(
        snapshot(&mut c),
        before,
        "rows after restoring the control file"
    );
    check_tree(&mut c, "t");
}

/// How the damage test harms a file.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Flip byte 100 of every 512-byte unit: inside every page image
    /// (headers are 32 bytes), so every read fails its checksum.
    FlipEveryUnit,
    /// Flip one byte in the middle: an error or the right rows, never wrong
    /// ones (the byte may be padding after an image).
    FlipOne,
    /// Keep the first half.
    Truncate,
}

fn damage(bytes: &[u8], how: Damage) -> Vec<u8> {
    let mut b = bytes.to_vec();
    match how {
        Damage::FlipEveryUnit => {
            for at in (100..b.len()).step_by(512) {
                b[at] ^= 0x5a;
            }
        }
        Damage::FlipOne => {
            let at = b.len() / 2;
            b[at] ^= 0x5a;
        }
        Damage::Truncate => b.truncate(b.len() / 2),
    }
    b
}

/// The one map file of the tree whose data file is `data` (its checkpoint
/// number changes as checkpoints carry it forward).
fn map_of(data: &std::path::Path) -> std::path::PathBuf {
    let rel = data.file_name().unwrap().to_string_lossy().into_owned();
    let dir = data.parent().unwrap();
    let maps: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{rel}-")) && n.ends_with(".map"))
        .collect();
    assert_eq!(maps.len(), 1, "map files of {}: {maps:?}", data.display());
    dir.join(&maps[0])
}

/// Damage to one table's data file or map, found after a restart (so
/// nothing is cached): its queries fail with XX001 naming the file, the
/// server does not restart, another table reads as before; with the bytes
/// restored the table is whole again.
#[test]
fn damaged_table_files_are_errors_naming_the_file() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "badfiles", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE bad (id int, v text) USING orioledb;
         CREATE TABLE good (id int, v text) USING orioledb;
         INSERT INTO bad SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
         INSERT INTO good SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let file = query_text(
        &mut c,
        "SELECT file FROM orioledb_trees WHERE reloid = 'bad'::regclass",
    );
    let sum =
        |t: &str| format!("SELECT count(*) || ' ' || md5(string_agg(v, ',' ORDER BY id)) FROM {t}");
    let want_bad = query_text(&mut c, &sum("bad"));
    let want_good = query_text(&mut c, &sum("good"));
    drop(c);
    let data = cluster_path(cenv, &file);
    let cases = [
        ("data file", Damage::FlipEveryUnit),
        ("data file", Damage::FlipOne),
        ("data file", Damage::Truncate),
        ("map file", Damage::FlipOne),
        ("map file", Damage::Truncate),
    ];
    for (which, how) in cases {
        let what = format!("{which} {how:?}");
        stop_server(cenv);
        let target = if which == "map file" {
            map_of(&data)
        } else {
            data.clone()
        };
        let orig = std::fs::read(&target).unwrap();
        write_cluster_file(cenv, &target, &damage(&orig, how));
        start_server(cenv);
        let mut c = cluster.connect("postgres");
        let started = query_text(&mut c, "SELECT pg_postmaster_start_time()::text");
        let queries = [
            sum("bad"),
            "SELECT v FROM bad WHERE id = 777".to_string(),
            "SELECT orioledb_check('bad'::regclass)".to_string(),
        ];
        for sql in &queries {
            match c.simple_query(sql) {
                Err(e) => {
                    let db = e
                        .as_db_error()
                        .unwrap_or_else(|| panic!("{what}: `{sql}` lost the connection: {e}"));
                    assert_eq!(
                        db.code().code(),
                        "XX001",
                        "{what}: `{sql}`: {}",
                        describe(&e)
                    );
                    assert!(
                        db.message().contains(&file),
                        "{what}: `{sql}`: the error does not name {file}: {}",
                        db.message()
                    );
                }
                Ok(_) if matches!(how, Damage::FlipOne) && which == "data file" => {
                    // The flipped byte was padding or an unused extent: then
                    // the rows must be exactly right.
                    assert_eq!(query_text(&mut c, &sum("bad")), want_bad, "{what}");
                }
                Ok(_) => panic!("{what}: `{sql}` succeeded on a damaged table"),
            }
        }
        assert_eq!(
            query_text(&mut c, &sum("good")),
            want_good,
            "{what}: other table"
        );
        check_tree(&mut c, "good");
        assert_eq!(
            query_text(&mut c, "SELECT pg_postmaster_start_time()::text"),
            started,
            "{what}: the server restarted"
        );
        drop(c);
        stop_server(cenv);
        // A quarantined tree's map was carried to the shutdown checkpoint's name.
        let now = if which == "map file" {
            map_of(&data)
        } else {
            data.clone()
        };
        write_cluster_file(cenv, &now, &orig);
        start_server(cenv);
        let mut c = cluster.connect("postgres");
        assert_eq!(
            query_text(&mut c, &sum("bad")),
            want_bad,
            "{what}: after repair"
        );
        check_tree(&mut c, "bad");
    }
}

/// A table's map file lost while the server is down (deleted, or missing
/// from a file-level copy taken mid-checkpoint): the table is quarantined,
/// not emptied. Its data file stays byte for byte, its queries fail with
/// XX001 naming the missing map and the data file, the log has one WARNING
/// for it, another table reads, writes and checkpoints; restoring the map
/// under its name (which the control file keeps naming) repairs the table.
#[test]
fn missing_map_file_quarantines_the_table_and_keeps_its_data() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "nomap", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE lost (id int, v text) USING orioledb;
         CREATE TABLE kept (id int, v text) USING orioledb;
         INSERT INTO lost SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
         INSERT INTO kept SELECT g, md5(g::text) FROM generate_series(1, 2000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let file_of = |c: &mut Client, t: &str| {
        query_text(
            c,
            &format!("SELECT file FROM orioledb_trees WHERE reloid = '{t}'::regclass"),
        )
    };
    let lost_file = file_of(&mut c, "lost");
    let sum =
        |t: &str| format!("SELECT count(*) || ' ' || md5(string_agg(v, ',' ORDER BY id)) FROM {t}");
    let want_lost = query_text(&mut c, &sum("lost"));
    drop(c);
    stop_server(cenv);
    let data = cluster_path(cenv, &lost_file);
    let data_bytes = std::fs::read(&data).unwrap();
    let map = map_of(&data);
    let saved = std::fs::read(&map).unwrap();
    std::fs::remove_file(&map).unwrap();
    let from = log_len(cenv);
    start_server(cenv);
    let mut c = cluster.connect("postgres");
    for sql in [
        sum("lost"),
        "SELECT v FROM lost WHERE id = 777".to_string(),
        "SELECT orioledb_check('lost'::regclass)".to_string(),
    ] {
        let e = c
            .simple_query(&sql)
            .expect_err("a table without its map was read");
        let db = e
            .as_db_error()
            .unwrap_or_else(|| panic!("`{sql}` lost the connection: {e}"));
        assert_eq!(db.code().code(), "XX001", "`{sql}`: {}", describe(&e));
        assert!(
            db.message().contains("map file is missing") && db.message().contains(&lost_file),
            "`{sql}`: {}",
            db.message()
        );
    }
    c.batch_execute("INSERT INTO kept VALUES (0, 'more'); CHECKPOINT")
        .unwrap();
    check_tree(&mut c, "kept");
    let want_kept = query_text(&mut c, &sum("kept"));
    assert!(want_kept.starts_with("2001 "), "{want_kept}");
    let log = log_since(cenv, from);
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARNING") && l.contains("map file is missing"))
        .count();
    assert_eq!(warnings, 1, "one WARNING for the lost map:\n{log}");
    drop(c);
    stop_server(cenv);
    assert_eq!(
        std::fs::read(&data).unwrap(),
        data_bytes,
        "the quarantined data file changed"
    );
    // Restored under its own name, which the control file keeps naming
    // (checkpoints write maps only for trees that changed).
    write_cluster_file(cenv, &map, &saved);
    start_server(cenv);
    let mut c = cluster.connect("postgres");
    assert_eq!(query_text(&mut c, &sum("lost")), want_lost, "after repair");
    assert_eq!(query_text(&mut c, &sum("kept")), want_kept);
    check_tree(&mut c, "lost");
}

/// The engine's durable redo point, from `orioledb_data/control` (bytes
/// 16..24, little-endian).
fn engine_redo(c: &mut Client) -> u64 {
    let hex = query_text(
        c,
        "SELECT encode(pg_read_binary_file('orioledb_data/control'), 'hex')",
    );
    let byte = |i: usize| u64::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    (16..24).rev().fold(0, |acc, i| acc << 8 | byte(i))
}

/// An engine checkpoint whose redo point falls where WAL insertion stands
/// just past a page header with nothing on the page yet (always so right
/// after `pg_switch_wal()`) succeeds, and recovery replays from it. Taking
/// the WAL insert position as the redo point made `XLogFlush` refuse it
/// ("xlog flush request 0/3000028 is not satisfied --- flushed only to
/// 0/3000000"). VACUUM (FREEZE) of an empty table runs an engine checkpoint
/// with no WAL written before it, so right after a switch the redo point
/// (the start of the checkpoint's marker record) is the new segment's first
/// record, 40 bytes in (the long page header).
#[test]
fn engine_checkpoint_right_after_a_wal_segment_switch() {
    let (env, _g) = require_server!();
    let mut conf = OWN_CLUSTER.to_vec();
    conf.push("autovacuum = off");
    let cluster = ScratchCluster::new(&env, "walswitch", &conf);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int) USING orioledb;
         CREATE TABLE r (id int, v text) USING orioledb;",
    )
    .unwrap();
    let segment: u64 = query_text(
        &mut c,
        "SELECT setting FROM pg_settings WHERE name = 'wal_segment_size'",
    )
    .parse()
    .unwrap();
    let mut at_segment_start = 0;
    for round in 0..10 {
        c.batch_execute(&format!("INSERT INTO r VALUES ({round}, 'before {round}')"))
            .unwrap();
        c.batch_execute("SELECT pg_switch_wal()").unwrap();
        c.batch_execute("VACUUM (FREEZE) t").unwrap_or_else(|e| {
            panic!(
                "round {round}: VACUUM's engine checkpoint failed: {}\n{}",
                describe(&e),
                cluster.log_tail()
            )
        });
        if engine_redo(&mut c) % segment == 40 {
            at_segment_start += 1;
        }
    }
    assert!(
        at_segment_start > 0,
        "other WAL came between pg_switch_wal() and the engine checkpoint in every round"
    );
    // Recovery reads the log from that redo point: the marker is skipped,
    // what follows is applied.
    c.batch_execute("INSERT INTO r SELECT g, 'after ' || g FROM generate_series(100, 199) g")
        .unwrap();
    c.batch_execute("SELECT pg_switch_wal()").unwrap();
    c.batch_execute("VACUUM (FREEZE) t").unwrap();
    c.batch_execute("INSERT INTO t SELECT generate_series(1, 50); DELETE FROM r WHERE id = 3")
        .unwrap();
    let sum = "SELECT (SELECT count(*) || ' ' || sum(id) FROM t) || ' / ' || \
               (SELECT count(*) || ' ' || md5(string_agg(v, ',' ORDER BY id)) FROM r)";
    let want = query_text(&mut c, sum);
    assert!(want.starts_with("50 1275 / 109 "), "{want}");
    drop(c);
    immediate_restart(cenv);
    let mut c = cluster.connect("postgres");
    assert_eq!(
        query_text(&mut c, sum),
        want,
        "after crash recovery\n{}",
        cluster.log_tail()
    );
    check_tree(&mut c, "r");
    check_tree(&mut c, "t");
}

/// Blocks until the server has noticed a crash: the postmaster ends every
/// other session (`watch`) before it restarts.
fn wait_for_crash_noticed(watch: &mut Client) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while watch.simple_query("SELECT 1").is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not notice the crash"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `orioledb.debug_checkpoint_crash_at = N` kills the backend at the N-th
/// file operation of its engine checkpoint: for every N, until the
/// checkpoint runs to its end, the server restarts and has every committed
/// row and a valid tree.
#[test]
fn crash_at_every_checkpoint_step_keeps_committed_rows() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "ckptcrash", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g;
         CHECKPOINT;",
    )
    .unwrap();
    // Few dirty pages per round keep the checkpoint short (each of its
    // steps costs a crash and a recovery) while it still has every kind.
    let mut next = 1001;
    let mut step = 1;
    let want = loop {
        // Committed changes on pages dirty at the checkpoint.
        c.batch_execute(&format!(
            "INSERT INTO t SELECT g, 'step {step}' FROM generate_series({next}, {}) g;
             UPDATE t SET v = v || '+' WHERE id = {};
             DELETE FROM t WHERE id = {};",
            next + 19,
            step * 7 % 1000 + 1,
            step * 13 % 1000 + 1
        ))
        .unwrap();
        next += 20;
        let want = snapshot(&mut c);
        let mut watch = cluster.connect("postgres");
        c.batch_execute(&format!("SET orioledb.debug_checkpoint_crash_at = {step}"))
            .unwrap();
        match c.batch_execute("CHECKPOINT") {
            Ok(()) => {
                // Past the checkpoint's last step: it completed.
                c.batch_execute("RESET orioledb.debug_checkpoint_crash_at")
                    .unwrap();
                break want;
            }
            Err(e) => assert!(
                e.as_db_error().is_none(),
                "step {step}: CHECKPOINT failed instead of ending the process: {}",
                describe(&e)
            ),
        }
        wait_for_crash_noticed(&mut watch);
        c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
        assert_eq!(
            snapshot(&mut c),
            want,
            "crash at checkpoint step {step}: rows after recovery\n{}",
            cluster.log_tail()
        );
        check_tree(&mut c, "t");
        step += 1;
        assert!(step < 1000, "the checkpoint never completed");
    };
    // One changed tree: its data file's sync, its map (write, sync,
    // rename), the directories' syncs and the control file's write, sync
    // and rename; trees that did not change cost none.
    assert!(
        step > 5,
        "the checkpoint took only {} I/O steps?",
        step - 1
    );
    eprintln!(
        "crashes at each of {} checkpoint I/O steps lost no committed row",
        step - 1
    );
    assert_eq!(snapshot(&mut c), want);
    drop(c);
    immediate_restart(cenv);
    let mut c = cluster.connect("postgres");
    assert_eq!(
        snapshot(&mut c),
        want,
        "after the last, complete checkpoint"
    );
    check_tree(&mut c, "t");
}

/// `orioledb.debug_checkpoint_fail_at = N` makes the N-th file operation of
/// the engine checkpoint (and those after it) fail as on a full disk: the
/// CHECKPOINT is an ERROR (53100) naming a file, the server keeps running,
/// the previous checkpoint stays usable (an immediate stop loses no
/// committed row) and a CHECKPOINT without the fault succeeds. When the
/// N-th operation is an fsync the backend PANICs instead (a failed fsync
/// may have lost data, and a retry would "succeed" without it): the server
/// restarts and crash recovery has every committed row.
#[test]
fn failing_checkpoint_io_is_an_error_and_keeps_the_last_checkpoint() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "ckptfail", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 1000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let mut started = query_text(&mut c, "SELECT pg_postmaster_start_time()::text");
    let mut next = 1001;
    let mut step = 1;
    let mut sync_panics = 0;
    loop {
        c.batch_execute(&format!(
            "INSERT INTO t SELECT g, 'step {step}' FROM generate_series({next}, {}) g;
             UPDATE t SET v = v || '+' WHERE id = {};",
            next + 19,
            step * 7 % 1000 + 1
        ))
        .unwrap();
        next += 20;
        let want = snapshot(&mut c);
        let mut watch = cluster.connect("postgres");
        let from = log_len(cenv);
        c.batch_execute(&format!("SET orioledb.debug_checkpoint_fail_at = {step}"))
            .unwrap();
        let failed = c.batch_execute("CHECKPOINT");
        let Err(e) = failed else {
            c.batch_execute("RESET orioledb.debug_checkpoint_fail_at")
                .unwrap();
            break;
        };
        let panicked = match e.as_db_error() {
            None => true,
            Some(db) => db.severity() == "PANIC",
        };
        if panicked {
            // The step was an fsync: the server restarts (crash recovery).
            wait_for_crash_noticed(&mut watch);
            c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
            let log = log_since(cenv, from);
            assert!(
                log.lines()
                    .any(|l| l.contains("PANIC") && l.contains("could not fsync")),
                "step {step}: no PANIC for a failed fsync in the log:\n{log}"
            );
            assert_eq!(
                snapshot(&mut c),
                want,
                "step {step}: rows after the fsync PANIC and recovery\n{}",
                cluster.log_tail()
            );
            check_tree(&mut c, "t");
            started = query_text(&mut c, "SELECT pg_postmaster_start_time()::text");
            sync_panics += 1;
            step += 1;
            assert!(step < 1000, "the checkpoint never completed");
            continue;
        }
        drop(watch);
        c.batch_execute("RESET orioledb.debug_checkpoint_fail_at")
            .unwrap();
        let db = e
            .as_db_error()
            .unwrap_or_else(|| panic!("step {step}: CHECKPOINT lost the connection: {e}"));
        assert_eq!(db.code().code(), "53100", "step {step}: {}", describe(&e));
        assert!(
            db.message().contains("orioledb_data"),
            "step {step}: the error names no file: {}",
            db.message()
        );
        assert_eq!(
            query_text(&mut c, "SELECT pg_postmaster_start_time()::text"),
            started,
            "step {step}: the server restarted"
        );
        assert_eq!(
            snapshot(&mut c),
            want,
            "step {step}: rows after the failure"
        );
        if step % 4 == 1 {
            // What is durable now (the last good checkpoint, or this one if
            // it failed after its commit point) plus WAL has every row.
            drop(c);
            immediate_restart(cenv);
            c = cluster.connect("postgres");
            assert_eq!(
                snapshot(&mut c),
                want,
                "step {step}: after an immediate stop"
            );
            check_tree(&mut c, "t");
            started = query_text(&mut c, "SELECT pg_postmaster_start_time()::text");
        }
        step += 1;
        assert!(step < 1000, "the checkpoint never completed");
    }
    // One changed tree: its data file's sync, its map (write, sync,
    // rename), the directories' syncs and the control file's write, sync
    // and rename; trees that did not change cost none.
    assert!(
        step > 5,
        "the checkpoint took only {} I/O steps?",
        step - 1
    );
    assert!(sync_panics > 0, "no step of the checkpoint was an fsync?");
    // Completed above; one more works too, and it is what a restart loads.
    c.batch_execute("INSERT INTO t VALUES (0, 'last'); CHECKPOINT")
        .unwrap();
    let want = snapshot(&mut c);
    drop(c);
    immediate_restart(cenv);
    let mut c = cluster.connect("postgres");
    assert_eq!(snapshot(&mut c), want, "after the final checkpoint");
    check_tree(&mut c, "t");
}

/// Durability hazard 1 of issue 18: a replay of the engine's records from
/// its redo point that fails halfway (an ERROR, here injected one-shot
/// through `orioledb_data/debug_replay_fail_at`) must not leave anything
/// running on a half-replayed pool — a process that went on would serve
/// rows from before the crash, and a later replay would apply older
/// final-state records over its newer ones. After a crash the startup
/// process replays; its failure is a PANIC, so the server does not start.
/// Started again, it replays from the files and every committed row is
/// there.
#[test]
fn a_failed_engine_replay_stops_the_server_and_loses_nothing() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "replayfail", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    changes_after_a_checkpoint(&mut c);
    // A checkpoint of PostgreSQL's alone: crash recovery then starts
    // after the changes, so they are the engine's own replay's to apply,
    // from its redo point. A backup's start checkpoint runs the engine's
    // too when the checkpointer logs it (`pg::backup`): not with
    // log_checkpoints off.
    for sql in [
        "ALTER SYSTEM SET log_checkpoints = off",
        "SELECT pg_reload_conf(), pg_sleep(0.5)",
        "SELECT pg_backup_start('gap', true)",
        "SELECT pg_backup_stop()",
    ] {
        c.batch_execute(sql).unwrap();
    }
    let want = snapshot(&mut c);
    drop(c);
    crash_server(cenv);
    write_cluster_file(cenv, &cluster_path(cenv, "orioledb_data/debug_replay_fail_at"), b"40\n");
    let from = log_len(cenv);
    let started = try_start_server(cenv);
    let log = log_since(cenv, from);
    assert!(
        started.is_err(),
        "the server started on a failed engine replay:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("PANIC") && l.contains("injected by debug_replay_fail_at")),
        "the replay failure is a PANIC:\n{log}"
    );
    assert!(
        !cluster_path(cenv, "orioledb_data/debug_replay_fail_at").exists(),
        "the injection is one-shot"
    );
    start_server(cenv);
    let log = log_since(cenv, from);
    assert!(
        log.contains("replayed") && log.contains("engine WAL records"),
        "the second start replayed the engine's records:\n{log}"
    );
    let mut c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
    assert_eq!(snapshot(&mut c), want, "rows after the failed and repeated replay");
    check_tree(&mut c, "t");
}

/// Table `t` with rows, an engine checkpoint, then updates, inserts and
/// deletes after it: the changes an engine replay must apply.
fn changes_after_a_checkpoint(c: &mut Client) {
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g;
         CHECKPOINT;
         UPDATE t SET v = v || '+' WHERE id % 3 = 0;
         INSERT INTO t SELECT g, 'late' || g FROM generate_series(501, 700) g;
         DELETE FROM t WHERE id % 10 = 1;",
    )
    .unwrap();
}

/// Hazard 1's other path: after a clean shutdown whose engine checkpoint
/// did not happen, PostgreSQL has no redo to do, so no startup-process
/// replay either: the first process to use the engine (the orioledb
/// checkpointer, as it starts) replays the engine's records. When that
/// replay fails, the server restarts (a PANIC) instead of letting anyone
/// use the engine unreplayed, and the replay after the restart applies
/// every change.
#[test]
fn a_failed_engine_replay_outside_recovery_restarts_the_server_and_loses_nothing() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "replayfail2", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    changes_after_a_checkpoint(&mut c);
    let want = snapshot(&mut c);
    drop(c);
    let skip = cluster_path(cenv, "orioledb_data/debug_skip_shutdown_checkpoint");
    write_cluster_file(cenv, &skip, b"1\n");
    let from = log_len(cenv);
    stop_server(cenv);
    assert!(
        log_since(cenv, from).contains("shutdown checkpoint skipped"),
        "the engine's shutdown checkpoint was skipped:\n{}",
        log_since(cenv, from)
    );
    let fail = cluster_path(cenv, "orioledb_data/debug_replay_fail_at");
    write_cluster_file(cenv, &fail, b"40\n");
    start_server(cenv);
    // The replay fails in whichever process uses the engine first; reads
    // may meet the restart, so they are retried until one succeeds.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let got = loop {
        let mut c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
        match c.query_one(SNAPSHOT, &[]) {
            Ok(r) if !fail.exists() => break r.get::<_, String>(0),
            _ if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("no read after the failed replay: {other:?}"),
        }
    };
    let log = log_since(cenv, from);
    assert!(
        log.lines()
            .any(|l| l.contains("PANIC") && l.contains("injected by debug_replay_fail_at")),
        "the replay failure is a PANIC:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("orioledb: replayed") && l.contains("engine WAL records")),
        "a later replay applied the engine's records:\n{log}"
    );
    assert_eq!(got, want, "rows after the failed and repeated replay");
    let mut c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
    check_tree(&mut c, "t");
}

/// A clean shutdown checkpoints the engine (the orioledb checkpointer's
/// last act): the next start has no engine records to replay. (pgrx's
/// `wait_latch` consumes its SIGTERM flag, so asking it afterwards never
/// saw a shutdown, and every clean start replayed the records since the
/// last scheduled engine checkpoint.)
#[test]
fn a_clean_shutdown_checkpoints_the_engine() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "cleanstop", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 300) g;
         UPDATE t SET v = v || '+' WHERE id % 3 = 0;",
    )
    .unwrap();
    let want = snapshot(&mut c);
    drop(c);
    let from = log_len(cenv);
    stop_server(cenv);
    start_server(cenv);
    let mut c = connect_retry(&cenv.host, cenv.port, "postgres", Duration::from_secs(120));
    assert_eq!(snapshot(&mut c), want);
    let log = log_since(cenv, from);
    assert!(
        !log.contains("engine WAL records"),
        "a clean start replayed engine records:\n{log}"
    );
    check_tree(&mut c, "t");
}

/// On a new cluster the WAL-keeping replication slot does not exist yet,
/// and every engine checkpoint creates it if missing: a backend's
/// CHECKPOINT beside another's (or the worker's first) once failed with
/// `replication slot "orioledb_rs" already exists`. Sessions checkpoint
/// at once right after the start; every one succeeds and one slot holds
/// the WAL.
#[test]
fn first_checkpoints_of_a_new_cluster_at_once_all_succeed() {
    let (env, _g) = require_server!();
    for round in 0..3 {
        let cluster = ScratchCluster::new(&env, &format!("firstckpt{round}"), OWN_CLUSTER);
        let mut c = cluster.connect("postgres");
        c.batch_execute("CREATE EXTENSION orioledb_rs").unwrap();
        let start = std::sync::Arc::new(std::sync::Barrier::new(4));
        let sessions: Vec<_> = (0..4)
            .map(|_| {
                let mut s = cluster.connect("postgres");
                let start = start.clone();
                std::thread::spawn(move || {
                    start.wait();
                    s.batch_execute("CHECKPOINT").map_err(|e| e.to_string())
                })
            })
            .collect();
        for s in sessions {
            let r = s.join().unwrap();
            assert!(r.is_ok(), "round {round}: {r:?}\n{}", cluster.log_tail());
        }
        let slots = query_text(
            &mut c,
            "SELECT count(*) || ' ' || bool_and(restart_lsn IS NOT NULL) FROM pg_replication_slots \
              WHERE slot_name = 'orioledb_rs'",
        );
        assert_eq!(slots, "1 true", "round {round}");
    }
}

/// `u`'s row count by a sequential scan and by an index scan on `v`.
fn unlogged_counts(c: &mut Client) -> (i64, i64) {
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let by_index: i64 = c.query_one("SELECT count(*) FROM u WHERE v >= 0", &[]).unwrap().get(0);
    c.batch_execute("RESET ALL; SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off")
        .unwrap();
    let by_seqscan: i64 = c.query_one("SELECT count(*) FROM u", &[]).unwrap().get(0);
    c.batch_execute("RESET ALL").unwrap();
    (by_seqscan, by_index)
}

/// An unlogged orioledb table keeps its rows through a clean restart and
/// is empty after a crash, as heap's are: PostgreSQL empties its indexes
/// then, and a tree that kept its rows would disagree with them (index
/// scans missing rows, the primary key taking duplicates). A permanent
/// table beside it keeps everything, and rows written after the emptying
/// replay over it through a second crash.
#[test]
fn unlogged_tables_are_empty_after_a_crash() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_unlogged_crash";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE UNLOGGED TABLE u (id int PRIMARY KEY, v int, t text) USING orioledb;
         CREATE INDEX u_v ON u (v);
         INSERT INTO u SELECT g, g, 'v' || g FROM generate_series(1, 1000) g;
         INSERT INTO u SELECT 1001, 1001, string_agg(md5(g::text), '') FROM generate_series(1, 500) g;
         CREATE TABLE p (id int PRIMARY KEY, v int) USING orioledb;
         INSERT INTO p SELECT g, g FROM generate_series(1, 500) g;
         CHECKPOINT;",
    )
    .unwrap();
    restart_server(&env);
    let mut c = connect(&env, db);
    assert_eq!(unlogged_counts(&mut c), (1001, 1001), "a clean restart keeps unlogged rows");
    let key_before = key_of(&mut c, "u");
    assert_ne!(key_before, "row id");
    let toast = "(SELECT reltoastrelid FROM pg_class WHERE relname = 'u')";
    assert!(tree_keys(&mut c, toast) > 0, "a value went to the toast tree");
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(unlogged_counts(&mut c), (0, 0), "an unlogged table is empty after a crash");
    assert_eq!(key_of(&mut c, "u"), key_before, "the emptied tree keeps its key");
    assert_eq!(tree_keys(&mut c, toast), 0, "its toast tree is emptied too");
    let left: i64 = c
        .query_one("SELECT count(*) FROM p", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 500, "the permanent table keeps its rows");
    c.batch_execute("INSERT INTO u VALUES (5, 5, 'again'), (6, 6, repeat('toast again ', 5000))")
        .unwrap();
    expect_sqlstate(&mut c, "INSERT INTO u VALUES (5, 5, 'twice')", "23505");
    let t: String = c.query_one("SELECT md5(t) FROM u WHERE id = 6", &[]).unwrap().get(0);
    let want: String = c.query_one("SELECT md5(repeat('toast again ', 5000))", &[]).unwrap().get(0);
    assert_eq!(t, want, "a value toasted after the emptying");
    assert_eq!(unlogged_counts(&mut c), (2, 2));
    // The emptying and the rows after it are in WAL past the last
    // checkpoint: replay runs them over the tree the checkpoint left.
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(unlogged_counts(&mut c), (0, 0), "empty after the second crash too");
    c.batch_execute("INSERT INTO u SELECT g, g, 'w' FROM generate_series(1, 10) g").unwrap();
    assert_eq!(unlogged_counts(&mut c), (10, 10));
    restart_server(&env);
    let mut c = connect(&env, db);
    assert_eq!(unlogged_counts(&mut c), (10, 10), "rows written after the emptying stay through a clean restart");
}

/// After OID wraparound a temporary table can get the relation file
/// number a permanent one has (PostgreSQL checks a number only against
/// files of its own kind), and so the same tree id. Creating it must not
/// take the permanent table's live tree for a crash's leftover and empty
/// it: it is refused (55006), and the next try gets another number.
/// Wraparound is staged with `pg_resetwal -o` and large objects, which
/// take one OID each.
#[test]
fn temporary_table_with_a_permanent_tables_file_number() {
    let (env, _g) = require_server!();
    let cluster = ScratchCluster::new(&env, "fileclash", OWN_CLUSTER);
    let cenv = &cluster.env;
    let mut c = cluster.connect("postgres");
    // TRUNCATE (in a transaction of its own, so that it gives a new file)
    // makes `p`'s file number one that is no pg_class OID, which a new
    // table may then get as its OID and file number.
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE p (id int PRIMARY KEY) USING orioledb;",
    )
    .unwrap();
    c.batch_execute("TRUNCATE p").unwrap();
    c.batch_execute("INSERT INTO p SELECT generate_series(1, 100)").unwrap();
    let node: postgres::types::Oid = c
        .query_one("SELECT relfilenode FROM pg_class WHERE relname = 'p'", &[])
        .unwrap()
        .get(0);
    drop(c);
    stop_server(cenv);
    let mut reset = pg_command(cenv, "pg_resetwal");
    reset.arg("-o").arg((node - 200).to_string()).arg(cenv.pgdata.as_ref().unwrap());
    let out = reset.output().unwrap();
    assert!(out.status.success(), "pg_resetwal: {}", String::from_utf8_lossy(&out.stderr));
    start_server(cenv);
    let mut c = cluster.connect("postgres");
    // The session's temporary schema first (it takes OIDs too).
    c.batch_execute("CREATE TEMP TABLE warm (x int)").unwrap();
    loop {
        let o: postgres::types::Oid = c.query_one("SELECT lo_create(0)", &[]).unwrap().get(0);
        assert!(o < node, "OIDs went past {node} before the clash was staged");
        if o + 1 == node {
            break;
        }
    }
    let e = expect_sqlstate(&mut c, "CREATE TEMP TABLE tt (id int) USING orioledb", "55006");
    assert!(e.message().contains("in use by a permanent relation"), "{}", e.message());
    let n: i64 = c.query_one("SELECT count(*) FROM p", &[]).unwrap().get(0);
    assert_eq!(n, 100, "the permanent table keeps its rows");
    // Numbers just past it may be taken by p's index and old file too.
    let made = (0..20).any(|_| c.batch_execute("CREATE TEMP TABLE tt (id int) USING orioledb").is_ok());
    assert!(made, "a retry picks a free number");
    c.batch_execute("INSERT INTO tt VALUES (1)").unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM p", &[]).unwrap().get(0);
    assert_eq!(n, 100);
}

/// A standby has no unlogged table's rows (PostgreSQL refuses to read
/// such tables in recovery), and once promoted the table is empty and
/// usable, as heap's is: the tree replayed from the primary's WAL is
/// emptied (its relation has an init fork and no marker there), and the
/// orphan sweep keeps it although the standby has no main fork of it
/// before promotion.
#[test]
fn unlogged_tables_are_empty_on_a_promoted_standby() {
    let (env, _g) = require_server!();
    let primary = ScratchCluster::new(&env, "ulprimary", OWN_CLUSTER);
    let mut c = primary.connect("postgres");
    c.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE UNLOGGED TABLE u (id int PRIMARY KEY, v int) USING orioledb;
         CREATE INDEX u_v ON u (v);
         INSERT INTO u SELECT g, g FROM generate_series(1, 100) g;
         CREATE TABLE p (id int PRIMARY KEY) USING orioledb;
         INSERT INTO p SELECT generate_series(1, 100);",
    )
    .unwrap();
    drop(c);
    let standby = primary.standby(&env, "ulstandby");
    let mut c = primary.connect("postgres");
    c.batch_execute(
        "INSERT INTO u SELECT g, g FROM generate_series(101, 200) g;
         INSERT INTO p SELECT generate_series(101, 200);
         CHECKPOINT;",
    )
    .unwrap();
    let mut s = connect_retry(&standby.env.host, standby.env.port, "postgres", Duration::from_secs(60));
    let start = std::time::Instant::now();
    loop {
        let n: i64 = s.query_one("SELECT count(*) FROM p", &[]).unwrap().get(0);
        if n == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the standby replayed {n} of 200 rows");
        std::thread::sleep(Duration::from_millis(100));
    }
    expect_sqlstate(&mut s, "SELECT count(*) FROM u", "0A000");
    let promoted: bool = s.query_one("SELECT pg_promote()", &[]).unwrap().get(0);
    assert!(promoted, "promotion: {}", standby.log_tail());
    let mut s = standby.connect("postgres");
    assert_eq!(unlogged_counts(&mut s), (0, 0), "an unlogged table is empty after promotion");
    s.batch_execute("INSERT INTO u VALUES (5, 5)").unwrap();
    expect_sqlstate(&mut s, "INSERT INTO u VALUES (5, 6)", "23505");
    assert_eq!(unlogged_counts(&mut s), (1, 1));
    let n: i64 = s.query_one("SELECT count(*) FROM p", &[]).unwrap().get(0);
    assert_eq!(n, 200, "the permanent table has every row");
    // The primary keeps its rows.
    assert_eq!(unlogged_counts(&mut c), (200, 200));
}
