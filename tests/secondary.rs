//! Integration tests: `orioledb_btree`, secondary indexes stored in engine
//! trees (`src/am/secondary`).
//!
//! The index kinds and types are compared with heap + btree by
//! `tests/sql/secondary.sql` (sql_parity.rs); here: the `compress` option
//! and the errors, the index's files and size, its tree following the
//! transactions that create and drop it, updates that leave it alone,
//! concurrent writers and readers, kill -9, and a standby.

#[macro_use]
mod common;

use common::*;
use std::time::Duration;

/// The compression level of relation `rel`'s tree (a table's primary tree
/// or an index's) as the engine stores it.
fn tree_level(c: &mut Client, rel: &str) -> i32 {
    c.query_one(
        "SELECT compress FROM orioledb_trees WHERE reloid = $1::text::regclass",
        &[&rel],
    )
    .unwrap_or_else(|e| panic!("no tree for {rel}: {}", describe(&e)))
    .get(0)
}

fn access_method(c: &mut Client, rel: &str) -> String {
    c.query_one(
        "SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = $1::text::regclass",
        &[&rel],
    )
    .unwrap()
    .get(0)
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {}", describe(&e))).get(0)
}

/// Rows of `table` satisfying `cond`, counted through an index only (no
/// sequential scan or bitmap) and by a sequential scan.
fn both_ways_where(c: &mut Client, table: &str, cond: &str) -> (i64, i64) {
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let q = format!("SELECT count(*) FROM {table} WHERE {cond}");
    let p = plan(c, &q);
    assert!(p.contains("Index") && !p.contains("_pkey"), "not a secondary index scan: {p}");
    let by_index = count(c, &q);
    c.batch_execute("RESET enable_seqscan; SET enable_indexscan = off; SET enable_indexonlyscan = off").unwrap();
    let by_seq = count(c, &q);
    c.batch_execute("RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan").unwrap();
    (by_index, by_seq)
}

/// [`both_ways_where`] for `a` in `lo..=hi`.
fn both_ways(c: &mut Client, table: &str, lo: i32, hi: i32) -> (i64, i64) {
    both_ways_where(c, table, &format!("a BETWEEN {lo} AND {hi}"))
}

/// `WITH (compress = N)` on an orioledb table makes an `orioledb_btree`
/// index whose tree stores pages at that level; ALTER INDEX SET/RESET
/// changes it; bad values and unknown options are 22023; what the method
/// does not serve (table options, unique indexes, heap tables, unlogged
/// tables) is 0A000, a key too long 54000, and nothing is left behind.
#[test]
fn the_compress_option_makes_and_alters_engine_indexes() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_options");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, s text) USING orioledb;
         INSERT INTO t SELECT g, g % 100, 's' || g FROM generate_series(1, 1000) g;
         CREATE TABLE h (id int PRIMARY KEY, a int) USING heap;
         CREATE INDEX t_a ON t (a) WITH (compress = 3);
         CREATE INDEX t_s ON t USING orioledb_btree (s);
         CREATE INDEX t_plain ON t (s);",
    )
    .unwrap();
    assert_eq!(access_method(&mut c, "t_a"), "orioledb_btree");
    assert_eq!(access_method(&mut c, "t_s"), "orioledb_btree");
    assert_eq!(access_method(&mut c, "t_plain"), "btree", "a plain CREATE INDEX stays a btree");
    assert_eq!(tree_level(&mut c, "t_a"), 3);
    assert_eq!(tree_level(&mut c, "t_s"), -1, "orioledb.default_compress is off");
    c.batch_execute("ALTER INDEX t_a SET (compress = 7)").unwrap();
    assert_eq!(tree_level(&mut c, "t_a"), 7);
    c.batch_execute("ALTER INDEX t_a RESET (compress)").unwrap();
    assert_eq!(tree_level(&mut c, "t_a"), -1);
    c.batch_execute("SET orioledb.default_compress = 5; CREATE INDEX t_s5 ON t USING orioledb_btree (s)").unwrap();
    assert_eq!(tree_level(&mut c, "t_s5"), 5, "an index without the option takes the default");
    c.batch_execute("RESET orioledb.default_compress").unwrap();

    for (sql, code) in [
        ("CREATE INDEX bad ON t (a) WITH (compress = 23)", "22023"),
        ("CREATE INDEX bad ON t USING orioledb_btree (a) WITH (compress = 'x')", "22023"),
        ("CREATE INDEX bad ON t USING orioledb_btree (a) WITH (fillfactor = 50)", "22023"),
        ("CREATE INDEX bad ON t (a) WITH (primary_compress = 3)", "0A000"),
        ("ALTER INDEX t_a SET (compress = -2)", "22023"),
        ("ALTER INDEX t_a SET (toast_compress = 1)", "22023"),
        ("CREATE INDEX bad ON h (a) WITH (compress = 3)", "0A000"),
        ("CREATE INDEX bad ON h USING orioledb_btree (a)", "0A000"),
        ("CREATE UNIQUE INDEX bad ON t USING orioledb_btree (id)", "0A000"),
        ("CREATE UNIQUE INDEX bad ON t (id) WITH (compress = 3)", "0A000"),
        ("ALTER INDEX t_plain SET (compress = 3)", "0A000"),
    ] {
        expect_sqlstate(&mut c, sql, code);
    }
    c.batch_execute("CREATE UNLOGGED TABLE u (a int) USING orioledb").unwrap();
    expect_sqlstate(&mut c, "CREATE INDEX bad ON u USING orioledb_btree (a)", "0A000");
    // An index row the engine cannot store: the statement fails whole.
    let long = "x".repeat(1100);
    expect_sqlstate(&mut c, &format!("INSERT INTO t VALUES (5000, 1, '{long}')"), "54000");
    assert_eq!(count(&mut c, "SELECT count(*) FROM t WHERE id = 5000"), 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM t"), 1000);
    // The index rows are all there, the options kept.
    let (by_index, by_seq) = both_ways(&mut c, "t", 10, 19);
    assert_eq!((by_index, by_seq), (100, 100));
}

/// After CHECKPOINT the index has a data file and a map in
/// `orioledb_data/<db>/`, as the table does; `orioledb_relation_size`
/// counts them; a compressed index of the same rows is smaller.
#[test]
fn an_index_has_its_files_and_its_size_counts() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_files");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, b int) USING orioledb;
         INSERT INTO t SELECT g, g, g FROM generate_series(1, 100000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let before: i64 = count(&mut c, "SELECT orioledb_relation_size('t'::regclass)");
    c.batch_execute(
        "CREATE INDEX t_a ON t USING orioledb_btree (a);
         CREATE INDEX t_b ON t (b) WITH (compress = 3);
         CHECKPOINT;",
    )
    .unwrap();
    let after: i64 = count(&mut c, "SELECT orioledb_relation_size('t'::regclass)");
    let raw: i64 = count(&mut c, "SELECT orioledb_tree_bytes('t_a'::regclass)");
    let packed: i64 = count(&mut c, "SELECT orioledb_tree_bytes('t_b'::regclass)");
    assert!(raw > 500_000, "100,000 entries in {raw} bytes");
    assert!(packed * 2 < raw, "compress = 3: {packed} bytes against {raw}");
    assert_eq!(after - before, raw + packed, "orioledb_relation_size counts both indexes' files");
    // Scattered keys sorted through a sort that spills to disk (1 MB of
    // memory) still fill the leaves as a build of ordered keys does.
    c.batch_execute(
        "ALTER TABLE t ADD COLUMN c int;
         UPDATE t SET c = (id::int8 * 7919 % 100003)::int;
         SET maintenance_work_mem = '1MB';
         CREATE INDEX t_c ON t USING orioledb_btree (c);
         RESET maintenance_work_mem;",
    )
    .unwrap();
    let pages = |c: &mut Client, ix: &str| -> i64 {
        c.query_one("SELECT pages FROM orioledb_trees WHERE reloid = $1::text::regclass", &[&ix])
            .unwrap()
            .get(0)
    };
    let (ordered, scattered) = (pages(&mut c, "t_a"), pages(&mut c, "t_c"));
    assert!(scattered * 10 <= ordered * 11, "scattered keys took {scattered} pages, ordered {ordered}");
    assert_eq!(both_ways_where(&mut c, "t", "c BETWEEN 5000 AND 9000"), (4001, 4001));
    let Some(pgdata) = env.pgdata.clone() else {
        eprintln!("SKIP the file check: ORIOLEDB_TEST_PGDATA not set");
        return;
    };
    let row = c
        .query_one(
            "SELECT d.oid::int8, c.relfilenode::int8 FROM pg_class c, pg_database d
              WHERE c.relname = 't_a' AND d.datname = current_database()",
            &[],
        )
        .unwrap();
    let (db, node): (i64, i64) = (row.get(0), row.get(1));
    let dir = pgdata.join("orioledb_data").join(db.to_string());
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&node.to_string()), "no data file {node} in {names:?}");
    assert!(
        names.iter().any(|n| n.starts_with(&format!("{node}-")) && n.ends_with(".map")),
        "no map of {node} in {names:?}"
    );
}

/// The relation files of `rel` that have an engine tree in this database.
fn has_tree(c: &mut Client, relfilenode: i64) -> bool {
    count(
        c,
        &format!("SELECT count(*) FROM orioledb_tree_stats() WHERE relnode = {relfilenode}"),
    ) == 1
}

fn relfilenode(c: &mut Client, rel: &str) -> i64 {
    c.query_one("SELECT relfilenode::int8 FROM pg_class WHERE relname = $1", &[&rel])
        .unwrap()
        .get(0)
}

/// A rolled-back CREATE INDEX leaves no tree; a rolled-back DROP INDEX
/// keeps the index whole; a committed one removes its tree; an UPDATE of
/// columns the index does not cover inserts nothing into it.
#[test]
fn an_index_tree_follows_its_transactions() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_life");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, other int) USING orioledb;
         INSERT INTO t SELECT g, g % 50, 0 FROM generate_series(1, 5000) g;",
    )
    .unwrap();
    c.batch_execute("BEGIN; CREATE INDEX gone ON t USING orioledb_btree (a)").unwrap();
    let node = relfilenode(&mut c, "gone");
    assert!(has_tree(&mut c, node));
    c.batch_execute("ROLLBACK").unwrap();
    assert!(!has_tree(&mut c, node), "a rolled-back CREATE INDEX left its tree");

    c.batch_execute("CREATE INDEX t_a ON t USING orioledb_btree (a)").unwrap();
    let node = relfilenode(&mut c, "t_a");
    c.batch_execute("BEGIN; DROP INDEX t_a; ROLLBACK").unwrap();
    assert!(has_tree(&mut c, node));
    assert_eq!(both_ways(&mut c, "t", 0, 9), (1000, 1000));

    let keys = tree_keys(&mut c, "'t_a'::regclass");
    for _ in 0..20 {
        c.batch_execute("UPDATE t SET other = other + 1 WHERE id % 10 = 0").unwrap();
    }
    assert_eq!(tree_keys(&mut c, "'t_a'::regclass"), keys, "updates of other columns inserted entries");
    c.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    let hot: i64 = count(&mut c, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 't'");
    assert!(hot >= 10_000, "{hot} HOT updates counted");
    c.batch_execute("UPDATE t SET a = a + 100 WHERE id % 10 = 0").unwrap();
    assert_eq!(tree_keys(&mut c, "'t_a'::regclass"), keys + 500);
    assert_eq!(both_ways(&mut c, "t", 100, 149), (500, 500));
    c.batch_execute("VACUUM t").unwrap();
    assert_eq!(tree_keys(&mut c, "'t_a'::regclass"), keys, "VACUUM removed the dead versions' entries");

    c.batch_execute("DROP INDEX t_a").unwrap();
    assert!(!has_tree(&mut c, node), "a dropped index kept its tree");
}

/// Writers inserting, updating (the indexed column and others) and
/// deleting while readers count through the index: every reader's
/// snapshot sees through the index what a sequential scan sees, and at
/// the end the index holds exactly the live rows' entries after VACUUM.
#[test]
fn concurrent_writers_and_index_readers_agree() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_concurrent");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, other int) USING orioledb;
         INSERT INTO t SELECT g, g % 1000, 0 FROM generate_series(1, 20000) g;
         CREATE INDEX t_a ON t USING orioledb_btree (a);
         ANALYZE t;",
    )
    .unwrap();
    let secs = knob("ORIOLEDB_SECONDARY_SECS", 6);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..2u32 {
        let (env, stop) = (env.clone(), stop.clone());
        workers.push(std::thread::spawn(move || {
            let mut c = connect(&env, "itest_secondary_concurrent");
            let mut i = w as i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = (i * 7919) % 20000 + 1;
                let sql = match i % 4 {
                    0 => format!("UPDATE t SET a = (a + 37) % 1000 WHERE id = {id}"),
                    1 => format!("UPDATE t SET other = other + 1 WHERE id = {id}"),
                    2 => format!("DELETE FROM t WHERE id = {id}"),
                    _ => format!("INSERT INTO t VALUES ({id}, {}, 0) ON CONFLICT (id) DO NOTHING", i % 1000),
                };
                c.batch_execute(&sql).unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
                i += 2;
            }
        }));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    let mut reads = 0;
    while std::time::Instant::now() < deadline {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
        let (by_index, by_seq) = both_ways(&mut c, "t", 200, 399);
        c.batch_execute("COMMIT").unwrap();
        assert_eq!(by_index, by_seq, "the index and a scan disagree in one snapshot");
        reads += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(reads > 3, "only {reads} reads");
    c.batch_execute("VACUUM t").unwrap();
    let live = count(&mut c, "SELECT count(*) FROM t");
    assert_eq!(tree_keys(&mut c, "'t_a'::regclass") as i64, live + 1, "entries besides the descriptor");
    assert_eq!(both_ways(&mut c, "t", 0, 999), (live, live));
}

/// Committed index entries survive kill -9 (replayed from WAL with the
/// table's); an uncommitted transaction's rows are not found.
#[test]
fn index_entries_survive_a_crash() {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_secondary_crash");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int, s text) USING orioledb;
         INSERT INTO t SELECT g, g % 1000, 's' || g FROM generate_series(1, 30000) g;
         CREATE INDEX t_a ON t USING orioledb_btree (a) WITH (compress = 1);
         CREATE INDEX t_s ON t USING orioledb_btree (s DESC);
         CHECKPOINT;
         INSERT INTO t SELECT g, g % 1000, 's' || g FROM generate_series(30001, 40000) g;
         UPDATE t SET a = a + 1000 WHERE id % 7 = 0;
         DELETE FROM t WHERE id % 11 = 0;",
    )
    .unwrap();
    let mut open = connect(&env, "itest_secondary_crash");
    open.batch_execute("BEGIN; INSERT INTO t SELECT g, 5, 'open' FROM generate_series(50001, 51000) g").unwrap();
    crash_and_restart(&env);
    drop(open);
    let mut c = connect_retry(&env.host, env.port, "itest_secondary_crash", Duration::from_secs(60));
    let live = count(&mut c, "SELECT count(*) FROM t");
    assert_eq!(both_ways(&mut c, "t", 0, 1999), (live, live));
    assert_eq!(both_ways_where(&mut c, "t", "s = 'open'"), (0, 0));
    let (by_index, by_seq) = both_ways_where(&mut c, "t", "s > 's3999'");
    assert_eq!(by_index, by_seq);
    assert!(by_index > 5000, "{by_index} rows after 's3999'");
    for ix in ["t_a", "t_s"] {
        let r: String = c.query_one(&format!("SELECT orioledb_check('{ix}'::regclass)"), &[]).unwrap().get(0);
        assert!(r.starts_with("ok"), "{ix}: {r}");
    }
    assert_eq!(tree_level(&mut c, "t_a"), 1);
}

/// A standby replays index builds and entries: its queries through the
/// index see the primary's rows.
#[test]
fn a_standby_reads_through_the_index() {
    let (env, _g) = require_server!();
    let p = ScratchCluster::new(&env, "secstandby", &["shared_preload_libraries = 'orioledb_rs'"]);
    let mut pc = p.connect("postgres");
    pc.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE t (id int PRIMARY KEY, a int) USING orioledb;
         INSERT INTO t SELECT g, g % 100 FROM generate_series(1, 10000) g;
         CREATE INDEX t_a ON t USING orioledb_btree (a);",
    )
    .unwrap();
    let standby = p.standby(&env, "secstandbyreplica");
    let mut pc = p.connect("postgres");
    pc.batch_execute(
        "INSERT INTO t SELECT g, g % 100 FROM generate_series(10001, 12000) g;
         UPDATE t SET a = a + 100 WHERE id % 3 = 0;
         CREATE INDEX t_a2 ON t USING orioledb_btree (a DESC) WITH (compress = 3);",
    )
    .unwrap();
    let mut sc = standby.connect("postgres");
    // Through t_a, then (once its DROP has replayed) through t_a2.
    for round in 0..2 {
        wait_for_replay(&mut sc, &mut pc);
        let on_primary = both_ways(&mut pc, "t", 50, 149);
        assert_eq!(on_primary.0, on_primary.1);
        let on_standby = both_ways(&mut sc, "t", 50, 149);
        assert_eq!(on_standby, on_primary, "round {round}: the standby sees other rows through the index");
        if round == 0 {
            pc.batch_execute("DROP INDEX t_a; INSERT INTO t SELECT g, 60 FROM generate_series(20001, 20100) g").unwrap();
        }
    }
}

/// DROP INDEX CONCURRENTLY keeps the tree while the index is still written
/// (other sessions insert while it waits), and the tree goes once the
/// index's file is gone; a cancelled one leaves the index whole.
#[test]
fn drop_index_concurrently_keeps_the_tree_until_the_index_is_gone() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_dropconc");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int) USING orioledb;
         INSERT INTO t SELECT g, g % 10 FROM generate_series(1, 1000) g;
         CREATE INDEX t_a ON t USING orioledb_btree (a);",
    )
    .unwrap();
    let node = relfilenode(&mut c, "t_a");
    // A transaction that read the table holds the DROP in its wait.
    let mut holder = connect(&env, "itest_secondary_dropconc");
    holder.batch_execute("BEGIN; SELECT count(*) FROM t").unwrap();
    let env2 = env.clone();
    let dropper = std::thread::spawn(move || {
        let mut d = connect(&env2, "itest_secondary_dropconc");
        d.batch_execute("SET lock_timeout = '20s'").unwrap();
        d.batch_execute("DROP INDEX CONCURRENTLY t_a")
    });
    // Wait until the DROP waits (its first commit is done), then write.
    let start = std::time::Instant::now();
    while count(
        &mut c,
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%DROP INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'",
    ) == 0
    {
        assert!(start.elapsed() < Duration::from_secs(20), "the DROP never waited");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.batch_execute("INSERT INTO t SELECT g, 5 FROM generate_series(1001, 1100) g").unwrap();
    assert!(has_tree(&mut c, node), "the tree went while the index was still written");
    holder.batch_execute("COMMIT").unwrap();
    dropper.join().unwrap().unwrap();
    assert_eq!(count(&mut c, "SELECT count(*) FROM t WHERE a = 5"), 200);
    // PostgreSQL removes the file at a checkpoint; the orphan sweep then
    // drops the tree after the engine's.
    let start = std::time::Instant::now();
    while has_tree(&mut c, node) {
        assert!(start.elapsed() < Duration::from_secs(30), "the dropped index kept its tree");
        c.batch_execute("CHECKPOINT").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A level set in a rolled-back transaction (or subtransaction) is undone
/// with the option; an index's tree never moves to another tablespace;
/// an operator class with its own order is refused.
#[test]
fn levels_roll_back_and_indexes_stay_where_their_trees_are() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_secondary_rollback");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, a int) USING orioledb WITH (compress = 2);
         INSERT INTO t SELECT g, g FROM generate_series(1, 100) g;
         CREATE INDEX t_a ON t (a) WITH (compress = 3);",
    )
    .unwrap();
    c.batch_execute("BEGIN; ALTER INDEX t_a SET (compress = 9)").unwrap();
    assert_eq!(tree_level(&mut c, "t_a"), 9, "the transaction's own writes use the new level");
    c.batch_execute("ROLLBACK").unwrap();
    assert_eq!(tree_level(&mut c, "t_a"), 3);
    c.batch_execute("BEGIN; SAVEPOINT s; ALTER TABLE t SET (compress = 7); ROLLBACK TO s; ALTER INDEX t_a SET (compress = 4); COMMIT").unwrap();
    assert_eq!(tree_level(&mut c, "t"), 2, "the table's level came back with its option");
    assert_eq!(tree_level(&mut c, "t_a"), 4);
    // A toast tree made after the ALTER, in the same transaction, gets the
    // old level back too.
    c.batch_execute("CREATE TABLE w (id int PRIMARY KEY, v text) USING orioledb WITH (compress = 2)").unwrap();
    c.batch_execute(
        "BEGIN; ALTER TABLE w SET (toast_compress = 9);
         INSERT INTO w SELECT 1, string_agg(md5(g::text), '') FROM generate_series(1, 200) g",
    )
    .unwrap();
    let toast = "(SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'w')";
    let toast_level = |c: &mut Client| -> i32 {
        c.query_one(&format!("SELECT compress FROM orioledb_trees WHERE reloid::text = {toast}"), &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(toast_level(&mut c), 9);
    c.batch_execute("ROLLBACK").unwrap();
    assert_eq!(toast_level(&mut c), 2, "the toast tree kept the rolled-back level");
    // ROLLBACK PREPARED runs elsewhere: such a transaction is refused, one
    // that changed no level is not (a toast relation without a tree yet).
    c.batch_execute("BEGIN; ALTER INDEX t_a SET (compress = 8)").unwrap();
    expect_sqlstate(&mut c, "PREPARE TRANSACTION 'sec_levels'", "0A000");
    assert_eq!(tree_level(&mut c, "t_a"), 4);
    if show(&mut c, "max_prepared_transactions") != "0" {
        c.batch_execute("CREATE TABLE w2 (id int PRIMARY KEY, v text) USING orioledb").unwrap();
        c.batch_execute("BEGIN; ALTER TABLE w2 SET (fillfactor = 70); PREPARE TRANSACTION 'sec_heap_opts'").unwrap();
        c.batch_execute("ROLLBACK PREPARED 'sec_heap_opts'").unwrap();
    } else {
        eprintln!("SKIP the PREPARE of heap options: max_prepared_transactions = 0");
    }

    let dir = std::env::temp_dir().join(format!("itest_sec_ts_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let chown = std::process::Command::new("chown").arg(&env.os_user).arg(&dir).status().unwrap();
    assert!(chown.success(), "chown {} {}", env.os_user, dir.display());
    c.batch_execute("DROP TABLESPACE IF EXISTS itest_sec_ts").unwrap();
    c.batch_execute(&format!("CREATE TABLESPACE itest_sec_ts LOCATION '{}'", dir.display()))
        .unwrap();
    expect_sqlstate(&mut c, "ALTER INDEX t_a SET TABLESPACE itest_sec_ts", "0A000");
    expect_sqlstate(&mut c, "ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE itest_sec_ts", "0A000");
    expect_sqlstate(&mut c, "CREATE INDEX bad ON t USING orioledb_btree (a) TABLESPACE itest_sec_ts", "0A000");
    c.batch_execute("SET default_tablespace = itest_sec_ts").unwrap();
    expect_sqlstate(&mut c, "CREATE INDEX bad ON t (a) WITH (compress = 1)", "0A000");
    c.batch_execute("RESET default_tablespace").unwrap();
    c.batch_execute("DROP TABLESPACE itest_sec_ts").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    c.batch_execute(
        "CREATE FUNCTION rev_cmp(int4, int4) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT btint4cmp($2, $1)';
         CREATE OPERATOR CLASS rev_int4_ops FOR TYPE int4 USING orioledb_btree AS
             OPERATOR 1 >, OPERATOR 2 >=, OPERATOR 3 =, OPERATOR 4 <=, OPERATOR 5 <, FUNCTION 1 rev_cmp(int4, int4);",
    )
    .unwrap();
    expect_sqlstate(&mut c, "CREATE INDEX bad ON t USING orioledb_btree (a rev_int4_ops)", "0A000");
    // A rewrite through a cached plan (a function's body) works every time.
    c.batch_execute(
        "CREATE FUNCTION mk() RETURNS void LANGUAGE plpgsql AS $$
         BEGIN
           CREATE INDEX mk_a ON t (a) WITH (compress = 1);
           DROP INDEX mk_a;
         END $$;
         SELECT mk(); SELECT mk(); SELECT mk();",
    )
    .unwrap();
    let (by_index, by_seq) = both_ways(&mut c, "t", 10, 19);
    assert_eq!((by_index, by_seq), (10, 10));
}
