//! Workload tests: pgbench on orioledb tables keeps its books balanced, and
//! a long stream of updates leaves the primary tree small without VACUUM.
//!
//! Knobs: `ORIOLEDB_PGBENCH_SCALE` (10), `ORIOLEDB_PGBENCH_SECONDS` (60),
//! `ORIOLEDB_UPDATES` (1000000).

#[macro_use]
mod common;

use common::*;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pgbench(env: &TestEnv, db: &str, args: &[&str]) -> String {
    let out = client_command(env, "pgbench")
        .args(args)
        .arg(db)
        .output()
        .expect("run pgbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    text
}

/// The acceptance run: with orioledb as the default access method,
/// `pgbench -i -s 10` then `pgbench -c 8 -j 2 -T 60` finishes without
/// errors and every balance sum equals the history's sum of deltas.
#[test]
fn pgbench_keeps_balances() {
    let (env, _g) = require_server!();
    let db = "itest_pgbench";
    let mut c = fresh_db(&env, db);
    c.batch_execute(&format!(
        "ALTER DATABASE {db} SET default_table_access_method = orioledb"
    ))
    .unwrap();
    let scale = knob("ORIOLEDB_PGBENCH_SCALE", 10).to_string();
    let secs = knob("ORIOLEDB_PGBENCH_SECONDS", 60).to_string();
    pgbench(&env, db, &["-i", "-s", &scale, "-q"]);
    let mut c = connect(&env, db);
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_am a ON a.oid = c.relam \
             WHERE c.relname LIKE 'pgbench_%' AND c.relkind = 'r' AND a.amname = 'orioledb'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 4, "all four pgbench tables use orioledb");
    let out = pgbench(&env, db, &["-c", "8", "-j", "2", "-T", &secs]);
    assert!(
        out.contains("number of failed transactions: 0 "),
        "pgbench reported failures:\n{out}"
    );
    let row = c
        .query_one(
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts)::int8, \
                    (SELECT sum(bbalance) FROM pgbench_branches)::int8, \
                    (SELECT sum(tbalance) FROM pgbench_tellers)::int8, \
                    (SELECT coalesce(sum(delta), 0) FROM pgbench_history)::int8, \
                    (SELECT count(*) FROM pgbench_history)",
            &[],
        )
        .unwrap();
    let (a, b, t, h, n): (i64, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    eprintln!("pgbench: {n} transactions, sums a={a} b={b} t={t} h={h}");
    assert!(n > 0, "pgbench ran no transactions:\n{out}");
    assert_eq!((a, b, t), (h, h, h), "balances must equal the history");
    let accounts: i64 = c
        .query_one("SELECT count(*) FROM pgbench_accounts", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        accounts,
        knob("ORIOLEDB_PGBENCH_SCALE", 10) as i64 * 100_000
    );
}

fn primary_pages(c: &mut Client, table: &str) -> i64 {
    c.query_one(
        "SELECT pages FROM orioledb_trees WHERE reloid = $1::text::regclass AND tree = 'primary'",
        &[&table],
    )
    .unwrap()
    .get(0)
}

/// One million single-row updates spread over 10,000 rows, autovacuum off:
/// versions nobody can see are pruned as pages are modified, so the primary
/// tree stays within 1.5x of its size right after loading.
#[test]
fn updates_without_vacuum_stay_small() {
    // Alone on the server: a long transaction elsewhere (pgbench -i loads
    // its million rows in one) rightly keeps every version it may see, and
    // would measure that instead of pruning.
    let (env, _g) = require_server_exclusive!();
    let mut c = fresh_db(&env, "itest_no_vacuum");
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v int, pad text) USING orioledb \
             WITH (autovacuum_enabled = off);
         INSERT INTO t SELECT g, 0, repeat('p', 60) FROM generate_series(1, 10000) g;",
    )
    .unwrap();
    let loaded = primary_pages(&mut c, "t");
    let updates = knob("ORIOLEDB_UPDATES", 1_000_000);
    // Separate statements: CALL must not run inside an implicit transaction
    // block, or the procedure could not COMMIT.
    c.batch_execute("SET synchronous_commit = off").unwrap();
    c.batch_execute(
        "CREATE PROCEDURE churn(n int) LANGUAGE plpgsql AS $$
         BEGIN
           FOR i IN 1..n LOOP
             UPDATE t SET v = v + 1 WHERE id = (i::int8 * 7919) % 10000 + 1;
             COMMIT;
           END LOOP;
         END $$",
    )
    .unwrap();
    c.batch_execute(&format!("CALL churn({updates})")).unwrap();
    let total: i64 = c
        .query_one("SELECT sum(v)::int8 FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(total, updates as i64, "every update counted once");
    let after = primary_pages(&mut c, "t");
    eprintln!("primary tree: {loaded} pages after load, {after} after {updates} updates");
    assert!(
        after * 2 <= loaded * 3,
        "primary tree grew from {loaded} to {after} pages (limit 1.5x)"
    );
}
