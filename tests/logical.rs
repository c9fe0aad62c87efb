//! Logical decoding of orioledb tables (`pg::decode`, `am::modify::logical`): the
//! same statements on a heap table and on an orioledb table give the same
//! output from `test_decoding` and `wal2json` — inserts, updates of key and
//! non-key columns, deletes, TRUNCATE, every REPLICA IDENTITY, toasted
//! values (unchanged ones reported as heap reports them), rolled-back
//! savepoints, ON CONFLICT, COPY, and a transaction larger than
//! `logical_decoding_work_mem` (spilled to disk) — and publications carry
//! orioledb tables to subscribers in every direction, large transactions
//! streamed while in progress.

#[macro_use]
mod common;

use common::*;
use postgres::Client;
use std::time::{Duration, Instant};

const SERVER: &[&str] = &[
    "shared_preload_libraries = 'orioledb_rs'",
    "shared_buffers = 16MB",
    "orioledb.main_buffers = 16MB",
    "wal_level = logical",
    "logical_decoding_work_mem = 64kB",
    "max_wal_senders = 10",
    "max_replication_slots = 10",
    "max_prepared_transactions = 4",
];

/// The statements run on each access method (`TBL` is the table name
/// prefix, `AM` the access method).
const STATEMENTS: &str = r#"
CREATE TABLE TBL (id int PRIMARY KEY, v text, big text) USING AM;
CREATE TABLE TBL_full (id int PRIMARY KEY, v text, big text) USING AM;
ALTER TABLE TBL_full REPLICA IDENTITY FULL;
CREATE TABLE TBL_nokey (id int, v text) USING AM;
CREATE TABLE TBL_nothing (id int PRIMARY KEY, v text) USING AM;
ALTER TABLE TBL_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE TBL_idx (id int NOT NULL, u int NOT NULL, v text) USING AM;
CREATE UNIQUE INDEX TBL_idx_u ON TBL_idx (u);
ALTER TABLE TBL_idx REPLICA IDENTITY USING INDEX TBL_idx_u;
BEGIN;
INSERT INTO TBL VALUES (1, 'a', NULL), (2, 'b', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i)), (3, 'c', NULL);
UPDATE TBL SET v = 'bb' WHERE id = 2;
UPDATE TBL SET id = 20 WHERE id = 2;
UPDATE TBL SET big = repeat('y', 5) WHERE id = 20;
DELETE FROM TBL WHERE id = 20;
SAVEPOINT s1;
INSERT INTO TBL VALUES (100, 'rolled back', NULL);
UPDATE TBL SET v = 'rolled back' WHERE id = 1;
ROLLBACK TO s1;
SAVEPOINT s2;
INSERT INTO TBL VALUES (101, 'kept', NULL);
RELEASE s2;
INSERT INTO TBL VALUES (5, 'e', NULL) ON CONFLICT (id) DO UPDATE SET v = 'conflict';
INSERT INTO TBL VALUES (5, 'e', NULL) ON CONFLICT (id) DO UPDATE SET v = 'conflict';
INSERT INTO TBL VALUES (5, 'e', NULL) ON CONFLICT (id) DO NOTHING;
INSERT INTO TBL_full SELECT * FROM TBL;
INSERT INTO TBL_full VALUES (7, 'x', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i));
UPDATE TBL_full SET v = 'z';
DELETE FROM TBL_full WHERE id = 7;
INSERT INTO TBL_nokey VALUES (1, 'a'); UPDATE TBL_nokey SET v = 'b'; DELETE FROM TBL_nokey;
INSERT INTO TBL_nothing VALUES (1, 'a'); UPDATE TBL_nothing SET id = 2; DELETE FROM TBL_nothing;
INSERT INTO TBL_idx VALUES (1, 10, 'a'); UPDATE TBL_idx SET v = 'b'; UPDATE TBL_idx SET u = 11; DELETE FROM TBL_idx;
COMMIT;
BEGIN;
INSERT INTO TBL VALUES (200, 'aborted', NULL);
ROLLBACK;
COPY TBL (id, v) FROM STDIN;
INSERT INTO TBL SELECT i, 'many ' || i FROM generate_series(1000, 4000) i;
UPDATE TBL SET v = v || '!' WHERE id BETWEEN 1000 AND 2000;
TRUNCATE TBL_nokey, TBL_idx;
"#;

/// Runs the statements for one access method (COPY's rows from STDIN).
fn run_statements(c: &mut Client, prefix: &str, am: &str) {
    let sql = STATEMENTS.replace("TBL", prefix).replace("USING AM", &format!("USING {am}"));
    for stmt in sql.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        if stmt.starts_with("COPY") {
            let mut w = c.copy_in(stmt).unwrap();
            use std::io::Write;
            w.write_all(b"300\tcopied\n301\tcopied too\n").unwrap();
            w.finish().unwrap();
        } else {
            c.batch_execute(stmt).unwrap_or_else(|e| panic!("{stmt}: {}", describe(&e)));
        }
    }
}

/// The changes a slot returns, with the table prefix replaced by `T` and
/// long values shortened.
fn changes(c: &mut Client, slot: &str, options: &str) -> Vec<String> {
    let q = format!(
        "SELECT regexp_replace(data, '([0-9a-f]{{32}})[0-9a-f]{{100,}}', '\\1...', 'g') \
         FROM pg_logical_slot_get_changes('{slot}', NULL, NULL{options})"
    );
    c.query(&q, &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

fn normalize(lines: &[String], prefix: &str) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.replace(&format!("{prefix}_"), "T_").replace(&format!(".{prefix}"), ".T").replace(&format!("\"{prefix}"), "\"T"))
        .collect()
}

/// Decodes the statements on heap and on orioledb with `plugin` and
/// returns both outputs, normalized.
fn decoded(c: &mut Client, plugin: &str, options: &str, heap: &str, oriole: &str) -> (Vec<String>, Vec<String>) {
    c.batch_execute(&format!("SELECT pg_create_logical_replication_slot('s_{plugin}', '{plugin}')"))
        .unwrap();
    let slot = format!("s_{plugin}");
    run_statements(c, heap, "heap");
    let h = normalize(&changes(c, &slot, options), heap);
    run_statements(c, oriole, "orioledb");
    let o = normalize(&changes(c, &slot, options), oriole);
    c.batch_execute(&format!("SELECT pg_drop_replication_slot('{slot}')")).unwrap();
    (h, o)
}

/// `update` marks an update's line in the plugin's output.
fn assert_same(h: &[String], o: &[String], what: &str, update: &str) {
    let updates = h.iter().filter(|l| l.contains(update)).count();
    assert!(updates > 1000, "{what}: the heap run decoded too little to compare ({updates} updates)");
    if h != o {
        let first = h.iter().zip(o).position(|(a, b)| a != b).unwrap_or(h.len().min(o.len()));
        panic!(
            "{what}: orioledb's changes differ from heap's ({} against {} lines) from line {first}:\nheap:     {:?}\norioledb: {:?}",
            h.len(),
            o.len(),
            h.get(first..(first + 3).min(h.len())),
            o.get(first..(first + 3).min(o.len())),
        );
    }
}

#[test]
fn test_decoding_shows_orioledb_changes_as_heap_ones() {
    let (env, _g) = require_server!();
    let s = ScratchCluster::new(&env, "decoding", SERVER);
    let mut c = s.connect("postgres");
    c.batch_execute("CREATE EXTENSION orioledb_rs").unwrap();
    let (h, o) = decoded(&mut c, "test_decoding", ", 'include-xids', '0'", "h", "o");
    assert!(h.iter().any(|l| l.contains("unchanged-toast-datum")), "{h:?}");
    assert!(h.iter().any(|l| l.contains("TRUNCATE")), "{h:?}");
    assert!(!h.iter().any(|l| l.contains("rolled back") || l.contains("aborted")));
    assert_same(&h, &o, "test_decoding", ": UPDATE: ");
}

#[test]
fn wal2json_shows_orioledb_changes_as_heap_ones() {
    let (env, _g) = require_server!();
    let s = ScratchCluster::new(&env, "wal2json", SERVER);
    let c = &mut s.connect("postgres");
    c.batch_execute("CREATE EXTENSION orioledb_rs").unwrap();
    // Builds of PostgreSQL that restrict output plugins to a list (a
    // setting stock 15 does not have) must be told that wal2json is one.
    let known = text_rows(c, "SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'").unwrap();
    if known == ["1"] {
        c.batch_execute("SET output_plugin_libraries = pgoutput, test_decoding, wal2json").unwrap();
    }
    // Format 2: a line per change (format 1's one document per
    // transaction would compare as a few long lines).
    let (h, o) = decoded(c, "wal2json", ", 'format-version', '2', 'include-xids', '0', 'include-timestamp', '0', 'include-lsn', '0', 'include-type-oids', '0'", "h", "o");
    assert_same(&h, &o, "wal2json", r#""action":"U""#);
}

/// Prepared transactions decoded at PREPARE (a two-phase slot) and a
/// transaction past `logical_decoding_work_mem` streamed while in progress
/// (`stream-changes`) decode on orioledb as on heap.
#[test]
fn prepared_and_streamed_transactions_decode_as_on_heap() {
    let (env, _g) = require_server!();
    let s = ScratchCluster::new(&env, "decoding2pc", SERVER);
    let mut c = s.connect("postgres");
    c.batch_execute("CREATE EXTENSION orioledb_rs").unwrap();
    let script = |t: &str, am: &str| {
        format!(
            "CREATE TABLE {t} (id int PRIMARY KEY, v text) USING {am};
             BEGIN; INSERT INTO {t} VALUES (1, 'prepared'); UPDATE {t} SET v = 'p2' WHERE id = 1;
             PREPARE TRANSACTION 'committed';
             COMMIT PREPARED 'committed';
             BEGIN; INSERT INTO {t} VALUES (2, 'rolled back'); PREPARE TRANSACTION 'aborted';
             ROLLBACK PREPARED 'aborted';
             BEGIN; INSERT INTO {t} SELECT g, 'row ' || g FROM generate_series(10, 3000) g;
             UPDATE {t} SET v = v || '!' WHERE id % 2 = 0; DELETE FROM {t} WHERE id % 7 = 0; COMMIT;"
        )
    };
    let mut outputs = Vec::new();
    for (t, am) in [("h", "heap"), ("o", "orioledb")] {
        c.batch_execute("SELECT pg_create_logical_replication_slot('s2', 'test_decoding', false, true)")
            .unwrap();
        // One statement at a time: a simple query of several runs in one
        // implicit transaction, which COMMIT PREPARED refuses.
        for stmt in script(t, am).split(';').map(str::trim).filter(|q| !q.is_empty()) {
            c.batch_execute(stmt).unwrap_or_else(|e| panic!("{stmt}: {}", describe(&e)));
        }
        let lines = changes(&mut c, "s2", ", 'include-xids', '0', 'stream-changes', '1', 'skip-empty-xacts', '1'");
        c.batch_execute("SELECT pg_drop_replication_slot('s2')").unwrap();
        outputs.push(normalize(&lines, t));
    }
    let (h, o) = (&outputs[0], &outputs[1]);
    assert!(h.iter().any(|l| l.contains("PREPARE TRANSACTION")), "no prepared transaction decoded: {:?}", &h[..h.len().min(10)]);
    assert!(h.iter().any(|l| l.contains("opening a streamed block")), "nothing streamed: {:?}", &h[..h.len().min(10)]);
    assert_same(h, o, "two-phase and streamed test_decoding", "streaming change");
}

/// Waits until `sql` gives the same rows on both sides.
fn wait_equal(src: &mut Client, dst: &mut Client, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = text_rows(src, sql).unwrap();
        let b = text_rows(dst, sql).unwrap();
        if a == b {
            return;
        }
        assert!(Instant::now() < deadline, "the subscriber did not catch up on `{sql}`:\npublisher:  {a:?}\nsubscriber: {b:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn publications_carry_orioledb_tables_to_subscribers() {
    let (env, _g) = require_server!();
    let s = ScratchCluster::new(&env, "pubsub", SERVER);
    let mut admin = s.connect("postgres");
    admin.batch_execute("CREATE DATABASE src").unwrap();
    admin.batch_execute("CREATE DATABASE dst").unwrap();
    let mut src = s.connect("src");
    let mut dst = s.connect("dst");
    // Publisher and subscriber AMs: orioledb → heap, heap → orioledb,
    // orioledb → orioledb.
    let tables = [("o2h", "orioledb", "heap"), ("h2o", "heap", "orioledb"), ("o2o", "orioledb", "orioledb")];
    for (c, side) in [(&mut src, 1), (&mut dst, 2)] {
        c.batch_execute("CREATE EXTENSION orioledb_rs").unwrap();
        for t in tables {
            let am = if side == 1 { t.1 } else { t.2 };
            c.batch_execute(&format!("CREATE TABLE {} (id int PRIMARY KEY, v text, big text) USING {am}", t.0))
                .unwrap();
        }
    }
    for (t, ..) in tables {
        src.batch_execute(&format!("INSERT INTO {t} SELECT i, 'initial', NULL FROM generate_series(1, 500) i"))
            .unwrap();
    }
    src.batch_execute("CREATE PUBLICATION pub FOR TABLE o2h, h2o, o2o").unwrap();
    src.batch_execute("SELECT pg_create_logical_replication_slot('sub', 'pgoutput')").unwrap();
    // The slot is made beforehand: CREATE SUBSCRIPTION in the same cluster
    // would wait for itself creating one.
    let conn = format!("host={} port={} user=postgres dbname=src", s.env.host, s.env.port);
    dst.batch_execute(&format!(
        "CREATE SUBSCRIPTION sub CONNECTION '{conn}' PUBLICATION pub WITH (create_slot = false, slot_name = 'sub', streaming = on)"
    ))
    .unwrap();
    let all = |t: &str| format!("SELECT id, v, md5(big) FROM {t} ORDER BY id");
    for (t, ..) in tables {
        wait_equal(&mut src, &mut dst, &all(t));
    }
    for (t, ..) in tables {
        src.batch_execute(&format!(
            "BEGIN;
             UPDATE {t} SET v = 'updated' WHERE id % 3 = 0;
             UPDATE {t} SET id = id + 10000 WHERE id % 7 = 0;
             UPDATE {t} SET big = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i) WHERE id % 50 = 1;
             DELETE FROM {t} WHERE id % 5 = 0;
             INSERT INTO {t} SELECT i, 'new', NULL FROM generate_series(20000, 20300) i;
             COMMIT;
             UPDATE {t} SET v = 'after toast' WHERE id % 50 = 1;"
        ))
        .unwrap();
    }
    for (t, ..) in tables {
        wait_equal(&mut src, &mut dst, &all(t));
    }
    // Transactions past logical_decoding_work_mem went to the subscriber
    // while in progress (`streaming = on`).
    let streamed = text_rows(&mut src, "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = 'sub'").unwrap();
    assert!(
        streamed.first().and_then(|n| n.parse::<i64>().ok()).is_some_and(|n| n > 0),
        "no transaction was streamed: {streamed:?}"
    );
    // A table added to the publication reaches the subscriber after
    // REFRESH: its rows copied, then its changes streamed.
    for c in [&mut src, &mut dst] {
        c.batch_execute("CREATE TABLE later (id int PRIMARY KEY, v text, big text) USING orioledb").unwrap();
    }
    src.batch_execute(
        "INSERT INTO later SELECT i, 'before refresh', NULL FROM generate_series(1, 300) i;
         ALTER PUBLICATION pub ADD TABLE later",
    )
    .unwrap();
    dst.batch_execute("ALTER SUBSCRIPTION sub REFRESH PUBLICATION").unwrap();
    wait_equal(&mut src, &mut dst, &all("later"));
    src.batch_execute("UPDATE later SET v = 'after refresh' WHERE id < 100; DELETE FROM later WHERE id > 250")
        .unwrap();
    wait_equal(&mut src, &mut dst, &all("later"));
    let n = text_rows(&mut dst, "SELECT count(*) FROM later WHERE v = 'after refresh'").unwrap();
    assert_eq!(n, vec!["99".to_string()]);
    dst.batch_execute("DROP SUBSCRIPTION sub").unwrap();
}
