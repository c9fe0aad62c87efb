//! Shared helpers for the integration tests (tests/*.rs).
//!
//! The tests talk to a real PostgreSQL 15 server that preloads orioledb_rs.
//! `scripts/test.sh` starts a throwaway cluster and sets:
//!
//! | variable                 | meaning                                              |
//! |--------------------------|------------------------------------------------------|
//! | `ORIOLEDB_TEST_HOST`     | Unix socket directory of the server                  |
//! | `ORIOLEDB_TEST_PORT`     | its port                                             |
//! | `ORIOLEDB_TEST_PGDATA`   | its data directory (for restarts and crash tests)    |
//! | `ORIOLEDB_TEST_BINDIR`   | PostgreSQL's bin directory (pg_ctl, initdb)          |
//! | `ORIOLEDB_TEST_LOG`      | server log file used by restarts (optional)          |
//! | `ORIOLEDB_TEST_SCRATCH`  | directory for extra clusters (optional)              |
//! | `ORIOLEDB_TEST_OS_USER`  | OS user owning the cluster (default `postgres`)      |
//!
//! Without `ORIOLEDB_TEST_HOST`/`ORIOLEDB_TEST_PORT` every test prints a SKIP line
//! and passes (that is what happens inside `cargo pgrx test`).
//!
//! Tests run on parallel threads against one server. A test that restarts or
//! crashes the server must hold [`exclusive`]; every other test holds [`shared`]
//! (the [`require_server!`] macro takes it) so none is cut off mid-query.
//! Each test should work in its own database ([`fresh_db`]).
//!
//! Use it from a test file with `#[macro_use] mod common;`.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

pub use postgres::error::{DbError, SqlState};
pub use postgres::{Client, NoTls, SimpleQueryMessage};

/// The message the extension raises when it is used without being preloaded.
pub const NOT_PRELOADED_MSG: &str = "orioledb_rs must be loaded via shared_preload_libraries";

#[derive(Clone, Debug)]
pub struct TestEnv {
    pub host: String,
    pub port: u16,
    pub pgdata: Option<PathBuf>,
    pub bindir: PathBuf,
    pub log: Option<PathBuf>,
    pub scratch: Option<PathBuf>,
    pub os_user: String,
}

/// The test server's settings, or `None` when the environment does not name one.
pub fn env() -> Option<TestEnv> {
    let host = std::env::var("ORIOLEDB_TEST_HOST")
        .ok()
        .filter(|s| !s.is_empty())?;
    let port = std::env::var("ORIOLEDB_TEST_PORT")
        .ok()
        .filter(|s| !s.is_empty())?;
    let port: u16 = port
        .parse()
        .expect("ORIOLEDB_TEST_PORT must be a port number");
    let var = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
    Some(TestEnv {
        host,
        port,
        pgdata: var("ORIOLEDB_TEST_PGDATA").map(PathBuf::from),
        bindir: var("ORIOLEDB_TEST_BINDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin")),
        log: var("ORIOLEDB_TEST_LOG").map(PathBuf::from),
        scratch: var("ORIOLEDB_TEST_SCRATCH").map(PathBuf::from),
        os_user: var("ORIOLEDB_TEST_OS_USER").unwrap_or_else(|| "postgres".into()),
    })
}

/// The server settings plus the lock taken by `$lock` (`shared` or
/// `exclusive`), or return early (the test passes) with a SKIP message when no
/// server is configured.
macro_rules! require_server_locked {
    ($lock:ident) => {
        match $crate::common::env() {
            Some(e) => (e, $crate::common::$lock()),
            None => {
                eprintln!(
                    "SKIP {}: ORIOLEDB_TEST_HOST/ORIOLEDB_TEST_PORT not set \
                     (run scripts/test.sh, which starts a test server)",
                    module_path!()
                );
                return;
            }
        }
    };
}

/// Start of every test: the server settings plus a shared lock, or return early
/// (the test passes) with a SKIP message when no server is configured.
///
/// ```ignore
/// let (env, _guard) = require_server!();
/// ```
#[allow(unused_macros)]
macro_rules! require_server {
    () => {
        require_server_locked!(shared)
    };
}

/// Like [`require_server!`] but takes the exclusive lock (for restarts/crashes).
#[allow(unused_macros)]
macro_rules! require_server_exclusive {
    () => {
        require_server_locked!(exclusive)
    };
}

static SERVER_LOCK: RwLock<()> = RwLock::new(());

/// Held by tests that only use the server.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    SERVER_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by tests that restart or crash the server.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SERVER_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------ connecting

pub fn config_for(host: &str, port: u16, db: &str) -> postgres::Config {
    let mut c = postgres::Config::new();
    c.host(host)
        .port(port)
        .user("postgres")
        .dbname(db)
        .application_name("orioledb_rs-itest")
        .connect_timeout(Duration::from_secs(10));
    c
}

/// Connect to database `db` of the test server (panics on failure).
pub fn connect(env: &TestEnv, db: &str) -> Client {
    config_for(&env.host, env.port, db)
        .connect(NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to {}:{} db {db}: {}", env.host, env.port, describe(&e)))
}

/// Try to connect, retrying for up to `timeout` (the server may be starting).
pub fn connect_retry(host: &str, port: u16, db: &str, timeout: Duration) -> Client {
    let start = Instant::now();
    loop {
        match config_for(host, port, db).connect(NoTls) {
            Ok(c) => return c,
            Err(e) if start.elapsed() < timeout => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("cannot connect to {host}:{port} db {db} within {timeout:?}: {e}"),
        }
    }
}

/// (Re)create database `name` with the extension installed and connect to it.
/// Use a name unique to the test: tests run in parallel.
pub fn fresh_db(env: &TestEnv, name: &str) -> Client {
    fresh_db_with(env, name, "")
}

/// [`fresh_db`] created with `options` (CREATE DATABASE's, e.g. a locale).
pub fn fresh_db_with(env: &TestEnv, name: &str, options: &str) -> Client {
    let mut admin = connect(env, "postgres");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .unwrap_or_else(|e| panic!("DROP DATABASE {name}: {}", describe(&e)));
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\" {options}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {}", describe(&e)));
    let mut c = connect(env, name);
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS orioledb_rs")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION orioledb_rs in {name}: {}", describe(&e)));
    c
}

// ------------------------------------------------------------------ errors

/// An error as "SQLSTATE: message (detail/hint)", for assertion messages.
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{}: {}", db.code().code(), db.message());
            if let Some(d) = db.detail() {
                s += &format!(" (detail: {d})");
            }
            if let Some(h) = db.hint() {
                s += &format!(" (hint: {h})");
            }
            s
        }
        None => e.to_string(),
    }
}

/// Run `sql` (may be several statements) and require that it fails with
/// SQLSTATE `code` (e.g. "22023"). Returns the server's error for more checks.
pub fn expect_sqlstate(client: &mut Client, sql: &str, code: &str) -> DbError {
    match client.batch_execute(sql) {
        Ok(()) => panic!("expected SQLSTATE {code} from `{sql}`, but it succeeded"),
        Err(e) => match e.as_db_error() {
            Some(db) => {
                assert_eq!(
                    db.code().code(),
                    code,
                    "`{sql}` failed with the wrong SQLSTATE: {}",
                    describe(&e)
                );
                db.clone()
            }
            None => panic!("expected SQLSTATE {code} from `{sql}`, got a non-server error: {e}"),
        },
    }
}

/// Run `sql` expecting an ERROR (any SQLSTATE) whose message contains `needle`.
pub fn expect_error_containing(client: &mut Client, sql: &str, needle: &str) -> DbError {
    match client.batch_execute(sql) {
        Ok(()) => panic!("expected an error containing {needle:?} from `{sql}`, but it succeeded"),
        Err(e) => match e.as_db_error() {
            Some(db) => {
                assert!(
                    db.message().contains(needle),
                    "`{sql}` failed, but not with {needle:?}: {}",
                    describe(&e)
                );
                db.clone()
            }
            None => panic!("expected an error containing {needle:?} from `{sql}`, got: {e}"),
        },
    }
}

/// Single value of a one-row, one-column query, as text.
pub fn query_text(client: &mut Client, sql: &str) -> String {
    let row = client
        .query_one(sql, &[])
        .unwrap_or_else(|e| panic!("`{sql}`: {}", describe(&e)));
    row.get::<_, String>(0)
}

/// `SHOW name`.
pub fn show(client: &mut Client, name: &str) -> String {
    query_text(client, &format!("SHOW {name}"))
}

// ------------------------------------------------------------------ server control

fn whoami() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A command for PostgreSQL binary `bin`, run as the cluster's OS user
/// (through `runuser` when we are someone else, i.e. root). Runs in `/` so the
/// OS user never needs access to our working directory; RUST_BACKTRACE is
/// removed so the server's own behaviour does not depend on the test runner's.
pub fn pg_command(env: &TestEnv, bin: &str) -> Command {
    let path = env.bindir.join(bin);
    let mut cmd = if whoami() == env.os_user {
        Command::new(path)
    } else {
        let mut c = Command::new("runuser");
        c.arg("-u").arg(&env.os_user).arg("--").arg(path);
        c
    };
    cmd.current_dir("/").env_remove("RUST_BACKTRACE");
    cmd
}

/// A client program (`psql`, `pgbench`, `pg_dump`, ...) already pointed at
/// the test server as `postgres`; add its own arguments and the database.
pub fn client_command(env: &TestEnv, bin: &str) -> Command {
    let mut cmd = pg_command(env, bin);
    cmd.args([
        "-h",
        &env.host,
        "-p",
        &env.port.to_string(),
        "-U",
        "postgres",
    ]);
    cmd
}

pub fn run_checked(mut cmd: Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}): {cmd:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn pgdata(env: &TestEnv) -> &Path {
    env.pgdata
        .as_deref()
        .expect("ORIOLEDB_TEST_PGDATA is required to restart the test server")
}

/// `pg_ctl restart -m fast`, then wait until connections succeed.
/// Hold [`exclusive`] while calling this.
pub fn restart_server(env: &TestEnv) {
    let mut cmd = pg_command(env, "pg_ctl");
    cmd.arg("-D")
        .arg(pgdata(env))
        .args(["-w", "-t", "120", "-m", "fast"]);
    if let Some(log) = &env.log {
        cmd.arg("-l").arg(log);
    }
    cmd.arg("restart");
    run_checked(cmd, "pg_ctl restart");
    drop(connect_retry(
        &env.host,
        env.port,
        "postgres",
        Duration::from_secs(60),
    ));
}

/// `pg_ctl stop -m immediate` (no shutdown checkpoint: crash recovery at
/// the next start), then start again. Hold [`exclusive`] while calling this.
pub fn immediate_restart(env: &TestEnv) {
    let mut cmd = pg_command(env, "pg_ctl");
    cmd.arg("-D")
        .arg(pgdata(env))
        .args(["-w", "-t", "120", "-m", "immediate", "stop"]);
    run_checked(cmd, "pg_ctl stop -m immediate");
    start_server(env);
}

/// PID of the postmaster (first line of postmaster.pid).
pub fn postmaster_pid(env: &TestEnv) -> u32 {
    let f = pgdata(env).join("postmaster.pid");
    let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("bad {}", f.display()))
}

/// Simulate a crash: SIGKILL the postmaster (its children exit when they notice),
/// wait until it is gone, then start the server again; it runs crash recovery.
/// Hold [`exclusive`] while calling this.
/// Processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    // Fields after the parenthesised command name: state, ppid.
                    let rest = &s[s.rfind(')')? + 2..];
                    rest.split(' ').nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

pub fn crash_and_restart(env: &TestEnv) {
    crash_server(env);
    start_server(env);
}

/// `kill -9` of the postmaster; returns once it and its children are gone.
pub fn crash_server(env: &TestEnv) {
    let pid = postmaster_pid(env);
    // A busy backend outlives its postmaster until it next waits (as in
    // any PostgreSQL): the new server can start only once they are gone.
    let children = children_of(pid);
    run_checked(
        {
            let mut c = Command::new("kill");
            c.args(["-9", &pid.to_string()]);
            c
        },
        "kill -9 postmaster",
    );
    // Wait for the postmaster and its children to go away (the shared memory
    // segment and sockets are released when the last backend exits).
    let start = Instant::now();
    while std::iter::once(&pid)
        .chain(&children)
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
        && start.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// `pg_ctl start` and wait until connections succeed.
pub fn start_server(env: &TestEnv) {
    let mut cmd = pg_command(env, "pg_ctl");
    cmd.arg("-D").arg(pgdata(env)).args(["-w", "-t", "300"]);
    if let Some(log) = &env.log {
        cmd.arg("-l").arg(log);
    }
    cmd.arg("start");
    // pg_ctl start keeps the postmaster attached to our stdout unless it is
    // redirected; -l does that, else discard it.
    if env.log.is_none() {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    run_checked(cmd, "pg_ctl start");
    drop(connect_retry(
        &env.host,
        env.port,
        "postgres",
        Duration::from_secs(60),
    ));
}

/// `pg_ctl stop -m fast`: a clean shutdown (the extension's checkpointer
/// checkpoints once more). Hold [`exclusive`] for the shared test server.
pub fn stop_server(env: &TestEnv) {
    let mut cmd = pg_command(env, "pg_ctl");
    cmd.arg("-D")
        .arg(pgdata(env))
        .args(["-w", "-t", "120", "-m", "fast", "stop"]);
    run_checked(cmd, "pg_ctl stop");
}

/// `pg_ctl start` for a server that may refuse to start: Ok once
/// connections succeed, Err(pg_ctl's output) if it did not start (the
/// server log says why).
pub fn try_start_server(env: &TestEnv) -> Result<(), String> {
    let mut cmd = pg_command(env, "pg_ctl");
    cmd.arg("-D").arg(pgdata(env)).args(["-w", "-t", "120"]);
    if let Some(log) = &env.log {
        cmd.arg("-l").arg(log);
    }
    cmd.arg("start");
    if env.log.is_none() {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        return Err(format!(
            "pg_ctl start failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    drop(connect_retry(
        &env.host,
        env.port,
        "postgres",
        Duration::from_secs(60),
    ));
    Ok(())
}

/// Bytes in the server log so far (0 without a log), to read what a later
/// step wrote with [`log_since`].
pub fn log_len(env: &TestEnv) -> u64 {
    env.log
        .as_ref()
        .and_then(|l| std::fs::metadata(l).ok())
        .map_or(0, |m| m.len())
}

/// The server log from byte `from` on (empty without a log).
pub fn log_since(env: &TestEnv, from: u64) -> String {
    let Some(text) = env.log.as_ref().and_then(|l| std::fs::read(l).ok()) else {
        return String::new();
    };
    String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).into_owned()
}

/// Writes `bytes` to `path` in the cluster's data directory and gives the
/// file to the cluster's OS user (tests run as root and may create it).
pub fn write_cluster_file(env: &TestEnv, path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    chown_to(env, path);
}

// ------------------------------------------------------------------ extra clusters

static NEXT_SCRATCH_PORT: AtomicU16 = AtomicU16::new(0);

/// A throwaway cluster of its own (initdb + start), stopped and removed on drop.
/// Its socket lives in its own directory, so its port never clashes with others.
pub struct ScratchCluster {
    pub env: TestEnv,
    pub dir: PathBuf,
}

impl ScratchCluster {
    /// `conf` lines are appended to postgresql.conf (e.g. shared_preload_libraries).
    pub fn new(base: &TestEnv, name: &str, conf: &[&str]) -> ScratchCluster {
        let scratch_root = base.scratch.clone().unwrap_or_else(|| {
            let p = pgdata(base)
                .parent()
                .expect("PGDATA has a parent")
                .join("scratch");
            std::fs::create_dir_all(&p).expect("create scratch dir");
            chown_to(base, &p);
            p
        });
        let dir = scratch_root.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch cluster dir");
        chown_to(base, &dir);
        let pgdata = dir.join("pgdata");
        let sock = dir.clone();
        let n = NEXT_SCRATCH_PORT.fetch_add(1, Ordering::SeqCst);
        let port = base.port.wrapping_add(100 + n);

        let mut initdb = pg_command(base, "initdb");
        initdb.arg("-D").arg(&pgdata).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        run_checked(initdb, "initdb (scratch cluster)");

        let mut text = format!(
            "\n# scratch cluster for an integration test\nport = {port}\nlisten_addresses = ''\n\
             unix_socket_directories = '{}'\n",
            sock.display()
        );
        for line in conf {
            text.push_str(line);
            text.push('\n');
        }
        let conf_path = pgdata.join("postgresql.conf");
        let mut old = std::fs::read_to_string(&conf_path).expect("read postgresql.conf");
        old.push_str(&text);
        std::fs::write(&conf_path, old).expect("write postgresql.conf");

        let env = cluster_env(base, &dir, pgdata, port);
        start_server(&env);
        ScratchCluster { env, dir }
    }

    pub fn connect(&self, db: &str) -> Client {
        connect(&self.env, db)
    }

    /// The tail of the server log, for assertion messages.
    pub fn log_tail(&self) -> String {
        self.env
            .log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .map(|s| {
                s.lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

impl ScratchCluster {
    /// A streaming standby of this cluster: its data directory copied while
    /// it is stopped (then it is started again), with `standby.signal` and a
    /// `primary_conninfo` naming it. Stopped and removed on drop.
    pub fn standby(&self, base: &TestEnv, name: &str) -> ScratchCluster {
        stop_server(&self.env);
        let primary = format!("host={} port={} user=postgres", self.env.host, self.env.port);
        let (standby, started) = ScratchCluster::from_copy(base, name, &[&format!("primary_conninfo = '{primary}'")], |pgdata| {
            let mut c = Command::new("cp");
            c.arg("-a").arg(self.env.pgdata.as_ref().expect("a scratch cluster has PGDATA")).arg(pgdata);
            run_checked(c, "copy the primary's data directory");
            let signal = pgdata.join("standby.signal");
            std::fs::write(&signal, b"").expect("write standby.signal");
            start_server(&self.env);
        });
        started.unwrap_or_else(|e| panic!("the standby did not start: {e}\n{}", standby.log_tail()));
        standby
    }

    /// A cluster started from a copy of a data directory, which `fill`
    /// writes at the path it is given (a base backup, a file copy, an
    /// extracted archive); `conf` lines are added to its configuration,
    /// after its own port and socket. Returns it with the outcome of its
    /// start (a copy may rightly refuse to start); stopped and removed on
    /// drop either way.
    pub fn from_copy(
        base: &TestEnv,
        name: &str,
        conf: &[&str],
        fill: impl FnOnce(&Path),
    ) -> (ScratchCluster, Result<(), String>) {
        let root = base.scratch.clone().unwrap_or_else(|| {
            pgdata(base).parent().expect("PGDATA has a parent").join("scratch")
        });
        let dir = root.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the copy's dir");
        chown_to(base, &dir);
        let pgdata = dir.join("pgdata");
        fill(&pgdata);
        let n = NEXT_SCRATCH_PORT.fetch_add(1, Ordering::SeqCst);
        let port = base.port.wrapping_add(100 + n);
        let conf_path = pgdata.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).expect("read postgresql.conf");
        text.push_str(&format!(
            "\n# copy\nport = {port}\nunix_socket_directories = '{}'\n",
            dir.display()
        ));
        for line in conf {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&conf_path, text).expect("write postgresql.conf");
        run_checked(
            {
                let mut c = Command::new("chown");
                c.arg("-R").arg(format!("{}:", base.os_user)).arg(&dir);
                c
            },
            "hand the copy to the server's user",
        );
        let env = cluster_env(base, &dir, pgdata, port);
        let started = try_start_server(&env);
        (ScratchCluster { env, dir }, started)
    }
}

/// The settings of a cluster of our own in `dir` (its socket and log
/// there), with an empty log file the server's user may write.
fn cluster_env(base: &TestEnv, dir: &Path, pgdata: PathBuf, port: u16) -> TestEnv {
    let env = TestEnv {
        host: dir.display().to_string(),
        port,
        pgdata: Some(pgdata),
        bindir: base.bindir.clone(),
        log: Some(dir.join("postgres.log")),
        scratch: None,
        os_user: base.os_user.clone(),
    };
    if let Some(log) = &env.log {
        std::fs::write(log, b"").expect("create the cluster's log");
        chown_to(base, log);
    }
    env
}

impl Drop for ScratchCluster {
    fn drop(&mut self) {
        if let Some(pgdata) = &self.env.pgdata {
            let _ = pg_command(&self.env, "pg_ctl")
                .arg("-D")
                .arg(pgdata)
                .args(["-w", "-m", "immediate", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if std::env::var("ORIOLEDB_TEST_KEEP").as_deref() != Ok("1") {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn chown_to(env: &TestEnv, path: &Path) {
    if whoami() != env.os_user {
        let _ = Command::new("chown")
            .arg(format!("{}:", env.os_user))
            .arg(path)
            .status();
    }
}

// ------------------------------------------------------------------ outcomes

/// What a statement did, in a form that compares across access methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Rows returned (each row's columns joined by `|`), in server order.
    Rows(Vec<String>),
    /// Rows affected by a statement that returns none (or a utility command: 0).
    Count(u64),
    /// Failed with this SQLSTATE.
    Err(String),
}

/// Expected rows, for comparing with an [`Outcome`].
pub fn rows(r: &[&str]) -> Outcome {
    Outcome::Rows(r.iter().map(|s| s.to_string()).collect())
}

/// Runs `sql` (one statement, or several: the last one's result counts).
pub fn run_simple(c: &mut Client, sql: &str) -> Outcome {
    match c.simple_query(sql) {
        Ok(msgs) => {
            let mut out = Outcome::Count(0);
            let mut current: Option<Vec<String>> = None;
            for m in msgs {
                match m {
                    SimpleQueryMessage::RowDescription(_) => current = Some(Vec::new()),
                    SimpleQueryMessage::Row(r) => {
                        let line = (0..r.len())
                            .map(|i| r.get(i).unwrap_or("NULL").to_string())
                            .collect::<Vec<_>>()
                            .join("|");
                        current.get_or_insert_with(Vec::new).push(line);
                    }
                    SimpleQueryMessage::CommandComplete(n) => {
                        out = match current.take() {
                            Some(rs) => Outcome::Rows(rs),
                            None => Outcome::Count(n),
                        };
                    }
                    _ => {}
                }
            }
            out
        }
        Err(e) => Outcome::Err(match e.as_db_error() {
            Some(db) => db.code().code().to_string(),
            None => format!("client error: {e}"),
        }),
    }
}

// ------------------------------------------------------------------ randomness

/// splitmix64: a tiny deterministic PRNG for seeded test workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn range(&mut self, lo: i64, hi_incl: i64) -> i64 {
        lo + self.below((hi_incl - lo + 1) as u64) as i64
    }
    /// true with probability `p` percent.
    pub fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// A numeric test knob from the environment (tests can be run bigger).
#[allow(dead_code)]
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Rows of `sql` as `|`-joined text lines, in server order (NULL as `NULL`),
/// or the error's description.
#[allow(dead_code)]
pub fn text_rows(c: &mut Client, sql: &str) -> Result<Vec<String>, String> {
    use postgres::SimpleQueryMessage;
    match c.simple_query(sql) {
        Ok(msgs) => Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("NULL").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect()),
        Err(e) => Err(describe(&e)),
    }
}

/// What `orioledb_trees.key` says `table`'s tree is ordered by ("row id"
/// or the key's columns).
#[allow(dead_code)]
pub fn key_of(c: &mut Client, table: &str) -> String {
    c.query_one(
        "SELECT key FROM orioledb_trees WHERE reloid = $1::text::regclass",
        &[&table],
    )
    .unwrap()
    .get(0)
}

/// Items in the engine tree of relation `rel` (an expression giving its
/// oid), as `orioledb_check` counts them ("ok: 1 levels, 1 pages, 2 keys").
#[allow(dead_code)]
pub fn tree_keys(c: &mut Client, rel: &str) -> u64 {
    let s: String = c
        .query_one(&format!("SELECT orioledb_check({rel})"), &[])
        .unwrap()
        .get(0);
    s.rsplit(", ")
        .next()
        .and_then(|k| k.strip_suffix(" keys"))
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("unexpected orioledb_check output {s}"))
}

/// `EXPLAIN (COSTS OFF)` of `sql`, one line per plan line.
pub fn plan(c: &mut Client, sql: &str) -> String {
    c.query(&format!("EXPLAIN (COSTS OFF) {sql}"), &[])
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {}", describe(&e)))
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bytes a file holds on disk as `orioledb_relation_size` counts
/// them: its length less the holes engine checkpoints punch.
pub fn held_bytes(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.len().min(m.blocks() * 512)
}

/// Waits until `sc` (a standby) has replayed what `pc` (its primary) has
/// written so far. A check the standby cancels for a recovery conflict
/// (40001: its snapshot was in the way of what replay removes, as tests of
/// those conflicts provoke) is asked again.
#[allow(dead_code)]
pub fn wait_for_replay(sc: &mut Client, pc: &mut Client) {
    let lsn: String = pc.query_one("SELECT pg_current_wal_lsn()::text", &[]).unwrap().get(0);
    let start = std::time::Instant::now();
    loop {
        let behind = match sc.query_one("SELECT pg_last_wal_replay_lsn() < $1::text::pg_lsn", &[&lsn]) {
            Ok(row) => row.get::<_, bool>(0),
            Err(e) if e.code().is_some_and(|c| c.code() == "40001") => true,
            Err(e) => panic!("waiting for replay: {}", describe(&e)),
        };
        if !behind {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the standby did not catch up");
        std::thread::sleep(Duration::from_millis(100));
    }
}
