//! Integration tests: VACUUM removes index entries of dead row versions;
//! CREATE INDEX CONCURRENTLY and REINDEX CONCURRENTLY build indexes that
//! agree with a full scan.
//!
//! Dead versions leave an orioledb table without VACUUM, but their index
//! entries stay until something removes them. An index on a column that
//! every UPDATE changes gets no help from bottom-up deletion (its key
//! changed) nor from index scans marking entries dead (nobody reads it), so
//! without VACUUM it grows by one entry per update.
//!
//! Concurrent builds run on a table in row-id order (no primary key) and on
//! one in primary-key order, since the two layouts are read differently.

#[macro_use]
mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn size(c: &mut Client, rel: &str) -> i64 {
    c.query_one("SELECT pg_relation_size($1::text::regclass)", &[&rel])
        .unwrap()
        .get(0)
}

/// A connection whose NOTICE/INFO messages are collected in the returned list.
fn connect_noting(env: &TestEnv, db: &str) -> (Client, Arc<Mutex<Vec<String>>>) {
    let notes = Arc::new(Mutex::new(Vec::new()));
    let sink = notes.clone();
    let c = config_for(&env.host, env.port, db)
        .notice_callback(move |n| sink.lock().unwrap().push(n.message().to_string()))
        .connect(NoTls)
        .unwrap_or_else(|e| panic!("connect to {db}: {e}"));
    (c, notes)
}

/// The number in "removed N entries" of the VACUUM VERBOSE line of `index`.
fn removed(notes: &[String], index: &str) -> Option<f64> {
    let needle = format!("index \"{index}\"");
    let line = notes.iter().find(|n| n.contains(&needle))?;
    let rest = &line[line.find("removed ")? + "removed ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// ~200,000 single-row updates, each changing an indexed column to a
/// scattered value, with VACUUM every 20,000: both indexes stay within 2x
/// of their size when freshly built (without VACUUM cleaning it, the index
/// on the changing column gets one more entry per row and grows well past
/// 2x), and VACUUM VERBOSE says how many entries it removed.
#[test]
fn vacuum_keeps_an_index_on_a_changing_column_small() {
    // Alone on the server: another test's long transaction would rightly
    // keep the entries of every version it may still see.
    let (env, _g) = require_server_exclusive!();
    drop(fresh_db(&env, "itest_index_vacuum"));
    let (mut c, notes) = connect_noting(&env, "itest_index_vacuum");
    let rows = knob("ORIOLEDB_INDEX_ROWS", 200_000);
    let updates = knob("ORIOLEDB_INDEX_UPDATES", 200_000);
    let every = knob("ORIOLEDB_INDEX_VACUUM_EVERY", 20_000).max(1);
    c.batch_execute(&format!(
        "CREATE TABLE t (id int PRIMARY KEY, v int, pad text) USING orioledb
           WITH (autovacuum_enabled = off);
         INSERT INTO t SELECT g, g, repeat('p', 20) FROM generate_series(1, {rows}) g;
         CREATE INDEX t_v ON t (v);"
    ))
    .unwrap();
    let fresh_v = size(&mut c, "t_v");
    let fresh_pk = size(&mut c, "t_pkey");
    // Separate statements: CALL must not run inside an implicit transaction
    // block, or the procedure could not COMMIT.
    c.batch_execute("SET synchronous_commit = off").unwrap();
    c.batch_execute(&format!(
        "CREATE PROCEDURE churn(first int8, n int) LANGUAGE plpgsql AS $$
         BEGIN
           FOR i IN first .. first + n - 1 LOOP
             UPDATE t SET v = ((i * 2654435761) % {rows})::int + 1
              WHERE id = (i * 7919) % {rows} + 1;
             COMMIT;
           END LOOP;
         END $$"
    ))
    .unwrap();
    let mut done = 0;
    let mut last_removed = 0.0;
    while done < updates {
        let n = every.min(updates - done);
        c.batch_execute(&format!("CALL churn({done}, {n})")).unwrap();
        done += n;
        notes.lock().unwrap().clear();
        c.batch_execute("VACUUM (VERBOSE) t").unwrap();
        let notes = notes.lock().unwrap();
        last_removed = removed(&notes, "t_v").unwrap_or_else(|| {
            panic!("VACUUM VERBOSE did not report on index t_v: {notes:?}")
        });
    }
    assert!(
        last_removed >= (every.min(updates) / 2) as f64,
        "the last VACUUM removed only {last_removed} entries from t_v"
    );
    let live: i64 = c.query_one("SELECT count(*) FROM t", &[]).unwrap().get(0);
    assert_eq!(live, rows as i64);
    let after_v = size(&mut c, "t_v");
    let after_pk = size(&mut c, "t_pkey");
    eprintln!(
        "t_v: {fresh_v} bytes fresh, {after_v} after {updates} updates; \
         t_pkey: {fresh_pk} fresh, {after_pk} after"
    );
    assert!(after_v <= 2 * fresh_v, "t_v grew from {fresh_v} to {after_v} bytes (limit 2x)");
    assert!(after_pk <= 2 * fresh_pk, "t_pkey grew from {fresh_pk} to {after_pk} bytes (limit 2x)");
    // The index still finds exactly the live rows.
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let through_index: i64 = c
        .query_one("SELECT count(*) FROM t WHERE v >= 0", &[])
        .unwrap()
        .get(0);
    assert_eq!(through_index, rows as i64);
}

/// VACUUM's options: INDEX_CLEANUP off leaves the indexes alone, VERBOSE
/// reports per index, ANALYZE still analyses, a database-wide VACUUM also
/// visits toast relations; statistics are updated.
#[test]
fn vacuum_options_and_statistics() {
    let (env, _g) = require_server!();
    drop(fresh_db(&env, "itest_index_vacuum_options"));
    let (mut c, notes) = connect_noting(&env, "itest_index_vacuum_options");
    c.batch_execute(
        "CREATE TABLE u (id int PRIMARY KEY, k int, doc text) USING orioledb
           WITH (autovacuum_enabled = off);
         CREATE INDEX u_k ON u (k);
         CREATE INDEX u_doc ON u USING hash (doc);
         INSERT INTO u SELECT g, g, repeat('d', 3000) || g FROM generate_series(1, 3000) g;
         UPDATE u SET k = -k WHERE id % 2 = 0;
         DELETE FROM u WHERE id % 3 = 0;",
    )
    .unwrap();
    notes.lock().unwrap().clear();
    c.batch_execute("VACUUM (VERBOSE, INDEX_CLEANUP off) u").unwrap();
    {
        let notes = notes.lock().unwrap();
        assert!(
            removed(&notes, "u_k").is_none(),
            "INDEX_CLEANUP off still cleaned u_k: {notes:?}"
        );
    }
    notes.lock().unwrap().clear();
    c.batch_execute("VACUUM (VERBOSE) u").unwrap();
    {
        let notes = notes.lock().unwrap();
        let k = removed(&notes, "u_k").unwrap_or_else(|| panic!("no report on u_k: {notes:?}"));
        // 1500 updated and 1000 deleted rows left 2500 dead entries.
        assert!(k >= 2000.0, "VACUUM removed only {k} entries from u_k: {notes:?}");
        assert!(removed(&notes, "u_doc").is_some(), "no report on u_doc: {notes:?}");
        assert!(removed(&notes, "u_pkey").is_some(), "no report on u_pkey: {notes:?}");
    }
    // A second VACUUM finds nothing more to remove.
    notes.lock().unwrap().clear();
    c.batch_execute("VACUUM (VERBOSE) u").unwrap();
    assert_eq!(removed(&notes.lock().unwrap(), "u_k"), Some(0.0));
    // (n_live_tup is not compared: this backend's own pending counts may
    // reach the shared statistics after VACUUM's report.)
    let (reltuples, vacuumed): (f32, bool) = {
        let r = c
            .query_one(
                "SELECT c.reltuples, s.last_vacuum IS NOT NULL
                   FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
                  WHERE c.oid = 'u'::regclass",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(reltuples, 2000.0);
    assert!(vacuumed);
    // One statement each: VACUUM cannot run inside the implicit transaction
    // of a multi-statement query.
    for v in ["VACUUM (ANALYZE) u", "VACUUM", "VACUUM (FREEZE, VERBOSE) u"] {
        c.batch_execute(v).unwrap_or_else(|e| panic!("{v}: {}", describe(&e)));
    }
    let analyzed: bool = c
        .query_one(
            "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relid = 'u'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(analyzed);
    // Every path still finds the same rows.
    for settings in [
        "SET enable_seqscan = on; SET enable_indexscan = off; SET enable_bitmapscan = off",
        "SET enable_seqscan = off; SET enable_indexscan = on; SET enable_bitmapscan = off",
        "SET enable_seqscan = off; SET enable_indexscan = off; SET enable_bitmapscan = on",
    ] {
        c.batch_execute(settings).unwrap();
        let r = c
            .query_one(
                "SELECT count(*), sum(k)::int8 FROM u WHERE k BETWEEN -3000 AND 3000",
                &[],
            )
            .unwrap();
        let (n, s): (i64, i64) = (r.get(0), r.get(1));
        assert_eq!(n, 2000, "{settings}");
        // ids not divisible by 3; even ones negated.
        let want: i64 = (1..=3000i64)
            .filter(|g| g % 3 != 0)
            .map(|g| if g % 2 == 0 { -g } else { g })
            .sum();
        assert_eq!(s, want, "{settings}");
        let d: i64 = c
            .query_one(
                "SELECT count(*) FROM u WHERE doc = repeat('d', 3000) || '7'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(d, 1, "{settings}");
    }
}

// ------------------------------------------------------------------ concurrent builds

/// The two table layouts: (table name, key clause of its first column).
const LAYOUTS: [(&str, &str); 2] = [("r", ""), ("k", " PRIMARY KEY")];

/// Planner settings that read a table one way only.
const FULL_SCAN: &str = "SET enable_seqscan = on; SET enable_indexscan = off; \
     SET enable_indexonlyscan = off; SET enable_bitmapscan = off";
const INDEX_SCAN: &str = "SET enable_seqscan = off; SET enable_indexscan = on; \
     SET enable_indexonlyscan = off; SET enable_bitmapscan = off";
const BITMAP_SCAN: &str = "SET enable_seqscan = off; SET enable_indexscan = off; \
     SET enable_indexonlyscan = off; SET enable_bitmapscan = on";


/// The rows `filter` selects from `table`, as a count and a digest of
/// `id:v` in id order, read by the current planner settings.
fn digest(c: &mut Client, table: &str, filter: &str) -> String {
    let q = format!(
        "SELECT count(*) || ' ' || coalesce(md5(string_agg(id || ':' || v, ',' ORDER BY id)), '-') \
         FROM {table} WHERE {filter}"
    );
    query_text(c, &q)
}

/// `filter` on `table` selects the same rows through a full scan as
/// through `index` (an index scan, and a bitmap scan when `bitmap`), and
/// the plans really use `index`. Returns the full scan's digest.
fn agrees(c: &mut Client, table: &str, index: &str, filter: &str, bitmap: bool) -> String {
    let q = format!("SELECT id, v FROM {table} WHERE {filter}");
    c.batch_execute(FULL_SCAN).unwrap();
    let want = digest(c, table, filter);
    let mut ways = vec![("index scan", INDEX_SCAN)];
    if bitmap {
        ways.push(("bitmap scan", BITMAP_SCAN));
    }
    for (way, settings) in ways {
        c.batch_execute(settings).unwrap();
        let p = plan(c, &q);
        assert!(p.contains(index), "{way} of `{q}` does not use {index}:\n{p}");
        let got = digest(c, table, filter);
        assert_eq!(got, want, "{way} through {index}: `{q}`");
    }
    c.batch_execute("RESET ALL").unwrap();
    want
}

/// (indisvalid, indisready) of index `name`.
fn index_state(c: &mut Client, name: &str) -> (bool, bool) {
    let r = c
        .query_one(
            "SELECT indisvalid, indisready FROM pg_index WHERE indexrelid = $1::text::regclass",
            &[&name],
        )
        .unwrap_or_else(|e| panic!("pg_index of {name}: {}", describe(&e)));
    (r.get(0), r.get(1))
}

fn assert_valid(c: &mut Client, names: &[String]) {
    for n in names {
        assert_eq!(index_state(c, n), (true, true), "index {n} is not valid and ready");
    }
}

/// amcheck, when the server has it: every btree index of `table` is
/// well-formed and holds an entry for every row (`heapallindexed`, which
/// reads the table through the concurrent-build path with an MVCC
/// snapshot).
fn amcheck_all(c: &mut Client, table: &str) {
    if c.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck").is_err() {
        eprintln!("amcheck is not installed: skipping bt_index_check");
        return;
    }
    let rows = c
        .query(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
              JOIN pg_am a ON a.oid = c.relam \
             WHERE i.indrelid = $1::text::regclass AND a.amname = 'btree' AND i.indisvalid",
            &[&table],
        )
        .unwrap();
    for r in rows {
        let name: String = r.get(0);
        c.batch_execute(&format!("SELECT bt_index_check('{name}'::regclass, true)"))
            .unwrap_or_else(|e| panic!("bt_index_check({name}): {}", describe(&e)));
    }
}

/// A connection for one session of a concurrency scenario.
fn session(env: &TestEnv, db: &str, name: &str) -> (Client, i32) {
    let mut c = connect(env, db);
    c.batch_execute(&format!(
        "SET statement_timeout = '120s'; SET application_name = 'cic-{name}'"
    ))
    .unwrap();
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    (c, pid)
}

/// Runs `stmts` one after another on `c` in a thread (each its own
/// statement: CONCURRENTLY cannot run in a transaction block).
fn spawn_stmts(mut c: Client, stmts: Vec<String>) -> JoinHandle<(Client, Result<(), String>)> {
    std::thread::spawn(move || {
        for s in &stmts {
            if let Err(e) = c.batch_execute(s) {
                return (c, Err(format!("{s}: {}", describe(&e))));
            }
        }
        (c, Ok(()))
    })
}

/// Polls until backend `pid` waits on a heavyweight lock (true), or
/// `running` says its statement ended / 30 s passed (false).
fn waits_on_lock(watch: &mut Client, pid: i32, running: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while running() && start.elapsed() < Duration::from_secs(30) {
        let waiting: bool = watch
            .query_one(
                "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) \
                 FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if waiting {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Creates table `t` (layout `key`) with `n` rows: `v` repeats every
/// 1000 rows, `w` is scattered, `u` is unique, `s` has 300 values.
fn populate(c: &mut Client, t: &str, key: &str, n: u32) {
    c.batch_execute(&format!(
        "CREATE TABLE {t} (id int{key}, v int, w int, u int8, s text) USING orioledb
           WITH (autovacuum_enabled = off);
         INSERT INTO {t} SELECT g, g % 1000, (g * 7919) % 5000, g, 's' || (g % 300)
           FROM generate_series(1, {n}) g;"
    ))
    .unwrap_or_else(|e| panic!("populating {t}: {}", describe(&e)));
}

/// CREATE INDEX CONCURRENTLY on a populated table with dead and
/// rolled-back versions: plain, unique, partial, expression and hash
/// indexes are valid and find exactly the rows a full scan finds, and an
/// index holds one entry per visible row (none for dead versions).
#[test]
fn create_index_concurrently_matches_a_full_scan() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_cic_populated");
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 20_000);
        c.batch_execute(&format!(
            "UPDATE {t} SET v = v + 5000, u = u + 1000000 WHERE id % 7 = 0;
             DELETE FROM {t} WHERE id % 11 = 0;"
        ))
        .unwrap();
        // A separate batch: BEGIN in a multi-statement query would take
        // the statements before it into the rolled-back transaction.
        c.batch_execute(&format!(
            "BEGIN;
             UPDATE {t} SET v = -1 WHERE id % 5 = 0;
             INSERT INTO {t} SELECT g, g, g, g FROM generate_series(30001, 30100) g;
             ROLLBACK;"
        ))
        .unwrap();
        let names: Vec<String> = ["v", "u", "w_even", "expr", "hash"]
            .iter()
            .map(|n| format!("{t}_{n}"))
            .collect();
        for ddl in [
            format!("CREATE INDEX CONCURRENTLY {t}_v ON {t} (v)"),
            format!("CREATE UNIQUE INDEX CONCURRENTLY {t}_u ON {t} (u)"),
            format!("CREATE INDEX CONCURRENTLY {t}_w_even ON {t} (w) WHERE v % 2 = 0"),
            format!("CREATE INDEX CONCURRENTLY {t}_expr ON {t} ((v * 2 + w))"),
            format!("CREATE INDEX CONCURRENTLY {t}_hash ON {t} USING hash (s)"),
        ] {
            c.batch_execute(&ddl)
                .unwrap_or_else(|e| panic!("{ddl}: {}", describe(&e)));
        }
        assert_valid(&mut c, &names);
        let live: i64 = c
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(live, 20_000 - 20_000 / 11);
        // The build counted (and indexed) the rows its snapshot saw, not
        // the dead versions the updates and the rollback left.
        let entries: f32 = c
            .query_one(
                "SELECT reltuples FROM pg_class WHERE oid = $1::text::regclass",
                &[&format!("{t}_v")],
            )
            .unwrap()
            .get(0);
        assert_eq!(entries as i64, live, "entries of {t}_v");
        let all = agrees(&mut c, t, &format!("{t}_v"), "v >= -100", true);
        assert!(all.starts_with(&format!("{live} ")), "{all}");
        agrees(&mut c, t, &format!("{t}_v"), "v BETWEEN 100 AND 5200", true);
        agrees(&mut c, t, &format!("{t}_u"), "u > 15000", true);
        agrees(&mut c, t, &format!("{t}_w_even"), "v % 2 = 0 AND w < 2500", true);
        agrees(&mut c, t, &format!("{t}_expr"), "v * 2 + w < 3000", true);
        agrees(&mut c, t, &format!("{t}_hash"), "s = 's42'", true);
        // The unique index is enforced.
        expect_sqlstate(
            &mut c,
            &format!("INSERT INTO {t} VALUES (50000, 1, 1, 2, 'x')"),
            "23505",
        );
        amcheck_all(&mut c, t);
    }
}

/// A concurrent build indexes what its snapshot sees: with an older
/// REPEATABLE READ snapshot still open, the versions deleted before the
/// build are not indexed (an ordinary build would index them for that
/// snapshot), and CREATE INDEX CONCURRENTLY waits for the old snapshot
/// before marking the index valid.
#[test]
fn create_index_concurrently_indexes_its_snapshot_and_waits_for_older_ones() {
    let (env, _g) = require_server!();
    let db = "itest_cic_snapshot";
    let mut c = fresh_db(&env, db);
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 5_000);
        let (mut old, _) = session(&env, db, "old");
        old.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {t}"
        ))
        .unwrap();
        c.batch_execute(&format!(
            "DELETE FROM {t} WHERE id <= 1000; UPDATE {t} SET v = v + 1 WHERE id > 4500"
        ))
        .unwrap();
        let (builder, pid) = session(&env, db, "build");
        let h = spawn_stmts(builder, vec![format!("CREATE INDEX CONCURRENTLY {t}_v ON {t} (v)")]);
        assert!(
            waits_on_lock(&mut c, pid, || !h.is_finished()),
            "CREATE INDEX CONCURRENTLY did not wait for the older snapshot"
        );
        let phase: String = c
            .query_one(
                "SELECT coalesce(max(phase), '') FROM pg_stat_progress_create_index WHERE pid = $1",
                &[&pid],
            )
            .unwrap()
            .get(0);
        assert!(phase.contains("old snapshots"), "waiting in phase {phase:?}");
        // Built, not yet valid: 4000 visible rows got entries; the 1000
        // deleted rows and the 500 old versions did not.
        assert_eq!(index_state(&mut c, &format!("{t}_v")), (false, true));
        let entries: f32 = c
            .query_one(
                "SELECT reltuples FROM pg_class WHERE oid = $1::text::regclass",
                &[&format!("{t}_v")],
            )
            .unwrap()
            .get(0);
        assert_eq!(entries, 4000.0, "entries of {t}_v");
        // The old snapshot still reads its rows.
        let seen: i64 = old
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(seen, 5000);
        old.batch_execute("COMMIT").unwrap();
        let (_, r) = h.join().unwrap();
        r.unwrap();
        assert_valid(&mut c, &[format!("{t}_v")]);
        agrees(&mut c, t, &format!("{t}_v"), "v >= 0", true);
        agrees(&mut c, t, &format!("{t}_v"), "v BETWEEN 490 AND 510", true);
        amcheck_all(&mut c, t);
    }
}

/// Writes random changes to `t` in short transactions (some rolled back)
/// until `stop`; returns how many statements it ran.
fn writer(mut c: Client, t: String, seed: u64, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut rng = Rng(seed);
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let id = rng.range(1, 20_000);
            let sql = match rng.below(6) {
                0 => format!(
                    "INSERT INTO {t} SELECT nextval('ids'), {v}, {w}, nextval('us'), 's' || {v} % 300",
                    v = rng.range(0, 999),
                    w = rng.range(0, 4999)
                ),
                // changes v, keeps u: old and new versions share a u value
                1 => format!("UPDATE {t} SET v = v + 1 WHERE id = {id}"),
                2 => format!("UPDATE {t} SET u = nextval('us'), w = w + 1 WHERE id = {id}"),
                3 => format!("DELETE FROM {t} WHERE id = {id}"),
                4 => format!(
                    "BEGIN; UPDATE {t} SET v = -v WHERE id = {id}; \
                     INSERT INTO {t} SELECT nextval('ids'), 7, 7, nextval('us'), 's7'; ROLLBACK"
                ),
                _ => format!(
                    "BEGIN; UPDATE {t} SET v = v + 2 WHERE id BETWEEN {id} AND {id} + 20; \
                     DELETE FROM {t} WHERE id = {id} + 21; COMMIT"
                ),
            };
            if let Err(e) = c.batch_execute(&sql) {
                panic!("writer: {sql}: {}", describe(&e));
            }
            n += 1;
        }
        n
    })
}

/// CREATE [UNIQUE] INDEX CONCURRENTLY and REINDEX CONCURRENTLY while other
/// sessions write: the build first waits for a transaction that holds
/// uncommitted inserts, updates and deletes, and a writer keeps changing
/// rows (updates that keep the unique column included) through every
/// phase. Afterwards each index finds exactly the rows a full scan finds.
#[test]
fn create_index_concurrently_while_others_write() {
    let (env, _g) = require_server!();
    let db = "itest_cic_writers";
    let mut c = fresh_db(&env, db);
    for (i, (t, key)) in LAYOUTS.iter().enumerate() {
        let t = t.to_string();
        populate(&mut c, &t, key, 20_000);
        c.batch_execute(
            "DROP SEQUENCE IF EXISTS ids; DROP SEQUENCE IF EXISTS us;
             CREATE SEQUENCE ids START 1000000; CREATE SEQUENCE us START 10000000;",
        )
        .unwrap();
        // A transaction with uncommitted changes the build must wait for.
        let (mut b, _) = session(&env, db, "b");
        b.batch_execute(&format!(
            "BEGIN;
             INSERT INTO {t} SELECT nextval('ids'), g % 1000, g, nextval('us'), 'b'
               FROM generate_series(1, 200) g;
             UPDATE {t} SET v = v + 3 WHERE id BETWEEN 5000 AND 5199;
             DELETE FROM {t} WHERE id BETWEEN 6000 AND 6099;"
        ))
        .unwrap();
        let (builder, pid) = session(&env, db, "build");
        let h = spawn_stmts(
            builder,
            vec![
                format!("CREATE INDEX CONCURRENTLY {t}_v ON {t} (v)"),
                format!("CREATE UNIQUE INDEX CONCURRENTLY {t}_u ON {t} (u)"),
                format!("CREATE INDEX CONCURRENTLY {t}_w_even ON {t} (w) WHERE v % 2 = 0"),
                format!("REINDEX INDEX CONCURRENTLY {t}_v"),
                format!("REINDEX TABLE CONCURRENTLY {t}"),
            ],
        );
        assert!(
            waits_on_lock(&mut c, pid, || !h.is_finished()),
            "CREATE INDEX CONCURRENTLY did not wait for the open writer"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (wc, _) = session(&env, db, "writer");
        let w = writer(wc, t.clone(), 0x5EED + i as u64, stop.clone());
        std::thread::sleep(Duration::from_millis(200));
        b.batch_execute("COMMIT").unwrap();
        let (_, r) = h.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let writes = w.join().expect("writer thread");
        r.unwrap_or_else(|e| panic!("{t}: {e}"));
        eprintln!("{t}: {writes} writes ran beside the concurrent builds");
        assert!(writes > 0);
        let names: Vec<String> = ["v", "u", "w_even"].iter().map(|n| format!("{t}_{n}")).collect();
        assert_valid(&mut c, &names);
        let leftovers: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_class WHERE relname ~ '_cc(new|old)'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(leftovers, 0, "REINDEX CONCURRENTLY left indexes behind");
        agrees(&mut c, &t, &format!("{t}_v"), "v >= -100000", true);
        agrees(&mut c, &t, &format!("{t}_v"), "v BETWEEN 200 AND 300", true);
        agrees(&mut c, &t, &format!("{t}_u"), "u >= 0", true);
        agrees(&mut c, &t, &format!("{t}_w_even"), "v % 2 = 0 AND w < 4000", true);
        amcheck_all(&mut c, &t);
    }
}

/// A unique concurrent build over duplicates fails (23505) and leaves an
/// invalid index that the planner ignores and writers do not maintain, as
/// on heap; REINDEX INDEX CONCURRENTLY repairs it once the duplicate is
/// gone.
#[test]
fn failed_unique_concurrent_build_leaves_an_invalid_index() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_cic_unique");
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 3_000);
        c.batch_execute(&format!("UPDATE {t} SET u = 17 WHERE id = 2500")).unwrap();
        let idx = format!("{t}_u");
        let e = expect_sqlstate(
            &mut c,
            &format!("CREATE UNIQUE INDEX CONCURRENTLY {idx} ON {t} (u)"),
            "23505",
        );
        assert!(
            e.detail().unwrap_or("").contains("(u)=(17)"),
            "detail: {:?}",
            e.detail()
        );
        assert_eq!(index_state(&mut c, &idx), (false, false));
        // Ignored by the planner; writes do not check it.
        c.batch_execute(INDEX_SCAN).unwrap();
        let p = plan(&mut c, &format!("SELECT * FROM {t} WHERE u = 17"));
        assert!(!p.contains(&idx), "an invalid index was planned:\n{p}");
        c.batch_execute(&format!("RESET ALL; INSERT INTO {t} VALUES (9001, 1, 1, 17, 'x')"))
            .unwrap();
        // Remove the duplicates, then rebuild the invalid index in place.
        c.batch_execute(&format!("DELETE FROM {t} WHERE id IN (2500, 9001)")).unwrap();
        c.batch_execute(&format!("REINDEX INDEX CONCURRENTLY {idx}"))
            .unwrap_or_else(|e| panic!("REINDEX INDEX CONCURRENTLY {idx}: {}", describe(&e)));
        assert_valid(&mut c, std::slice::from_ref(&idx));
        expect_sqlstate(&mut c, &format!("INSERT INTO {t} VALUES (9002, 1, 1, 17, 'x')"), "23505");
        agrees(&mut c, t, &idx, "u BETWEEN 10 AND 2000", true);
        amcheck_all(&mut c, t);
    }
}

/// REINDEX INDEX / TABLE CONCURRENTLY over every index kind, the primary
/// key and the toast relation's index included: the indexes keep their
/// names, get new files, and find the same rows; the primary-key table is
/// still read through its primary tree.
#[test]
fn reindex_concurrently_rebuilds_every_index() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_reindex_concurrently");
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 10_000);
        c.batch_execute(&format!(
            "ALTER TABLE {t} ADD COLUMN tags text[], ADD COLUMN big text;
             UPDATE {t} SET tags = ARRAY['t' || (id % 7), 't' || (id % 11)] WHERE id % 3 <> 0;
             UPDATE {t} SET big = (SELECT string_agg(md5(id || '.' || g), '') FROM generate_series(1, 100) g)
              WHERE id % 100 = 0;
             CREATE INDEX {t}_v ON {t} (v);
             CREATE INDEX {t}_w_even ON {t} (w) WHERE v % 2 = 0;
             CREATE INDEX {t}_hash ON {t} USING hash (s);
             CREATE INDEX {t}_gin ON {t} USING gin (tags);
             CREATE INDEX {t}_brin ON {t} USING brin (id) WITH (pages_per_range = 1);
             UPDATE {t} SET v = v + 1000 WHERE id % 13 = 0;
             DELETE FROM {t} WHERE id % 17 = 0;"
        ))
        .unwrap();
        let files = |c: &mut Client| -> Vec<(String, String)> {
            c.query(
                "SELECT c.relname::text, c.relfilenode::text FROM pg_index i \
                   JOIN pg_class c ON c.oid = i.indexrelid \
                  WHERE i.indrelid = $1::text::regclass ORDER BY 1",
                &[&t],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
        };
        let before = files(&mut c);
        c.batch_execute(&format!("REINDEX INDEX CONCURRENTLY {t}_v"))
            .unwrap_or_else(|e| panic!("REINDEX INDEX CONCURRENTLY: {}", describe(&e)));
        c.batch_execute(&format!("REINDEX TABLE CONCURRENTLY {t}"))
            .unwrap_or_else(|e| panic!("REINDEX TABLE CONCURRENTLY: {}", describe(&e)));
        let after = files(&mut c);
        assert_eq!(
            before.iter().map(|f| &f.0).collect::<Vec<_>>(),
            after.iter().map(|f| &f.0).collect::<Vec<_>>(),
            "index names"
        );
        for (b, a) in before.iter().zip(&after) {
            assert_ne!(b.1, a.1, "{} was not rebuilt", b.0);
        }
        let names: Vec<String> = after.iter().map(|f| f.0.clone()).collect();
        assert_valid(&mut c, &names);
        agrees(&mut c, t, &format!("{t}_v"), "v BETWEEN 100 AND 1200", true);
        agrees(&mut c, t, &format!("{t}_w_even"), "v % 2 = 0 AND w < 1000", true);
        agrees(&mut c, t, &format!("{t}_hash"), "s = 's42'", true);
        // GIN and BRIN are read through bitmaps only.
        c.batch_execute(FULL_SCAN).unwrap();
        let gin_want = digest(&mut c, t, "tags @> ARRAY['t3']");
        let brin_want = digest(&mut c, t, "id BETWEEN 2000 AND 2500");
        c.batch_execute(BITMAP_SCAN).unwrap();
        let p = plan(&mut c, &format!("SELECT * FROM {t} WHERE tags @> ARRAY['t3']"));
        assert!(p.contains(&format!("{t}_gin")), "{p}");
        assert_eq!(digest(&mut c, t, "tags @> ARRAY['t3']"), gin_want);
        if key.is_empty() {
            let p = plan(&mut c, &format!("SELECT * FROM {t} WHERE id BETWEEN 2000 AND 2500"));
            assert!(p.contains(&format!("{t}_brin")), "{p}");
        }
        assert_eq!(digest(&mut c, t, "id BETWEEN 2000 AND 2500"), brin_want);
        c.batch_execute("RESET ALL").unwrap();
        // Toasted values (3200 bytes that do not compress) still read back.
        let big: i64 = c
            .query_one(
                &format!(
                    "SELECT count(*) FROM {t} WHERE big = \
                     (SELECT string_agg(md5(id || '.' || g), '') FROM generate_series(1, 100) g)"
                ),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(big, (1..=10_000).filter(|i| i % 100 == 0 && i % 17 != 0).count() as i64);
        if !key.is_empty() {
            // A filter on a system column keeps the primary scan away (it
            // does not produce tuple headers), so the btree is read.
            agrees(
                &mut c,
                t,
                &format!("{t}_pkey"),
                "id BETWEEN 10 AND 400 AND xmin IS NOT NULL",
                true,
            );
            let p = plan(&mut c, &format!("SELECT * FROM {t} WHERE id = 42"));
            assert!(p.contains("OrioleDB Primary Scan"), "{p}");
        }
        amcheck_all(&mut c, t);
    }
}

/// VACUUM FULL on both layouts and CLUSTER on the primary key: the rows,
/// their toasted values and every index read the same afterwards,
/// the table's files shrink after churn, rows written afterwards survive
/// a restart, ROLLBACK keeps the old files, and CLUSTER on another index
/// is 0A000.
#[test]
fn vacuum_full_and_cluster_rewrite_compactly() {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_vacuum_full");
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 20_000);
        c.batch_execute(&format!(
            "ALTER TABLE {t} ADD COLUMN big text;
             UPDATE {t} SET big = (SELECT string_agg(md5(id || '.' || g), '') FROM generate_series(1, 100) g)
              WHERE id % 97 = 1;
             CREATE INDEX {t}_v ON {t} (v);
             CREATE INDEX {t}_hash ON {t} USING hash (s);
             UPDATE {t} SET v = v + 1 WHERE id % 2 = 0;
             UPDATE {t} SET v = v + 1 WHERE id % 2 = 0;
             DELETE FROM {t} WHERE id % 3 = 0;
             CHECKPOINT;"
        ))
        .unwrap();
        let everything = |c: &mut Client| {
            query_text(
                c,
                &format!(
                    "SELECT count(*) || ' ' || md5(string_agg(id || ':' || v || ':' || s || ':' || \
                     coalesce(md5(big), '-'), ',' ORDER BY id)) FROM {t}"
                ),
            )
        };
        let size = |c: &mut Client| -> i64 {
            c.query_one(&format!("SELECT orioledb_relation_size('{t}'::regclass)"), &[])
                .unwrap()
                .get(0)
        };
        let want = everything(&mut c);
        let before = size(&mut c);
        if !key.is_empty() {
            // A rolled-back rewrite keeps the old files.
            c.batch_execute(&format!("BEGIN; CLUSTER {t} USING {t}_pkey; ROLLBACK;"))
                .unwrap_or_else(|e| panic!("CLUSTER in a transaction: {}", describe(&e)));
            assert_eq!(everything(&mut c), want);
        }
        if key.is_empty() {
            // Stored in row-id order: CLUSTER renumbers the rows in the
            // index's order, so a sequential scan returns that order —
            // through the cluster sort and through an index scan.
            for (how, set) in [("sort", "enable_indexscan"), ("index scan", "enable_sort")] {
                c.batch_execute(&format!("SET {set} = off; CLUSTER {t} USING {t}_v; RESET {set}"))
                    .unwrap_or_else(|e| panic!("CLUSTER {t} USING {t}_v ({how}): {}", describe(&e)));
                assert_eq!(everything(&mut c), want, "{t}: rows after CLUSTER ({how})");
                let vs: Vec<i32> = c
                    .query(&format!("SELECT v FROM {t}"), &[])
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                assert!(
                    vs.windows(2).all(|w| w[0] <= w[1]),
                    "{t}: a plain scan after CLUSTER ({how}) is in index order"
                );
                assert_eq!(query_text(&mut c, &format!("SELECT min(ctid)::text FROM {t}")), "(0,1)");
                agrees(&mut c, t, &format!("{t}_v"), "v BETWEEN 100 AND 300", true);
            }
        } else {
            // Stored in key order: that is the table's order.
            let e = c
                .batch_execute(&format!("CLUSTER {t} USING {t}_v"))
                .unwrap_err();
            assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{}", describe(&e));
        }
        c.batch_execute(&format!("VACUUM FULL {t}"))
            .unwrap_or_else(|e| panic!("VACUUM FULL {t}: {}", describe(&e)));
        if !key.is_empty() {
            c.batch_execute(&format!("CLUSTER {t} USING {t}_pkey"))
                .unwrap_or_else(|e| panic!("CLUSTER {t}: {}", describe(&e)));
            let p = plan(&mut c, &format!("SELECT * FROM {t} WHERE id = 42"));
            assert!(p.contains("OrioleDB Primary Scan"), "{p}");
        }
        assert_eq!(everything(&mut c), want, "{t}: rows after the rewrite");
        c.batch_execute("CHECKPOINT").unwrap();
        let after = size(&mut c);
        assert!(
            after < before * 3 / 4,
            "{t}: VACUUM FULL left {after} bytes of {before}"
        );
        agrees(&mut c, t, &format!("{t}_v"), "v BETWEEN 100 AND 300", true);
        agrees(&mut c, t, &format!("{t}_hash"), "s = 's42'", true);
        amcheck_all(&mut c, t);
        // New rows and changes after the rewrite, then a restart.
        c.batch_execute(&format!(
            "INSERT INTO {t} (id, v, w, u, s, big) VALUES (30001, 1, 1, 30001, 's1', repeat('z', 5000));
             UPDATE {t} SET big = big || 'y' WHERE id % 97 = 1 AND id < 2000;"
        ))
        .unwrap();
        let want = everything(&mut c);
        restart_server(&env);
        let mut c2 = connect(&env, "itest_vacuum_full");
        assert_eq!(everything(&mut c2), want, "{t}: rows after a restart");
        c = c2;
    }
}

/// VACUUM (FREEZE) freezes what committed before its freeze limit and
/// advances `relfrozenxid` of the table and its toast relation past the
/// transactions since (heap's `age(relfrozenxid)` after VACUUM FREEZE is
/// 0 on an idle database; ours is at most the handful of xids this test
/// spends afterwards); old row locks, also a MultiXactId whose updater
/// aborted, are removed; the rows read the same, also to a snapshot taken
/// before. Re-keying keeps the table's horizons (its versions are copied
/// unchanged), and a plain VACUUM does not move them.
#[test]
fn vacuum_freeze_advances_relfrozenxid() {
    // Alone: other tests' transactions would hold the horizon back and age
    // the new relfrozenxid between the VACUUM and the check.
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_vacuum_freeze");
    for (t, key) in LAYOUTS {
        populate(&mut c, t, key, 5_000);
        c.batch_execute(&format!(
            "ALTER TABLE {t} ADD COLUMN big text;
             UPDATE {t} SET big = (SELECT string_agg(md5(id || '.' || g), '') FROM generate_series(1, 100) g)
              WHERE id % 50 = 1;
             BEGIN; SELECT * FROM {t} WHERE id < 100 FOR SHARE; COMMIT;
             BEGIN; DELETE FROM {t} WHERE id % 7 = 0; ROLLBACK;
             DELETE FROM {t} WHERE id % 11 = 0;"
        ))
        .unwrap();
        let all = format!(
            "SELECT count(*) || ' ' || md5(string_agg(id || ':' || v || ':' || coalesce(md5(big), '-'), ',' ORDER BY id)) FROM {t}"
        );
        let want = query_text(&mut c, &all);
        // Transactions after the rows were written.
        c.batch_execute(
            "DO $$ BEGIN FOR i IN 1..300 LOOP PERFORM txid_current(); COMMIT; END LOOP; END $$",
        )
        .unwrap();
        let ages = |c: &mut Client| -> (i32, i32) {
            let r = c
                .query_one(
                    &format!(
                        "SELECT age(t.relfrozenxid), age(tt.relfrozenxid) FROM pg_class t \
                         JOIN pg_class tt ON tt.oid = t.reltoastrelid WHERE t.oid = '{t}'::regclass"
                    ),
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        let (before, _) = ages(&mut c);
        assert!(before > 300, "{t}: relfrozenxid age {before} before VACUUM");
        c.batch_execute(&format!("VACUUM {t}")).unwrap();
        let (plain, _) = ages(&mut c);
        assert!(plain >= before, "{t}: a plain VACUUM moved relfrozenxid ({before} -> {plain})");
        // A KEY SHARE locker beside an updater that aborts: an update multi.
        let mut locker = connect(&env, "itest_vacuum_freeze");
        locker
            .batch_execute(&format!("BEGIN; SELECT * FROM {t} WHERE id = 4 FOR KEY SHARE"))
            .unwrap();
        c.batch_execute(&format!("BEGIN; UPDATE {t} SET v = v WHERE id = 4; ROLLBACK"))
            .unwrap();
        locker.batch_execute("COMMIT").unwrap();
        drop(locker);
        let mut reader = connect(&env, "itest_vacuum_freeze");
        reader
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .unwrap();
        assert_eq!(query_text(&mut reader, &all), want);
        c.batch_execute(&format!("VACUUM (FREEZE) {t}")).unwrap();
        // The reader's snapshot holds the horizon: nothing after it is frozen.
        assert_eq!(query_text(&mut reader, &all), want, "{t}: old snapshot after freezing");
        reader.batch_execute("COMMIT").unwrap();
        drop(reader);
        c.batch_execute(&format!("VACUUM (FREEZE) {t}")).unwrap();
        let (table_age, toast_age) = ages(&mut c);
        assert!(table_age < 10, "{t}: relfrozenxid age {table_age} after VACUUM FREEZE");
        assert!(toast_age < 10, "{t}: toast relfrozenxid age {toast_age}");
        assert_eq!(query_text(&mut c, &all), want, "{t}: rows after freezing");
        // Frozen rows still update, lock and delete normally.
        c.batch_execute(&format!(
            "UPDATE {t} SET v = v + 1 WHERE id = 1; DELETE FROM {t} WHERE id = 2;
             BEGIN; SELECT * FROM {t} WHERE id = 3 FOR UPDATE; COMMIT;"
        ))
        .unwrap();
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {t} WHERE id <= 3"), &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 2);
    }
    // Re-keying a table with old rows keeps its relfrozenxid.
    c.batch_execute(
        "CREATE TABLE rk (id int, v int) USING orioledb;
         INSERT INTO rk SELECT g, g FROM generate_series(1, 1000) g;",
    )
    .unwrap();
    c.batch_execute(
        "DO $$ BEGIN FOR i IN 1..100 LOOP PERFORM txid_current(); COMMIT; END LOOP; END $$",
    )
    .unwrap();
    let age = |c: &mut Client| -> i32 {
        c.query_one("SELECT age(relfrozenxid) FROM pg_class WHERE relname = 'rk'", &[])
            .unwrap()
            .get(0)
    };
    let before = age(&mut c);
    c.batch_execute("ALTER TABLE rk ADD PRIMARY KEY (id)").unwrap();
    assert!(age(&mut c) >= before, "re-key reset relfrozenxid");
    assert_eq!(
        query_text(&mut c, "SELECT count(*) || ' ' || sum(v) FROM rk"),
        "1000 500500"
    );
}
