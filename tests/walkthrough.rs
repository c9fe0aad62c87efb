//! The seed walkthrough (`sql/demo.sql`, the README demo) as a test: the
//! files of tbl1 after CHECKPOINT mapped to its relations (the secondary
//! index's own file and map among them, with and without compress), the toast
//! threshold (tbl2), sizes for compress -1, 1 and 20 (tbl1/tbl3/tbl20),
//! `orioledb_relation_size` equal to the sum of the files, `orioledb_table`;
//! and pgbench_accounts at scale 10 with `compress = 3` at most a quarter of
//! its uncompressed size.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

const RANDOM_BYTES: &str = "CREATE FUNCTION random_bytes(n int) RETURNS bytea
LANGUAGE sql VOLATILE AS $$
  SELECT decode(string_agg(lpad(to_hex(floor(random() * 256)::int), 2, '0'), ''), 'hex')
  FROM generate_series(1, n)
$$";

fn engine_dir(env: &TestEnv, c: &mut postgres::Client) -> PathBuf {
    let dboid: postgres::types::Oid = c
        .query_one(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .get(0);
    env.pgdata
        .as_ref()
        .expect("ORIOLEDB_TEST_PGDATA")
        .join("orioledb_data")
        .join(dboid.to_string())
}

/// relfilenode of `rel`.
fn relnode(c: &mut postgres::Client, rel: &str) -> u32 {
    let n: postgres::types::Oid = c
        .query_one(
            "SELECT relfilenode FROM pg_class WHERE oid = $1::text::regclass",
            &[&rel],
        )
        .unwrap()
        .get(0);
    n
}

/// Files of the engine directory belonging to relation file `node`: its
/// data file and its checkpoint maps, name → bytes.
fn files_of(dir: &PathBuf, node: u32) -> BTreeMap<String, u64> {
    let n = node.to_string();
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let ours = name == n
                || name
                    .strip_prefix(&format!("{n}-"))
                    .is_some_and(|r| r.ends_with(".map"));
            ours.then(|| (name, held_bytes(&e.metadata().unwrap())))
        })
        .collect()
}

/// (pages, file_bytes) of a table's primary or toast tree.
fn tree(c: &mut postgres::Client, table: &str, kind: &str) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT pages, file_bytes FROM orioledb_trees WHERE \"table\" = $1::text::regclass AND tree = $2",
            &[&table, &kind],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

#[test]
fn seed_walkthrough() {
    let (env, _g) = require_server!();
    let mut c = fresh_db(&env, "itest_walkthrough");
    c.batch_execute(RANDOM_BYTES).unwrap();
    c.batch_execute(
        "CREATE TABLE tbl1 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb;
         CREATE INDEX idx_tbl1_ts ON tbl1 USING orioledb_btree (ts);
         INSERT INTO tbl1 SELECT g, g, now(), random_bytes(3000) FROM generate_series(1, 100) g;
         CHECKPOINT;",
    )
    .unwrap();
    let dir = engine_dir(&env, &mut c);
    let table_node = relnode(&mut c, "tbl1");
    let toast: String = c
        .query_one(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'tbl1'",
            &[],
        )
        .unwrap()
        .get(0);
    let toast_node = relnode(&mut c, &toast);
    let index_node = relnode(&mut c, "idx_tbl1_ts");

    // The primary tree is named by the table's relfilenode, the toast tree
    // by its toast relation's; each has its checkpoint map beside it.
    let primary_files = files_of(&dir, table_node);
    let toast_files = files_of(&dir, toast_node);
    eprintln!("tbl1 primary: {primary_files:?}\ntbl1 toast ({toast}): {toast_files:?}");
    assert!(primary_files.contains_key(&table_node.to_string()), "{primary_files:?}");
    assert!(primary_files.keys().any(|k| k.ends_with(".map")), "{primary_files:?}");
    assert!(toast_files.contains_key(&toast_node.to_string()), "{toast_files:?}");
    // The secondary index is an engine tree too, as in the seed.
    let index_files = files_of(&dir, index_node);
    assert!(index_files.contains_key(&index_node.to_string()), "{index_files:?}");
    assert!(index_files.keys().any(|k| k.ends_with(".map")), "{index_files:?}");
    // 100 values of 3000 random bytes went to toast: ~300 kB there, the
    // primary tree holds only the short rows (and its row-id map).
    let toast_bytes = toast_files[&toast_node.to_string()];
    let primary_bytes = primary_files[&table_node.to_string()];
    assert!(toast_bytes >= 300_000, "toast file {toast_bytes} bytes");
    assert!(primary_bytes <= 4 * 8192, "primary file {primary_bytes} bytes");
    let key: String = c
        .query_one("SELECT key FROM orioledb_trees WHERE \"table\" = 'tbl1'::regclass AND tree = 'primary'", &[])
        .unwrap()
        .get(0);
    assert_eq!(key, "id");

    // orioledb_relation_size: every engine file plus PostgreSQL's index
    // files (the primary key's btree, the toast index; idx_tbl1_ts is an
    // engine tree, counted with the engine files).
    let index_bytes: i64 = c
        .query_one(
            "SELECT sum(pg_relation_size(indexrelid))::int8 FROM pg_index
              JOIN pg_class ic ON ic.oid = indexrelid JOIN pg_am a ON a.oid = ic.relam
              WHERE indrelid IN ('tbl1'::regclass, (SELECT reltoastrelid FROM pg_class WHERE relname = 'tbl1'))
                AND a.amname = 'btree'",
            &[],
        )
        .unwrap()
        .get(0);
    let engine_sum: u64 = primary_files
        .values()
        .chain(toast_files.values())
        .chain(index_files.values())
        .sum();
    let (size, pg_size): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT orioledb_relation_size('tbl1'::regclass), pg_relation_size('tbl1')",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    // pg_relation_size counts the primary tree's pages (hooks::sizes).
    let tree_pages: i64 = c
        .query_one(
            "SELECT pages FROM orioledb_tree_stats() WHERE relnode = (SELECT relfilenode FROM pg_class WHERE relname = 'tbl1')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(pg_size, tree_pages * 8192);
    assert_eq!(size as u64, engine_sum + index_bytes as u64, "the sum of the files");

    // tbl2: 1000 and 2100 bytes stay in the primary tree, 3000 go to toast.
    c.batch_execute(
        "CREATE TABLE tbl2 (id int PRIMARY KEY, lob bytea) USING orioledb;
         INSERT INTO tbl2 VALUES (1, random_bytes(1000)), (2, random_bytes(2100));
         CHECKPOINT;",
    )
    .unwrap();
    let toast = "(SELECT reltoastrelid FROM pg_class WHERE relname = 'tbl2')";
    let toast_chunks = |c: &mut postgres::Client| tree_keys(c, toast);
    let toast2: String = c
        .query_one(&format!("SELECT {toast}::regclass::text"), &[])
        .unwrap()
        .get(0);
    let toast2_node = relnode(&mut c, &toast2);
    let toast_listed = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM orioledb_trees WHERE \"table\" = 'tbl2'::regclass AND tree = 'toast'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(toast_chunks(&mut c), 0, "1000 and 2100 bytes stay inline");
    // As in the seed: no toast tree, and no toast file, until a value is toasted.
    assert_eq!(toast_listed(&mut c), 0, "no toast tree before the first toasted value");
    assert!(files_of(&dir, toast2_node).is_empty(), "no toast file yet");
    c.batch_execute("INSERT INTO tbl2 VALUES (3, random_bytes(3000)); CHECKPOINT")
        .unwrap();
    assert_eq!(toast_chunks(&mut c), 2, "3000 bytes go to toast, in two chunks");
    assert_eq!(toast_listed(&mut c), 1, "the first toasted value made the toast tree");
    assert!(
        files_of(&dir, toast2_node).contains_key(&toast2_node.to_string()),
        "the toast tree's data file after CHECKPOINT"
    );
    let lens: Vec<i32> = c
        .query("SELECT length(lob) FROM tbl2 ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(lens, vec![1000, 2100, 3000]);

    // tbl3 (compress = 1) and tbl20 (compress = 20): the same rows.
    c.batch_execute(
        "CREATE TABLE tbl3 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb WITH (compress = 1);
         CREATE TABLE tbl20 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb WITH (compress = 20);
         CREATE INDEX idx_tbl3_ts ON tbl3 (ts) WITH (compress = 1);
         CREATE INDEX idx_tbl20_ts ON tbl20 (ts) WITH (compress = 20);
         INSERT INTO tbl3 SELECT * FROM tbl1;
         INSERT INTO tbl20 SELECT * FROM tbl1;
         CHECKPOINT;",
    )
    .unwrap();
    let (p1, t1) = (tree(&mut c, "tbl1", "primary").1, tree(&mut c, "tbl1", "toast").1);
    let (p3, t3) = (tree(&mut c, "tbl3", "primary").1, tree(&mut c, "tbl3", "toast").1);
    let (p20, t20) = (tree(&mut c, "tbl20", "primary").1, tree(&mut c, "tbl20", "toast").1);
    eprintln!("primary bytes: -1 {p1}, 1 {p3}, 20 {p20}; toast bytes: -1 {t1}, 1 {t3}, 20 {t20}");
    assert!(p3 < p1, "compress = 1 makes the primary tree file smaller ({p3} vs {p1})");
    assert!(p20 < p1, "compress = 20 too ({p20} vs {p1})");
    // Random bytes do not compress; what shrinks is the pages' unused space.
    assert!(t3 < t1, "toast: {t3} vs {t1}");
    let levels: Vec<(String, i32)> = c
        .query(
            "SELECT tree, compress FROM orioledb_trees WHERE \"table\" = 'tbl3'::regclass ORDER BY tree",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        levels,
        vec![("index".to_string(), 1), ("primary".to_string(), 1), ("toast".to_string(), 1)]
    );
    // The index files: 100 equal timestamps, one page; compressed, a few
    // hundred bytes.
    let (i1, i3, i20) = (
        tree(&mut c, "tbl1", "index").1,
        tree(&mut c, "tbl3", "index").1,
        tree(&mut c, "tbl20", "index").1,
    );
    eprintln!("index bytes: -1 {i1}, 1 {i3}, 20 {i20}");
    assert!(i3 < i1 && i20 < i1, "compressed index files are smaller: {i3}, {i20} vs {i1}");
    let desc: String = c
        .query_one(
            "SELECT description FROM orioledb_table WHERE reloid = 'tbl3'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        desc.starts_with("Compress = 1, Primary compress = 1, TOAST compress = 1"),
        "{desc}"
    );
    for col in ["Column", "Type", "Collation", "Nullable", "Dropped", "Compression", "lob", "bytea"] {
        assert!(desc.contains(col), "{desc}");
    }
    // The demo's primary-key reads.
    let p: Vec<String> = c
        .query("EXPLAIN (COSTS OFF) SELECT c1 FROM tbl1 WHERE id = 42", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(p.join("\n").contains("OrioleDB Primary Scan"), "{p:?}");
}

/// pgbench_accounts at scale 10: `compress = 3` leaves at most a quarter of
/// the uncompressed primary tree file (the seed: 290 MB → 48 MB).
#[test]
fn pgbench_accounts_compress_to_a_quarter() {
    let (env, _g) = require_server!();
    let scale = std::env::var("ORIOLEDB_PGBENCH_SCALE").unwrap_or_else(|_| "10".into());
    let mut sizes = Vec::new();
    for (db, level) in [("itest_pgb_raw", -1), ("itest_pgb_zstd3", 3)] {
        let mut c = fresh_db(&env, db);
        c.batch_execute(&format!(
            "ALTER DATABASE {db} SET default_table_access_method = orioledb;
             ALTER DATABASE {db} SET orioledb.default_compress = {level};"
        ))
        .unwrap();
        drop(c);
        let out = client_command(&env, "pgbench")
            .args(["-i", "-q", "-s", &scale, db])
            .output()
            .expect("run pgbench");
        assert!(
            out.status.success(),
            "pgbench -i failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut c = connect(&env, db);
        c.batch_execute("CHECKPOINT").unwrap();
        let (bytes, compress): (i64, i32) = {
            let r = c
                .query_one(
                    "SELECT file_bytes, compress FROM orioledb_trees
                      WHERE \"table\" = 'pgbench_accounts'::regclass AND tree = 'primary'",
                    &[],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert_eq!(compress, level);
        sizes.push(bytes);
        drop(c);
        let mut admin = connect(&env, "postgres");
        admin
            .batch_execute(&format!("DROP DATABASE {db}"))
            .unwrap();
    }
    eprintln!(
        "pgbench_accounts primary tree at scale {scale}: {} bytes uncompressed, {} with compress = 3",
        sizes[0], sizes[1]
    );
    assert!(
        sizes[1] * 4 <= sizes[0],
        "compress = 3: {} bytes, uncompressed {}",
        sizes[1],
        sizes[0]
    );
}
