//! Integration tests: a table's engine tree follows its transactions, is
//! shared by all sessions, and its files appear after CHECKPOINT.

#[macro_use]
mod common;

use common::*;

fn relnode(c: &mut postgres::Client, table: &str) -> u32 {
    let oid: postgres::types::Oid = c
        .query_one(
            "SELECT relfilenode FROM pg_class WHERE relname = $1",
            &[&table],
        )
        .unwrap()
        .get(0);
    oid
}

fn tree_listed(c: &mut postgres::Client, relnode: u32) -> bool {
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM orioledb_trees WHERE relnode = $1",
            &[&relnode],
        )
        .unwrap()
        .get(0);
    n == 1
}

#[test]
fn trees_follow_create_drop_commit_and_rollback() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_xact");
    c.batch_execute("CREATE TABLE t1 (id int, v text) USING orioledb WITH (compress = 3)")
        .unwrap();
    let n1 = relnode(&mut c, "t1");
    let row = c
        .query_one(
            "SELECT reloid::text, compress, tree FROM orioledb_trees WHERE relnode = $1",
            &[&n1],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "t1");
    assert_eq!(
        row.get::<_, i32>(1),
        3,
        "the tree takes the table's compress level"
    );
    assert_eq!(row.get::<_, String>(2), "primary");
    c.batch_execute("ALTER TABLE t1 SET (primary_compress = 7)")
        .unwrap();
    let level: i32 = c
        .query_one(
            "SELECT compress FROM orioledb_trees WHERE relnode = $1",
            &[&n1],
        )
        .unwrap()
        .get(0);
    assert_eq!(level, 7, "ALTER TABLE SET reaches the tree");

    // CREATE rolled back: no tree left.
    c.batch_execute("BEGIN; CREATE TABLE t2 (id int) USING orioledb")
        .unwrap();
    let n2 = relnode(&mut c, "t2");
    assert!(tree_listed(&mut c, n2));
    c.batch_execute("ROLLBACK").unwrap();
    assert!(
        !tree_listed(&mut c, n2),
        "a rolled-back CREATE TABLE must not leave a tree"
    );

    // DROP rolled back keeps the tree; DROP committed removes it.
    c.batch_execute("BEGIN; DROP TABLE t1; ROLLBACK").unwrap();
    assert!(
        tree_listed(&mut c, n1),
        "a rolled-back DROP TABLE must keep the tree"
    );
    c.batch_execute("DROP TABLE t1").unwrap();
    assert!(
        !tree_listed(&mut c, n1),
        "a committed DROP TABLE removes the tree"
    );

    // Savepoints: the inner CREATE goes with ROLLBACK TO, the outer stays.
    c.batch_execute("BEGIN; CREATE TABLE t3 (id int) USING orioledb; SAVEPOINT s; CREATE TABLE t4 (id int) USING orioledb")
        .unwrap();
    let (n3, n4) = (relnode(&mut c, "t3"), relnode(&mut c, "t4"));
    c.batch_execute(
        "ROLLBACK TO SAVEPOINT s; SAVEPOINT s2; DROP TABLE t3; RELEASE SAVEPOINT s2; COMMIT",
    )
    .unwrap();
    assert!(
        !tree_listed(&mut c, n4),
        "ROLLBACK TO SAVEPOINT removes the inner table's tree"
    );
    assert!(
        !tree_listed(&mut c, n3),
        "a DROP in a released savepoint commits with the transaction"
    );

    // TRUNCATE gives the table a new file and tree; the old one goes at commit.
    c.batch_execute("CREATE TABLE t5 (id int) USING orioledb")
        .unwrap();
    let old = relnode(&mut c, "t5");
    c.batch_execute("TRUNCATE t5").unwrap();
    let new = relnode(&mut c, "t5");
    assert_ne!(old, new);
    assert!(tree_listed(&mut c, new) && !tree_listed(&mut c, old));
    // TRUNCATE in the creating transaction empties in place.
    c.batch_execute("BEGIN; CREATE TABLE t6 (id int) USING orioledb; TRUNCATE t6; COMMIT")
        .unwrap();
    let n6 = relnode(&mut c, "t6");
    assert!(tree_listed(&mut c, n6));
}

/// relfilenode of `table`'s toast relation.
fn toast_relnode(c: &mut postgres::Client, table: &str) -> u32 {
    let oid: postgres::types::Oid = c
        .query_one(
            "SELECT t.relfilenode FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid \
              WHERE c.relname = $1",
            &[&table],
        )
        .unwrap()
        .get(0);
    oid
}

/// A value too large to stay inline (random, so compression cannot shrink it).
const BIG: &str = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200))";

/// A toast relation gets its tree with its first toasted value: tables whose
/// values stay inline have no toast tree, a rolled-back CREATE + toasted
/// INSERT leaves none, a savepoint's rollback keeps one the table's other
/// values use, TRUNCATE and VACUUM FULL hand values on, and compression
/// follows the table's `toast_compress`.
#[test]
fn toast_trees_come_with_the_first_toasted_value() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_lazy_toast");
    c.batch_execute(
        "CREATE TABLE lt (id int PRIMARY KEY, v text) USING orioledb WITH (toast_compress = 3);
         INSERT INTO lt SELECT g, 'short' FROM generate_series(1, 100) g",
    )
    .unwrap();
    let toast = toast_relnode(&mut c, "lt");
    assert!(!tree_listed(&mut c, toast), "inline values only: no toast tree");
    let trees_before: i64 = c
        .query_one("SELECT count(*) FROM orioledb_trees", &[])
        .unwrap()
        .get(0);

    // A rolled-back first value still leaves the tree (another session may
    // be using it by then).
    c.batch_execute(&format!("BEGIN; INSERT INTO lt VALUES (101, {BIG}); ROLLBACK"))
        .unwrap();
    assert!(tree_listed(&mut c, toast), "the first toasted value made the tree");
    let level: i32 = c
        .query_one("SELECT compress FROM orioledb_trees WHERE relnode = $1", &[&toast])
        .unwrap()
        .get(0);
    assert_eq!(level, 3, "the toast tree takes the table's toast_compress");
    c.batch_execute(&format!("INSERT INTO lt VALUES (102, {BIG})")).unwrap();
    let keys = tree_keys(&mut c, "(SELECT reltoastrelid FROM pg_class WHERE relname = 'lt')");
    // Four chunks of the committed value; the rolled-back row's four go
    // when its version is pruned.
    assert!(keys == 4 || keys == 8, "{keys} chunks");
    let len: i32 = c
        .query_one("SELECT length(v) FROM lt WHERE id = 102", &[])
        .unwrap()
        .get(0);
    assert_eq!(len, 6400);

    // CREATE TABLE and its first toasted value rolled back: no tree left.
    c.batch_execute(&format!(
        "BEGIN; CREATE TABLE gone (id int, v text) USING orioledb; INSERT INTO gone VALUES (1, {BIG})"
    ))
    .unwrap();
    let gone_toast = toast_relnode(&mut c, "gone");
    assert!(tree_listed(&mut c, gone_toast));
    c.batch_execute("ROLLBACK").unwrap();
    assert!(!tree_listed(&mut c, gone_toast), "rolled back with its table");
    let trees_now: i64 = c
        .query_one("SELECT count(*) FROM orioledb_trees", &[])
        .unwrap()
        .get(0);
    assert_eq!(trees_now, trees_before + 1, "only lt's toast tree was added");
    // Made in a savepoint that rolls back while the table (created before
    // the transaction) stays: the tree stays, and later values use it.
    c.batch_execute("CREATE TABLE keep (id int, v text) USING orioledb").unwrap();
    c.batch_execute(&format!(
        "BEGIN; SAVEPOINT s; INSERT INTO keep VALUES (1, {BIG}); ROLLBACK TO SAVEPOINT s;
         INSERT INTO keep VALUES (2, {BIG}); COMMIT"
    ))
    .unwrap();
    let keep_toast = toast_relnode(&mut c, "keep");
    assert!(tree_listed(&mut c, keep_toast));
    let n: i64 = c
        .query_one("SELECT count(*) FROM keep WHERE length(v) = 6400", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);

    // Created in a savepoint of the table's transaction: the tree stays with
    // the table when the savepoint rolls back, and later values use it.
    c.batch_execute(&format!(
        "BEGIN; CREATE TABLE sp (id int, v text) USING orioledb; SAVEPOINT s;
         INSERT INTO sp VALUES (1, {BIG}); ROLLBACK TO SAVEPOINT s;
         INSERT INTO sp VALUES (2, {BIG}); COMMIT"
    ))
    .unwrap();
    let sp_toast = toast_relnode(&mut c, "sp");
    assert!(tree_listed(&mut c, sp_toast));
    // Made in a released savepoint of a CREATE that rolls back: goes too.
    c.batch_execute(&format!(
        "BEGIN; CREATE TABLE gone2 (id int, v text) USING orioledb; SAVEPOINT s;
         INSERT INTO gone2 VALUES (1, {BIG}); RELEASE SAVEPOINT s"
    ))
    .unwrap();
    let gone2_toast = toast_relnode(&mut c, "gone2");
    assert!(tree_listed(&mut c, gone2_toast));
    c.batch_execute("ROLLBACK").unwrap();
    assert!(!tree_listed(&mut c, gone2_toast), "rolled back with its table");
    let n: i64 = c
        .query_one("SELECT count(*) FROM sp WHERE length(v) = 6400", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);

    // TRUNCATE: a new toast relation file, no tree until a value comes.
    c.batch_execute("TRUNCATE lt").unwrap();
    let toast2 = toast_relnode(&mut c, "lt");
    assert!(toast2 != toast && !tree_listed(&mut c, toast) && !tree_listed(&mut c, toast2));
    c.batch_execute("INSERT INTO lt VALUES (1, 'short')").unwrap();
    assert!(!tree_listed(&mut c, toast2));
    // VACUUM FULL without toasted values makes no toast tree; with them it
    // copies the values into the new one.
    c.batch_execute("VACUUM FULL lt").unwrap();
    let vf = toast_relnode(&mut c, "lt");
    assert!(!tree_listed(&mut c, vf));
    c.batch_execute(&format!("INSERT INTO lt VALUES (2, {BIG})")).unwrap();
    c.batch_execute("VACUUM FULL lt").unwrap();
    let toast3 = toast_relnode(&mut c, "lt");
    assert!(tree_listed(&mut c, toast3));
    let rows: Vec<(i32, i32)> = c
        .query("SELECT id, length(v) FROM lt ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, vec![(1, 5), (2, 6400)]);
    // Sizes, the checker and a DROP with and without a toast tree.
    c.batch_execute("CHECKPOINT").unwrap();
    for t in ["lt", "sp"] {
        let ok: String = c
            .query_one(&format!("SELECT orioledb_check((SELECT reltoastrelid FROM pg_class WHERE relname = '{t}'))"), &[])
            .unwrap()
            .get(0);
        assert!(ok.starts_with("ok"), "{ok}");
    }
    c.batch_execute(
        "CREATE TABLE inl (id int, v text) USING orioledb; INSERT INTO inl VALUES (1, 'x');
         SELECT orioledb_relation_size('inl'::regclass), pg_total_relation_size('inl');
         DROP TABLE inl, lt, sp, keep",
    )
    .unwrap();
    assert!(!tree_listed(&mut c, toast3) && !tree_listed(&mut c, sp_toast));
}

#[test]
fn temporary_and_unlogged_tables() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_kinds");
    c.batch_execute(
        "CREATE TEMP TABLE tt (id int PRIMARY KEY, v text) USING orioledb;
         CREATE UNLOGGED TABLE tu (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO tt SELECT g, 'v' || g FROM generate_series(1, 100) g;
         INSERT INTO tu SELECT g, 'v' || g FROM generate_series(1, 100) g;
         CREATE TEMP TABLE tc ON COMMIT DELETE ROWS AS SELECT * FROM tt WITH NO DATA;",
    )
    .unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM orioledb_trees WHERE \"table\" IN ('tt'::regclass, 'tu'::regclass)", &[])
        .unwrap()
        .get(0);
    assert!(n >= 2, "temporary and unlogged tables have trees");
    let s: i64 = c
        .query_one("SELECT sum(t.id + u.id)::int8 FROM tt t JOIN tu u USING (id)", &[])
        .unwrap()
        .get(0);
    assert_eq!(s, 2 * 5050);
    c.batch_execute("BEGIN; INSERT INTO tc VALUES (1, 'x'); COMMIT").unwrap();
    let left: i64 = c.query_one("SELECT count(*) FROM tc", &[]).unwrap().get(0);
    assert_eq!(left, 0, "ON COMMIT DELETE ROWS");
    // A temporary table and its tree go with the session.
    let tt_node: postgres::types::Oid = c
        .query_one("SELECT relfilenode FROM pg_class WHERE oid = 'tt'::regclass", &[])
        .unwrap()
        .get(0);
    drop(c);
    let mut c = connect(&env, "itest_trees_kinds");
    let mut gone = false;
    for _ in 0..100 {
        if !tree_listed(&mut c, tt_node) {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gone, "the temporary table's tree is dropped with its session");
    let n: i64 = c.query_one("SELECT count(*) FROM tu", &[]).unwrap().get(0);
    assert_eq!(n, 100);
    // A materialized view refreshed concurrently (through a temporary table).
    c.batch_execute(
        "CREATE MATERIALIZED VIEW mv USING orioledb AS SELECT id % 10 AS k, count(*) AS n FROM tu GROUP BY 1;
         CREATE UNIQUE INDEX ON mv (k);
         INSERT INTO tu VALUES (1000, 'x');
         REFRESH MATERIALIZED VIEW CONCURRENTLY mv;",
    )
    .unwrap();
    let n: i64 = c.query_one("SELECT n FROM mv WHERE k = 0", &[]).unwrap().get(0);
    assert_eq!(n, 11);
}

#[test]
fn trees_are_shared_by_sessions_and_written_by_checkpoint() {
    let (env, _g) = require_server!();
    let mut a = fresh_db(&env, "itest_trees_shared");
    let mut b = connect(&env, "itest_trees_shared");
    a.batch_execute("CREATE TABLE s1 (id int) USING orioledb WITH (compress = 1)")
        .unwrap();
    let n = relnode(&mut a, "s1");
    assert!(
        tree_listed(&mut b, n),
        "another backend must see the tree (shared metadata)"
    );
    a.batch_execute("CHECKPOINT").unwrap();
    let (_, db_dir) = engine_db_dir(&env, &mut a);
    assert!(
        db_dir.parent().unwrap().join("control").exists(),
        "CHECKPOINT writes orioledb_data/control"
    );
    let data = db_dir.join(n.to_string());
    assert!(
        data.exists(),
        "the tree's data file is named by the relfilenode: {}",
        data.display()
    );
    let maps: Vec<String> = std::fs::read_dir(&db_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(&format!("{n}-")) && f.ends_with(".map"))
        .collect();
    assert_eq!(
        maps.len(),
        1,
        "one map file per tree after a checkpoint: {maps:?}"
    );
    let bytes: i64 = b
        .query_one(
            "SELECT file_bytes FROM orioledb_trees WHERE relnode = $1",
            &[&n],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        bytes as u64,
        std::fs::metadata(&data).unwrap().len(),
        "file_bytes is the data file's size"
    );
}

#[test]
fn relation_size_and_table_view() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_size");
    c.batch_execute(
        "CREATE TABLE tbl3 (id int NOT NULL, c1 int, ts timestamp, lob bytea, t text COLLATE \"C\") \
         USING orioledb WITH (compress = 1); CHECKPOINT",
    )
    .unwrap();
    let n = relnode(&mut c, "tbl3");
    let (dboid, db_dir) = engine_db_dir(&env, &mut c);
    let toast_node: u32 = {
        let o: postgres::types::Oid = c
            .query_one(
                "SELECT t.relfilenode FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.relname = 'tbl3'",
                &[],
            )
            .unwrap()
            .get(0);
        o
    };
    let size: i64 = c
        .query_one("SELECT orioledb_relation_size('tbl3'::regclass)", &[])
        .unwrap()
        .get(0);
    let toast_index: i64 = c
        .query_one(
            "SELECT coalesce(sum(pg_relation_size(indexrelid)), 0)::int8 FROM pg_index
              WHERE indrelid = (SELECT reltoastrelid FROM pg_class WHERE relname = 'tbl3')",
            &[],
        )
        .unwrap()
        .get(0);
    // Data files and checkpoint maps of the primary and toast trees.
    let engine_files: u64 = std::fs::read_dir(&db_dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            [n, toast_node].iter().any(|x| {
                name == x.to_string()
                    || name.starts_with(&format!("{x}-")) && name.ends_with(".map")
            })
        })
        .map(|e| held_bytes(&e.metadata().unwrap()))
        .sum();
    assert!(std::fs::metadata(db_dir.join(n.to_string())).is_ok());
    assert_eq!(
        size as u64,
        engine_files + toast_index as u64,
        "after CHECKPOINT: the sum of the files"
    );
    assert!(size > 0);
    // A name or an OID, as pg_relation_size takes them.
    let by_name: i64 = c.query_one("SELECT orioledb_relation_size('tbl3')", &[]).unwrap().get(0);
    let by_oid: i64 = c
        .query_one("SELECT orioledb_relation_size(oid) FROM pg_class WHERE relname = 'tbl3'", &[])
        .unwrap()
        .get(0);
    assert_eq!((by_name, by_oid), (size, size));
    expect_sqlstate(&mut c, "SELECT orioledb_relation_size('no_such_table')", "42P01");
    // Not an orioledb table: an error naming it.
    c.batch_execute("CREATE TABLE heap1 (id int)").unwrap();
    let e = expect_sqlstate(
        &mut c,
        "SELECT orioledb_relation_size('heap1'::regclass)",
        "42809",
    );
    assert!(e.message().contains("\"heap1\""), "{}", e.message());

    let row = c
        .query_one("SELECT datoid, relnode, description FROM orioledb_table WHERE reloid = 'tbl3'::regclass", &[])
        .unwrap();
    assert_eq!(row.get::<_, postgres::types::Oid>(0), dboid);
    assert_eq!(row.get::<_, postgres::types::Oid>(1), n);
    let desc: String = row.get(2);
    let lines: Vec<&str> = desc.lines().collect();
    assert_eq!(
        lines[0], "Compress = 1, Primary compress = 1, TOAST compress = 1",
        "{desc}"
    );
    let cells = |l: &str| {
        l.split('|')
            .map(|s| s.trim().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cells(lines[1]),
        [
            "Column",
            "Type",
            "Collation",
            "Nullable",
            "Dropped",
            "Compression"
        ]
    );
    assert_eq!(
        cells(lines[2]),
        ["id", "integer", "(null)", "false", "false", ""]
    );
    assert_eq!(
        cells(lines[4]),
        [
            "ts",
            "timestamp without time zone",
            "(null)",
            "true",
            "false",
            ""
        ]
    );
    assert_eq!(cells(lines[6]), ["t", "text", "C", "true", "false", ""]);
    assert_eq!(lines.len(), 7, "{desc}");
    // Columns line up: every line of the table has its bars at the same places.
    let bars = |l: &str| l.match_indices('|').map(|(i, _)| i).collect::<Vec<_>>();
    assert!(
        lines[1..].iter().all(|l| bars(l) == bars(lines[1])),
        "{desc}"
    );
    let heap_rows: i64 = c
        .query_one(
            "SELECT count(*) FROM orioledb_table WHERE reloid = 'heap1'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(heap_rows, 0);
}

/// Pages of the engine tree of relation `rel` at 8 kB each, 0 without one.
fn tree_pages_bytes(c: &mut postgres::Client, rel: &str) -> i64 {
    c.query_one(
        "SELECT coalesce((SELECT t.pages * 8192 FROM orioledb_tree_stats() t
                           WHERE t.relnode = (SELECT relfilenode FROM pg_class WHERE oid = $1::text::regclass)), 0)::int8",
        &[&rel],
    )
    .unwrap()
    .get(0)
}

#[test]
fn postgres_size_functions_count_engine_trees() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_pg_sizes");
    c.batch_execute(
        "CREATE TABLE t (a int PRIMARY KEY, b text) USING orioledb;
         CREATE INDEX t_b ON t (length(b));
         CREATE INDEX t_o ON t USING orioledb_btree (a);
         INSERT INTO t SELECT g, repeat('x', 100) || g FROM generate_series(1, 5000) g;
         INSERT INTO t SELECT 0, string_agg(md5(g::text), '') FROM generate_series(1, 1000) g;
         CREATE TABLE h (a int PRIMARY KEY, b text) USING heap;
         INSERT INTO h SELECT g, 'x' FROM generate_series(1, 1000) g;
         CREATE VIEW stock AS SELECT pg_relation_size('t'::regclass) AS t_main,
                pg_table_size('t'::regclass) AS t_table, pg_indexes_size('t'::regclass) AS t_indexes,
                pg_total_relation_size('t'::regclass) AS t_total,
                pg_total_relation_size('h'::regclass) AS h_total;",
    )
    .unwrap();
    let toast: String = c
        .query_one("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 't'", &[])
        .unwrap()
        .get(0);
    let main = tree_pages_bytes(&mut c, "t");
    let toast_main = tree_pages_bytes(&mut c, &toast);
    let ours_index = tree_pages_bytes(&mut c, "t_o");
    assert!(main > 8192 && toast_main > 0 && ours_index > 0, "{main} {toast_main} {ours_index}");
    let one = |c: &mut postgres::Client, q: &str| -> Option<i64> { c.query_one(q, &[]).unwrap().get(0) };
    assert_eq!(one(&mut c, "SELECT pg_relation_size('t')"), Some(main));
    assert_eq!(one(&mut c, "SELECT pg_relation_size('t', 'main')"), Some(main));
    assert_eq!(one(&mut c, "SELECT pg_relation_size('t', 'fsm')"), Some(0));
    assert_eq!(one(&mut c, &format!("SELECT pg_relation_size('{toast}')")), Some(toast_main));
    assert_eq!(one(&mut c, "SELECT pg_relation_size('t_o')"), Some(ours_index));
    // The stock parts (forks, the toast index, PostgreSQL's btrees) are
    // still counted: a view keeps the stock functions (below).
    let stock = c
        .query_one("SELECT t_table, t_indexes, t_total FROM stock", &[])
        .unwrap();
    let (table, indexes, total): (i64, i64, i64) = (stock.get(0), stock.get(1), stock.get(2));
    assert!(indexes > 0 && total >= table + indexes, "{table} {indexes} {total}");
    assert_eq!(one(&mut c, "SELECT pg_table_size('t')"), Some(table + main + toast_main));
    assert_eq!(one(&mut c, "SELECT pg_indexes_size('t')"), Some(indexes + ours_index));
    assert_eq!(
        one(&mut c, "SELECT pg_total_relation_size('t')"),
        Some(total + main + toast_main + ours_index)
    );
    // Inside functions, EXPLAIN ANALYZE and CREATE TABLE AS too.
    c.batch_execute(
        "CREATE FUNCTION f() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN pg_relation_size('t'); END $$;
         CREATE TABLE copied AS SELECT pg_relation_size('t') AS s",
    )
    .unwrap();
    assert_eq!(one(&mut c, "SELECT f()"), Some(main));
    assert_eq!(one(&mut c, "SELECT s FROM copied"), Some(main));
    // Heap relations measure as before; a view keeps the stock functions
    // and does not come to depend on the extension.
    let h_total: i64 = one(&mut c, "SELECT pg_total_relation_size('h')").unwrap();
    let row = c.query_one("SELECT t_main, h_total FROM stock", &[]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (0, h_total));
    // Built-in functions are pinned (no pg_depend rows): any row would be ours.
    let deps: i64 = one(
        &mut c,
        "SELECT count(*) FROM pg_depend d JOIN pg_rewrite r ON d.objid = r.oid
          WHERE r.ev_class = 'stock'::regclass AND d.refclassid = 'pg_proc'::regclass",
    )
    .unwrap();
    assert_eq!(deps, 0, "the view calls the stock functions only");
    // The view's query is left alone, not the event triggers CREATE VIEW
    // runs, and a subtransaction they abort does not change that.
    c.batch_execute(
        "CREATE FUNCTION et() RETURNS event_trigger LANGUAGE plpgsql AS $$
         BEGIN
             BEGIN PERFORM 1 / 0; EXCEPTION WHEN division_by_zero THEN NULL; END;
             PERFORM set_config('itest.seen', pg_relation_size('t')::text, false);
         END $$;
         CREATE EVENT TRIGGER et ON ddl_command_start WHEN TAG IN ('CREATE VIEW') EXECUTE FUNCTION et();
         CREATE VIEW stock2 AS SELECT pg_relation_size('t'::regclass) AS s;
         DROP EVENT TRIGGER et;",
    )
    .unwrap();
    let seen: String = c.query_one("SELECT current_setting('itest.seen')", &[]).unwrap().get(0);
    assert_eq!(seen, main.to_string(), "the event trigger's call");
    assert_eq!(one(&mut c, "SELECT s FROM stock2"), Some(0));
    // A REVOKE of the stock function still holds.
    c.batch_execute(
        "DROP ROLE IF EXISTS itest_size_reader; CREATE ROLE itest_size_reader;
         REVOKE EXECUTE ON FUNCTION pg_relation_size(regclass, text) FROM PUBLIC;
         SET ROLE itest_size_reader",
    )
    .unwrap();
    expect_sqlstate(&mut c, "SELECT pg_relation_size('t', 'main')", "42501");
    expect_sqlstate(&mut c, "SELECT pg_relation_size('t')", "42501");
    assert_eq!(one(&mut c, "SELECT pg_table_size('t')"), Some(table + main + toast_main));
    c.batch_execute(
        "RESET ROLE; GRANT EXECUTE ON FUNCTION pg_relation_size(regclass, text) TO PUBLIC;
         REVOKE EXECUTE ON FUNCTION pg_relation_size(regclass) FROM PUBLIC;
         SET ROLE itest_size_reader",
    )
    .unwrap();
    // The one-argument form's own REVOKE holds too; the other form is allowed.
    expect_sqlstate(&mut c, "SELECT pg_relation_size('t')", "42501");
    assert_eq!(one(&mut c, "SELECT pg_relation_size('t', 'main')"), Some(main));
    c.batch_execute(
        "RESET ROLE; GRANT EXECUTE ON FUNCTION pg_relation_size(regclass) TO PUBLIC;
         DROP ROLE itest_size_reader",
    )
    .unwrap();
    // An aborted transaction's ROLLBACK TO (named like a size function) reads no catalogs.
    c.batch_execute("BEGIN; SAVEPOINT keep_size").unwrap();
    assert!(c.batch_execute("SELECT 1 / 0").is_err());
    c.batch_execute("ROLLBACK TO SAVEPOINT keep_size; COMMIT").unwrap();
    // As the stock functions: NULL for a relation that is gone, 22023 for a bad fork.
    assert_eq!(one(&mut c, "SELECT pg_relation_size(0::oid)"), None);
    assert_eq!(one(&mut c, "SELECT pg_table_size(0::oid)"), None);
    expect_sqlstate(&mut c, "SELECT pg_relation_size('t', 'nope')", "22023");
}

fn has_map(env: &TestEnv, c: &mut postgres::Client, relnode: u32) -> bool {
    let (_, dir) = engine_db_dir(env, c);
    std::fs::read_dir(&dir).is_ok_and(|d| {
        d.flatten().any(|e| {
            let f = e.file_name().to_string_lossy().into_owned();
            f.starts_with(&format!("{relnode}-")) && f.ends_with(".map")
        })
    })
}

/// The checkpointer writes trees on its own every orioledb.checkpoint_timeout,
/// and once more at a clean shutdown, so trees survive a restart.
#[test]
fn checkpointer_runs_on_schedule_and_at_shutdown() {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_checkpointer");
    // (The worker has no database connection, so pg_stat_activity does not
    // list it; its effect is what is checked.)
    c.batch_execute("ALTER SYSTEM SET orioledb.checkpoint_timeout = '1s'")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    c.batch_execute("CREATE TABLE k1 (id int) USING orioledb")
        .unwrap();
    let n1 = relnode(&mut c, "k1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !has_map(&env, &mut c, n1) {
        assert!(
            std::time::Instant::now() < deadline,
            "no engine checkpoint within 20 s at a 1 s timeout"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    c.batch_execute("ALTER SYSTEM RESET orioledb.checkpoint_timeout")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    // Created and dropped after the last checkpoint: a clean restart keeps
    // the one and forgets the other, without any CHECKPOINT command.
    c.batch_execute("CREATE TABLE k2 (id int) USING orioledb; DROP TABLE k1")
        .unwrap();
    let n2 = relnode(&mut c, "k2");
    drop(c);
    restart_server(&env);
    let mut c = connect(&env, "itest_checkpointer");
    assert!(
        tree_listed(&mut c, n2),
        "a table created before a clean shutdown keeps its tree"
    );
    assert!(
        !tree_listed(&mut c, n1),
        "a table dropped before a clean shutdown stays gone"
    );
}

/// DROP DATABASE takes the database's trees along (files go at the next
/// checkpoint); `CREATE DATABASE ... TEMPLATE` (both strategies) copies a
/// template's orioledb tables — keyed, collated, row-id, toasted, indexed —
/// into trees of the new database that are independent of the template and
/// survive a crash right after the creation.
#[test]
fn databases_with_orioledb_tables() {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_trees_db");
    c.batch_execute(
        "CREATE TABLE d1 (id int) USING orioledb;
         INSERT INTO d1 SELECT generate_series(1, 300);
         CREATE INDEX d1_id ON d1 (id);
         CREATE TABLE d2 (k text COLLATE \"C\" PRIMARY KEY, n int, big text) USING orioledb;
         INSERT INTO d2 SELECT 'k' || g, g, CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 200) END
           FROM generate_series(1, 2000) g;
         CREATE INDEX d2_n ON d2 (n);
         UPDATE d2 SET n = n + 1 WHERE n % 7 = 0;
         CREATE TABLE d3 (k text COLLATE \"en_US\" PRIMARY KEY, n int) USING orioledb;
         INSERT INTO d3 SELECT w || g, g FROM unnest(ARRAY['apple', 'Apple', 'éclair', 'eclair', 'Zebra', 'co-op', 'coop', '_x']) w,
           generate_series(1, 400) g;
         CHECKPOINT",
    )
    .unwrap();
    let (_, dir) = engine_db_dir(&env, &mut c);
    let files = |d: &std::path::Path| std::fs::read_dir(d).map(|r| r.count()).unwrap_or(0);
    assert!(files(&dir) >= 2, "data file and map after CHECKPOINT");
    let digest = "SELECT (SELECT count(*) || ':' || sum(id) FROM d1) || '/' ||
                         (SELECT count(*) || ':' || sum(n) || ':' || md5(string_agg(k || coalesce(big, ''), ',' ORDER BY k)) FROM d2) || '/' ||
                         (SELECT count(*) FROM d2 WHERE n BETWEEN 100 AND 200) || '/' ||
                         (SELECT md5(string_agg(k, ',' ORDER BY k)) FROM d3) || '/' ||
                         (SELECT string_agg(k || n, ',' ORDER BY k) FROM d3 WHERE k IN ('coop17', 'Apple3', 'éclair12', 'nope'))";
    let want = query_text(&mut c, digest);
    drop(c);
    let mut admin = connect(&env, "postgres");
    for (copy, strategy) in [("itest_trees_db_wal", "WAL_LOG"), ("itest_trees_db_file", "FILE_COPY")] {
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {copy} WITH (FORCE)"))
            .unwrap();
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {copy} TEMPLATE itest_trees_db STRATEGY = {strategy}"
            ))
            .unwrap();
        let mut k = connect(&env, copy);
        assert_eq!(query_text(&mut k, digest), want, "{strategy}: the copy's rows");
        for t in ["d1", "d2", "d3"] {
            let r = query_text(&mut k, &format!("SELECT orioledb_check('{t}'::regclass)"));
            assert!(r.starts_with("ok"), "{strategy}: {t}: {r}");
        }
        // Independent: changing the copy leaves the template as it was.
        k.batch_execute("UPDATE d2 SET n = 0; DELETE FROM d1; INSERT INTO d2 VALUES ('new', 1)")
            .unwrap();
        let mut t = connect(&env, "itest_trees_db");
        assert_eq!(query_text(&mut t, digest), want, "{strategy}: the template after the copy changed");
    }
    // A crash right after the creation: the copy comes back from WAL. The
    // template's tables have visibility maps (VACUUM sets their bits), so
    // the WAL_LOG copy logs page images of them, which replay writes into
    // shared buffers before it creates the copy's trees (whose maps it
    // drops): the server once failed to start, its end-of-recovery
    // checkpoint writing a map buffer whose file was gone.
    let mut t = connect(&env, "itest_trees_db");
    for table in ["d1", "d2", "d3"] {
        t.batch_execute(&format!("VACUUM {table}")).unwrap();
    }
    let maps: i64 = t
        .query_one(
            "SELECT count(*) FROM pg_class c, LATERAL pg_relation_size(c.oid, 'vm') s
              WHERE relname IN ('d1', 'd2', 'd3') AND s > 0",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(maps, 3, "every template table has a visibility map to copy");
    drop(t);
    admin
        .batch_execute("DROP DATABASE IF EXISTS itest_trees_db_crash WITH (FORCE)")
        .unwrap();
    admin
        .batch_execute("CREATE DATABASE itest_trees_db_crash TEMPLATE itest_trees_db")
        .unwrap();
    drop(admin);
    crash_and_restart(&env);
    let mut k = connect(&env, "itest_trees_db_crash");
    assert_eq!(query_text(&mut k, digest), want, "the copy after a crash");
    // Replay placed the language-collated keys in their order (the tree's
    // descriptor is replayed before any record holding its keys).
    for t in ["d1", "d2", "d3"] {
        let r = query_text(&mut k, &format!("SELECT orioledb_check('{t}'::regclass)"));
        assert!(r.starts_with("ok"), "after the crash: {t}: {r}");
    }
    drop(k);
    // A copy whose map had bits on disk (VACUUM sets them, CHECKPOINT
    // writes them) loses their clears in a crash (a DELETE clears them in
    // shared buffers only; map changes are not logged): recovery empties
    // the map, so an index-only scan counts only the rows left.
    let mut admin = connect(&env, "postgres");
    for sql in [
        "DROP DATABASE IF EXISTS itest_trees_db_crash2 WITH (FORCE)",
        "CREATE DATABASE itest_trees_db_crash2 TEMPLATE itest_trees_db",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let mut k = connect(&env, "itest_trees_db_crash2");
    for sql in ["VACUUM d1", "CHECKPOINT", "DELETE FROM d1 WHERE id % 2 = 0"] {
        k.batch_execute(sql).unwrap();
    }
    drop((k, admin));
    crash_and_restart(&env);
    let mut k = connect(&env, "itest_trees_db_crash2");
    let count = |k: &mut Client, only_index: bool| {
        let set = if only_index {
            "SET enable_seqscan = off; SET enable_bitmapscan = off"
        } else {
            "SET enable_seqscan = on; SET enable_indexonlyscan = off; SET enable_bitmapscan = off; SET enable_indexscan = off"
        };
        k.batch_execute(set).unwrap();
        // (A row-id table: index-only scans of keyed tables are not offered.)
        let q = "SELECT count(*)::text FROM d1 WHERE id > 0";
        let plan: String = k
            .query(&format!("EXPLAIN {q}"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0) + "\n")
            .collect();
        assert_eq!(plan.contains("Index Only Scan"), only_index, "{plan}");
        let n = query_text(k, q);
        k.batch_execute("RESET ALL").unwrap();
        n
    };
    assert_eq!(count(&mut k, true), count(&mut k, false), "an index-only scan of the copy after a crash");
    drop(k);
    let mut admin = connect(&env, "postgres");
    for db in [
        "itest_trees_db",
        "itest_trees_db_wal",
        "itest_trees_db_file",
        "itest_trees_db_crash",
        "itest_trees_db_crash2",
    ] {
        admin
            .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .unwrap();
    }
    admin.batch_execute("CHECKPOINT").unwrap();
    assert_eq!(
        files(&dir),
        0,
        "the dropped database's trees are removed: {}",
        dir.display()
    );
}

/// Several backends create, truncate and drop orioledb tables at once while
/// another one checkpoints: the shared tree directory stays consistent — one
/// tree per table, none left over, every tree passes the checker.
#[test]
fn concurrent_table_lifecycles_across_backends() {
    let (env, _g) = require_server!();
    drop(fresh_db(&env, "itest_trees_conc"));
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let ck = s.spawn(|| {
            let mut c = connect(&env, "itest_trees_conc");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.batch_execute("CHECKPOINT").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let env = &env;
                s.spawn(move || {
                    let mut c = connect(env, "itest_trees_conc");
                    for i in 0..25 {
                        let t = format!("w{w}_t{i}");
                        c.batch_execute(&format!(
                            "CREATE TABLE {t} (id int) USING orioledb WITH (compress = {})",
                            i % 3
                        ))
                        .unwrap();
                        if i % 3 == 0 {
                            c.batch_execute(&format!("TRUNCATE {t}")).unwrap();
                        }
                        if i % 2 == 0 {
                            c.batch_execute(&format!("DROP TABLE {t}")).unwrap();
                        }
                        if i % 5 == 0 {
                            c.batch_execute(&format!(
                                "BEGIN; CREATE TABLE {t}_rb (id int) USING orioledb; ROLLBACK"
                            ))
                            .unwrap();
                        }
                    }
                })
            })
            .collect();
        for h in workers {
            h.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ck.join().unwrap();
    });
    let mut c = connect(&env, "itest_trees_conc");
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'orioledb'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 4 * 12, "12 of each worker's 25 tables survive");
    let (trees, orphans): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE reloid IS NULL) FROM orioledb_trees",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((trees, orphans), (tables, 0), "exactly one tree per table");
    let bad: i64 = c
        .query_one(
            "SELECT count(*) FROM orioledb_trees t, LATERAL orioledb_table_compression(t.reloid::oid) l \
             WHERE orioledb_check(t.reloid::oid) NOT LIKE 'ok:%' OR t.compress <> l.primary_compress",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(bad, 0);
}

/// The current database's OID and its engine directory
/// (`$PGDATA/orioledb_data/<database oid>`).
fn engine_db_dir(env: &TestEnv, c: &mut postgres::Client) -> (u32, std::path::PathBuf) {
    let dboid: postgres::types::Oid = c
        .query_one(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    let dir = env
        .pgdata
        .as_ref()
        .expect("ORIOLEDB_TEST_PGDATA")
        .join("orioledb_data")
        .join(dboid.to_string());
    (dboid, dir)
}

/// The compression options survive pg_dump and restore (they are ordinary
/// reloptions in the dump, and restoring goes through the options hook).
#[test]
fn compression_options_survive_dump_and_restore() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_dump_src");
    c.batch_execute(
        "CREATE TABLE dumped (id int, v text) USING orioledb WITH (compress = 4, toast_compress = 9, fillfactor = 80)",
    )
    .unwrap();
    let out = client_command(&env, "pg_dump")
        .args(["--schema-only", "itest_dump_src"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8(out.stdout).unwrap();
    assert!(
        dump.contains("compress='4'") || dump.contains("compress=4"),
        "{dump}"
    );
    let mut d = fresh_db(&env, "itest_dump_dst");
    // The dump creates the extension itself; restore into a database with it.
    d.batch_execute("DROP EXTENSION orioledb_rs").unwrap();
    drop(d);
    // The dump holds psql meta-commands (\restrict): restore it with psql.
    let mut psql = client_command(&env, "psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .args(["-d", "itest_dump_dst", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    psql.stdin
        .take()
        .unwrap()
        .write_all(dump.as_bytes())
        .unwrap();
    let res = psql.wait_with_output().unwrap();
    assert!(
        res.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    let mut d = connect(&env, "itest_dump_dst");
    let levels = d
        .query_one(
            "SELECT * FROM orioledb_table_compression('dumped'::regclass)",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            levels.get::<_, i32>(0),
            levels.get::<_, i32>(1),
            levels.get::<_, i32>(2)
        ),
        (4, 4, 9)
    );
    let am: String = d
        .query_one("SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 'dumped'", &[])
        .unwrap()
        .get(0);
    assert_eq!(am, "orioledb");
    let tree: i32 = d
        .query_one(
            "SELECT compress FROM orioledb_trees WHERE reloid = 'dumped'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tree, 4, "the restored table's tree uses the restored level");
}

/// Tables created and dropped faster than the checkpointer's schedule (a
/// test suite, work tables): a dropped table's metadata chunks come back
/// at the drop and its tree slot at an engine checkpoint, which CREATE
/// TABLE takes itself when no slot is left, so 1,500 create/insert/drop
/// cycles (more than the default metadata holds at about three chunks
/// each) all succeed with the default settings.
#[test]
fn creating_and_dropping_many_tables_never_runs_out_of_metadata() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_many_tables");
    let cycles = knob("ORIOLEDB_CREATE_DROP_CYCLES", 1500);
    for i in 0..cycles {
        c.batch_execute(&format!(
            "CREATE TABLE churn_{i} (id int PRIMARY KEY, v text) USING orioledb;
             INSERT INTO churn_{i} VALUES (1, 'x');
             DROP TABLE churn_{i};"
        ))
        .unwrap_or_else(|e| panic!("cycle {i}: {}", describe(&e)));
    }
    // Leave no metadata pressure behind: the checkpoints release the
    // dropped tables' slots now, not while later tests run (an engine
    // checkpoint in the middle of a test's inserts writes its pages twice).
    c.batch_execute("CHECKPOINT; CHECKPOINT").unwrap();
}

/// Copy-on-write writes every changed page to a new extent and frees the
/// old one only when a later checkpoint supersedes it, in the middle of
/// the file where truncation cannot reach: rewriting every row three
/// times left the data file at about twice the tree. Checkpoints punch
/// those extents out, so the space the file holds (what
/// `orioledb_relation_size` and `du` count) follows the tree's pages
/// while the file's length (`file_bytes`) keeps its holes.
#[test]
fn churned_files_hold_about_their_live_pages() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_punch");
    c.batch_execute(
        "CREATE TABLE churn (id int PRIMARY KEY, n int, pad text) USING orioledb;
         INSERT INTO churn SELECT g, 0, repeat('x', 150) FROM generate_series(1, 20000) g;
         CHECKPOINT;",
    )
    .unwrap();
    let node = relnode(&mut c, "churn");
    for round in 1..=3 {
        c.batch_execute("UPDATE churn SET n = n + 1; CHECKPOINT;").unwrap();
        let r = c
            .query_one(
                "SELECT pages, file_bytes, orioledb_tree_bytes('churn'::regclass)
                   FROM orioledb_trees WHERE relnode = $1",
                &[&node],
            )
            .unwrap();
        let (pages, file_bytes, held): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
        assert!(
            held * 4 <= pages * 8192 * 5,
            "round {round}: {held} bytes held for {pages} pages (file {file_bytes} bytes long)"
        );
        if round == 3 {
            assert!(
                file_bytes * 4 > pages * 8192 * 5,
                "the holes are inside the file: {file_bytes} bytes long for {pages} pages"
            );
        }
    }
}

/// Pages and keys of `table`'s tree.
fn tree_size(c: &mut postgres::Client, table: &str) -> (i64, u64) {
    let pages: i64 = c
        .query_one(
            "SELECT pages FROM orioledb_trees WHERE reloid = $1::text::regclass",
            &[&table],
        )
        .unwrap()
        .get(0);
    (pages, tree_keys(c, &format!("'{table}'::regclass")))
}

/// What the last changes of a table leave comes back without VACUUM once
/// nobody writes to it (the orioledb checkpointer's sweep of quiet trees,
/// `am/quiet.rs`), but not while a snapshot that may still see it lives:
/// a batch UPDATE of every row, twice, of a table without a primary key
/// and one with, autovacuum off as in seed 004.
#[test]
fn quiet_tables_get_their_space_back_without_vacuum() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_quiet");
    let rows = 6000u64;
    // Keys a row keeps: its version and that version's row-id map entry,
    // plus in a keyed table the chain root's map entry (the redirect its
    // index entries name, `am::layout::hot`).
    for (table, key, per_row) in [("quiet_ids", "", 2), ("quiet_keyed", " PRIMARY KEY", 3)] {
        c.batch_execute(&format!(
            "CREATE TABLE {table} (id int{key}, n int, pad text) USING orioledb
                 WITH (autovacuum_enabled = false);
             CREATE INDEX ON {table} (id);
             INSERT INTO {table} SELECT g, 0, repeat('y', 60) FROM generate_series(1, {rows}) g;"
        ))
        .unwrap();
        let (loaded_pages, _) = tree_size(&mut c, table);
        // A snapshot from before the updates holds their versions.
        let mut old = connect(&env, "itest_trees_quiet");
        old.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {table}"
        ))
        .unwrap();
        for _ in 0..2 {
            c.batch_execute(&format!("UPDATE {table} SET n = n + 1")).unwrap();
        }
        let sum = format!("SELECT count(*) || ' ' || sum(n) FROM {table}");
        assert_eq!(query_text(&mut c, &sum), format!("{rows} {}", 2 * rows));
        std::thread::sleep(std::time::Duration::from_secs(3));
        let (held_pages, held_keys) = tree_size(&mut c, table);
        assert!(
            held_keys >= 3 * rows,
            "{table}: versions an open snapshot may see were pruned: {held_keys} keys"
        );
        assert_eq!(query_text(&mut old, &sum), format!("{rows} 0"), "{table}: the old snapshot");
        old.batch_execute("COMMIT").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let (pages, keys) = loop {
            let (pages, keys) = tree_size(&mut c, table);
            if (keys <= per_row * rows + 1 && pages * 2 <= held_pages) || std::time::Instant::now() > deadline {
                break (pages, keys);
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
        };
        assert!(
            keys <= per_row * rows + 1 && pages * 2 <= held_pages && pages <= loaded_pages * 2,
            "{table}: loaded {loaded_pages} pages, {held_pages} pages and {held_keys} keys \
             while a snapshot held them, {pages} pages and {keys} keys 30 s after"
        );
        assert_eq!(query_text(&mut c, &sum), format!("{rows} {}", 2 * rows), "{table}");
        let vacuums = query_text(
            &mut c,
            &format!(
                "SELECT (vacuum_count + autovacuum_count)::text FROM pg_stat_user_tables \
                  WHERE relid = '{table}'::regclass"
            ),
        );
        assert_eq!(vacuums, "0", "{table}: no VACUUM ran");
        // Reads through the index still find every row.
        c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
        let through_index = format!("SELECT count(*)::text FROM {table} WHERE id > 0");
        assert_eq!(query_text(&mut c, &through_index), rows.to_string(), "{table}");
        c.batch_execute("RESET enable_seqscan; RESET enable_bitmapscan").unwrap();
    }
}

/// A trickle of writes (a row updated every 400 ms) after a batch UPDATE
/// of every row does not keep the table from the quiet sweep: the sweep
/// leaves alone only a tree whose tally grows by more than a 64th of its
/// pages a second (a busy table, whose backends sweep it themselves).
/// With "unchanged since the last round" as the rule, this table kept its
/// batch's old versions while the trickle lasted. Alone on the server:
/// every round needs the cluster's horizon past the trickle's last update.
#[test]
fn a_trickle_of_writes_does_not_keep_a_table_from_its_quiet_sweep() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_trees_quiet_trickle";
    let mut c = fresh_db(&env, db);
    let rows = 6000u64;
    c.batch_execute(&format!(
        "CREATE TABLE tq (id int PRIMARY KEY, n int, pad text) USING orioledb
             WITH (autovacuum_enabled = false);
         INSERT INTO tq SELECT g, 0, repeat('y', 200) FROM generate_series(1, {rows}) g;"
    ))
    .unwrap();
    // Held across the batch, so that its backend cannot prune as it goes.
    let mut old = connect(&env, db);
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM tq")
        .unwrap();
    for _ in 0..2 {
        c.batch_execute("UPDATE tq SET n = n + 1").unwrap();
    }
    let (_, held_keys) = tree_size(&mut c, "tq");
    assert!(held_keys >= 4 * rows, "the batch's versions were pruned under a snapshot: {held_keys} keys");
    old.batch_execute("COMMIT").unwrap();
    /// Stops the trickle however the test ends.
    struct Stop(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopper = Stop(stop.clone());
    let trickle = {
        let stop = stop.clone();
        let env = env.clone();
        std::thread::spawn(move || {
            let mut w = connect(&env, db);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                w.batch_execute(&format!("UPDATE tq SET n = n + 1 WHERE id = {}", 1 + i % 7))
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(400));
            }
        })
    };
    // A row keeps its version, that version's map entry and its chain
    // root's (see quiet_tables_get_their_space_back_without_vacuum); the
    // trickle's rows a few more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let keys = loop {
        let (_, keys) = tree_size(&mut c, "tq");
        if keys <= 3 * rows + 30 || std::time::Instant::now() > deadline {
            break keys;
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    drop(stopper);
    trickle.join().unwrap();
    assert!(
        keys <= 3 * rows + 30,
        "{held_keys} keys after the batch, {keys} after 30 s of a trickle of updates"
    );
    assert_eq!(
        query_text(&mut c, "SELECT count(*) || ' ' || min(n) FROM tq"),
        format!("{rows} 2")
    );
}

/// The quiet sweep skips a table whose lock another session holds, and
/// releases nothing then: its lock value was built (and dropped, releasing
/// the lock) for a try that failed too, a "you don't own a lock" WARNING
/// in the log at every round.
#[test]
fn a_quiet_sweep_that_finds_its_table_locked_releases_nothing() {
    let (env, _g) = require_server!();
    if env.log.is_none() {
        eprintln!("SKIP: needs ORIOLEDB_TEST_LOG");
        return;
    }
    let db = "itest_trees_quiet_locked";
    let mut c = fresh_db(&env, db);
    c.batch_execute(
        "CREATE TABLE q (id int, n int) USING orioledb WITH (autovacuum_enabled = false);
         INSERT INTO q SELECT g, 0 FROM generate_series(1, 2000) g;",
    )
    .unwrap();
    let from = log_len(&env);
    // Held before the updates, so the sweep finds the table locked on
    // every round (and has not swept it before).
    let mut locker = connect(&env, db);
    locker.batch_execute("BEGIN; LOCK q IN SHARE UPDATE EXCLUSIVE MODE").unwrap();
    c.batch_execute("UPDATE q SET n = n + 1; UPDATE q SET n = n + 1").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(5));
    locker.batch_execute("COMMIT").unwrap();
    let log = log_since(&env, from);
    assert!(
        !log.contains("you don't own a lock"),
        "the sweep released a lock it did not hold:\n{}",
        log.lines().filter(|l| l.contains("don't own")).take(3).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(query_text(&mut c, "SELECT count(*) || ' ' || sum(n) FROM q"), "2000 4000");
}

/// The background sweep runs in a process outside PostgreSQL's proc array,
/// where `TransactionIdIsInProgress` skips one backend's slot: it took
/// that backend's running transaction for aborted and removed the versions
/// it had written, so its rows were gone once it committed (seen under
/// load in `tests/hot.rs`). Several sessions update a few rows each (fewer
/// than a tally flush, so the table still looks quiet) and stay open while
/// a newer transaction commits and the sweep prunes the table; every row
/// must be there with its new value after they commit.
#[test]
fn a_quiet_sweep_keeps_the_versions_of_running_transactions() {
    let (env, _g) = require_server!();
    let db = "itest_trees_quiet_running";
    let mut c = fresh_db(&env, db);
    // Connected first, so that one of them likely holds the proc array's
    // first slots (the one a process outside it skips).
    let mut open: Vec<_> = (0..6).map(|_| connect(&env, db)).collect();
    let rows = 3000;
    c.batch_execute(&format!(
        "CREATE TABLE quiet_run (id int PRIMARY KEY, n int, pad text) USING orioledb
             WITH (autovacuum_enabled = false);
         INSERT INTO quiet_run SELECT g, 0, repeat('y', 60) FROM generate_series(1, {rows}) g;
         UPDATE quiet_run SET n = n + 1;
         UPDATE quiet_run SET n = n + 1;"
    ))
    .unwrap();
    let (held_pages, _) = tree_size(&mut c, "quiet_run");
    for (s, o) in open.iter_mut().enumerate() {
        let lo = s * 500 + 1;
        o.batch_execute(&format!(
            "BEGIN; UPDATE quiet_run SET n = n + 10 WHERE id BETWEEN {lo} AND {lo} + 9"
        ))
        .unwrap();
    }
    // A transaction newer than theirs completes: the proc array is searched.
    c.batch_execute("SELECT txid_current()").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tree_size(&mut c, "quiet_run").0 * 2 > held_pages && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let (pages, _) = tree_size(&mut c, "quiet_run");
    assert!(pages * 2 <= held_pages, "not swept in 30 s: {pages} of {held_pages} pages");
    for o in &mut open {
        o.batch_execute("COMMIT").unwrap();
    }
    let sum = "SELECT count(*) || ' ' || sum(n) FROM quiet_run";
    assert_eq!(
        query_text(&mut c, sum),
        format!("{rows} {}", 2 * rows + 6 * 10 * 10),
        "rows updated by transactions running during the sweep"
    );
}

/// Database statements that would put orioledb tables outside the default
/// tablespace are refused (0A000), and the tables stay: the engine would
/// not follow their relation files there, and its orphan sweep took the
/// trees of a database moved by `ALTER DATABASE ... SET TABLESPACE` for
/// those of dropped tables (every row lost at the next CHECKPOINT). A
/// database without orioledb tables still moves.
#[test]
fn databases_with_orioledb_tables_stay_in_the_default_tablespace() {
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_ts_db");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g",
    )
    .unwrap();
    drop(c);
    let dir = std::env::temp_dir().join(format!("itest_ts_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let owner = env.os_user.clone();
    let chown = std::process::Command::new("chown")
        .arg(&owner)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(chown.success(), "chown {owner} {}", dir.display());
    let mut admin = connect(&env, "postgres");
    for sql in [
        "DROP DATABASE IF EXISTS itest_ts_copy".to_string(),
        "DROP DATABASE IF EXISTS itest_ts_plain".to_string(),
        "DROP TABLESPACE IF EXISTS itest_ts".to_string(),
        format!("CREATE TABLESPACE itest_ts LOCATION '{}'", dir.display()),
    ] {
        admin.batch_execute(&sql).unwrap();
    }
    let e = expect_sqlstate(&mut admin, "ALTER DATABASE itest_ts_db SET TABLESPACE itest_ts", "0A000");
    assert!(e.message().contains("tablespace \"itest_ts\""), "{}", e.message());
    // PostgreSQL's own errors stay its own, and DEFAULT is no move.
    expect_sqlstate(&mut admin, "ALTER DATABASE itest_ts_db SET TABLESPACE no_such_ts", "42704");
    expect_sqlstate(&mut admin, "ALTER DATABASE itest_ts_db SET TABLESPACE pg_global", "22023");
    expect_sqlstate(
        &mut admin,
        "CREATE DATABASE itest_ts_copy TEMPLATE itest_ts_db TABLESPACE itest_ts",
        "0A000",
    );
    // The orphan sweep runs after the engine's checkpoint.
    admin.batch_execute("CHECKPOINT").unwrap();
    let mut c = connect(&env, "itest_ts_db");
    assert_eq!(query_text(&mut c, "SELECT count(*)::text FROM t"), "500");
    drop(c);
    for sql in [
        "CREATE DATABASE itest_ts_plain",
        "ALTER DATABASE itest_ts_plain SET TABLESPACE itest_ts",
        "CREATE DATABASE itest_ts_copy TEMPLATE itest_ts_db TABLESPACE DEFAULT",
        "CHECKPOINT",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let mut k = connect(&env, "itest_ts_copy");
    assert_eq!(query_text(&mut k, "SELECT count(*)::text FROM t"), "500");
    drop(k);
    for sql in [
        "DROP DATABASE itest_ts_copy",
        "DROP DATABASE itest_ts_plain",
        "DROP DATABASE itest_ts_db",
        "DROP TABLESPACE itest_ts",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// CREATE DATABASE waits (up to five seconds) for the template's other
/// sessions to leave, and one may create an orioledb table meanwhile: the
/// copy must get that table's tree too, although the template had none
/// when the statement began.
#[test]
fn a_table_made_in_the_template_while_create_database_waits_is_copied() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_trees_tpl_race");
    let mut admin = connect(&env, "postgres");
    admin.batch_execute("DROP DATABASE IF EXISTS itest_trees_tpl_race_copy").unwrap();
    let waiter = {
        let env = env.clone();
        std::thread::spawn(move || {
            let mut admin = connect(&env, "postgres");
            admin.batch_execute("CREATE DATABASE itest_trees_tpl_race_copy TEMPLATE itest_trees_tpl_race")
        })
    };
    // Until CREATE DATABASE is waiting for this session to go (it gives
    // up after five seconds: the table comes at once then).
    let start = std::time::Instant::now();
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE state = 'active' AND query LIKE 'CREATE DATABASE itest_trees_tpl_race_copy%'",
                &[],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "CREATE DATABASE never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Past its look at the template (its ShareLock is taken before the wait).
    std::thread::sleep(std::time::Duration::from_millis(300));
    c.batch_execute(
        "CREATE TABLE late (id int PRIMARY KEY, v text) USING orioledb;
         INSERT INTO late SELECT g, 'v' || g FROM generate_series(1, 100) g;",
    )
    .unwrap();
    drop(c);
    waiter
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("CREATE DATABASE: {}", describe(&e)));
    let mut copy = connect(&env, "itest_trees_tpl_race_copy");
    let n: i64 = copy
        .query_one("SELECT count(*) FROM late", &[])
        .unwrap_or_else(|e| panic!("the copy's table: {}", describe(&e)))
        .get(0);
    assert_eq!(n, 100, "the copy has the table made while it waited");
    drop(copy);
    admin.batch_execute("DROP DATABASE itest_trees_tpl_race_copy").unwrap();
}

/// More tables than the engine's metadata region holds at once (about
/// 2,000 small trees with the defaults): 3,000 tables, each with a primary
/// key, a toastable column (every tenth with a toasted value, so a toast
/// tree too) and a secondary index, created in batches while another
/// backend checkpoints in a loop and a third creates, fills and drops
/// tables (half of them in rolled-back transactions). Idle trees are
/// evicted and loaded again on use, so every table reads back — after a
/// crash too — and dropping them all leaves no file behind.
#[test]
fn more_tables_than_the_metadata_holds_at_once() {
    let (env, _g) = require_server_exclusive!();
    let db = "itest_more_tables";
    drop(fresh_db(&env, db));
    let n = knob("ORIOLEDB_MANY_TABLES", 3000);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let ck = s.spawn(|| {
            let mut c = connect(&env, db);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.batch_execute("CHECKPOINT").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        let churn = s.spawn(|| {
            let mut c = connect(&env, db);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (begin, end) = if i % 2 == 0 { ("BEGIN;", "ROLLBACK") } else { ("", "") };
                c.batch_execute(&format!(
                    "{begin} CREATE TABLE churn_{i} (id int PRIMARY KEY, v text) USING orioledb;
                     INSERT INTO churn_{i} VALUES (1, repeat('c', 5000));
                     {end}"
                ))
                .unwrap_or_else(|e| panic!("churn {i}: {}", describe(&e)));
                if i % 2 == 1 {
                    c.batch_execute(&format!("DROP TABLE churn_{i}")).unwrap();
                }
                i += 1;
            }
        });
        // Stops the helpers however this thread leaves (a panic too: the
        // scope waits for them).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let stopper = Stop(&stop);
        let mut c = connect(&env, db);
        for b in 0..n.div_ceil(100) {
            let (lo, hi) = (b * 100, ((b + 1) * 100).min(n) - 1);
            c.batch_execute(&format!(
                "DO $$ BEGIN FOR i IN {lo}..{hi} LOOP
                   EXECUTE format('CREATE TABLE m_%s (id int PRIMARY KEY, v text, w int) USING orioledb', i);
                   EXECUTE format('CREATE INDEX ON m_%s (w)', i);
                   EXECUTE format('INSERT INTO m_%s SELECT g, CASE WHEN mod(%s, 10) = 0 AND g = 1
                                   THEN repeat(md5(g::text), 300) ELSE md5(g::text) END, g * %s
                                   FROM generate_series(1, 1 + mod(%s, 7)) g', i, i, i, i);
                 END LOOP; END $$"
            ))
            .unwrap_or_else(|e| panic!("tables {lo}..{hi}: {}", describe(&e)));
        }
        drop(stopper);
        ck.join().unwrap();
        churn.join().unwrap();
    });
    let expected = |i: u64| {
        let rows = 1 + i % 7;
        let len = (1..=rows).map(|g| if i % 10 == 0 && g == 1 { 9600 } else { 32 }).sum::<u64>();
        format!("{rows}|{len}|{}", (1..=rows).map(|g| g * i).sum::<u64>())
    };
    let check_all = |c: &mut postgres::Client, when: &str| {
        for i in 0..n {
            let got = query_text(
                c,
                &format!(
                    "SELECT count(*) || '|' || sum(length(v)) || '|' || sum(w) FROM m_{i}"
                ),
            );
            assert_eq!(got, expected(i), "table m_{i} {when}");
            if i % 97 == 0 {
                // Through the secondary index too (w = i only in row 1).
                c.batch_execute("SET enable_seqscan = off").unwrap();
                let via_index =
                    query_text(c, &format!("SELECT count(*)::text FROM m_{i} WHERE w = {i}"));
                c.batch_execute("RESET enable_seqscan").unwrap();
                assert_eq!(via_index, "1", "m_{i} by its index {when}");
            }
        }
    };
    let mut c = connect(&env, db);
    check_all(&mut c, "after the load");
    let trees: i64 = c
        .query_one("SELECT count(*) FROM orioledb_table", &[])
        .unwrap()
        .get(0);
    assert!(trees >= n as i64, "orioledb_table lists the cold tables too: {trees}");
    drop(c);
    immediate_restart(&env);
    let mut c = connect(&env, db);
    check_all(&mut c, "after a crash");
    for b in 0..n.div_ceil(500) {
        let (lo, hi) = (b * 500, ((b + 1) * 500).min(n) - 1);
        c.batch_execute(&format!(
            "DO $$ BEGIN FOR i IN {lo}..{hi} LOOP EXECUTE format('DROP TABLE m_%s', i); END LOOP; END $$"
        ))
        .unwrap();
    }
    c.batch_execute("CHECKPOINT; CHECKPOINT").unwrap();
    let (_, dir) = engine_db_dir(&env, &mut c);
    let left: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "files left after dropping every table: {left:?}");
}
