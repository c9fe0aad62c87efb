//! Integration test: a seeded random workload runs against a heap table and
//! an orioledb table at the same time, and their contents must stay equal.
//!
//! There are several logical sessions ("workers"). Each is a pair of
//! connections, one for the heap table and one for the orioledb table, and
//! both connections of a pair run the identical statement stream. Workers
//! keep transactions open at the same time and their statements are
//! interleaved (deterministically, from the seed); they touch disjoint rows
//! (own id range, own range of `k`) so nobody ever waits for anybody.
//!
//! Every statement must have the same outcome on both tables (affected rows,
//! returned rows — compared as sorted sets — or SQLSTATE). After every
//! COMMIT/ROLLBACK the tables are compared with a sequential scan and through
//! the primary key; after every fifth also through the index on `k` and with
//! index-only scans.
//!
//! Environment: `ORIOLEDB_DIFF_SEED` (default 42), `ORIOLEDB_DIFF_TXNS`
//! (transactions in all, default 1500), `ORIOLEDB_DIFF_WORKERS` (default 3).
//! On a mismatch the seed, the transaction number, the statements of the
//! open transactions and the first differing rows are printed.
//!
//! Run through `scripts/test.sh` (see tests/common/mod.rs for the environment).

#[macro_use]
mod common;

use common::*;
use std::fmt::Write as _;
use std::time::Instant;

const DB: &str = "itest_differential";
const HEAP: &str = "d_heap";
const ORIO: &str = "d_orio";

/// Ids a worker inserts: `w * ID_STRIDE + [0, ID_SPACE)`; a primary-key
/// change adds [`MOVE`] (so a row keeps its worker: `id % MOVE / ID_STRIDE`).
const ID_STRIDE: i64 = 10_000;
const ID_SPACE: i64 = 600;
const MOVE: i64 = 1_000_000;
/// Values of `k` a worker uses: `w * K_STRIDE + [0, K_SPACE)`.
const K_STRIDE: i64 = 1_000;
const K_SPACE: i64 = 100;

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {s:?}")),
        _ => default,
    }
}

// ------------------------------------------------------------------ PRNG

// ------------------------------------------------------------------ outcomes

use common::Outcome as Out;

/// Runs `sql`; returned rows sorted (the two tables return them in
/// different orders).
fn exec(c: &mut Client, sql: &str) -> Out {
    let mut out = run_simple(c, sql);
    if let Out::Rows(rows) = &mut out {
        rows.sort();
    }
    out
}

fn short(o: &Out) -> String {
    match o {
        Out::Rows(r) if r.len() > 6 => format!("Rows({} rows: {:?} ...)", r.len(), &r[..6]),
        other => format!("{other:?}"),
    }
}

// ------------------------------------------------------------------ workers

struct Worker {
    w: i64,
    heap: Client,
    orio: Client,
    in_txn: bool,
    /// statements left in the current transaction
    left: u32,
    /// open savepoints (names)
    savepoints: Vec<String>,
    next_sp: u32,
    /// the transaction is aborted by an error (only ROLLBACK [TO] helps)
    aborted: bool,
    /// statements of the current transaction, for the failure report
    log: Vec<String>,
    /// statement counter for generated values
    n: u64,
}

impl Worker {
    fn id_base(&self) -> i64 {
        self.w * ID_STRIDE
    }
    fn k_base(&self) -> i64 {
        self.w * K_STRIDE
    }
    /// An id of this worker, most often in the base range, sometimes moved.
    fn some_id(&self, rng: &mut Rng) -> i64 {
        let moved = match rng.below(10) {
            0..=6 => 0,
            7 | 8 => MOVE,
            _ => 2 * MOVE,
        };
        moved + self.id_base() + rng.below(ID_SPACE as u64) as i64
    }
    fn some_k(&self, rng: &mut Rng) -> String {
        if rng.pct(3) {
            "NULL".into()
        } else {
            (self.k_base() + rng.below(K_SPACE as u64) as i64).to_string()
        }
    }
    fn some_v(&mut self, rng: &mut Rng) -> String {
        self.n += 1;
        match rng.below(100) {
            0..=2 => "NULL".into(),
            // a long value: compressible, or not
            3 => format!(
                "'{}'",
                format!("w{}n{}-", self.w, self.n).repeat(rng.range(300, 900) as usize)
            ),
            4 => {
                let mut s = String::new();
                for _ in 0..rng.range(200, 600) {
                    let _ = write!(s, "{:016x}", rng.next());
                }
                format!("'{s}'")
            }
            _ => {
                let mut s = format!("w{}n{}", self.w, self.n);
                for _ in 0..rng.below(4) {
                    let _ = write!(s, "-{:x}", rng.next() & 0xffff);
                }
                format!("'{s}'")
            }
        }
    }
    /// A WHERE clause matching only this worker's rows.
    fn mine(&self) -> String {
        format!(
            "id % {MOVE} BETWEEN {} AND {}",
            self.id_base(),
            self.id_base() + ID_STRIDE - 1
        )
    }
}

/// One generated statement: SQL with `{t}` for the table.
fn gen_statement(wk: &mut Worker, rng: &mut Rng) -> String {
    let t = "{t}";
    match rng.below(100) {
        // inserts (some ids already taken: 23505)
        0..=14 => {
            let id = wk.id_base() + rng.below(ID_SPACE as u64) as i64;
            let (k, v) = (wk.some_k(rng), wk.some_v(rng));
            format!("INSERT INTO {t} (id, k, v) VALUES ({id}, {k}, {v})")
        }
        15..=16 => {
            // a batch of consecutive ids (skipping the taken ones, or not)
            let n = rng.range(5, 40);
            let lo = wk.id_base() + rng.below((ID_SPACE - n) as u64) as i64;
            let (kb, w, tag) = (wk.k_base(), wk.w, wk.n);
            wk.n += 1;
            let conflict = if rng.pct(70) {
                " ON CONFLICT DO NOTHING"
            } else {
                ""
            };
            format!(
                "INSERT INTO {t} (id, k, v) SELECT g, {kb} + g % {K_SPACE}, 'w{w}b{tag}-' || g \
                 FROM generate_series({lo}, {}) g{conflict}",
                lo + n - 1
            )
        }
        17..=19 => {
            let mut vals = Vec::new();
            for _ in 0..rng.range(2, 6) {
                let id = wk.id_base() + rng.below(ID_SPACE as u64) as i64;
                vals.push(format!("({id}, {}, {})", wk.some_k(rng), wk.some_v(rng)));
            }
            format!("INSERT INTO {t} (id, k, v) VALUES {}", vals.join(", "))
        }
        20..=25 => {
            let id = wk.id_base() + rng.below(ID_SPACE as u64) as i64;
            let (k, v) = (wk.some_k(rng), wk.some_v(rng));
            if rng.pct(70) {
                format!(
                    "INSERT INTO {t} AS x (id, k, v) VALUES ({id}, {k}, {v}) ON CONFLICT (id) \
                     DO UPDATE SET k = EXCLUDED.k, v = left(coalesce(x.v, '') || '+' || coalesce(EXCLUDED.v, ''), 60) \
                     RETURNING id, k, v"
                )
            } else {
                format!("INSERT INTO {t} (id, k, v) VALUES ({id}, {k}, {v}) ON CONFLICT DO NOTHING RETURNING id")
            }
        }
        // updates by primary key
        26..=39 => {
            let id = wk.some_id(rng);
            let (k, v) = (wk.some_k(rng), wk.some_v(rng));
            match rng.below(3) {
                0 => format!("UPDATE {t} SET v = {v} WHERE id = {id} RETURNING id, k, v"),
                1 => format!("UPDATE {t} SET k = {k} WHERE id = {id}"),
                _ => format!("UPDATE {t} SET k = {k}, v = {v} WHERE id = {id} RETURNING id, k, v"),
            }
        }
        // primary-key changes (the target may exist: 23505)
        40..=47 => {
            let id = wk.some_id(rng);
            match rng.below(4) {
                0 => {
                    let lo = wk.id_base() + rng.below(ID_SPACE as u64) as i64;
                    format!(
                        "UPDATE {t} SET id = id + {MOVE} WHERE id BETWEEN {lo} AND {} RETURNING id, k, v",
                        lo + rng.range(1, 8)
                    )
                }
                1 if id >= MOVE => {
                    format!("UPDATE {t} SET id = id - {MOVE} WHERE id = {id} RETURNING id")
                }
                _ => format!("UPDATE {t} SET id = id + {MOVE} WHERE id = {id} RETURNING id"),
            }
        }
        // deletes
        48..=55 => {
            let id = wk.some_id(rng);
            if rng.pct(60) {
                format!("DELETE FROM {t} WHERE id = {id}")
            } else {
                format!(
                    "DELETE FROM {t} WHERE id BETWEEN {id} AND {} RETURNING id, k, v",
                    id + rng.range(1, 10)
                )
            }
        }
        // by ranges of k (through the index on k when the planner likes it)
        56..=65 => {
            let kb = wk.k_base();
            let k1 = kb + rng.below(K_SPACE as u64) as i64;
            let k2 = (k1 + rng.range(0, 6)).min(kb + K_SPACE - 1);
            let d = rng.range(1, 5);
            let v = wk.some_v(rng);
            match rng.below(4) {
                0 => format!(
                    "UPDATE {t} SET k = {kb} + (k - {kb} + {d}) % {K_SPACE} WHERE k BETWEEN {k1} AND {k2} RETURNING id, k"
                ),
                1 => format!("UPDATE {t} SET v = {v} WHERE k BETWEEN {k1} AND {k2}"),
                2 => format!("DELETE FROM {t} WHERE k BETWEEN {k1} AND {k2} RETURNING id"),
                _ => format!(
                    "UPDATE {t} SET v = left(coalesce(v, '') || '.', 60), k = k WHERE k BETWEEN {k1} AND {k2} AND id % 2 = {}",
                    rng.below(2)
                ),
            }
        }
        // savepoints
        66..=69 => {
            wk.next_sp += 1;
            let name = format!("s{}", wk.next_sp);
            wk.savepoints.push(name.clone());
            format!("SAVEPOINT {name}")
        }
        70..=73 if !wk.savepoints.is_empty() => {
            let i = rng.below(wk.savepoints.len() as u64) as usize;
            let name = wk.savepoints[i].clone();
            // ROLLBACK TO keeps the savepoint, RELEASE removes it and later ones
            if rng.pct(60) {
                wk.savepoints.truncate(i + 1);
                format!("ROLLBACK TO SAVEPOINT {name}")
            } else {
                wk.savepoints.truncate(i);
                format!("RELEASE SAVEPOINT {name}")
            }
        }
        // reads inside the transaction (own changes must be visible)
        74..=79 => {
            let kb = wk.k_base();
            match rng.below(4) {
                0 => format!("SELECT id, k, v FROM {t} WHERE {}", wk.mine()),
                1 => format!(
                    "SELECT id, k, v FROM {t} WHERE k BETWEEN {kb} AND {}",
                    kb + K_SPACE - 1
                ),
                2 => format!("SELECT count(*), sum(id), sum(k) FROM {t}"),
                _ => {
                    let id = wk.some_id(rng);
                    format!(
                        "SELECT id, k, v FROM {t} WHERE id = {id} OR id = {}",
                        id + MOVE
                    )
                }
            }
        }
        // row locks on own rows
        80..=83 => {
            let kb = wk.k_base();
            let k1 = kb + rng.below(K_SPACE as u64) as i64;
            let mode = [
                "FOR UPDATE",
                "FOR NO KEY UPDATE",
                "FOR SHARE",
                "FOR KEY SHARE",
            ][rng.below(4) as usize];
            format!(
                "SELECT id, k FROM {t} WHERE k BETWEEN {k1} AND {} {mode}",
                k1 + 3
            )
        }
        // scan choice for the rest of the session (transactional SET)
        84..=87 => match rng.below(3) {
            0 => "SET enable_seqscan = off".into(),
            1 => "SET enable_seqscan = on".into(),
            _ => "SET enable_indexscan = off".into(),
        },
        88..=89 => {
            // delete and insert the same key again in one statement
            let id = wk.some_id(rng);
            format!(
                "WITH d AS (DELETE FROM {t} WHERE id = {id} RETURNING id, k, v) \
                 INSERT INTO {t} (id, k, v) SELECT id, k, left('re' || coalesce(v, ''), 60) FROM d \
                 RETURNING id, k, v"
            )
        }
        90..=92 => {
            // a cursor over own rows, changing rows where it stands
            wk.n += 1;
            let c = format!("c{}", wk.n);
            let kb = wk.k_base();
            let k1 = kb + rng.below(K_SPACE as u64) as i64;
            let lock = ["FOR UPDATE", "FOR NO KEY UPDATE", ""][rng.below(3) as usize];
            let order = " ORDER BY id"; // FETCH n must not depend on the scan order
            let mut steps = vec![
                format!(
                    "DECLARE {c} CURSOR FOR SELECT id, k, v FROM {t} WHERE k BETWEEN {k1} AND {}{order} {lock}",
                    k1 + rng.range(0, 10)
                ),
                format!("FETCH {} FROM {c}", rng.range(1, 3)),
            ];
            if !lock.is_empty() {
                steps.push(format!(
                    "UPDATE {t} SET v = 'cur{}' WHERE CURRENT OF {c} RETURNING id, k, v",
                    wk.n
                ));
                steps.push(format!("FETCH 1 FROM {c}"));
                if rng.pct(50) {
                    steps.push(format!("DELETE FROM {t} WHERE CURRENT OF {c} RETURNING id"));
                }
            }
            steps.push(format!("FETCH ALL FROM {c}"));
            steps.push(format!("CLOSE {c}"));
            steps.join(STEP_SEP)
        }
        93..=94 => {
            // several primary keys change through the index on k; only
            // unmoved rows move, so no moved row can be in the way of
            // another one (unique checks are immediate: order-dependent)
            let kb = wk.k_base();
            let k1 = kb + rng.below(K_SPACE as u64) as i64;
            format!(
                "UPDATE {t} SET id = id + {MOVE} WHERE k BETWEEN {k1} AND {} AND id < {MOVE} RETURNING id, k",
                k1 + rng.range(0, 3)
            )
        }
        95..=96 => {
            // updates that change nothing
            let lo = wk.id_base() + rng.below(ID_SPACE as u64) as i64;
            format!(
                "UPDATE {t} SET v = v, k = k WHERE id BETWEEN {lo} AND {}",
                lo + 20
            )
        }
        _ => {
            let id = wk.some_id(rng);
            let v = wk.some_v(rng);
            format!("UPDATE {t} SET v = {v} WHERE id = {id}")
        }
    }
}

/// Separates the statements of one generated operation.
const STEP_SEP: &str = "\n;;\n";

// ------------------------------------------------------------------ comparing

/// (name, settings, query): the tables are compared through each.
const CHECKS: [(&str, &str, &str); 6] = [
    (
        "seqscan",
        "SET enable_seqscan = on; SET enable_indexscan = off; SET enable_indexonlyscan = off; \
         SET enable_bitmapscan = off",
        "SELECT id, k, v FROM {t} ORDER BY id",
    ),
    (
        "primary key",
        "SET enable_seqscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = on",
        "SELECT id, k, v FROM {t} ORDER BY id",
    ),
    (
        "index on k",
        "SET enable_sort = off",
        "SELECT id, k, v FROM {t} WHERE k >= 0 ORDER BY k, id",
    ),
    (
        "index-only on k",
        "SET enable_sort = on",
        "SELECT k FROM {t} WHERE k IS NOT NULL ORDER BY k",
    ),
    ("index-only on id", "", "SELECT id FROM {t} ORDER BY id"),
    (
        "bitmap on k",
        "SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on",
        "SELECT id, k, v FROM {t} WHERE k >= 0 OR k < 0 ORDER BY id",
    ),
];

fn first_difference(h: &[String], o: &[String]) -> String {
    let cut = |s: &String| {
        if s.len() > 120 {
            format!("{}... ({} chars)", &s[..120], s.len())
        } else {
            s.clone()
        }
    };
    for i in 0..h.len().max(o.len()) {
        let (a, b) = (h.get(i), o.get(i));
        if a != b {
            return format!(
                "row {i}: heap {:?}, orioledb {:?} (heap has {} rows, orioledb {})",
                a.map(cut),
                b.map(cut),
                h.len(),
                o.len()
            );
        }
    }
    "no difference".into()
}

struct Ctx {
    seed: u64,
    txn: u64,
    started: Instant,
}

impl Ctx {
    fn fail(&self, workers: &[Worker], what: String) -> ! {
        let mut msg = format!(
            "differential test failed: seed {} (ORIOLEDB_DIFF_SEED={}), transaction {} ({:.1}s in)\n{what}\n",
            self.seed,
            self.seed,
            self.txn,
            self.started.elapsed().as_secs_f64()
        );
        for wk in workers {
            let _ = writeln!(
                msg,
                "-- worker {} ({}), statements of its current transaction:",
                wk.w,
                if wk.in_txn {
                    "in a transaction"
                } else {
                    "idle"
                }
            );
            for s in &wk.log {
                let s = if s.len() > 300 {
                    format!("{}...", &s[..300])
                } else {
                    s.clone()
                };
                let _ = writeln!(msg, "   {s}");
            }
        }
        panic!("{msg}");
    }
}

/// Time spent: statements on heap, on orioledb; checks on heap, on orioledb.
struct Times([std::sync::atomic::AtomicU64; 4]);

impl Times {
    fn add(&self, i: usize, d: std::time::Duration) {
        self.0[i].fetch_add(d.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    }
    fn secs(&self, i: usize) -> f64 {
        self.0[i].load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6
    }
}

static TIME: Times = Times([
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
]);

/// Compares the tables through the first two checks (seq scan, primary
/// key), or through all of them when `all`.
fn compare_tables(ctx: &Ctx, checker: &mut Client, workers: &[Worker], all: bool) {
    for (name, settings, query) in CHECKS.iter().take(if all { CHECKS.len() } else { 2 }) {
        checker.batch_execute(settings).expect("check settings");
        // Cheap first: a digest of the rows in scan order.
        let digest = |t: &str| {
            format!(
                "SELECT count(*) || ' ' || coalesce(md5(string_agg(x::text, E'\\n')), '') \
                 FROM ({}) x",
                query.replace("{t}", t)
            )
        };
        let t0 = Instant::now();
        let h = text_rows(checker, &digest(HEAP));
        let t1 = Instant::now();
        let o = text_rows(checker, &digest(ORIO));
        TIME.add(2, t1 - t0);
        TIME.add(3, t1.elapsed());
        if h.is_ok() && h == o {
            continue;
        }
        let h = text_rows(checker, &query.replace("{t}", HEAP));
        let o = text_rows(checker, &query.replace("{t}", ORIO));
        match (h, o) {
            (Ok(h), Ok(o)) if h == o => {}
            (Ok(h), Ok(o)) => ctx.fail(
                workers,
                format!("tables differ ({name}): {}", first_difference(&h, &o)),
            ),
            (h, o) => ctx.fail(
                workers,
                format!(
                    "check query failed ({name}): heap {:?}, orioledb {:?}",
                    h.err(),
                    o.err()
                ),
            ),
        }
    }
    checker
        .batch_execute("RESET ALL; SET jit = off")
        .expect("RESET ALL on the checker");
}

/// Runs one statement on both connections of the worker.
fn step(ctx: &Ctx, workers: &mut [Worker], i: usize, sql: &str) -> Out {
    let wk = &mut workers[i];
    wk.log.push(sql.replace("{t}", "t"));
    let t0 = Instant::now();
    let h = exec(&mut wk.heap, &sql.replace("{t}", HEAP));
    let t1 = Instant::now();
    let o = exec(&mut wk.orio, &sql.replace("{t}", ORIO));
    TIME.add(0, t1 - t0);
    TIME.add(1, t1.elapsed());
    if h != o {
        let stmt = sql.replace("{t}", "t");
        ctx.fail(
            workers,
            format!(
                "worker {i}: `{}` had different outcomes:\n  heap:     {}\n  orioledb: {}",
                if stmt.len() > 300 {
                    &stmt[..300]
                } else {
                    &stmt
                },
                short(&h),
                short(&o)
            ),
        );
    }
    h
}

#[test]
fn heap_and_orioledb_agree_on_random_workload() {
    let (env, _g) = require_server!();
    let seed = env_num("ORIOLEDB_DIFF_SEED", 42);
    let txns = env_num("ORIOLEDB_DIFF_TXNS", 1500);
    let nworkers = env_num("ORIOLEDB_DIFF_WORKERS", 3).max(1) as i64;
    let mut checker = fresh_db(&env, DB);
    // No JIT: with enable_seqscan = off a query that can only be answered
    // by a (disabled) seq scan costs 1e10 and would be JIT-compiled each
    // time (~50-100 ms).
    checker.batch_execute("SET jit = off").unwrap();
    for (t, am) in [(HEAP, "heap"), (ORIO, "orioledb")] {
        checker
            .batch_execute(&format!(
                "CREATE TABLE {t} (id int PRIMARY KEY, k int, v text) USING {am}; \
                 CREATE INDEX {t}_k ON {t} (k);"
            ))
            .unwrap_or_else(|e| panic!("create {t}: {}", describe(&e)));
    }
    let mut workers: Vec<Worker> = (0..nworkers)
        .map(|w| {
            let mut heap = connect(&env, DB);
            let mut orio = connect(&env, DB);
            for c in [&mut heap, &mut orio] {
                c.batch_execute("SET statement_timeout = '60s'; SET jit = off")
                    .unwrap();
            }
            Worker {
                w,
                heap,
                orio,
                in_txn: false,
                left: 0,
                savepoints: Vec::new(),
                next_sp: 0,
                aborted: false,
                log: Vec::new(),
                n: 0,
            }
        })
        .collect();
    let mut rng = Rng(seed);
    let mut ctx = Ctx {
        seed,
        txn: 0,
        started: Instant::now(),
    };
    let (mut commits, mut rollbacks, mut errors, mut statements) = (0u64, 0u64, 0u64, 0u64);
    eprintln!("differential: seed {seed}, {txns} transactions, {nworkers} workers");

    while ctx.txn < txns {
        let i = rng.below(nworkers as u64) as usize;
        if !workers[i].in_txn {
            let begin = match rng.below(10) {
                0..=6 => "BEGIN",
                _ => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            };
            let wk = &mut workers[i];
            wk.in_txn = true;
            wk.left = rng.range(1, 12) as u32;
            wk.savepoints.clear();
            wk.aborted = false;
            wk.log.clear();
            step(&ctx, &mut workers, i, begin);
            continue;
        }
        if workers[i].left == 0 {
            // end the transaction
            let end = if workers[i].aborted {
                if rng.pct(50) {
                    "ROLLBACK"
                } else {
                    "COMMIT"
                }
            } else if rng.pct(75) {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            step(&ctx, &mut workers, i, end);
            if end == "COMMIT" && !workers[i].aborted {
                commits += 1;
            } else {
                rollbacks += 1;
            }
            workers[i].in_txn = false;
            ctx.txn += 1;
            compare_tables(&ctx, &mut checker, &workers, ctx.txn.is_multiple_of(5));
            continue;
        }
        workers[i].left -= 1;
        if workers[i].aborted {
            // an error ended the work: roll back to a savepoint if there is one
            if let Some(name) = workers[i].savepoints.last().cloned() {
                step(
                    &ctx,
                    &mut workers,
                    i,
                    &format!("ROLLBACK TO SAVEPOINT {name}"),
                );
                workers[i].aborted = false;
            } else {
                workers[i].left = 0;
            }
            continue;
        }
        let sql = gen_statement(&mut workers[i], &mut rng);
        statements += 1;
        // Sometimes guard a statement with a savepoint of its own (not a
        // savepoint command: RELEASE of the guard would drop it too).
        let is_sp = ["SAVEPOINT", "ROLLBACK", "RELEASE"]
            .iter()
            .any(|p| sql.starts_with(p));
        let guard = !is_sp && rng.pct(25);
        if guard {
            step(&ctx, &mut workers, i, "SAVEPOINT guard");
        }
        let mut out = Out::Count(0);
        for part in sql.split(STEP_SEP) {
            out = step(&ctx, &mut workers, i, part);
            if matches!(out, Out::Err(_)) {
                break;
            }
        }
        if let Out::Err(code) = &out {
            errors += 1;
            // duplicate keys; a cursor past its last row for WHERE CURRENT OF
            let expected = ["23505", "24000"];
            if !expected.contains(&code.as_str()) {
                ctx.fail(
                    &workers,
                    format!("unexpected error {code} from `{sql}` (on both tables)"),
                );
            }
        }
        if guard {
            if matches!(out, Out::Err(_)) {
                step(&ctx, &mut workers, i, "ROLLBACK TO SAVEPOINT guard");
            } else {
                step(&ctx, &mut workers, i, "RELEASE SAVEPOINT guard");
            }
        } else if matches!(out, Out::Err(_)) {
            workers[i].aborted = true;
        }
    }
    // Finish open transactions and compare once more.
    for i in 0..workers.len() {
        if workers[i].in_txn {
            step(&ctx, &mut workers, i, "COMMIT");
            workers[i].in_txn = false;
        }
    }
    compare_tables(&ctx, &mut checker, &workers, true);
    let rows: i64 = checker
        .query_one(&format!("SELECT count(*) FROM {ORIO}"), &[])
        .unwrap()
        .get(0);
    eprintln!(
        "differential: seed {seed}: {} transactions ({commits} committed, {rollbacks} rolled back), \
         {statements} statements ({errors} errors on both), {rows} rows at the end, {:.1}s",
        ctx.txn,
        ctx.started.elapsed().as_secs_f64()
    );
    eprintln!(
        "differential: time in statements: heap {:.1}s, orioledb {:.1}s; in checks: heap {:.1}s, orioledb {:.1}s",
        TIME.secs(0),
        TIME.secs(1),
        TIME.secs(2),
        TIME.secs(3)
    );
}
