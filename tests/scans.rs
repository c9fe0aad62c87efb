//! Integration tests: the planner offers bitmap heap scans, TID range scans
//! and sample scans on orioledb tables, and each returns what the plain
//! scans of the same table return. (`tests/sql/scan_kinds.sql` compares the
//! placement-independent results with heap.)

#[macro_use]
mod common;

use common::*;


fn analyzed_plan(c: &mut Client, sql: &str) -> String {
    c.query(
        &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}"),
        &[],
    )
    .unwrap_or_else(|e| panic!("EXPLAIN ANALYZE {sql}: {}", describe(&e)))
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect::<Vec<_>>()
    .join("\n")
}

/// Rows of `sql` as text lines, in server order.
fn rows(c: &mut Client, sql: &str) -> Vec<String> {
    text_rows(c, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)))
        .get(0)
}

/// Plain scans only (sequential scans), for reference results.
const PLAIN: &str = "SET enable_seqscan = on; SET enable_indexscan = off; \
     SET enable_indexonlyscan = off; SET enable_bitmapscan = off; SET enable_tidscan = off";
/// Bitmap heap scans wherever an index can serve.
const BITMAP: &str = "SET enable_seqscan = off; SET enable_indexscan = off; \
     SET enable_indexonlyscan = off; SET enable_bitmapscan = on; SET enable_tidscan = on";

/// Two tables with the same rows (keyed by primary key, and by row id),
/// updated and partly deleted so that their indexes name dead versions.
fn load(c: &mut Client) {
    c.batch_execute(
        "CREATE TABLE k (id int PRIMARY KEY, a int, b int, c int, tags int[]) USING orioledb;
         INSERT INTO k SELECT (g * 7919) % 50021, g % 100, g % 37, g, ARRAY[g % 5, g % 7]
           FROM generate_series(1, 50000) g;
         CREATE TABLE r (id int, a int, b int, c int, tags int[]) USING orioledb;
         INSERT INTO r SELECT * FROM k;",
    )
    .unwrap();
    for t in ["k", "r"] {
        c.batch_execute(&format!(
            "CREATE INDEX {t}_a ON {t} (a);
             CREATE INDEX {t}_b ON {t} (b);
             CREATE INDEX {t}_tags ON {t} USING gin (tags);
             CREATE INDEX {t}_c ON {t} USING brin (c) WITH (pages_per_range = 4);
             UPDATE {t} SET a = a + 1000 WHERE c % 10 = 0;
             DELETE FROM {t} WHERE c % 17 = 0;
             ANALYZE {t};"
        ))
        .unwrap();
    }
}

#[test]
fn bitmap_scans_are_planned_and_agree_with_sequential_scans() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_scan_bitmap");
    load(&mut c);
    let queries = [
        ("SELECT id, a, b FROM {t} WHERE a = 42 ORDER BY id", "Bitmap Index Scan"),
        ("SELECT id, a FROM {t} WHERE a BETWEEN 10 AND 12 ORDER BY id", "Bitmap Index Scan"),
        ("SELECT id FROM {t} WHERE a = ANY ('{1,3,1099}') ORDER BY id", "Bitmap Index Scan"),
        ("SELECT id FROM {t} WHERE a = 5 OR b = 6 ORDER BY id", "BitmapOr"),
        ("SELECT id FROM {t} WHERE a = 5 AND b = 6 ORDER BY id", "Bitmap Index Scan"),
        ("SELECT id FROM {t} WHERE tags @> ARRAY[3, 4] ORDER BY id", "{t}_tags"),
        ("SELECT id, c FROM {t} WHERE c BETWEEN 20000 AND 20500 ORDER BY id", "{t}_c"),
        ("SELECT id FROM {t} WHERE a >= 1000 AND b < 4 ORDER BY id", "Bitmap Index Scan"),
    ];
    for t in ["k", "r"] {
        for (q, index) in queries {
            let q = q.replace("{t}", t);
            let index = index.replace("{t}", t);
            c.batch_execute(BITMAP).unwrap();
            let p = plan(&mut c, &q);
            assert!(
                p.contains("Bitmap Heap Scan") && p.contains(&index),
                "{q}: expected a bitmap heap scan using {index}, got\n{p}"
            );
            let got = rows(&mut c, &q);
            c.batch_execute(PLAIN).unwrap();
            assert!(plan(&mut c, &q).contains("Seq Scan"));
            let want = rows(&mut c, &q);
            assert!(!want.is_empty(), "{q}: no rows to compare");
            assert_eq!(got, want, "{q}: the bitmap heap scan disagrees with a seq scan");
        }
        // BRIN hands out lossy pages: whole blocks, rechecked.
        c.batch_execute(BITMAP).unwrap();
        let p = analyzed_plan(
            &mut c,
            &format!("SELECT count(*) FROM {t} WHERE c BETWEEN 20000 AND 20500"),
        );
        assert!(p.contains("lossy="), "{t}: expected lossy pages from BRIN, got\n{p}");
    }
}

#[test]
fn tid_range_scans_agree_with_a_filtered_sequential_scan() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_scan_tidrange");
    load(&mut c);
    let ranges = [
        "ctid >= '(1,0)' AND ctid < '(5,0)'",
        "ctid > '(3,17)' AND ctid <= '(40,2)'",
        "ctid >= '(100,291)' AND ctid < '(100,300)'",
        "ctid < '(2,0)'",
        "ctid >= '(150,5)'",
        "ctid > '(20,290)' AND ctid < '(21,2)'",
        "ctid >= '(9,0)' AND ctid < '(3,0)'",
        "ctid >= '(1000000,0)'",
    ];
    for t in ["k", "r"] {
        for range in ranges {
            let q = format!("SELECT ctid, id, a FROM {t} WHERE {range} ORDER BY ctid");
            c.batch_execute(BITMAP).unwrap();
            let p = plan(&mut c, &q);
            assert!(p.contains("Tid Range Scan"), "{q}: expected a TID range scan, got\n{p}");
            let got = rows(&mut c, &q);
            c.batch_execute(PLAIN).unwrap();
            let p = plan(&mut c, &q);
            assert!(p.contains("Seq Scan"), "{q}: expected a seq scan, got\n{p}");
            assert_eq!(got, rows(&mut c, &q), "{q}");
        }
        // The range scan itself returns TID order, both ways (a scroll
        // cursor reads it backward without a Material node).
        c.batch_execute(BITMAP).unwrap();
        let fwd = rows(&mut c, &format!("SELECT id FROM {t} WHERE ctid >= '(2,0)' AND ctid < '(6,0)'"));
        c.batch_execute(PLAIN).unwrap();
        let want = rows(
            &mut c,
            &format!("SELECT id FROM {t} WHERE ctid >= '(2,0)' AND ctid < '(6,0)' ORDER BY ctid"),
        );
        assert_eq!(fwd, want);
        c.batch_execute(BITMAP).unwrap();
        c.batch_execute(&format!(
            "BEGIN; DECLARE cur SCROLL CURSOR FOR SELECT id FROM {t} \
             WHERE ctid >= '(2,0)' AND ctid < '(6,0)'"
        ))
        .unwrap();
        let p = plan(
            &mut c,
            &format!(
                "DECLARE cur2 SCROLL CURSOR FOR SELECT id FROM {t} \
                 WHERE ctid >= '(2,0)' AND ctid < '(6,0)'"
            ),
        );
        assert!(
            p.contains("Tid Range Scan") && !p.contains("Materialize"),
            "expected a backward-capable TID range scan, got\n{p}"
        );
        let first3 = rows(&mut c, "FETCH 3 FROM cur");
        assert_eq!(first3, want[..3].to_vec());
        let back2 = rows(&mut c, "FETCH BACKWARD 2 FROM cur");
        assert_eq!(back2, vec![want[1].clone(), want[0].clone()]);
        let last = rows(&mut c, "FETCH LAST FROM cur");
        assert_eq!(last, vec![want[want.len() - 1].clone()]);
        let mut all_back = rows(&mut c, "FETCH BACKWARD ALL FROM cur");
        all_back.reverse();
        assert_eq!(all_back, want[..want.len() - 1].to_vec());
        let again = rows(&mut c, "FETCH ALL FROM cur");
        assert_eq!(again, want);
        c.batch_execute("COMMIT").unwrap();
    }
}

#[test]
fn table_samples_have_plausible_sizes_and_repeat() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_scan_sample");
    c.batch_execute(
        "CREATE TABLE s (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO s SELECT g, 'v' || g FROM generate_series(1, 100000) g;
         DELETE FROM s WHERE id % 4 = 0;
         UPDATE s SET v = v || 'u' WHERE id % 5 = 0;
         CREATE TABLE e (id int) USING orioledb;",
    )
    .unwrap();
    let total = count(&mut c, "SELECT count(*) FROM s");
    assert_eq!(total, 75000);
    let p = plan(&mut c, "SELECT * FROM s TABLESAMPLE BERNOULLI (10)");
    assert!(p.contains("Sample Scan"), "expected a sample scan, got\n{p}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM s TABLESAMPLE BERNOULLI (100)"), total);
    assert_eq!(count(&mut c, "SELECT count(*) FROM s TABLESAMPLE SYSTEM (100)"), total);
    assert_eq!(count(&mut c, "SELECT count(*) FROM s TABLESAMPLE SYSTEM (0)"), 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM s TABLESAMPLE BERNOULLI (0)"), 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM e TABLESAMPLE SYSTEM (50)"), 0);
    // 10% of 75,000 rows: BERNOULLI picks rows (sd ~82), SYSTEM picks TID
    // blocks (396 blocks of ~190 live rows on average; sd ~1,200 rows).
    let b = count(&mut c, "SELECT count(*) FROM s TABLESAMPLE BERNOULLI (10)");
    assert!((6500..=8500).contains(&b), "BERNOULLI (10) returned {b} of {total} rows");
    let sys = count(&mut c, "SELECT count(*) FROM s TABLESAMPLE SYSTEM (10)");
    assert!((2000..=13000).contains(&sys), "SYSTEM (10) returned {sys} of {total} rows");
    // Rows sampled are visible rows of the table.
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM (SELECT id, v FROM s TABLESAMPLE BERNOULLI (20)
               EXCEPT ALL SELECT id, v FROM s) x"
        ),
        0
    );
    for method in ["BERNOULLI (10)", "SYSTEM (10)"] {
        let q = format!("SELECT id FROM s TABLESAMPLE {method} REPEATABLE (42) ORDER BY id");
        let one = rows(&mut c, &q);
        let two = rows(&mut c, &q);
        assert!(!one.is_empty(), "{q}: empty sample");
        assert_eq!(one, two, "{q}: REPEATABLE gave different rows");
        let other = rows(
            &mut c,
            &format!("SELECT id FROM s TABLESAMPLE {method} REPEATABLE (43) ORDER BY id"),
        );
        assert_ne!(one, other, "{method}: different seeds gave the same sample");
    }
}

/// Parallel plans for every query shape.
const PARALLEL: &str = "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; \
     SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2; \
     SET parallel_leader_participation = on";
/// Serial plans.
const SERIAL: &str = "SET max_parallel_workers_per_gather = 0";

/// A table in row-id order is read by parallel sequential scans: workers
/// take chunks of row ids, together every visible version exactly once
/// (also with rows deleted and updated, and an open transaction's own
/// changes); parallel index builds index each
/// version once. A table in primary-key order stays serial.
#[test]
fn parallel_sequential_scans_split_the_row_ids() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_scan_parallel");
    load(&mut c);
    let queries = [
        "SELECT count(*), sum(id::int8), sum(a::int8), count(DISTINCT b) FROM r",
        "SELECT a, count(*) FROM r WHERE b < 10 GROUP BY a ORDER BY a",
        "SELECT id, a FROM r WHERE c % 1000 = 7 ORDER BY id",
        "SELECT s.g, count(*) FROM r JOIN generate_series(1, 20) s(g) ON r.b = s.g \
         GROUP BY s.g ORDER BY s.g",
    ];
    for q in queries {
        c.batch_execute(&format!("{PLAIN}; {PARALLEL}")).unwrap();
        let p = analyzed_plan(&mut c, q);
        assert!(p.contains("Parallel Seq Scan on r"), "{q}: expected a parallel scan:\n{p}");
        assert!(p.contains("Workers Launched: 2"), "{q}: expected 2 workers:\n{p}");
        let got = rows(&mut c, q);
        c.batch_execute(SERIAL).unwrap();
        assert!(!plan(&mut c, q).contains("Parallel"), "{q}");
        let want = rows(&mut c, q);
        assert_eq!(got, want, "{q}: parallel and serial scans disagree");
    }
    // The transaction's own uncommitted changes, seen by the workers.
    c.batch_execute(&format!(
        "BEGIN; DELETE FROM r WHERE c < 20000; UPDATE r SET a = -a WHERE c % 3 = 0; {PARALLEL}"
    ))
    .unwrap();
    let q = "SELECT count(*), sum(a::int8) FROM r";
    assert!(analyzed_plan(&mut c, q).contains("Parallel Seq Scan on r"));
    let got = rows(&mut c, q);
    c.batch_execute(SERIAL).unwrap();
    assert_eq!(got, rows(&mut c, q), "own changes under a parallel scan");
    c.batch_execute("ROLLBACK").unwrap();
    // Parallel index build: one entry per visible version.
    c.batch_execute(
        "SET max_parallel_maintenance_workers = 2; SET min_parallel_table_scan_size = 0;
         SET maintenance_work_mem = '64MB';
         CREATE INDEX r_c_par ON r (c); RESET ALL;",
    )
    .unwrap();
    let live = count(&mut c, "SELECT count(*) FROM r");
    let entries: f32 = c
        .query_one("SELECT reltuples FROM pg_class WHERE relname = 'r_c_par'", &[])
        .unwrap()
        .get(0);
    assert_eq!(entries as i64, live, "parallel index build entries");
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let q = "SELECT count(*), sum(c::int8) FROM r WHERE c > 100";
    assert!(plan(&mut c, q).contains("r_c_par"), "{}", plan(&mut c, q));
    let got = rows(&mut c, q);
    c.batch_execute("RESET ALL").unwrap();
    c.batch_execute(PLAIN).unwrap();
    assert_eq!(got, rows(&mut c, q), "index built in parallel disagrees");
    // With every build planned parallel: a new table's toast index is
    // built serially (toast relations hold chunks), and CREATE TABLE AS
    // over a parallel query writes from the leader, as on heap.
    c.batch_execute(&format!(
        "RESET ALL; {PARALLEL}; SET max_parallel_maintenance_workers = 2;
         CREATE TABLE r_sum (b int, n int8, big text) USING orioledb;
         DROP TABLE r_sum;
         CREATE TABLE r_ctas USING orioledb AS SELECT b, count(*) AS n FROM r GROUP BY b;"
    ))
    .unwrap_or_else(|e| panic!("parallel DDL: {}", describe(&e)));
    let q = "SELECT b, count(*) FROM r GROUP BY b ORDER BY b";
    c.batch_execute(SERIAL).unwrap();
    assert_eq!(rows(&mut c, "SELECT b, n FROM r_ctas ORDER BY b"), rows(&mut c, q));
    // Keyed tables stay serial.
    c.batch_execute(&format!("RESET ALL; {PARALLEL}")).unwrap();
    let p = plan(&mut c, "SELECT count(*) FROM k");
    assert!(!p.contains("Parallel"), "keyed table planned parallel:\n{p}");
}

/// Index-only scans: VACUUM marks the TID blocks whose versions everyone
/// sees all-visible (no table fetches afterwards), every change clears its
/// block, and under a writer and a VACUUM loop running at the same time,
/// an index-only scan in a REPEATABLE READ snapshot returns exactly what a
/// sequential scan of the same snapshot returns (a bit outliving a change
/// would show the changed row's old index entry).
#[test]
fn index_only_scans_follow_the_visibility_map() {
    let (env, _g) = require_server!();
    let db = "itest_scan_ios";
    let mut c = fresh_db(&env, db);
    load(&mut c);
    for t in ["k", "r"] {
        c.batch_execute(&format!("CREATE INDEX {t}_b_c ON {t} (b, c)")).unwrap();
        c.batch_execute(&format!("VACUUM ANALYZE {t}")).unwrap();
    }
    let ios = "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = off; \
               SET enable_indexonlyscan = on";
    for t in ["k", "r"] {
        c.batch_execute(ios).unwrap();
        let q = format!("SELECT b, count(*), sum(c::int8) FROM {t} WHERE b BETWEEN 3 AND 9 GROUP BY b ORDER BY b");
        let p = analyzed_plan(&mut c, &q);
        assert!(p.contains("Index Only Scan") && p.contains("Heap Fetches: 0"), "{t}:\n{p}");
        let got = rows(&mut c, &q);
        c.batch_execute(&format!("RESET ALL; {PLAIN}")).unwrap();
        assert_eq!(got, rows(&mut c, &q), "{t}: index-only scan after VACUUM");
        c.batch_execute("RESET ALL").unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    // A writer: updates of the indexed columns, deletes, inserts, rollbacks.
    {
        let stop = stop.clone();
        let env = env.clone();
        threads.push(std::thread::spawn(move || {
            let mut w = connect(&env, db);
            let mut rng = Rng(7);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = if rng.below(2) == 0 { "k" } else { "r" };
                let c0 = rng.range(1, 50_000);
                let sql = match rng.below(4) {
                    0 => format!("UPDATE {t} SET b = (b + 1) % 37 WHERE c BETWEEN {c0} AND {c0} + 40"),
                    1 => format!("DELETE FROM {t} WHERE c BETWEEN {c0} AND {c0} + 10"),
                    2 => format!(
                        "INSERT INTO {t} SELECT 60000 + g * 50021 + {c0}, 1, g % 37, 60000 + {c0} + g FROM generate_series(1, 5) g \
                         ON CONFLICT DO NOTHING"
                    ),
                    _ => format!("BEGIN; UPDATE {t} SET c = -c WHERE c BETWEEN {c0} AND {c0} + 40; ROLLBACK"),
                };
                w.batch_execute(&sql).unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
            }
        }));
    }
    // VACUUM in a loop: sets bits while the writer clears them.
    {
        let stop = stop.clone();
        let env = env.clone();
        threads.push(std::thread::spawn(move || {
            let mut v = connect(&env, db);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                v.batch_execute("VACUUM k").unwrap();
                v.batch_execute("VACUUM r").unwrap();
            }
        }));
    }
    let mut reader = connect(&env, db);
    let mut checked = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(12);
    while std::time::Instant::now() < deadline {
        for t in ["k", "r"] {
            let q = format!("SELECT b, count(*), sum(c::int8) FROM {t} WHERE b BETWEEN 3 AND 20 GROUP BY b ORDER BY b");
            reader
                .batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ; {ios}"))
                .unwrap();
            let got = rows(&mut reader, &q);
            reader.batch_execute(PLAIN).unwrap();
            let want = rows(&mut reader, &q);
            reader.batch_execute("COMMIT; RESET ALL").unwrap();
            assert_eq!(got, want, "{t}: index-only scan disagrees with a seq scan of the same snapshot");
            checked += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert!(checked > 10, "only {checked} comparisons");
}

/// A backend that changed a block remembers it as clear (no map read on
/// its next change there); a VACUUM in another session that sets the
/// block's bit afterwards must make it read the map again, or its next
/// delete would leave the bit set and index-only scans would count the
/// deleted row.
#[test]
fn a_block_seen_clear_is_read_again_after_another_sessions_vacuum() {
    let (env, _g) = require_server!();
    let db = "itest_scan_vm_cache";
    let mut w = fresh_db(&env, db);
    for t in ["k", "r"] {
        let key = if t == "k" { "PRIMARY KEY" } else { "" };
        w.batch_execute(&format!(
            "CREATE TABLE {t} (id int {key}, v int) USING orioledb WITH (autovacuum_enabled = off);
             INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 100) g;
             CREATE INDEX {t}_v ON {t} (v);"
        ))
        .unwrap();
    }
    let mut v = connect(&env, db);
    let ios = "SET enable_seqscan = off; SET enable_bitmapscan = off";
    for t in ["k", "r"] {
        // The writer sees block 0 clear (its own change: an insert, since
        // an update's chain keeps the block off the map), then the other
        // session's VACUUM marks it all-visible once that change is old.
        w.batch_execute(&format!("INSERT INTO {t} VALUES (101, 0)")).unwrap();
        v.batch_execute(&format!("VACUUM {t}")).unwrap();
        v.batch_execute(ios).unwrap();
        let q = format!("SELECT count(*) FROM {t} WHERE v >= 0");
        let p = analyzed_plan(&mut v, &q);
        assert!(p.contains("Index Only Scan") && p.contains("Heap Fetches: 0"), "{t}: not all-visible:\n{p}");
        assert_eq!(count(&mut v, &q), 101);
        w.batch_execute(&format!("DELETE FROM {t} WHERE id = 2")).unwrap();
        assert_eq!(count(&mut v, &q), 100, "{t}: an index-only scan counts a deleted row");
        v.batch_execute("RESET ALL").unwrap();
    }
}

/// A table that grew while a snapshot held its dead versions is pruned by
/// the next sequential scan that reads it in key order, as heap's scans
/// prune the pages they read: without it, every later scan read all of
/// it until VACUUM or the background sweep came.
#[test]
fn a_sequential_scan_prunes_what_a_held_snapshot_left() {
    // Alone: what may be pruned is bounded by the oldest transaction of
    // any database (snapshots are cluster-wide), and the loads of this
    // binary's other tests run long ones.
    let (env, _g) = require_server_exclusive!();
    let db = "itest_scan_prune";
    let mut w = fresh_db(&env, db);
    for t in ["k", "r"] {
        let key = if t == "k" { "PRIMARY KEY" } else { "" };
        w.batch_execute(&format!(
            "CREATE TABLE {t} (id int {key}, v int, pad text) USING orioledb WITH (autovacuum_enabled = off);
             INSERT INTO {t} SELECT g, 0, repeat('x', 50) FROM generate_series(1, 100) g;"
        ))
        .unwrap();
    }
    let pages = |c: &mut Client, t: &str| -> i64 {
        c.query_one(
            &format!(
                "SELECT pages FROM orioledb_tree_stats() WHERE relnode = \
                 (SELECT relfilenode FROM pg_class WHERE relname = '{t}')"
            ),
            &[],
        )
        .unwrap()
        .get(0)
    };
    let mut holder = connect(&env, db);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM k").unwrap();
    for _ in 0..100 {
        w.batch_execute("UPDATE k SET v = v + 1; UPDATE r SET v = v + 1").unwrap();
    }
    holder.batch_execute("COMMIT").unwrap();
    for t in ["k", "r"] {
        let before = pages(&mut w, t);
        assert!(before > 64, "{t}: only {before} pages with the snapshot held");
        assert_eq!(count(&mut w, &format!("SELECT count(*) FROM {t} WHERE v = 100")), 100);
        let after = pages(&mut w, t);
        assert!(after * 4 < before, "{t}: {before} pages before the scan, {after} after");
        assert_eq!(count(&mut w, &format!("SELECT count(*) FROM {t} WHERE v = 100")), 100);
    }
}

/// What a scan prunes may own toast values: they wait in the scanning
/// backend's queue (not deleted in the middle of the scan) and go when its
/// transaction ends, and the rows still read whole.
#[test]
fn toast_values_of_versions_a_scan_pruned_go_when_its_transaction_ends() {
    // Alone, as `a_sequential_scan_prunes_what_a_held_snapshot_left`.
    let (env, _g) = require_server_exclusive!();
    let db = "itest_scan_prune_toast";
    let (mut w, table_before, chunks_before) = bloat_with_toast(&env, db);
    {
        let mut reader = connect(&env, db);
        assert_eq!(count(&mut reader, TOAST_CHECK), 200);
        let table_after = prune_pages(&mut reader);
        assert!(table_after * 4 < table_before, "{table_before} table pages before the scan, {table_after} after");
        assert_eq!(count(&mut reader, TOAST_CHECK), 200, "rows read again in the scanning backend");
    }
    assert_eq!(count(&mut w, TOAST_CHECK), 200, "rows read in another backend");
    wait_for_chunks(&mut w, chunks_before);
    // The leaves the deletes emptied merged away (they stayed: 2,068 pages).
    let toast_pages: i64 = w
        .query_one(
            "SELECT pages FROM orioledb_tree_stats() WHERE relnode = (SELECT relfilenode FROM pg_class \
             WHERE oid = (SELECT reltoastrelid FROM pg_class WHERE relname = 't'))",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(toast_pages < 200, "{toast_pages} toast pages for 400 chunks of about 1,600 bytes");
}

/// A scan that pruned toast values commits without waiting for their
/// toast relation's lock (REINDEX of the toast table holds it): the values
/// stay queued. A later change of another table that waits for that lock
/// and is cancelled (lock_timeout) puts them back in the queue, and they
/// go once the lock is free and the backend ends.
#[test]
fn a_pruning_scan_commits_without_waiting_for_a_busy_toast_relation() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_scan_prune_toast_busy";
    let (mut w, _, chunks_before) = bloat_with_toast(&env, db);
    w.batch_execute("CREATE TABLE u (id int) USING orioledb").unwrap();
    let toast = query_text(&mut w, "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 't'");
    let mut blocker = connect(&env, db);
    blocker.batch_execute(&format!("BEGIN; REINDEX TABLE {toast}")).unwrap();
    {
        let mut reader = connect(&env, db);
        reader.batch_execute("SET lock_timeout = '2s'").unwrap();
        let started = std::time::Instant::now();
        let seen = reader.query_one(TOAST_CHECK, &[]).map(|r| r.get::<_, i64>(0));
        assert_eq!(seen.map_err(|e| describe(&e)), Ok(200), "the pruning scan's commit");
        assert!(started.elapsed() < std::time::Duration::from_millis(1500), "the scan's commit waited");
        // Nor does a change of another table (it used to wait, and fail
        // with 55P03 under lock_timeout): the values stay queued.
        reader.batch_execute("SET lock_timeout = '200ms'").unwrap();
        let started = std::time::Instant::now();
        reader.batch_execute("INSERT INTO u VALUES (1)").map_err(|e| describe(&e)).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_millis(1500), "the change waited");
        blocker.batch_execute("COMMIT").unwrap();
        assert_eq!(count(&mut reader, TOAST_CHECK), 200);
    }
    wait_for_chunks(&mut w, chunks_before);
}

const TOAST_CHECK: &str = "SELECT count(*) FROM t WHERE v = 20 AND length(big) = 3200 AND left(big, 32) = md5('19')";

/// Database `db` with table `t`: 200 rows whose `big` is toasted in two
/// chunks, updated 20 times (a new value each time) while a snapshot was
/// held, so that a scan finds 20 dead versions of each row to prune.
/// Returns a connection, the table's pages and the toast tree's chunks.
fn bloat_with_toast(env: &TestEnv, db: &str) -> (Client, i64, i64) {
    let mut w = fresh_db(env, db);
    w.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v int, pad text, big text) USING orioledb
             WITH (autovacuum_enabled = off);
         INSERT INTO t SELECT g, 0, repeat('p', 200),
             (SELECT string_agg(md5(g::text || '-' || i), '') FROM generate_series(1, 100) i)
         FROM generate_series(1, 200) g;",
    )
    .unwrap();
    let mut holder = connect(env, db);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t").unwrap();
    for _ in 0..20 {
        // A new value each time (the old versions own theirs).
        w.batch_execute("UPDATE t SET v = v + 1, big = md5(v::text) || substr(big, 33)").unwrap();
    }
    holder.batch_execute("COMMIT").unwrap();
    let (table_before, chunks_before) = (prune_pages(&mut w), chunks(&mut w));
    assert_eq!(chunks_before, 200 * 21 * 2, "two chunks for each of 21 values of 200 rows");
    assert!(table_before > 64, "only {table_before} table pages with the snapshot held");
    (w, table_before, chunks_before)
}

/// Pages of table `t`'s tree.
fn prune_pages(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT pages FROM orioledb_tree_stats() WHERE relnode = \
         (SELECT relfilenode FROM pg_class WHERE relname = 't')",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Chunks in table `t`'s toast tree (deleting them does not merge its
/// leaves away at once, so its pages say less).
fn chunks(c: &mut Client) -> i64 {
    let s = query_text(c, "SELECT orioledb_check(reltoastrelid) FROM pg_class WHERE relname = 't'");
    s.split(", ").find_map(|p| p.strip_suffix(" keys")).and_then(|n| n.parse().ok()).unwrap_or(-1)
}

/// Waits (10 s at most) until only the live values' chunks are left, and
/// checks the rows.
fn wait_for_chunks(w: &mut Client, chunks_before: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let chunks_after = chunks(w);
        if chunks_after == 200 * 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "toast chunks {chunks_before} before the scan, {chunks_after} after its transaction and backend ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(count(w, TOAST_CHECK), 200);
}

/// Connects with the server's notices (VACUUM VERBOSE's INFO lines)
/// collected.
fn connect_noting(env: &TestEnv, db: &str) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let notes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let n = notes.clone();
    let mut cfg = config_for(&env.host, env.port, db);
    cfg.notice_callback(move |d| n.lock().unwrap().push(d.message().to_string()));
    (cfg.connect(postgres::NoTls).unwrap(), notes)
}

/// `(skipped, blocks)` from the last VACUUM VERBOSE line in `notes`.
fn skipped_blocks(notes: &std::sync::Mutex<Vec<String>>) -> (u64, u64) {
    let notes = notes.lock().unwrap();
    let line = notes
        .iter()
        .rev()
        .find(|l| l.contains("blocks skipped"))
        .unwrap_or_else(|| panic!("no VACUUM VERBOSE line in {notes:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "blocks").unwrap();
    (words[at - 3].parse().unwrap(), words[at - 1].parse().unwrap())
}

/// COPY FREEZE marks the blocks it fills all-visible, so the VACUUM after
/// the load (pgbench's) skips them all; a block changed afterwards is read
/// again, its dead rows pruned, and index-only scans never return them;
/// DISABLE_PAGE_SKIPPING reads everything.
#[test]
fn vacuum_skips_the_blocks_copy_freeze_filled() {
    let (env, _g) = require_server!();
    let db = "itest_scan_vacuum_skip";
    fresh_db(&env, db);
    let (mut c, notes) = connect_noting(&env, db);
    c.batch_execute("CREATE TABLE f (id int, b int, pad text) USING orioledb; BEGIN; TRUNCATE f")
        .unwrap();
    let data: String = (1..=40_000).map(|i| format!("{i}\t7\t{}\n", "pad".repeat(13))).collect();
    let mut w = c.copy_in("COPY f FROM STDIN WITH (FREEZE)").unwrap();
    std::io::Write::write_all(&mut w, data.as_bytes()).unwrap();
    w.finish().unwrap();
    c.batch_execute("COMMIT; CREATE INDEX f_id_b ON f (id, b)").unwrap();
    c.batch_execute("VACUUM (VERBOSE) f").unwrap();
    let (skipped, blocks) = skipped_blocks(&notes);
    assert!(blocks > 200 && skipped == blocks, "{skipped} of {blocks} blocks skipped after COPY FREEZE");
    let reltuples = query_text(&mut c, "SELECT reltuples::int8::text FROM pg_class WHERE relname = 'f'");
    let n: i64 = reltuples.parse().unwrap();
    assert!((36_000..=44_000).contains(&n), "reltuples {n} after a skipping VACUUM");
    // Changes clear their blocks' bits: the next VACUUM reads those
    // blocks (and skips the rest), and the deleted rows are gone for
    // index-only scans once it set the bits again.
    c.batch_execute("DELETE FROM f WHERE id BETWEEN 20000 AND 20500; UPDATE f SET b = 8 WHERE id = 30000")
        .unwrap();
    c.batch_execute("VACUUM (VERBOSE) f").unwrap();
    let (skipped, blocks) = skipped_blocks(&notes);
    assert!(skipped < blocks && skipped + 40 > blocks, "{skipped} of {blocks} blocks skipped after a delete");
    let ios = "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = off";
    c.batch_execute(ios).unwrap();
    let q = "SELECT count(*), sum(b) FROM f WHERE id BETWEEN 1 AND 40000";
    let p = analyzed_plan(&mut c, q);
    assert!(p.contains("Index Only Scan") && p.contains("Heap Fetches: 0"), "{p}");
    assert_eq!(rows(&mut c, q), vec!["39499|276494".to_string()]);
    c.batch_execute(&format!("RESET ALL; {PLAIN}")).unwrap();
    assert_eq!(rows(&mut c, q), vec!["39499|276494".to_string()]);
    c.batch_execute("RESET ALL").unwrap();
    c.batch_execute("VACUUM (VERBOSE, DISABLE_PAGE_SKIPPING) f").unwrap();
    assert_eq!(skipped_blocks(&notes).0, 0, "DISABLE_PAGE_SKIPPING");
    c.batch_execute("VACUUM (VERBOSE, FREEZE) f").unwrap();
    assert_eq!(skipped_blocks(&notes).0, 0, "an aggressive VACUUM");
}

/// VACUUM and ANALYZE of orioledb tables obey the cost-based delay as on
/// heap: engine pages never pass through PostgreSQL's buffer manager, which
/// is what charges the balance `vacuum_delay_point` sleeps on, so before
/// they ran at full speed whatever `vacuum_cost_delay` (or autovacuum's
/// 2 ms) said.
#[test]
fn vacuum_and_analyze_obey_the_cost_based_delay() {
    let (env, _g) = require_server!();
    let db = "itest_scan_vacuum_cost";
    fresh_db(&env, db);
    let mut c = connect(&env, db);
    c.batch_execute(
        "CREATE TABLE v (id int PRIMARY KEY, b int, pad text) USING orioledb;
         INSERT INTO v SELECT g, g, repeat('x', 100) FROM generate_series(1, 40000) g;
         CREATE TABLE r (id int, b int, pad text) USING orioledb;
         INSERT INTO r SELECT g, g, repeat('x', 100) FROM generate_series(1, 40000) g;
         UPDATE v SET b = b + 1 WHERE id % 4 = 0; UPDATE r SET b = b + 1 WHERE id % 4 = 0;
         ALTER TABLE v SET (autovacuum_enabled = off); ALTER TABLE r SET (autovacuum_enabled = off)",
    )
    .unwrap();
    let leaves: i64 = query_text(&mut c, "SELECT pages::text FROM orioledb_trees WHERE reloid = 'v'::regclass AND tree = 'primary'")
        .parse()
        .unwrap();
    assert!(leaves > 500, "{leaves} pages");
    // `sql` without a delay, then with vacuum_cost_delay 1ms and limit 1
    // (every leaf costs at least one; each pause sleeps one to four ms).
    let slowed_down = |c: &mut Client, sql: &str, at_least_ms: u128| {
        let timed = |c: &mut Client| {
            let t = std::time::Instant::now();
            c.batch_execute(sql).unwrap();
            t.elapsed()
        };
        c.batch_execute("SET vacuum_cost_delay = 0").unwrap();
        let free = timed(c);
        c.batch_execute("SET vacuum_cost_delay = '1ms'; SET vacuum_cost_limit = 1").unwrap();
        let slowed = timed(c);
        assert!(
            slowed.as_millis() >= at_least_ms && slowed > free * 2,
            "{sql}: {free:?} without delay, {slowed:?} with vacuum_cost_delay 1ms, limit 1"
        );
    };
    for t in ["v", "r"] {
        // Not skipping what the first VACUUM marked all-visible (`r`).
        slowed_down(&mut c, &format!("VACUUM (DISABLE_PAGE_SKIPPING) {t}"), 500);
        slowed_down(&mut c, &format!("ANALYZE {t}"), 400);
        c.batch_execute("RESET vacuum_cost_delay; RESET vacuum_cost_limit").unwrap();
    }
}

/// A keyed table's HOT-like chain whose first version VACUUM pruned keeps
/// that version's row id (the chain's redirect) in its block. Once the
/// chain's member is deleted but still seen by an open snapshot, the
/// index entry naming the redirect stays, so its block must not become
/// all-visible: an index-only scan would return the deleted row.
#[test]
fn a_chain_redirect_keeps_its_block_off_the_visibility_map() {
    let (env, _g) = require_server!();
    let db = "itest_scan_redirect";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE TABLE kt (id int PRIMARY KEY, v int, pad text) USING orioledb \
           WITH (autovacuum_enabled = off);
         CREATE INDEX kt_v ON kt (v);
         INSERT INTO kt SELECT g, g, repeat('x', 30) FROM generate_series(1, 2000) g;",
    )
    .unwrap();
    c.batch_execute("VACUUM kt").unwrap();
    let block = |c: &mut Client| count(c, "SELECT (ctid::text::point)[0]::int8 FROM kt WHERE id = 1");
    let root_block = block(&mut c);
    // No indexed column changes: a HOT-like update, whose new version
    // finds no room in the full block of the first.
    c.batch_execute("UPDATE kt SET pad = 'y' WHERE id = 1").unwrap();
    assert_ne!(block(&mut c), root_block, "the member was placed beside its root");
    // The first version is dead to everyone: VACUUM prunes it, its row id
    // stays as the chain's redirect.
    c.batch_execute("VACUUM kt").unwrap();
    let mut old = connect(&env, db);
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM kt")
        .unwrap();
    c.batch_execute("DELETE FROM kt WHERE id = 1").unwrap();
    c.batch_execute("VACUUM kt").unwrap();
    // (enable_indexscan = off would price index-only scans out as well.)
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .unwrap();
    let q = "SELECT v FROM kt WHERE v = 1";
    let p = analyzed_plan(&mut c, q);
    assert!(p.contains("Index Only Scan"), "{p}");
    assert!(rows(&mut c, q).is_empty(), "the deleted row came back from the index:\n{p}");
    assert_eq!(count(&mut old, "SELECT count(*) FROM kt WHERE v = 1"), 1);
    old.batch_execute("COMMIT").unwrap();
}

/// Sequential scans count in the statistics views as heap's do (scans,
/// rows read, blocks of the row-id space), and an analysed empty table is
/// planned as empty.
#[test]
fn scans_are_counted_and_empty_tables_estimated_empty() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_scan_stats");
    c.batch_execute(
        "CREATE TABLE s (id int, v text) USING orioledb;
         INSERT INTO s SELECT g, 'v' || g FROM generate_series(1, 3000) g;
         CREATE TABLE e (id int, v text) USING orioledb;
         ANALYZE e;
         SELECT pg_stat_force_next_flush();",
    )
    .unwrap();
    let before = count(&mut c, "SELECT coalesce(seq_scan, 0) FROM pg_stat_user_tables WHERE relname = 's'");
    c.batch_execute(
        "SET enable_indexscan = off; SET max_parallel_workers_per_gather = 0;
         SELECT count(*) FROM s; SELECT count(*) FROM s WHERE id < 0;",
    )
    .unwrap();
    c.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    let scans = count(&mut c, "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 's'");
    assert_eq!(scans, before + 2, "two sequential scans counted");
    let read = count(&mut c, "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 's'");
    assert!(read >= 3000, "rows returned by the scans counted: {read}");
    let blocks = count(
        &mut c,
        "SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables WHERE relname = 's'",
    );
    // 3000 row ids are 11 TID blocks; two scans read each.
    assert!(blocks >= 22, "blocks counted: {blocks}");
    // The primary scan counts as a scan of the primary key's index.
    c.batch_execute(
        "CREATE TABLE pk (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO pk SELECT g, 'v' FROM generate_series(1, 3000) g;
         ANALYZE pk;",
    )
    .unwrap();
    c.batch_execute("RESET enable_indexscan").unwrap();
    let p = plan(&mut c, "SELECT * FROM pk WHERE id = 5");
    assert!(p.contains("Primary Key Cond"), "{p}");
    c.batch_execute(
        "SET enable_bitmapscan = off; SELECT * FROM pk WHERE id = ANY ('{5,6}'); \
         SELECT * FROM pk WHERE id = 7; RESET enable_bitmapscan; SELECT pg_stat_force_next_flush()",
    )
    .unwrap();
    let ix = rows(
        &mut c,
        "SELECT idx_scan || ' ' || idx_tup_read || ' ' || idx_tup_fetch FROM pg_stat_user_indexes WHERE indexrelname = 'pk_pkey'",
    );
    assert_eq!(ix, vec!["2 3 3".to_string()], "primary scans counted on the key's index");
    let costed = |c: &mut Client| rows(c, "EXPLAIN SELECT * FROM e").join("\n");
    let p = costed(&mut c);
    assert!(p.contains("rows=1 "), "an analysed empty table is estimated empty: {p}");
    c.batch_execute("INSERT INTO e SELECT g, 'x' FROM generate_series(1, 500) g").unwrap();
    let p = costed(&mut c);
    assert!(!p.contains("rows=1 "), "rows inserted since ANALYZE count: {p}");
}
