//! Integration tests of loads: COPY's batches (`multi_insert`) and the
//! re-key of ALTER TABLE ... ADD PRIMARY KEY copy rows into the tree a leaf
//! at a time (`Tree::insert_run`). Its own test binary: the long
//! transactions here would hold back the pruning horizon of tests that
//! count pruned versions if they ran beside them.

#[macro_use]
mod common;

use common::*;

/// A re-key copies in batches, map entries first, then versions; the keys
/// computed by its first pass are kept while they fit in
/// maintenance_work_mem and computed again otherwise. Both ways, with rows
/// in random key order and some updated (HOT chains flattened), the table
/// answers every lookup as before, in key order, and COPY (batched
/// inserts) into the keyed table agrees too.
#[test]
fn rekeys_in_batches_keep_every_row() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_pk_batches");
    for (t, mem) in [("kept", "64MB"), ("recomputed", "1MB")] {
        c.batch_execute(&format!(
            "CREATE TABLE {t} (id int NOT NULL, v text, n int) USING orioledb;
             INSERT INTO {t} SELECT g, repeat('x', g % 50), g % 13
               FROM generate_series(1, 120000) g ORDER BY md5(g::text);
             UPDATE {t} SET n = n + 100 WHERE id % 10 = 0;
             SET maintenance_work_mem = '{mem}';
             ALTER TABLE {t} ADD PRIMARY KEY (id);
             RESET maintenance_work_mem;
             ANALYZE {t};"
        ))
        .unwrap();
        assert_eq!(key_of(&mut c, t), "id");
        let r = c
            .query_one(
                &format!(
                    "SELECT count(*), sum(id), sum(n), sum(length(v)),
                            bool_and(id = rn) FROM (SELECT *, row_number() OVER () AS rn FROM {t}) s"
                ),
                &[],
            )
            .unwrap();
        let (count, ids, ns, lens, ordered): (i64, i64, i64, i64, bool) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
        let want_n: i64 = (1..=120000i64).map(|g| g % 13 + if g % 10 == 0 { 100 } else { 0 }).sum();
        let want_len: i64 = (1..=120000i64).map(|g| g % 50).sum();
        assert_eq!((count, ids, ns, lens), (120000, 120000 * 120001 / 2, want_n, want_len), "{t}");
        assert!(ordered, "{t}: a scan returns key order");
        let one: i32 = c
            .query_one(&format!("SELECT n FROM {t} WHERE id = 777"), &[])
            .unwrap()
            .get(0);
        assert_eq!(one, 777 % 13);
        let check = query_text(&mut c, &format!("SELECT orioledb_check('{t}'::regclass)"));
        assert!(check.starts_with("ok"), "{t}: checker: {check}");
    }
    // COPY into a keyed table goes through multi_insert's batches: rows in
    // random key order, and a duplicate key that fails the whole COPY.
    c.batch_execute("CREATE TABLE copied (id int PRIMARY KEY, v text) USING orioledb")
        .unwrap();
    let mut ids: Vec<i32> = (1..=30000).collect();
    ids.sort_by_key(|g| (g * 7919) % 30011);
    let rows: String = ids.iter().map(|g| format!("{g}\tc{g}\n")).collect();
    let copy = |c: &mut postgres::Client, data: &str| -> Result<u64, postgres::Error> {
        use std::io::Write;
        let mut w = c.copy_in("COPY copied FROM STDIN")?;
        w.write_all(data.as_bytes()).unwrap();
        w.finish()
    };
    assert_eq!(copy(&mut c, &rows).unwrap(), 30000);
    let dup = copy(&mut c, "30001\tnew\n17\tdup\n").unwrap_err();
    assert_eq!(dup.code(), Some(&postgres::error::SqlState::UNIQUE_VIOLATION));
    let r = c
        .query_one(
            "SELECT count(*), sum(id), bool_and(v = 'c' || id), max(id) FROM copied",
            &[],
        )
        .unwrap();
    let (count, sum, same, max): (i64, i64, bool, i32) = (r.get(0), r.get(1), r.get(2), r.get(3));
    assert_eq!((count, sum, same, max), (30000, 30000 * 30001 / 2, true, 30000));
    let check = query_text(&mut c, "SELECT orioledb_check('copied'::regclass)");
    assert!(check.starts_with("ok"), "copied: checker: {check}");
}

/// COPY ... FREEZE inserts its rows frozen, as heap does: a REPEATABLE READ
/// transaction whose snapshot is older than the COPY sees them (the
/// documented exception to MVCC that FREEZE buys), heap and orioledb alike,
/// keyed and row-id tables alike; a plain COPY's rows stay invisible to it.
#[test]
fn copy_freeze_rows_are_frozen_as_on_heap() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_copy_freeze");
    let mut old = connect(&env, "itest_copy_freeze");
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    let load = |c: &mut postgres::Client, t: &str, how: &str, freeze: bool| {
        use std::io::Write;
        c.batch_execute(&format!("BEGIN; CREATE TABLE {t} (id int {how}")).unwrap();
        let opt = if freeze { " WITH (FREEZE)" } else { "" };
        let mut w = c.copy_in(&format!("COPY {t} FROM STDIN{opt}")).unwrap();
        w.write_all(b"1\n2\n3\n").unwrap();
        w.finish().unwrap();
        c.batch_execute("COMMIT").unwrap();
    };
    let cases = [
        ("f_heap", "PRIMARY KEY) USING heap", true, 3),
        ("f_keyed", "PRIMARY KEY) USING orioledb", true, 3),
        ("f_rowid", ") USING orioledb", true, 3),
        ("p_heap", ") USING heap", false, 0),
        ("p_rowid", ") USING orioledb", false, 0),
    ];
    for (t, how, freeze, _) in cases {
        load(&mut c, t, how, freeze);
    }
    for (t, _, _, seen) in cases {
        let n: i64 = old
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(n, seen, "{t}: rows an older snapshot sees");
    }
    old.batch_execute("COMMIT").unwrap();
    // Frozen rows are ordinary rows afterwards.
    c.batch_execute("UPDATE f_keyed SET id = id + 10 WHERE id = 2; DELETE FROM f_rowid WHERE id = 1")
        .unwrap();
    let s = query_text(
        &mut c,
        "SELECT (SELECT string_agg(id::text, ',' ORDER BY id) FROM f_keyed) || ' ' || \
                (SELECT string_agg(id::text, ',' ORDER BY id) FROM f_rowid)",
    );
    assert_eq!(s, "1,3,12 2,3");
}
