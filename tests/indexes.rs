//! Integration tests: VACUUM removes index entries of dead row versions.
//!
//! Dead versions leave an orioledb table without VACUUM, but their index
//! entries stay until something removes them. An index on a column that
//! every UPDATE changes gets no help from bottom-up deletion (its key
//! changed) nor from index scans marking entries dead (nobody reads it), so
//! without VACUUM it grows by one entry per update.

#[macro_use]
mod common;

use common::*;
use std::sync::{Arc, Mutex};


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
