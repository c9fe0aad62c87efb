//! Crash endurance: the whole server killed with `kill -9`, cycle after
//! cycle, while clients transfer money between accounts and another session
//! runs CHECKPOINT in a loop (PostgreSQL's and the engine's), on a cluster of
//! its own with `fsync = on` and the extension's default settings.
//!
//! After every restart: no commit a client saw acknowledged is missing
//! (each transfer inserts its own numbered history row, so every client's
//! rows up to its last acknowledged number must be there, and at most the
//! one in flight beyond it), the balances sum to zero, and the checker
//! passes on every tree.
//!
//! Knob: `ORIOLEDB_ENDURANCE_CYCLES` (default 5 in the test suite; the
//! 100-cycle run is reported in docs/benchmarks.md).

#[macro_use]
mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const CLIENTS: usize = 4;
const ACCOUNTS: i32 = 200;

/// Kills the postmaster and every child at once, then starts the server
/// again (crash recovery).
fn kill_whole_server(env: &TestEnv) {
    let pid = postmaster_pid(env);
    let mut all = vec![pid];
    all.extend(children_of(pid));
    let mut kill = std::process::Command::new("kill");
    kill.arg("-9").args(all.iter().map(|p| p.to_string()));
    let _ = kill.status();
    let gone = std::time::Instant::now();
    while all
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        && gone.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    start_server(env);
}

/// A client: numbered transfers until its connection breaks; returns the
/// last number whose COMMIT was acknowledged.
fn client(env: TestEnv, w: i32, mut seq: i32, seed: u64) -> JoinHandle<i32> {
    std::thread::spawn(move || {
        let mut acked = seq - 1;
        let Ok(mut c) = config_for(&env.host, env.port, "endure").connect(NoTls) else {
            return acked;
        };
        let mut r = Rng(seed);
        loop {
            let a = r.range(1, ACCOUNTS as i64);
            let b = r.range(1, ACCOUNTS as i64);
            let d = r.range(1, 100);
            let sql = format!(
                "BEGIN;
                 UPDATE acct SET bal = bal + {d} WHERE id = {a};
                 UPDATE acct SET bal = bal - {d} WHERE id = {b};
                 INSERT INTO hist VALUES ({w}, {seq}, {d}, repeat('h', {}));
                 COMMIT;",
                r.below(3000)
            );
            match c.batch_execute(&sql) {
                Ok(()) => {
                    acked = seq;
                    seq += 1;
                }
                Err(e) if e.is_closed() || e.as_db_error().is_none() => return acked,
                Err(e) => {
                    // Deadlocks between transfers: retry with the same number.
                    let code = e.as_db_error().map(|d| d.code().code().to_string());
                    if !matches!(code.as_deref(), Some("40P01") | Some("40001")) {
                        return acked;
                    }
                    let _ = c.batch_execute("ROLLBACK");
                }
            }
        }
    })
}

#[test]
fn kill9_cycles_lose_no_acknowledged_commit() {
    let (base, _g) = require_server!();
    let cluster = ScratchCluster::new(
        &base,
        "endure",
        &["shared_preload_libraries = 'orioledb_rs'", "fsync = on"],
    );
    let env = cluster.env.clone();
    let mut c = cluster.connect("postgres");
    c.batch_execute("CREATE DATABASE endure").unwrap();
    let mut c = cluster.connect("endure");
    c.batch_execute(&format!(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL) USING orioledb;
         CREATE TABLE hist (w int, seq int, delta int, pad text, PRIMARY KEY (w, seq))
             USING orioledb;
         INSERT INTO acct SELECT g, 0 FROM generate_series(1, {ACCOUNTS}) g;"
    ))
    .unwrap();
    drop(c);
    let cycles = knob("ORIOLEDB_ENDURANCE_CYCLES", 5);
    let mut next = [1i32; CLIENTS];
    let mut r = Rng(knob("ORIOLEDB_SEED", 7));
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let ckpt = {
            let (env, stop) = (env.clone(), stop.clone());
            std::thread::spawn(move || {
                let Ok(mut c) = config_for(&env.host, env.port, "endure").connect(NoTls) else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) && c.batch_execute("CHECKPOINT").is_ok() {
                    std::thread::sleep(Duration::from_millis(150));
                }
            })
        };
        let clients: Vec<_> = (0..CLIENTS)
            .map(|w| client(env.clone(), w as i32, next[w], r.next()))
            .collect();
        std::thread::sleep(Duration::from_millis(800 + r.below(2500)));
        kill_whole_server(&env);
        stop.store(true, Ordering::Relaxed);
        let acked: Vec<i32> = clients.into_iter().map(|h| h.join().unwrap()).collect();
        let _ = ckpt.join();

        let mut c = cluster.connect("endure");
        let sum: i64 = c
            .query_one("SELECT sum(bal)::int8 FROM acct", &[])
            .unwrap()
            .get(0);
        assert_eq!(sum, 0, "cycle {cycle}: balances do not sum to zero");
        for w in 0..CLIENTS {
            let row = c
                .query_one(
                    "SELECT count(*) FILTER (WHERE seq <= $2)::int4, coalesce(max(seq), 0)::int4 \
                     FROM hist WHERE w = $1",
                    &[&(w as i32), &acked[w]],
                )
                .unwrap();
            let (upto, max): (i32, i32) = (row.get(0), row.get(1));
            assert_eq!(
                upto, acked[w],
                "cycle {cycle}: client {w} had {} commits acknowledged, {upto} survived\n{}",
                acked[w],
                cluster.log_tail()
            );
            assert!(
                max <= acked[w] + 1,
                "cycle {cycle}: client {w}: row {max} beyond the acknowledged {}",
                acked[w]
            );
            next[w] = max + 1;
        }
        for t in ["acct", "hist"] {
            let r = query_text(&mut c, &format!("SELECT orioledb_check('{t}'::regclass)"));
            assert!(r.starts_with("ok"), "cycle {cycle}: checker on {t}: {r}");
        }
        eprintln!("crash cycle {cycle}: acknowledged {acked:?}, sum {sum}");
    }
}
