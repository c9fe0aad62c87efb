//! Base backups of a server with orioledb tables (`pg::backup`). Copies
//! taken while pgbench writes and the engine's own checkpoints are due
//! every second — with `pg_basebackup` (plain and tar, WAL streamed and
//! fetched, slowed down so that the copy takes seconds) and with
//! `pg_backup_start()` / a file copy / `pg_backup_stop()` — start, recover,
//! pass `pg_verifybackup`, balance, hold every row committed before the
//! backup began with no gap after it, and pass the tree checker. A copy
//! whose engine files predate its start is refused when restored.

#[macro_use]
mod common;

use common::*;
use std::path::Path;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Engine checkpoints due every second (the point of these runs): a copy
/// that takes seconds would see several if backups did not hold them off.
const PRIMARY: &[&str] = &[
    "shared_preload_libraries = 'orioledb_rs'",
    "shared_buffers = 16MB",
    "orioledb.main_buffers = 16MB",
    "orioledb.checkpoint_timeout = 1",
    "default_table_access_method = orioledb",
];

const SCALE: i64 = 2;

/// A primary with pgbench's tables and `seq`, a table the writers fill
/// with consecutive ids.
fn primary(env: &TestEnv, name: &str) -> ScratchCluster {
    let p = ScratchCluster::new(env, name, PRIMARY);
    p.connect("postgres")
        .batch_execute("CREATE EXTENSION orioledb_rs; CREATE TABLE seq (id bigint PRIMARY KEY, pad text)")
        .unwrap();
    let mut init = client_command(&p.env, "pgbench");
    init.args(["-i", "-q", "-s", &SCALE.to_string(), "postgres"]);
    run_checked(init, "pgbench -i");
    p
}

/// Writers on the primary while a backup is taken: pgbench, a session
/// inserting consecutive ids into `seq` (one transaction each), and one
/// running CHECKPOINT (each asks for an engine checkpoint, which must not
/// happen while files are copied).
struct Load {
    stop: Arc<AtomicBool>,
    /// The last id whose INSERT had committed.
    committed: Arc<AtomicI64>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pgbench: std::process::Child,
}

impl Load {
    fn start(p: &ScratchCluster) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicI64::new(0));
        let mut threads = Vec::new();
        {
            let (stop, committed) = (stop.clone(), committed.clone());
            let mut c = p.connect("postgres");
            threads.push(std::thread::spawn(move || {
                let mut id = 0i64;
                while !stop.load(Ordering::Acquire) {
                    id += 1;
                    c.execute("INSERT INTO seq VALUES ($1, repeat('x', 100))", &[&id]).unwrap();
                    committed.store(id, Ordering::Release);
                }
            }));
        }
        {
            let stop = stop.clone();
            let mut c = p.connect("postgres");
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1500));
                    c.batch_execute("CHECKPOINT").unwrap();
                }
            }));
        }
        // In a process group of its own: it may run under `runuser`, which
        // a kill of the child alone would not stop.
        let pgbench = client_command(&p.env, "pgbench")
            .process_group(0)
            .args(["-n", "-c", "2", "-T", "600", "postgres"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start pgbench");
        std::thread::sleep(Duration::from_millis(500));
        Load {
            stop,
            committed,
            threads,
            pgbench,
        }
    }

    fn committed(&self) -> i64 {
        self.committed.load(Ordering::Acquire)
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.join().expect("a writer failed");
        }
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.pgbench.id())])
            .status();
        let _ = self.pgbench.wait();
    }
}

/// What a restored copy must show: pgbench's books balance, every
/// account is there, `seq` holds 1..n without a gap for an n of at least
/// `floor`, the trees pass the checker, and the copy takes writes.
fn verify(copy: &ScratchCluster, floor: i64) {
    let mut c = copy.connect("postgres");
    let sums = query_text(
        &mut c,
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(bbalance) FROM pgbench_branches) \
         || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
    );
    let parts: Vec<&str> = sums.split(' ').collect();
    assert!(parts.iter().all(|p| *p == parts[0]), "pgbench's sums disagree in the copy: {sums}");
    let accounts: i64 = c.query_one("SELECT count(*) FROM pgbench_accounts", &[]).unwrap().get(0);
    assert_eq!(accounts, 100_000 * SCALE);
    let (n, max): (i64, Option<i64>) = {
        let r = c.query_one("SELECT count(*), max(id) FROM seq", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    let max = max.unwrap_or(0);
    assert_eq!(n, max, "seq has gaps in the copy: {n} rows up to {max}");
    assert!(max >= floor, "the copy lost committed rows: seq ends at {max}, {floor} had committed before the backup began");
    for t in ["pgbench_accounts", "pgbench_branches", "pgbench_tellers", "pgbench_history", "seq"] {
        let r = query_text(&mut c, &format!("SELECT orioledb_check('{t}'::regclass)"));
        assert!(r.starts_with("ok"), "checker on {t} in the copy: {r}");
    }
    c.batch_execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1; INSERT INTO seq VALUES (-1, 'after')")
        .unwrap();
}

fn pg_verifybackup(env: &TestEnv, dir: &Path) {
    let mut v = Command::new(env.bindir.join("pg_verifybackup"));
    v.arg(dir);
    run_checked(v, "pg_verifybackup");
}

/// `pg_basebackup` of the primary under load, as `format` ("p" or "t")
/// with WAL by `wal` ("stream" or "fetch"), restored and verified.
fn basebackup_restores(format: &str, wal: &str) {
    let (env, _g) = require_server!();
    let p = primary(&env, &format!("bb{format}{wal}"));
    let load = Load::start(&p);
    let floor = load.committed();
    let (copy, started) = ScratchCluster::from_copy(&env, &format!("bb{format}{wal}copy"), &[], |pgdata| {
        let out = if format == "p" {
            pgdata.to_path_buf()
        } else {
            pgdata.with_file_name("tar")
        };
        let mut bb = pg_command(&p.env, "pg_basebackup");
        bb.args(["-h", &p.env.host, "-p", &p.env.port.to_string(), "-U", "postgres"])
            .arg("-D")
            .arg(&out)
            // About 8 MB/s: the copy takes seconds, with engine
            // checkpoints due every one of them.
            .args(["-F", format, "-X", wal, "-c", "fast", "--max-rate=8M"]);
        run_checked(bb, "pg_basebackup");
        if format == "t" {
            use std::os::unix::fs::PermissionsExt;
            std::fs::create_dir_all(pgdata).unwrap();
            std::fs::set_permissions(pgdata, std::fs::Permissions::from_mode(0o700)).unwrap();
            let mut x = Command::new("tar");
            x.arg("-xf").arg(out.join("base.tar")).arg("-C").arg(pgdata);
            run_checked(x, "extract base.tar");
            if wal == "stream" {
                let mut x = Command::new("tar");
                x.arg("-xf").arg(out.join("pg_wal.tar")).arg("-C").arg(pgdata.join("pg_wal"));
                run_checked(x, "extract pg_wal.tar");
            }
            std::fs::copy(out.join("backup_manifest"), pgdata.join("backup_manifest")).unwrap();
        }
        pg_verifybackup(&env, pgdata);
    });
    load.stop();
    started.unwrap_or_else(|e| panic!("the copy did not start: {e}\n{}", copy.log_tail()));
    verify(&copy, floor);
}

#[test]
fn pg_basebackup_plain_streamed_restores() {
    basebackup_restores("p", "stream");
}

#[test]
fn pg_basebackup_tar_fetched_restores() {
    basebackup_restores("t", "fetch");
}

#[test]
fn pg_basebackup_tar_streamed_restores() {
    basebackup_restores("t", "stream");
}

/// Copies `src`'s data directory to `dst` as a file-level backup would:
/// no server pid file, no slots, no WAL (added after the stop).
fn copy_data_dir(src: &Path, dst: &Path) {
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(src).arg(dst);
    run_checked(cp, "copy the data directory");
    let _ = std::fs::remove_file(dst.join("postmaster.pid"));
    for d in ["pg_replslot", "pg_wal"] {
        for e in std::fs::read_dir(dst.join(d)).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                std::fs::remove_dir_all(e.path()).unwrap();
            } else {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    std::fs::create_dir_all(dst.join("pg_wal/archive_status")).unwrap();
}

/// The WAL segments from the one the backup label starts in, copied from
/// the primary: what a backup holds (nothing before its start).
fn copy_wal_from_start(src: &Path, dst: &Path, label: &str) {
    let start = label
        .lines()
        .find_map(|l| l.strip_prefix("START WAL LOCATION: "))
        .and_then(|l| l.split("(file ").nth(1))
        .map(|f| f.trim_end_matches(')').to_string())
        .unwrap_or_else(|| panic!("no start segment in the label:\n{label}"));
    for e in std::fs::read_dir(src.join("pg_wal")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.len() == 24 && name.as_str() >= start.as_str() {
            std::fs::copy(e.path(), dst.join("pg_wal").join(&name)).unwrap();
        }
    }
}

/// Takes a low-level backup of `p` into `pgdata`: `pg_backup_start()`,
/// `copy` (given the primary's data directory), `pg_backup_stop()`, the
/// label written and the WAL from the start copied.
fn low_level_backup(p: &ScratchCluster, pgdata: &Path, copy: impl FnOnce(&Path)) {
    let src = p.env.pgdata.clone().expect("a scratch cluster has PGDATA");
    let mut b = p.connect("postgres");
    // In a transaction block with the extended protocol, as a driver runs
    // it: the client has its row before the statement's ExecutorEnd.
    let mut t = b.transaction().unwrap();
    t.query_one("SELECT pg_backup_start('itest', true)::text", &[]).unwrap();
    copy(&src);
    let label: String = t
        .query_one("SELECT labelfile FROM pg_backup_stop(false)", &[])
        .unwrap()
        .get(0);
    t.commit().unwrap();
    std::fs::write(pgdata.join("backup_label"), &label).unwrap();
    copy_wal_from_start(&src, pgdata, &label);
}

#[test]
fn low_level_backup_with_a_file_copy_restores() {
    let (env, _g) = require_server!();
    let p = primary(&env, "lowlevel");
    let load = Load::start(&p);
    let floor = load.committed();
    let (copy, started) = ScratchCluster::from_copy(&env, "lowlevelcopy", &[], |pgdata| {
        low_level_backup(&p, pgdata, |src| {
            copy_data_dir(src, pgdata);
            // The engine's control file as copied first, its data files
            // and maps again three seconds (three engine checkpoints due)
            // later: a copy may read them in any order.
            std::thread::sleep(Duration::from_secs(3));
            let control = std::fs::read(pgdata.join("orioledb_data/control")).unwrap();
            let mut cp = Command::new("cp");
            cp.arg("-a").arg(src.join("orioledb_data/.")).arg(pgdata.join("orioledb_data"));
            run_checked(cp, "copy the engine's files again");
            std::fs::write(pgdata.join("orioledb_data/control"), control).unwrap();
        });
    });
    load.stop();
    started.unwrap_or_else(|e| panic!("the copy did not start: {e}\n{}", copy.log_tail()));
    verify(&copy, floor);
}

#[test]
fn a_copy_whose_engine_files_predate_the_backup_is_refused() {
    let (env, _g) = require_server!();
    let p = primary(&env, "stale");
    let mut c = p.connect("postgres");
    let staged = p.dir.join("stale-engine");
    let src = p.env.pgdata.clone().unwrap();
    // The engine's files from before the backup, then writes, engine
    // checkpoints and WAL switches so that their redo point's WAL is not
    // among the backup's.
    // Copied inside a backup of their own, so that no engine checkpoint
    // completes under the copy (the worker's are due every second).
    c.batch_execute("SELECT pg_backup_start('stage', true)").unwrap();
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(src.join("orioledb_data")).arg(&staged);
    run_checked(cp, "keep the engine's files");
    c.batch_execute("SELECT pg_backup_stop(false)").unwrap();
    for _ in 0..2 {
        c.batch_execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 50 = 0; SELECT pg_switch_wal(); CHECKPOINT")
            .unwrap();
    }
    let (copy, started) = ScratchCluster::from_copy(&env, "stalecopy", &[], |pgdata| {
        low_level_backup(&p, pgdata, |src| {
            copy_data_dir(src, pgdata);
            std::fs::remove_dir_all(pgdata.join("orioledb_data")).unwrap();
            let mut cp = Command::new("cp");
            cp.arg("-a").arg(&staged).arg(pgdata.join("orioledb_data"));
            run_checked(cp, "put the old engine files in the copy");
        });
    });
    let log = copy.log_tail();
    assert!(started.is_err(), "a copy without the WAL its engine files need started:\n{log}");
    assert!(
        log.contains("cannot recover orioledb tables"),
        "the refusal names the problem:\n{log}"
    );
}

/// pgbench's books, account count and `seq`'s extent, as one text.
fn books(c: &mut Client) -> String {
    query_text(
        c,
        "SELECT coalesce((SELECT sum(abalance) FROM pgbench_accounts), 0) || ' ' || coalesce((SELECT sum(bbalance) FROM pgbench_branches), 0) \
         || ' ' || (SELECT count(*) FROM pgbench_history) || ' ' || (SELECT count(*) || '/' || coalesce(max(id), 0) FROM seq)",
    )
}

/// `pg_basebackup -R` of the primary under load: the standby streams,
/// answers reads as the primary at the same position, survives kill -9,
/// and once promoted takes writes.
#[test]
fn a_standby_made_by_pg_basebackup_follows_and_is_promoted() {
    let (env, _g) = require_server!();
    let p = primary(&env, "bbstandby");
    let load = Load::start(&p);
    let (standby, started) = ScratchCluster::from_copy(&env, "bbstandbycopy", &[], |pgdata| {
        standby_copy(&p, pgdata);
    });
    started.unwrap_or_else(|e| panic!("the standby did not start: {e}\n{}", standby.log_tail()));
    // Reads while replay changes the tables: each answer is one snapshot's
    // (pgbench's books balance in it, every branch is there), or the
    // query is cancelled for a conflict with recovery (40001).
    let mut sc = standby.connect("postgres");
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    let (mut answered, mut cancelled) = (0, 0);
    while std::time::Instant::now() < deadline {
        match sc.query_one(
            "SELECT coalesce((SELECT sum(abalance) FROM pgbench_accounts)::text, 'none') || ' ' \
             || coalesce((SELECT sum(bbalance) FROM pgbench_branches)::text, 'none') || ' ' \
             || (SELECT count(*) FROM pgbench_branches)",
            &[],
        ) {
            Ok(row) => {
                let r: String = row.get(0);
                let parts: Vec<&str> = r.split(' ').collect();
                assert!(
                    parts.len() == 3 && parts[0] == parts[1] && parts[2] == SCALE.to_string(),
                    "a standby query under replay saw no single snapshot's rows: {r}"
                );
                answered += 1;
            }
            Err(e) if e.code().is_some_and(|c| c.code() == "40001") => cancelled += 1,
            Err(e) => panic!("standby query: {e}"),
        }
    }
    assert!(answered > 0, "no standby query completed ({cancelled} cancelled)");
    drop(sc);
    load.stop();
    let mut pc = p.connect("postgres");
    let mut sc = standby.connect("postgres");
    wait_for_replay(&mut sc, &mut pc);
    assert_eq!(books(&mut sc), books(&mut pc), "the standby reads what the primary has");
    // kill -9 and a restart: it replays from its engine files again.
    drop(sc);
    crash_server(&standby.env);
    start_server(&standby.env);
    pc.batch_execute("UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid % 1000 = 3").unwrap();
    let mut sc = standby.connect("postgres");
    wait_for_replay(&mut sc, &mut pc);
    assert_eq!(books(&mut sc), books(&mut pc), "after the standby's crash");
    let promoted: bool = sc.query_one("SELECT pg_promote()", &[]).unwrap().get(0);
    assert!(promoted, "promotion: {}", standby.log_tail());
    let mut sc = standby.connect("postgres");
    sc.batch_execute("INSERT INTO seq VALUES (-5, 'promoted'); CHECKPOINT").unwrap();
    for t in ["pgbench_accounts", "seq"] {
        let r = query_text(&mut sc, &format!("SELECT orioledb_check('{t}'::regclass)"));
        assert!(r.starts_with("ok"), "checker on {t} after promotion: {r}");
    }
}

/// Writes a standby of `p` at `pgdata` (`pg_basebackup -R`, WAL streamed).
fn standby_copy(p: &ScratchCluster, pgdata: &Path) {
    let mut bb = pg_command(&p.env, "pg_basebackup");
    bb.args(["-h", &p.env.host, "-p", &p.env.port.to_string(), "-U", "postgres"])
        .arg("-D")
        .arg(pgdata)
        .args(["-R", "-X", "stream", "-c", "fast"]);
    run_checked(bb, "pg_basebackup -R");
}


/// A standby checkpoints the engine on its own (restartpoints of the
/// engine, kept by its own slot): once PostgreSQL's restartpoints have
/// removed the WAL since its base backup, it still restarts — after
/// kill -9 and cleanly — and reads what the primary has; so does a
/// standby that streams from it (cascaded).
#[test]
fn a_standby_restarts_after_its_restartpoints_removed_its_base_backups_wal() {
    let (env, _g) = require_server!();
    let p = primary(&env, "rpstandby");
    let mut pc = p.connect("postgres");
    let first: String = pc.query_one("SELECT pg_walfile_name(pg_current_wal_lsn())", &[]).unwrap().get(0);
    // Restartpoints come from the WAL volume (each two segments replayed),
    // not from CHECKPOINT on the standby, which would checkpoint the
    // engine in its session too.
    let conf = ["wal_keep_size = 0", "max_wal_size = 32MB", "min_wal_size = 32MB"];
    let (standby, started) = ScratchCluster::from_copy(&env, "rpstandbycopy", &conf, |pgdata| {
        standby_copy(&p, pgdata);
    });
    started.unwrap_or_else(|e| panic!("the standby did not start: {e}\n{}", standby.log_tail()));
    let load = Load::start(&p);
    let mut sc = standby.connect("postgres");
    // New WAL segments and checkpoints on the primary, until the standby's
    // restartpoints have removed the segment the backup began in.
    let mut gone = false;
    for _ in 0..40 {
        pc.batch_execute("SELECT pg_switch_wal(); CHECKPOINT").unwrap();
        wait_for_replay(&mut sc, &mut pc);
        std::thread::sleep(Duration::from_millis(1000));
        let left: i64 = sc
            .query_one("SELECT count(*) FROM pg_ls_waldir() WHERE name <= $1", &[&first])
            .unwrap()
            .get(0);
        if left == 0 {
            gone = true;
            break;
        }
    }
    assert!(gone, "the standby's restartpoints never removed the WAL of its base backup");
    load.stop();
    wait_for_replay(&mut sc, &mut pc);
    assert_eq!(books(&mut sc), books(&mut pc), "the standby reads what the primary has");
    drop(sc);
    crash_server(&standby.env);
    try_start_server(&standby.env)
        .unwrap_or_else(|e| panic!("the standby did not restart after kill -9: {e}\n{}", standby.log_tail()));
    pc.batch_execute("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid % 500 = 7").unwrap();
    let mut sc = standby.connect("postgres");
    wait_for_replay(&mut sc, &mut pc);
    assert_eq!(books(&mut sc), books(&mut pc), "after the standby's crash");
    drop(sc);
    stop_server(&standby.env);
    try_start_server(&standby.env)
        .unwrap_or_else(|e| panic!("the standby did not restart cleanly: {e}\n{}", standby.log_tail()));
    let mut sc = standby.connect("postgres");
    wait_for_replay(&mut sc, &mut pc);
    assert_eq!(books(&mut sc), books(&mut pc), "after the standby's clean restart");
    // A cascaded standby: copied from the primary, streaming from the
    // standby.
    let upstream = format!("host={} port={} user=postgres", standby.env.host, standby.env.port);
    let (cascaded, started) = ScratchCluster::from_copy(&env, "rpcascaded", &[], |pgdata| {
        standby_copy(&p, pgdata);
        let auto = pgdata.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap();
        text.push_str(&format!("primary_conninfo = '{upstream}'\n"));
        std::fs::write(&auto, text).unwrap();
    });
    started.unwrap_or_else(|e| panic!("the cascaded standby did not start: {e}\n{}", cascaded.log_tail()));
    pc.batch_execute("UPDATE pgbench_accounts SET abalance = abalance - 5 WHERE aid % 300 = 11").unwrap();
    let mut cc = cascaded.connect("postgres");
    wait_for_replay(&mut cc, &mut pc);
    assert_eq!(books(&mut cc), books(&mut pc), "the cascaded standby reads what the primary has");
    let upstream_of: String = cc.query_one("SELECT sender_port::text FROM pg_stat_wal_receiver", &[]).unwrap().get(0);
    assert_eq!(upstream_of, standby.env.port.to_string(), "the cascaded standby streams from the standby");
}

/// VACUUM's freezing on the primary makes versions visible to every
/// snapshot: a standby query whose snapshot still counts their inserter as
/// running is cancelled before replay freezes them, never shown the rows.
#[test]
fn freezing_never_shows_a_standby_snapshot_rows_it_must_not_see() {
    let (env, _g) = require_server!();
    let p = ScratchCluster::new(
        &env,
        "freezeconflict",
        &["shared_preload_libraries = 'orioledb_rs'", "max_standby_streaming_delay = 0"],
    );
    let mut pc = p.connect("postgres");
    pc.batch_execute(
        "CREATE EXTENSION orioledb_rs;
         CREATE TABLE f (id int PRIMARY KEY, v text) USING orioledb;
         CREATE TABLE other (id int) USING orioledb;
         INSERT INTO f VALUES (1, 'early')",
    )
    .unwrap();
    drop(pc);
    let standby = p.standby(&env, "freezeconflictstandby");
    let mut watcher = standby.connect("postgres");
    let mut pc = p.connect("postgres");
    let mut late = p.connect("postgres");
    late.batch_execute("BEGIN; INSERT INTO f VALUES (2, 'late')").unwrap();
    // A commit flushes WAL (the open insert's record with it) to the standby.
    pc.batch_execute("INSERT INTO other VALUES (1)").unwrap();
    wait_for_replay(&mut watcher, &mut pc);
    let mut reader = standby.connect("postgres");
    reader.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let before: i64 = reader.query_one("SELECT count(*) FROM f", &[]).unwrap().get(0);
    assert_eq!(before, 1, "the standby snapshot sees the open insert");
    late.batch_execute("COMMIT").unwrap();
    pc.batch_execute("VACUUM (FREEZE) f").unwrap();
    wait_for_replay(&mut watcher, &mut pc);
    match reader.query_one("SELECT count(*) FROM f", &[]) {
        Ok(row) => {
            let n: i64 = row.get(0);
            assert_eq!(n, 1, "a standby snapshot saw a row committed after it");
        }
        Err(e) => assert!(
            e.code().is_some_and(|c| c.code() == "40001") || e.is_closed() || e.as_db_error().is_none(),
            "the standby query failed otherwise: {}", describe(&e)
        ),
    }
    assert!(standby.log_tail().contains("conflict with recovery"), "no recovery conflict: {}", standby.log_tail());
}

/// The primary deletes a pruned version's toast values (logged; its
/// pruning is not): a standby query that still sees the version and reads
/// the value again is cancelled first, never told a chunk is missing.
#[test]
fn pruned_toast_values_never_go_missing_under_a_standby_query() {
    standby_reads_a_toasted_value_the_primary_replaces(false);
}

/// With `hot_standby_feedback`, the primary keeps what the standby's
/// snapshot needs: the same standby query is neither cancelled nor wrong.
#[test]
fn hot_standby_feedback_keeps_what_standby_queries_read() {
    standby_reads_a_toasted_value_the_primary_replaces(true);
}

/// A REPEATABLE READ standby transaction reads a toasted value, the
/// primary replaces it and VACUUMs, and the transaction reads it again
/// once replay has caught up: the same value, or (without feedback) a
/// recovery-conflict cancellation.
fn standby_reads_a_toasted_value_the_primary_replaces(feedback: bool) {
    let (env, _g) = require_server!();
    let name = if feedback { "toastfeedback" } else { "toastconflict" };
    let conf = [
        "shared_preload_libraries = 'orioledb_rs'",
        "max_standby_streaming_delay = 0",
        if feedback { "hot_standby_feedback = on" } else { "hot_standby_feedback = off" },
        "wal_receiver_status_interval = 1",
    ];
    let p = ScratchCluster::new(&env, name, &conf);
    let big = |seed: &str| {
        format!("(SELECT string_agg(md5('{seed}' || g), '') FROM generate_series(1, 400) g)")
    };
    p.connect("postgres")
        .batch_execute(&format!(
            "CREATE EXTENSION orioledb_rs;
             CREATE TABLE tt (id int PRIMARY KEY, big text) USING orioledb;
             CREATE TABLE other (id int) USING orioledb;
             INSERT INTO tt VALUES (1, {})",
            big("a")
        ))
        .unwrap();
    let standby = p.standby(&env, &format!("{name}standby"));
    let mut reader = standby.connect("postgres");
    reader.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let first: String = reader.query_one("SELECT md5(big) FROM tt", &[]).unwrap().get(0);
    // Connected before the conflicting changes: with no standby delay, a
    // backend starting while replay resolves a conflict may be cancelled.
    let mut watcher = standby.connect("postgres");
    let mut pc = p.connect("postgres");
    if feedback {
        // Until the primary has the standby's snapshot horizon.
        let start = std::time::Instant::now();
        while query_text(&mut pc, "SELECT count(backend_xmin)::text FROM pg_stat_replication") != "1" {
            assert!(start.elapsed() < Duration::from_secs(30), "no hot standby feedback arrived");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    pc.batch_execute(&format!("UPDATE tt SET big = {} WHERE id = 1", big("b"))).unwrap();
    // The old version is dead to every snapshot of the primary: VACUUM
    // prunes it, and this session's next change deletes its values (a
    // change elsewhere: an UPDATE of the row could take its row id back,
    // whose record carries a conflict of its own).
    pc.batch_execute("VACUUM tt").unwrap();
    pc.batch_execute("INSERT INTO other VALUES (1)").unwrap();
    wait_for_replay(&mut watcher, &mut pc);
    match reader.query_one("SELECT md5(big) FROM tt", &[]) {
        Ok(row) => {
            let again: String = row.get(0);
            assert_eq!(again, first, "the standby snapshot's value changed");
        }
        Err(e) => assert!(
            !feedback
                && (e.code().is_some_and(|c| c.code() == "40001") || e.is_closed() || e.as_db_error().is_none()),
            "the standby query failed{}: {}",
            if feedback { " although hot_standby_feedback is on" } else { " otherwise" },
            describe(&e)
        ),
    }
}

/// A row's update takes its row id back once the version there is dead
/// to the primary — where VACUUM (or a full leaf, or a sweep) may already
/// have removed that version without logging it. The standby still holds
/// the version, and a REPEATABLE READ standby transaction still sees it:
/// replay must cancel that transaction before it overwrites the version,
/// never let it lose the row (it read 0 rows where it had read 1).
#[test]
fn a_row_id_taken_back_never_hides_a_row_from_a_standby_query() {
    let (env, _g) = require_server!();
    let conf = [
        "shared_preload_libraries = 'orioledb_rs'",
        "max_standby_streaming_delay = 0",
        "hot_standby_feedback = off",
    ];
    let p = ScratchCluster::new(&env, "takeback", &conf);
    p.connect("postgres")
        .batch_execute(
            "CREATE EXTENSION orioledb_rs;
             CREATE TABLE b (id int PRIMARY KEY, bal int) USING orioledb;
             INSERT INTO b VALUES (1, 0), (2, 0)",
        )
        .unwrap();
    let standby = p.standby(&env, "takebackstandby");
    let mut reader = standby.connect("postgres");
    reader.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let sql = "SELECT count(*) || ' ' || sum(bal) FROM b";
    let first = query_text(&mut reader, sql);
    assert_eq!(first, "2 0");
    let mut watcher = standby.connect("postgres");
    let mut pc = p.connect("postgres");
    // Moves row 1 to a new row id, removes the old version (dead to every
    // primary snapshot) unlogged, and takes the row id back.
    pc.batch_execute("UPDATE b SET bal = bal + 5 WHERE id = 1").unwrap();
    pc.batch_execute("VACUUM b").unwrap();
    pc.batch_execute("UPDATE b SET bal = bal + 5 WHERE id = 1").unwrap();
    pc.batch_execute("CREATE TABLE marker (id int) USING orioledb").unwrap();
    wait_for_replay(&mut watcher, &mut pc);
    match reader.query_one(sql, &[]) {
        Ok(row) => {
            let again: String = row.get(0);
            assert_eq!(again, first, "the standby snapshot lost or changed a row");
        }
        Err(e) => assert!(
            e.code().is_some_and(|c| c.code() == "40001") || e.is_closed() || e.as_db_error().is_none(),
            "the standby query failed otherwise: {}",
            describe(&e)
        ),
    }
}

/// `CREATE DATABASE ... TEMPLATE` (both strategies) of a database with
/// orioledb tables reaches a standby: it replays the copies, which are
/// independent of the template there too.
#[test]
fn a_database_copied_from_a_template_reaches_the_standby() {
    let (env, _g) = require_server!();
    let p = ScratchCluster::new(&env, "tplstandby", &["shared_preload_libraries = 'orioledb_rs'"]);
    p.connect("postgres").batch_execute("CREATE DATABASE tpl").unwrap();
    p.connect("tpl")
        .batch_execute(
            "CREATE EXTENSION orioledb_rs;
             CREATE TABLE t (id int PRIMARY KEY, v text) USING orioledb;
             INSERT INTO t SELECT g, repeat(md5(g::text), 1 + g % 100) FROM generate_series(1, 3000) g",
        )
        .unwrap();
    let standby = p.standby(&env, "tplstandbycopy");
    let mut pc = p.connect("postgres");
    for strategy in ["WAL_LOG", "FILE_COPY"] {
        let db = format!("copy_{}", strategy.to_lowercase());
        pc.batch_execute(&format!("CREATE DATABASE {db} TEMPLATE tpl STRATEGY = {strategy}"))
            .unwrap();
        p.connect(&db)
            .batch_execute("UPDATE t SET v = 'copy' WHERE id <= 100; DELETE FROM t WHERE id > 2900")
            .unwrap();
    }
    p.connect("tpl").batch_execute("DELETE FROM t WHERE id <= 10").unwrap();
    let mut watcher = standby.connect("postgres");
    wait_for_replay(&mut watcher, &mut pc);
    let sums = "SELECT count(*) || ' ' || sum(length(v)) || ' ' || count(*) FILTER (WHERE v = 'copy') FROM t";
    for db in ["tpl", "copy_wal_log", "copy_file_copy"] {
        let on_primary = query_text(&mut p.connect(db), sums);
        let on_standby = query_text(&mut standby.connect(db), sums);
        assert_eq!(on_standby, on_primary, "database {db} on the standby");
        let check = query_text(&mut p.connect(db), "SELECT orioledb_check('t'::regclass)");
        assert!(check.starts_with("ok"), "checker on the primary's {db}: {check}");
    }
}

/// Point-in-time recovery: a base backup plus archived WAL, recovered to
/// a named restore point, has what was committed before it and nothing
/// after.
#[test]
fn point_in_time_recovery_from_archived_wal() {
    let (env, _g) = require_server!();
    let archive_dir = |root: &Path| root.join("archive");
    let p = primary(&env, "pitr");
    let archive = archive_dir(&p.dir);
    std::fs::create_dir_all(&archive).unwrap();
    run_checked(
        {
            let mut c = Command::new("chown");
            c.arg(format!("{}:", env.os_user)).arg(&archive);
            c
        },
        "hand the archive to the server's user",
    );
    let mut c = p.connect("postgres");
    c.batch_execute("ALTER SYSTEM SET archive_mode = on").unwrap();
    c.batch_execute(&format!("ALTER SYSTEM SET archive_command = 'cp %p {}/%f'", archive.display()))
        .unwrap();
    drop(c);
    restart_server(&p.env);
    let mut c = p.connect("postgres");
    let (copy, started) = ScratchCluster::from_copy(
        &env,
        "pitrcopy",
        &[
            &format!("restore_command = 'cp {}/%f %p'", archive.display()),
            "recovery_target_name = 'before_second'",
            "recovery_target_action = 'promote'",
            "archive_mode = off",
        ],
        |pgdata| {
            let mut bb = pg_command(&p.env, "pg_basebackup");
            bb.args(["-h", &p.env.host, "-p", &p.env.port.to_string(), "-U", "postgres"])
                .arg("-D")
                .arg(pgdata)
                .args(["-X", "fetch", "-c", "fast"]);
            run_checked(bb, "pg_basebackup");
            // After the backup: a first batch, the restore point, a second
            // batch, all archived.
            c.batch_execute(
                "INSERT INTO seq SELECT g, 'first' FROM generate_series(1, 3000) g;
                 UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid <= 5000;",
            )
            .unwrap();
            let want = books(&mut c);
            c.batch_execute(
                "SELECT pg_create_restore_point('before_second');
                 INSERT INTO seq SELECT g, 'second' FROM generate_series(3001, 4000) g;
                 UPDATE pgbench_accounts SET abalance = abalance + 100 WHERE aid <= 5000;",
            )
            .unwrap();
            let wal: String = c
                .query_one("SELECT pg_walfile_name(pg_switch_wal() - 1)", &[])
                .unwrap()
                .get(0);
            // Wait until the segment holding the second batch is archived.
            let start = std::time::Instant::now();
            loop {
                let last: Option<String> = c
                    .query_one("SELECT last_archived_wal FROM pg_stat_archiver", &[])
                    .unwrap()
                    .get(0);
                if last.is_some_and(|l| l.as_str() >= wal.as_str()) {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(60), "WAL was not archived");
                std::thread::sleep(Duration::from_millis(100));
            }
            std::fs::write(pgdata.join("recovery.signal"), b"").unwrap();
            std::fs::write(pgdata.join("want"), want).unwrap();
        },
    );
    started.unwrap_or_else(|e| panic!("the recovery did not start: {e}\n{}", copy.log_tail()));
    let want = std::fs::read_to_string(copy.env.pgdata.as_ref().unwrap().join("want")).unwrap();
    let mut r = copy.connect("postgres");
    let start = std::time::Instant::now();
    while query_text(&mut r, "SELECT pg_is_in_recovery()::text") == "true" {
        assert!(start.elapsed() < Duration::from_secs(60), "recovery did not end\n{}", copy.log_tail());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(books(&mut r), want, "the copy at the restore point");
    for t in ["pgbench_accounts", "seq"] {
        let s = query_text(&mut r, &format!("SELECT orioledb_check('{t}'::regclass)"));
        assert!(s.starts_with("ok"), "checker on {t}: {s}");
    }
}

/// A `pg_backup_stop()` that fails after ending the backup (its wait for
/// archiving cancelled) does not leave the engine's checkpoints held off.
#[test]
fn a_failed_backup_stop_lets_engine_checkpoints_resume() {
    let (env, _g) = require_server!();
    let p = primary(&env, "failedstop");
    let mut c = p.connect("postgres");
    c.batch_execute("ALTER SYSTEM SET archive_mode = on").unwrap();
    c.batch_execute("ALTER SYSTEM SET archive_command = 'false'").unwrap();
    drop(c);
    restart_server(&p.env);
    let control = p.env.pgdata.clone().unwrap().join("orioledb_data/control");
    let mut b = p.connect("postgres");
    b.batch_execute("SELECT pg_backup_start('fails', true)").unwrap();
    b.batch_execute("SET statement_timeout = '1s'").unwrap();
    let stopped = b.batch_execute("SELECT pg_backup_stop(true)");
    assert!(stopped.is_err(), "pg_backup_stop returned without its WAL archived");
    let mut c = p.connect("postgres");
    let before = std::fs::read(&control).unwrap();
    c.batch_execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1; CHECKPOINT")
        .unwrap();
    let after = std::fs::read(&control).unwrap();
    assert_ne!(before, after, "CHECKPOINT ran no engine checkpoint: the failed backup still holds them off");
}
