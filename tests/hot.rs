//! Integration tests: HOT-like updates (`src/am/layout/hot.rs`). An UPDATE that
//! changes no indexed column inserts no index entries, in a table with a
//! primary key and in one in row-id order (chain members keyed under their
//! roots); every index kind must still find the row version its snapshot
//! sees, through chains whose older members are pruned, after VACUUM,
//! index builds, VACUUM FULL and CLUSTER, under concurrent updaters and
//! readers, and after a crash.

#[macro_use]
mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROWS: i32 = 200;

/// A table with an index of every kind on `w` (never updated here) and a
/// GIN index on `tags`; `v` is not indexed. `keyed`: `id` is its primary
/// key; else the table is in row-id order with a unique index on `id`
/// (both named `t_pkey`).
fn setup(c: &mut Client, keyed: bool) {
    let (id, unique) = if keyed {
        ("id int PRIMARY KEY", "")
    } else {
        ("id int NOT NULL", "CREATE UNIQUE INDEX t_pkey ON t (id);")
    };
    c.batch_execute(&format!(
        "CREATE TABLE t ({id}, v int NOT NULL, w int NOT NULL,
                         tags int[] NOT NULL, pad text) USING orioledb;
         INSERT INTO t SELECT i, 0, i % 20, ARRAY[i % 7], repeat('x', 50)
           FROM generate_series(1, {ROWS}) i;
         {unique}
         CREATE INDEX t_w ON t (w);
         CREATE INDEX t_w_hash ON t USING hash (w);
         CREATE INDEX t_w_brin ON t USING brin (w) WITH (pages_per_range = 1);
         CREATE INDEX t_tags ON t USING gin (tags);"
    ))
    .unwrap();
}

fn stat_i64(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

fn index_bytes(c: &mut Client) -> i64 {
    stat_i64(
        c,
        "SELECT sum(pg_relation_size(indexrelid))::int8 FROM pg_index
          WHERE indrelid = 't'::regclass",
    )
}

/// `SELECT sum(v), count(*)` over rows with `w < 10` through one access
/// path (the others switched off), checked against a sequential scan.
fn check_paths(c: &mut Client, what: &str) {
    let q = "SELECT coalesce(sum(v), 0)::int8, count(*) FROM t WHERE w < 10";
    let seq = {
        c.batch_execute(
            "SET enable_indexscan = off; SET enable_bitmapscan = off;
             SET enable_indexonlyscan = off; SET enable_seqscan = on",
        )
        .unwrap();
        let r = c.query_one(q, &[]).unwrap();
        (r.get::<_, i64>(0), r.get::<_, i64>(1))
    };
    for (path, set) in [
        ("index scan", "enable_indexscan = on"),
        ("bitmap scan", "enable_bitmapscan = on"),
    ] {
        c.batch_execute(&format!(
            "SET enable_indexscan = off; SET enable_bitmapscan = off;
             SET enable_seqscan = off; SET {set}"
        ))
        .unwrap();
        let r = c.query_one(q, &[]).unwrap();
        assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), seq, "{what}: {path}");
    }
    // Equality through the hash and GIN indexes, lossy pages through BRIN
    // and a tiny work_mem.
    c.batch_execute("SET enable_seqscan = off; SET enable_indexscan = on; SET enable_bitmapscan = on")
        .unwrap();
    for q in [
        "SELECT coalesce(sum(v), 0)::int8 FROM t WHERE w = 3",
        "SELECT coalesce(sum(v), 0)::int8 FROM t WHERE tags @> ARRAY[3]",
        "SELECT coalesce(sum(v), 0)::int8 FROM t WHERE id BETWEEN 10 AND 150",
    ] {
        let via_index: i64 = c.query_one(q, &[]).unwrap().get(0);
        c.batch_execute("SET enable_seqscan = on; SET enable_indexscan = off; SET enable_bitmapscan = off")
            .unwrap();
        let seq: i64 = c.query_one(q, &[]).unwrap().get(0);
        c.batch_execute("SET enable_seqscan = off; SET enable_indexscan = on; SET enable_bitmapscan = on")
            .unwrap();
        assert_eq!(via_index, seq, "{what}: {q}");
    }
    c.batch_execute(
        "SET work_mem = '64kB'; SET enable_indexscan = off; SET enable_seqscan = off",
    )
    .unwrap();
    let brin: i64 = c
        .query_one("SELECT count(*) FROM t WHERE w BETWEEN 2 AND 4", &[])
        .unwrap()
        .get(0);
    c.batch_execute("RESET ALL").unwrap();
    let seq: i64 = c
        .query_one("SELECT count(*) FROM t WHERE w BETWEEN 2 AND 4", &[])
        .unwrap()
        .get(0);
    assert_eq!(brin, seq, "{what}: lossy bitmap");
    // An index-only scan where the visibility map allows it.
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let ios = stat_i64(c, "SELECT count(*) FROM t WHERE w >= 0");
    c.batch_execute("RESET ALL").unwrap();
    assert_eq!(ios, stat_i64(c, "SELECT count(*) FROM t"), "{what}: count via w");
}

/// 20,000 updates of an unindexed column insert no index entry: every
/// index keeps its size, `n_tup_hot_upd` counts them, `n_dead_tup` does
/// not keep the pruned old versions, and every access
/// path returns what a sequential scan does — also after pruning removed
/// the chains' roots, after deletes and key re-inserts, after an update
/// of an indexed column, after VACUUM, CREATE INDEX on the updated column
/// (whose chains hold several values of it), REINDEX CONCURRENTLY,
/// VACUUM FULL and CLUSTER.
#[test]
fn hot_updates_keep_indexes_small_and_right() {
    hot_updates_keep_indexes_small_and_right_in(true, "itest_hot");
}

/// The same in a table without a primary key.
#[test]
fn row_id_hot_updates_keep_indexes_small_and_right() {
    hot_updates_keep_indexes_small_and_right_in(false, "itest_hot_rowid");
}

fn hot_updates_keep_indexes_small_and_right_in(keyed: bool, db: &str) {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, db);
    setup(&mut c, keyed);
    // No VACUUM resets the dead-row count below.
    c.batch_execute("ALTER TABLE t SET (autovacuum_enabled = off)").unwrap();
    let before = index_bytes(&mut c);
    let n = knob("ORIOLEDB_HOT_UPDATES", 20_000) as i32;
    for batch in 0..n / 500 {
        c.batch_execute(&format!(
            "UPDATE t SET v = v + 1 WHERE id = ({batch} * 37) % {ROWS} + 1;
             DO $$ BEGIN FOR i IN 1..499 LOOP
               UPDATE t SET v = v + 1 WHERE id = (i * 13 + {batch}) % {ROWS} + 1;
             END LOOP; END $$;"
        ))
        .unwrap();
        // After every batch: a batch whose updates went astray (a row
        // lost by a background sweep) shows here, not only at the end.
        let got = stat_i64(&mut c, "SELECT coalesce(sum(v), 0)::int8 FROM t");
        let rows = stat_i64(&mut c, "SELECT count(*) FROM t");
        assert_eq!((got, rows), ((batch as i64 + 1) * 500, ROWS as i64), "sum and rows after batch {batch}");
    }
    c.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    let hot = stat_i64(&mut c, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 't'");
    let upd = stat_i64(&mut c, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 't'");
    assert_eq!(hot, upd, "every update was HOT");
    assert!(upd >= n as i64 - 40, "{upd} updates counted");
    // Pruning reports what it removed, as heap's does: the old versions
    // are gone, and autovacuum has no dead rows to come for.
    let dead = stat_i64(&mut c, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 't'");
    assert!(dead < upd / 4, "{dead} dead rows counted after {upd} pruned updates");
    assert_eq!(
        stat_i64(&mut c, "SELECT sum(v)::int8 FROM t"),
        (n / 500 * 500) as i64
    );
    let after = index_bytes(&mut c);
    assert!(
        after <= before + 8 * 8192,
        "indexes grew from {before} to {after} bytes"
    );
    check_paths(&mut c, "after HOT updates");

    // Deletes of chain members, re-inserted keys, an indexed column changed.
    c.batch_execute(
        "DELETE FROM t WHERE id % 10 = 0;
         INSERT INTO t SELECT i, 1000, i % 20, ARRAY[i % 7], 'again'
           FROM generate_series(10, 200, 20) i;
         UPDATE t SET w = w + 1 WHERE id % 10 = 5;
         UPDATE t SET v = v + 1 WHERE id % 3 = 0;",
    )
    .unwrap();
    check_paths(&mut c, "after deletes, re-inserts and non-HOT updates");

    c.batch_execute("VACUUM t").unwrap();
    check_paths(&mut c, "after VACUUM");

    // An index on the column the chains changed.
    c.batch_execute("CREATE INDEX t_v ON t (v)").unwrap();
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let via_v: i64 = stat_i64(&mut c, "SELECT count(*) FROM t WHERE v >= 0");
    c.batch_execute("RESET ALL").unwrap();
    assert_eq!(via_v, stat_i64(&mut c, "SELECT count(*) FROM t"), "new index on v");
    c.batch_execute("UPDATE t SET pad = 'y' WHERE id < 50").unwrap();
    c.batch_execute("REINDEX TABLE CONCURRENTLY t").unwrap();
    check_paths(&mut c, "after REINDEX CONCURRENTLY");
    c.batch_execute("UPDATE t SET pad = 'z' WHERE id < 80").unwrap();
    c.batch_execute("VACUUM FULL t").unwrap();
    check_paths(&mut c, "after VACUUM FULL");
    c.batch_execute("UPDATE t SET pad = 'q' WHERE id < 80").unwrap();
    c.batch_execute("CLUSTER t USING t_pkey").unwrap();
    check_paths(&mut c, "after CLUSTER");
    let check = query_text(&mut c, "SELECT orioledb_check('t'::regclass)");
    assert!(check.starts_with("ok"), "checker: {check}");
}

/// Updaters move amounts between rows with HOT updates while readers sum
/// them through the secondary index in REPEATABLE READ snapshots: every
/// sum is the same. Then the server is killed and the sum and the index
/// still agree after recovery.
#[test]
fn concurrent_hot_updates_and_index_readers_then_crash() {
    concurrent_hot_updates_and_index_readers_then_crash_in(true, "itest_hot_conc");
}

/// The same in a table without a primary key.
#[test]
fn concurrent_row_id_hot_updates_and_index_readers_then_crash() {
    concurrent_hot_updates_and_index_readers_then_crash_in(false, "itest_hot_conc_rowid");
}

fn concurrent_hot_updates_and_index_readers_then_crash_in(keyed: bool, db: &'static str) {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, db);
    setup(&mut c, keyed);
    let total = stat_i64(&mut c, "SELECT sum(v)::int8 FROM t");
    let stop = Arc::new(AtomicBool::new(false));
    let secs = knob("ORIOLEDB_HOT_SECONDS", 6);
    let mut threads = Vec::new();
    for u in 0..3u64 {
        let (env, stop) = (env.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut c = connect(&env, db);
            let mut x = u * 7919 + 1;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = (x >> 33) % ROWS as u64 + 1;
                let b = (x >> 13) % ROWS as u64 + 1;
                let sql = format!(
                    "BEGIN; UPDATE t SET v = v - 1 WHERE id = {a};
                     UPDATE t SET v = v + 1 WHERE id = {b}; COMMIT"
                );
                match c.batch_execute(&sql) {
                    Ok(()) => n += 1,
                    Err(e) if e.code().map(|s| s.code()) == Some("40P01") => {
                        let _ = c.batch_execute("ROLLBACK");
                    }
                    Err(e) => panic!("updater: {}", describe(&e)),
                }
            }
            n
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let (env, stop) = (env.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            let mut c = connect(&env, db);
            let mut sums = 0u64;
            let paths = [
                "SET enable_seqscan = off; SET enable_bitmapscan = off",
                "SET enable_seqscan = off; SET enable_indexscan = off",
            ];
            while !stop.load(Ordering::Relaxed) {
                c.batch_execute(paths[(sums as usize + r as usize) % 2]).unwrap();
                c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
                let a: i64 = c
                    .query_one("SELECT coalesce(sum(v), 0)::int8 FROM t WHERE w >= 0", &[])
                    .unwrap()
                    .get(0);
                let b: i64 = c
                    .query_one("SELECT coalesce(sum(v), 0)::int8 FROM t WHERE tags && ARRAY[0,1,2,3,4,5,6]", &[])
                    .unwrap()
                    .get(0);
                c.batch_execute("COMMIT").unwrap();
                assert_eq!((a, b), (total, total), "a snapshot's sums through the indexes");
                sums += 1;
            }
            sums
        }));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let updates: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let reads: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(updates > 50 && reads > 5, "{updates} transfers, {reads} reads");
    check_paths(&mut c, "after concurrent HOT updates");
    drop(c);
    crash_and_restart(&env);
    let mut c = connect(&env, db);
    assert_eq!(stat_i64(&mut c, "SELECT sum(v)::int8 FROM t"), total, "after crash");
    check_paths(&mut c, "after crash recovery");
}

/// A row updated again and again takes its chain's root row id back
/// (`hot::reusable_root`): every second version is stored under the root's
/// id, so the row id map neither grows nor churns — but never while a
/// snapshot can still see the version in that slot: an open REPEATABLE READ
/// transaction keeps reading its version through every access path, and a
/// concurrent updater waiting on the row (EvalPlanQual) adds to the newest.
#[test]
fn hot_chains_take_their_root_row_id_back() {
    // Alone: another test's transaction, in any database, can keep this
    // backend's view of what is dead to everyone from moving on
    // (PostgreSQL's GlobalVis state; heap's pruning waits the same way).
    let (env, _g) = require_server_exclusive!();
    take_root_row_id_back(&env, "itest_hot_reuse", true);
}

/// [`hot_chains_take_their_root_row_id_back`] in a table without a
/// primary key, whose chain members are keyed under their root's row id:
/// a version taking the id back goes under the root's own key. (Before,
/// such chains spent a new row id, and a map entry, on every update.)
#[test]
fn row_id_chains_take_their_root_row_id_back() {
    let (env, _g) = require_server_exclusive!();
    take_root_row_id_back(&env, "itest_hot_reuse_rowid", false);
}

fn take_root_row_id_back(env: &TestEnv, db: &str, keyed: bool) {
    let env = env.clone();
    let mut c = fresh_db(&env, db);
    setup(&mut c, keyed);
    if !keyed {
        // Past the small tables a row-id table scans in heap's row order,
        // where an updated row never goes back (`hot::reusable_root`).
        c.batch_execute(
            "INSERT INTO t SELECT i, 0, 99, ARRAY[0], repeat('y', 500) FROM generate_series(1001, 1800) i",
        )
        .unwrap();
    }
    // An autovacuum's snapshot would keep the slot's old version (fine,
    // but not what is counted here).
    c.batch_execute("ALTER TABLE t SET (autovacuum_enabled = off)").unwrap();
    let ctid = |c: &mut Client| query_text(c, "SELECT ctid::text FROM t WHERE id = 7");
    let root = ctid(&mut c);
    let mut at_root = 0;
    for _ in 0..40 {
        c.batch_execute("UPDATE t SET v = v + 1 WHERE id = 7").unwrap();
        at_root += (ctid(&mut c) == root) as i32;
    }
    assert!(at_root >= 19, "{at_root} of 40 updates took the root's row id back");
    c.batch_execute("VACUUM t").unwrap();
    let keys_after = |c: &mut Client| -> i64 {
        let s = query_text(c, "SELECT orioledb_check('t'::regclass)");
        s.split(", ").find_map(|p| p.strip_suffix(" keys")).unwrap().parse().unwrap()
    };
    let settled = keys_after(&mut c);
    for _ in 0..200 {
        c.batch_execute("UPDATE t SET v = v + 1 WHERE id = 7").unwrap();
    }
    c.batch_execute("VACUUM t").unwrap();
    assert!(keys_after(&mut c) <= settled + 2, "200 more updates of one row left keys behind");
    check_paths(&mut c, "after reuse");

    // An old snapshot pins the slot's version.
    let mut old = connect(&env, db);
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let seen = query_text(&mut old, "SELECT v::text FROM t WHERE id = 7");
    for _ in 0..20 {
        c.batch_execute("UPDATE t SET v = v + 1 WHERE id = 7").unwrap();
    }
    c.batch_execute("VACUUM t").unwrap();
    let paths = [
        "SET enable_indexscan = on; SET enable_bitmapscan = off; SET enable_seqscan = off",
        "SET enable_indexscan = off; SET enable_bitmapscan = on; SET enable_seqscan = off",
        "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_seqscan = on",
    ];
    for set in paths {
        old.batch_execute(set).unwrap();
        let v = query_text(&mut old, "SELECT v::text FROM t WHERE w = 7 AND id = 7");
        assert_eq!(v, seen, "the old snapshot's version, with {set}");
    }
    old.batch_execute("COMMIT").unwrap();

    // A waiting updater re-reads the newest version (EvalPlanQual).
    let before: i32 = c.query_one("SELECT v FROM t WHERE id = 7", &[]).unwrap().get(0);
    c.batch_execute("BEGIN; UPDATE t SET v = v + 1 WHERE id = 7").unwrap();
    let waiter = {
        let env = env.clone();
        let db = db.to_string();
        std::thread::spawn(move || {
            let mut w = connect(&env, &db);
            w.batch_execute("UPDATE t SET v = v + 10 WHERE w = 7 AND id = 7").unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    c.batch_execute("COMMIT").unwrap();
    waiter.join().unwrap();
    let after: i32 = c.query_one("SELECT v FROM t WHERE id = 7", &[]).unwrap().get(0);
    assert_eq!(after, before + 11);
    check_paths(&mut c, "after the waiting updater");
}

/// An UPDATE compares the new row with the version it replaces; the point
/// read that found that version earlier in the transaction must not stand
/// in for it once its statement is over: meanwhile the row's chain may have
/// taken that row id back with other values, and an index on a column
/// that then differs would miss the new version.
#[test]
fn update_compares_with_the_version_of_its_own_statement() {
    // Alone, as the test above.
    let (env, _g) = require_server_exclusive!();
    let mut b = fresh_db(&env, "itest_hot_lastread");
    b.batch_execute(
        "CREATE TABLE t2 (id int PRIMARY KEY, x int, pad text) USING orioledb;
         INSERT INTO t2 VALUES (1, 1, 'a'), (2, 1, 'b');
         ALTER TABLE t2 SET (autovacuum_enabled = off);",
    )
    .unwrap();
    let mut t = connect(&env, "itest_hot_lastread");
    // A point read through the primary key (the table is tiny).
    t.batch_execute("SET enable_seqscan = off; BEGIN").unwrap();
    // By the simple protocol: an extended-protocol portal would keep its
    // snapshot (and so the version) until the transaction ends.
    let x = t.simple_query("SELECT x FROM t2 WHERE id = 1").unwrap();
    assert!(matches!(&x[1], postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("1")));
    let root = query_text(&mut b, "SELECT ctid::text FROM t2 WHERE id = 1");
    // Two transactions: the second takes the root's row id back.
    for _ in 0..2 {
        b.batch_execute("UPDATE t2 SET x = 2 WHERE id = 1").unwrap();
    }
    assert_eq!(query_text(&mut b, "SELECT ctid::text FROM t2 WHERE id = 1"), root);
    b.batch_execute("CREATE INDEX t2_x ON t2 (x)").unwrap();
    // A TID scan finds the row (no primary scan to refresh anything).
    t.batch_execute(&format!("UPDATE t2 SET x = 1 WHERE ctid = '{root}'"))
        .unwrap();
    // It changed the indexed column: not HOT (compared with the version
    // of x = 2 it replaced, not the one the SELECT read).
    let hot = t
        .simple_query("SELECT n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 't2'")
        .unwrap();
    assert!(
        matches!(&hot[1], postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("0")),
        "the update was HOT"
    );
    t.batch_execute("COMMIT").unwrap();
    b.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let plan: Vec<String> = b
        .query("EXPLAIN (COSTS OFF) SELECT id FROM t2 WHERE x = 1", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("t2_x"), "{plan}");
    let ids: Vec<i32> = b
        .query("SELECT id FROM t2 WHERE x = 1 ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, vec![1, 2], "the index finds the updated row");
}

/// Walks in row-id order over a table without a primary key whose chain
/// members are keyed under their roots (`Table::ids`): a TID range scan
/// returns exactly the versions whose `ctid` is in range, in `ctid` order
/// both ways; a small table's sequential scan returns `ctid` order (as
/// heap); TABLESAMPLE, VACUUM and index-only scans see every row; and a
/// row updated many times (row ids spent, leaving a gap) still reads as
/// one row.
#[test]
fn row_id_chains_in_ctid_order() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_hot_rowid_order");
    c.batch_execute(
        "CREATE TABLE r (id int NOT NULL, v int NOT NULL, pad text) USING orioledb;
         INSERT INTO r SELECT i, 0, repeat('p', 20) FROM generate_series(1, 1000) i;
         CREATE INDEX r_id ON r (id);
         UPDATE r SET v = v + 1 WHERE id % 3 = 0;
         UPDATE r SET v = v + 1 WHERE id % 5 = 0;
         UPDATE r SET v = v + 1 WHERE id % 3 = 0;",
    )
    .unwrap();
    let tid = |s: &str| -> (u32, u32) {
        let (b, o) = s.trim_matches(|ch| ch == '(' || ch == ')').split_once(',').unwrap();
        (b.parse().unwrap(), o.parse().unwrap())
    };
    let ctids = |c: &mut Client, sql: &str| -> Vec<(u32, u32)> {
        c.query(sql, &[]).unwrap().iter().map(|r| tid(&r.get::<_, String>(0))).collect()
    };
    let all = ctids(&mut c, "SELECT ctid::text FROM r");
    assert_eq!(all.len(), 1000);
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "a small table's sequential scan is in ctid order");
    let last_block = sorted.last().unwrap().0;
    assert!(last_block >= 4, "the updates spread over blocks: {last_block}");
    for b in [0, 1, 3, last_block / 2, last_block] {
        let want: Vec<_> = sorted.iter().copied().filter(|t| t.0 >= b).collect();
        let got = ctids(&mut c, &format!("SELECT ctid::text FROM r WHERE ctid >= '({b},0)'"));
        assert_eq!(got, want, "ctid >= ({b},0)");
        let want: Vec<_> = sorted.iter().copied().filter(|t| t.0 == b).collect();
        let got = ctids(
            &mut c,
            &format!("SELECT ctid::text FROM r WHERE ctid >= '({b},0)' AND ctid < '({},0)'", b + 1),
        );
        assert_eq!(got, want, "block {b}");
    }
    c.batch_execute("BEGIN; DECLARE cur SCROLL CURSOR FOR SELECT ctid::text FROM r WHERE ctid >= '(2,0)'")
        .unwrap();
    let fwd = ctids(&mut c, "FETCH ALL FROM cur");
    let mut back = ctids(&mut c, "FETCH BACKWARD ALL FROM cur");
    back.reverse();
    c.batch_execute("COMMIT").unwrap();
    assert_eq!(fwd, back, "a TID range read both ways");
    assert_eq!(fwd.len(), sorted.iter().filter(|t| t.0 >= 2).count());
    let sampled: i64 = c.query_one("SELECT count(*) FROM r TABLESAMPLE SYSTEM (100)", &[]).unwrap().get(0);
    assert_eq!(sampled, 1000);
    c.batch_execute("VACUUM r").unwrap();
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let via_index: i64 = c.query_one("SELECT count(*) FROM r WHERE id > 0", &[]).unwrap().get(0);
    c.batch_execute("RESET ALL").unwrap();
    assert_eq!(via_index, 1000, "index-only scan after VACUUM");
    let sum: i64 = c.query_one("SELECT sum(v)::int8 FROM r", &[]).unwrap().get(0);
    assert_eq!(sum, 2 * 333 + 200);
    // One row updated again and again: its walks skip the row ids spent.
    c.batch_execute(
        "CREATE TABLE one (v int) USING orioledb;
         INSERT INTO one VALUES (0);",
    )
    .unwrap();
    // Alone in its query string: it commits after every update.
    c.batch_execute("DO $$ BEGIN FOR i IN 1..20000 LOOP UPDATE one SET v = v + 1; COMMIT; END LOOP; END $$")
        .unwrap();
    let v: i32 = c.query_one("SELECT v FROM one", &[]).unwrap().get(0);
    assert_eq!(v, 20000);
    let n: i64 = c.query_one("SELECT count(*) FROM one WHERE ctid >= '(0,0)'", &[]).unwrap().get(0);
    assert_eq!(n, 1);
}
