//! Integration tests: tables are stored in primary-key order, the planner
//! reads them through the primary tree ("OrioleDB Primary Scan") for key
//! lookups, ranges and key order, and concurrent changes found that way are
//! re-checked like heap's (EvalPlanQual). Results themselves are compared
//! with heap in `tests/sql/primary_key.sql`.

#[macro_use]
mod common;

use common::*;
use std::time::Duration;

#[test]
fn tables_are_stored_and_read_in_key_order() {
    // Alone: it counts pruned versions, which other tests' open
    // transactions would keep (they hold the pruning horizon back).
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_pk_plans");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text, n int) USING orioledb;
         INSERT INTO t SELECT g, 'v' || g, g % 7 FROM generate_series(1, 20000) g ORDER BY md5(g::text);
         CREATE TABLE c2 (a text COLLATE \"C\", b int8, PRIMARY KEY (a, b)) USING orioledb;
         INSERT INTO c2 SELECT chr(97 + g % 5), g FROM generate_series(1, 5000) g;
         CREATE TABLE norow (id int, v text) USING orioledb;
         ANALYZE t; ANALYZE c2;",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "t"), "id");
    assert_eq!(key_of(&mut c, "c2"), "a, b");
    assert_eq!(key_of(&mut c, "norow"), "row id");
    c.batch_execute(
        "CREATE TABLE nk (n numeric PRIMARY KEY) USING orioledb;
         CREATE TABLE fk (f float8 PRIMARY KEY) USING orioledb;
         CREATE TABLE tk (s text COLLATE \"C.utf8\" PRIMARY KEY) USING orioledb;",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "nk"), "n");
    // Further types with order-preserving keys (results: tests/sql/types.sql);
    // the tables are empty, so the planner is steered off a sort.
    c.batch_execute("SET enable_seqscan = off; SET enable_sort = off").unwrap();
    for ty in ["interval", "money", "pg_lsn", "\"char\"", "macaddr", "macaddr8", "timetz", "name", "inet", "cidr"] {
        let t = format!("kt_{}", ty.replace('"', ""));
        c.batch_execute(&format!(
            "CREATE TABLE {t} (k {ty} PRIMARY KEY, v int) USING orioledb; ANALYZE {t};"
        ))
        .unwrap();
        assert_eq!(key_of(&mut c, &t), "k", "{ty}");
        let p = plan(&mut c, &format!("SELECT * FROM {t} ORDER BY k DESC LIMIT 1"));
        assert!(p.contains("OrioleDB Primary Scan") && !p.contains("Sort"), "{ty}:\n{p}");
    }
    c.batch_execute("RESET enable_seqscan; RESET enable_sort").unwrap();
    assert_eq!(key_of(&mut c, "tk"), "s");
    assert_eq!(key_of(&mut c, "fk"), "f");
    // ICU collations key the tree by sort key; a collation is judged by its
    // provider and locale, not its name; varchar keys like text.
    c.batch_execute(
        "CREATE COLLATION public.\"C.utf8\" (provider = icu, locale = 'en');
         CREATE TABLE ick (s text COLLATE public.\"C.utf8\" PRIMARY KEY) USING orioledb;
         CREATE TABLE vk (s varchar(10) COLLATE \"C\" PRIMARY KEY) USING orioledb;
         INSERT INTO ick SELECT g::text FROM generate_series(1, 5000) g;
         ANALYZE ick;",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "ick"), "s");
    assert_eq!(key_of(&mut c, "vk"), "s");
    for q in [
        "SELECT * FROM ick WHERE s = '42'",
        "SELECT * FROM ick WHERE s > '4999' AND s < '5'",
        "SELECT * FROM vk WHERE s = 'x'",
        "SELECT * FROM fk WHERE f = 1.5",
    ] {
        let p = plan(&mut c, q);
        assert!(p.contains("Primary Key Cond"), "{q}: expected the primary scan, got\n{p}");
    }
    let p = plan(&mut c, "SELECT * FROM ick ORDER BY s LIMIT 3");
    assert!(p.contains("OrioleDB Primary Scan") && !p.contains("Sort"), "{p}");
    // Encoded keys up to 1000 bytes; longer ones are refused (54000) and
    // leave nothing behind.
    c.batch_execute(
        "CREATE TABLE longk (s text COLLATE \"C\" PRIMARY KEY, v text) USING orioledb;
         INSERT INTO longk VALUES (repeat('a', 990), repeat('x', 5000));",
    )
    .unwrap();
    expect_sqlstate(&mut c, "INSERT INTO longk VALUES (repeat('b', 1200), 'y')", "54000");
    assert_eq!(
        query_text(&mut c, "SELECT count(*) || ' ' || sum(length(s)) || ' ' || sum(length(v)) FROM longk"),
        "1 990 5000"
    );
    // A libc language collation: the tree compares keys with strcoll_l under
    // the collation's locale, so ranges and ORDER BY are served too.
    c.batch_execute(
        "CREATE COLLATION en_libc (provider = libc, locale = 'en_US.UTF-8');
         CREATE TABLE lk (s text COLLATE en_libc PRIMARY KEY, n int) USING orioledb;
         INSERT INTO lk SELECT g::text, g FROM generate_series(1, 5000) g;
         ANALYZE lk;",
    )
    .unwrap_or_else(|e| panic!("libc collation (scripts/setup.sh generates en_US.UTF-8): {}", describe(&e)));
    assert_eq!(key_of(&mut c, "lk"), "s");
    for q in [
        "SELECT * FROM lk WHERE s = '42'",
        "SELECT * FROM lk WHERE s IN ('1', '2')",
        "UPDATE lk SET n = 0 WHERE s = '7'",
        "SELECT * FROM lk WHERE s > '4999' AND s < '5'",
    ] {
        let p = plan(&mut c, q);
        assert!(p.contains("Primary Key Cond"), "{q}: expected the primary scan, got\n{p}");
    }
    for q in [
        "SELECT * FROM lk ORDER BY s LIMIT 3",
        "SELECT * FROM lk ORDER BY s DESC LIMIT 3",
    ] {
        let p = plan(&mut c, q);
        assert!(p.contains("OrioleDB Primary Scan") && !p.contains("Sort"), "{q}: the tree is in the collation's order\n{p}");
    }
    // A one-column bool key (the shortest version key) is pruned too.
    c.batch_execute(
        "CREATE TABLE bk (b bool PRIMARY KEY, n int) USING orioledb;
         INSERT INTO bk VALUES (true, 0), (false, 0);
         CREATE PROCEDURE bump() LANGUAGE plpgsql AS $$
           BEGIN FOR i IN 1..2000 LOOP UPDATE bk SET n = n + 1 WHERE b; COMMIT; END LOOP; END $$;",
    )
    .unwrap();
    c.batch_execute("CALL bump()").unwrap();
    let keys = tree_keys(&mut c, "'bk'::regclass");
    assert!(keys < 200, "dead versions of a bool-keyed row are pruned: {keys} keys");
    // Rows inserted in random order come back in key order from a plain scan.
    let ids: Vec<i32> = c
        .query("SELECT id FROM t", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 20000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "a sequential scan returns key order");

    for q in [
        "SELECT * FROM t WHERE id = 42",
        "SELECT * FROM t WHERE id IN (1, 5, 9)",
        "SELECT * FROM t WHERE id = ANY ('{1,2}'::int[])",
        "SELECT * FROM t WHERE id > 19990",
        "SELECT * FROM t WHERE id BETWEEN 100 AND 120",
        "SELECT * FROM t ORDER BY id LIMIT 10",
        "SELECT * FROM t ORDER BY id DESC LIMIT 10",
        "SELECT * FROM t WHERE id < 100 ORDER BY id DESC LIMIT 3",
        "SELECT * FROM t WHERE id = 42::int8",
        "UPDATE t SET n = n + 1 WHERE id = 42",
        "DELETE FROM t WHERE id = 43",
        "SELECT * FROM t WHERE id = 42 FOR UPDATE",
        "SELECT * FROM c2 WHERE a = 'c' AND b = 12",
        "SELECT * FROM c2 WHERE a = 'c' AND b > 4900",
        "SELECT * FROM generate_series(1, 3) g JOIN t ON t.id = g",
    ] {
        let p = plan(&mut c, q);
        assert!(
            p.contains("OrioleDB Primary Scan") && p.contains("Primary Key Cond")
                || q.contains("ORDER BY id") && p.contains("OrioleDB Primary Scan"),
            "{q}: expected the primary scan, got\n{p}"
        );
    }
    // Ten rows, as pgbench's branches: a point lookup still goes through the
    // key (a small table's sequential scan reads every row through the
    // row-id map), a scan of the whole table stays sequential.
    c.batch_execute(
        "CREATE TABLE tiny (id int PRIMARY KEY, n int) USING orioledb;
         INSERT INTO tiny SELECT g, 0 FROM generate_series(1, 10) g; ANALYZE tiny;",
    )
    .unwrap();
    for q in ["UPDATE tiny SET n = n + 1 WHERE id = 5", "SELECT n FROM tiny WHERE id = 5"] {
        let p = plan(&mut c, q);
        assert!(p.contains("Primary Key Cond"), "{q}: expected the primary scan, got\n{p}");
    }
    let p = plan(&mut c, "SELECT * FROM tiny");
    assert!(p.contains("Seq Scan"), "{p}");
    let p = plan(&mut c, "SELECT * FROM t ORDER BY id DESC LIMIT 10");
    assert!(p.contains("Scan Direction: Backward"), "{p}");
    // xmin & co. are not in a custom scan's slot: the btree serves those.
    let p = plan(&mut c, "SELECT xmin, * FROM t WHERE id = 42");
    assert!(!p.contains("OrioleDB Primary Scan"), "{p}");
    // No key, no primary scan.
    let p = plan(&mut c, "SELECT * FROM norow WHERE id = 1");
    assert!(!p.contains("OrioleDB Primary Scan"), "{p}");
    // Prepared statements with parameters, generic plans included.
    c.batch_execute("SET plan_cache_mode = force_generic_plan").unwrap();
    let st = c.prepare("SELECT v FROM t WHERE id = $1").unwrap();
    for id in [7, 8, 19999] {
        let v: String = c.query_one(&st, &[&id]).unwrap().get(0);
        assert_eq!(v, format!("v{id}"));
    }
}

#[test]
fn keys_added_later_and_partitions_key_the_tree() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_pk_rekey");
    c.batch_execute(
        "CREATE TABLE l (a int, b text) USING orioledb;
         INSERT INTO l SELECT g, 'b' || g FROM generate_series(1, 6000) g ORDER BY md5(g::text);
         CREATE INDEX l_b ON l (b);",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "l"), "row id");
    let before: u32 = c
        .query_one("SELECT relfilenode::int8::int4 FROM pg_class WHERE relname = 'l'", &[])
        .unwrap()
        .get::<_, i32>(0) as u32;
    // A failing ADD PRIMARY KEY leaves the table as it was.
    c.batch_execute("INSERT INTO l VALUES (5, 'dup')").unwrap();
    expect_sqlstate(&mut c, "ALTER TABLE l ADD PRIMARY KEY (a)", "23505");
    assert_eq!(key_of(&mut c, "l"), "row id");
    c.batch_execute("DELETE FROM l WHERE b = 'dup'; ALTER TABLE l ADD PRIMARY KEY (a); ANALYZE l")
        .unwrap();
    assert_eq!(key_of(&mut c, "l"), "a");
    let after: i32 = c
        .query_one("SELECT relfilenode::int8::int4 FROM pg_class WHERE relname = 'l'", &[])
        .unwrap()
        .get(0);
    assert_ne!(after as u32, before, "re-keying gives the table a new file");
    // The secondary index still finds every row (row ids were kept).
    c.batch_execute("SET enable_seqscan = off").unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM l WHERE b > ''", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 6000);
    c.batch_execute("RESET enable_seqscan").unwrap();
    let ids: Vec<i32> = c
        .query("SELECT a FROM l", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // (A table this large is read in key order; small keyed tables are
    // read in row-id order, as heap returns their rows.)
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "re-keyed into key order");
    assert!(plan(&mut c, "SELECT * FROM l WHERE a = 7").contains("OrioleDB Primary Scan"));
    c.batch_execute("RESET enable_seqscan; ALTER TABLE l DROP CONSTRAINT l_pkey")
        .unwrap();
    assert!(!plan(&mut c, "SELECT * FROM l WHERE a = 7").contains("OrioleDB Primary Scan"));
    assert_eq!(key_of(&mut c, "l"), "row id", "dropping the key goes back to row-id order");
    let n: i64 = c.query_one("SELECT count(*) FROM l", &[]).unwrap().get(0);
    assert_eq!(n, 6000);

    // A partition created from a parent with a primary key.
    c.batch_execute(
        "CREATE TABLE p (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
         CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (1000) USING orioledb;
         CREATE TABLE p2 (id int NOT NULL, v int) USING orioledb;
         INSERT INTO p2 SELECT g, g FROM generate_series(1000, 1999) g ORDER BY random();
         ALTER TABLE p ATTACH PARTITION p2 FOR VALUES FROM (1000) TO (2000);
         INSERT INTO p SELECT g, g FROM generate_series(0, 999) g ORDER BY random();
         ANALYZE p;",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "p1"), "id");
    assert_eq!(key_of(&mut c, "p2"), "id", "ATTACH PARTITION keys an attached table");
    let p = plan(&mut c, "SELECT * FROM p WHERE id = 1500");
    assert!(p.contains("OrioleDB Primary Scan) on p2"), "{p}");
    let v: i32 = c.query_one("SELECT v FROM p WHERE id = 1500", &[]).unwrap().get(0);
    assert_eq!(v, 1500);
}

#[test]
fn concurrent_updates_through_the_key_are_rechecked() {
    let (env, _g) = require_server!();
    let mut a = fresh_db(&env, "itest_pk_epq");
    a.batch_execute(
        "CREATE TABLE acc (id int PRIMARY KEY, bal int) USING orioledb;
         INSERT INTO acc SELECT g, 0 FROM generate_series(1, 1000) g;
         ANALYZE acc;",
    )
    .unwrap();
    assert!(plan(&mut a, "UPDATE acc SET bal = bal + 1 WHERE id = 1").contains("OrioleDB Primary Scan"));
    let mut b = connect(&env, "itest_pk_epq");
    // The second updater waits, then applies its change to the new version.
    a.batch_execute("BEGIN; UPDATE acc SET bal = bal + 1 WHERE id = 1").unwrap();
    let h = std::thread::spawn(move || {
        let n = b.execute("UPDATE acc SET bal = bal + 10 WHERE id = 1", &[]).unwrap();
        assert_eq!(n, 1, "the waiting update found the new version");
        b
    });
    std::thread::sleep(Duration::from_millis(300));
    a.batch_execute("COMMIT").unwrap();
    let mut b = h.join().unwrap();
    let bal: i32 = a.query_one("SELECT bal FROM acc WHERE id = 1", &[]).unwrap().get(0);
    assert_eq!(bal, 11, "both updates applied");
    // A key change makes the waiting updater's row no longer match.
    a.batch_execute("BEGIN; UPDATE acc SET id = 100000 WHERE id = 2").unwrap();
    let h = std::thread::spawn(move || {
        let n = b.execute("UPDATE acc SET bal = bal + 10 WHERE id = 2", &[]).unwrap();
        (b, n)
    });
    std::thread::sleep(Duration::from_millis(300));
    a.batch_execute("COMMIT").unwrap();
    let (mut b, n) = h.join().unwrap();
    assert_eq!(n, 0, "the re-checked row has another key now");
    // REPEATABLE READ: a concurrent update is a serialization failure.
    b.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT * FROM acc WHERE id = 3")
        .unwrap();
    a.batch_execute("UPDATE acc SET bal = bal + 1 WHERE id = 3").unwrap();
    expect_sqlstate(&mut b, "UPDATE acc SET bal = bal + 1 WHERE id = 3", "40001");
    b.batch_execute("ROLLBACK").unwrap();
    let rows: i64 = a.query_one("SELECT count(*) FROM acc", &[]).unwrap().get(0);
    assert_eq!(rows, 1000);
}

/// A session keeps its table handles (tree, layout, served key) across
/// transactions and relies on PostgreSQL's relcache invalidation to drop
/// them: a key added and rolled back elsewhere leaves both sessions with
/// the same layout (rows written here are seen there), and a key added or
/// dropped elsewhere is read and planned with here at the next statement.
#[test]
fn cached_table_handles_follow_another_sessions_key_changes() {
    let (env, _g) = require_server!();
    let mut a = fresh_db(&env, "itest_pk_handles");
    a.batch_execute("CREATE TABLE h (id int, v text) USING orioledb")
        .unwrap();
    let plan = |c: &mut postgres::Client| {
        c.query("EXPLAIN SELECT v FROM h WHERE id = 1234", &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let count = "SELECT count(*)::text || ' ' || coalesce(sum(id), 0)::text FROM h";
    // Cached here: the row-id layout and "no served key".
    assert_eq!(query_text(&mut a, count), "0 0");
    assert!(!plan(&mut a).contains("OrioleDB Primary Scan"));
    let mut b = connect(&env, "itest_pk_handles");
    // Rolled back: no invalidation reaches this session, so the tree must
    // not have changed under its handle.
    b.batch_execute("BEGIN; ALTER TABLE h ADD PRIMARY KEY (id); ROLLBACK")
        .unwrap();
    a.batch_execute("INSERT INTO h SELECT g, 'v' || g FROM generate_series(1, 1500) g ORDER BY md5(g::text)")
        .unwrap();
    assert_eq!(query_text(&mut b, count), "1500 1125750", "rows written by the other session");
    b.batch_execute(
        "ALTER TABLE h ADD PRIMARY KEY (id);
         INSERT INTO h SELECT g, 'v' || g FROM generate_series(1501, 3000) g ORDER BY md5(g::text);
         ANALYZE h",
    )
    .unwrap();
    assert_eq!(key_of(&mut b, "h"), "id");
    assert_eq!(query_text(&mut a, "SELECT v FROM h WHERE id = 1234"), "v1234");
    assert_eq!(query_text(&mut a, count), "3000 4501500");
    assert!(plan(&mut a).contains("OrioleDB Primary Scan"), "{}", plan(&mut a));
    a.batch_execute("UPDATE h SET v = 'new' WHERE id = 1234").unwrap();
    assert_eq!(query_text(&mut b, "SELECT v FROM h WHERE id = 1234"), "new");
    // The key dropped elsewhere: the scan is no longer offered here.
    b.batch_execute("ALTER TABLE h DROP CONSTRAINT h_pkey").unwrap();
    assert!(!plan(&mut a).contains("OrioleDB Primary Scan"), "{}", plan(&mut a));
    assert_eq!(query_text(&mut a, "SELECT v FROM h WHERE id = 1234"), "new");
    let check = query_text(&mut a, "SELECT orioledb_check('h'::regclass)");
    assert!(check.starts_with("ok"), "{check}");
}

/// A row stored with the short header in a row-id table may be too large
/// for a keyed tree once it gets its full header (a deleter, a lock): the
/// key's bytes come on top. Such a table is left in row-id order by ADD
/// PRIMARY KEY (as for a key too long to encode), so the row can still be
/// locked, updated and deleted.
#[test]
fn rows_near_the_size_limit_keep_the_table_deletable_after_a_key() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_pk_near_limit");
    // Full-header size: 32 + 1 (padding) + 2 x 8 (int8) + 4 (varlena) + n;
    // the row-id tree keeps 2576 bytes of it inline (2600 less the 14-byte
    // member key and 6-byte root trailer of a HOT-like update, less the
    // toast list's 4), a tree keyed by two int8s takes 2569.
    c.batch_execute(
        "CREATE TABLE big (id int8, k int8, b bytea) USING orioledb;
         ALTER TABLE big ALTER COLUMN b SET STORAGE PLAIN;
         INSERT INTO big SELECT 1, 1, decode(repeat('ab', 2520), 'hex');
         INSERT INTO big SELECT g, g, 'small' FROM generate_series(2, 50) g;
         ALTER TABLE big ADD PRIMARY KEY (id, k);",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "big"), "row id", "the big row keeps the table in row-id order");
    c.batch_execute(
        "SELECT * FROM big WHERE id = 1 FOR UPDATE;
         UPDATE big SET b = decode(repeat('cd', 2520), 'hex') WHERE id = 1;
         UPDATE big SET b = decode(repeat('ef', 2520), 'hex') WHERE id = 1;",
    )
    .unwrap();
    let b: String = c
        .query_one("SELECT encode(b, 'hex') FROM big WHERE id = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(b, "ef".repeat(2520), "a HOT-like update of the big row");
    c.batch_execute("DELETE FROM big WHERE id = 1").unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM big", &[]).unwrap().get(0);
    assert_eq!(n, 49);
    // Without that row the same table is keyed.
    c.batch_execute(
        "CREATE TABLE fine (id int8, k int8, b bytea) USING orioledb;
         INSERT INTO fine SELECT g, g, 'small' FROM generate_series(1, 50) g;
         ALTER TABLE fine ADD PRIMARY KEY (id, k);",
    )
    .unwrap();
    assert_eq!(key_of(&mut c, "fine"), "id, k");
}
