//! SQL parity: orioledb tables behave like heap tables for single-session SQL.
//!
//! Every script `tests/sql/<name>.sql` runs through `psql` twice, in two fresh
//! databases that differ only in `default_table_access_method` (`heap` in one,
//! `orioledb` in the other), and the two outputs (stdout and stderr, interleaved
//! as psql wrote them, with the database name masked) must be identical. On a
//! mismatch the test prints a line diff and keeps both outputs under
//! `target/tmp/sql_parity/`.
//!
//! Rules for scripts: deterministic output only — ORDER BY every query that
//! prints rows, never print ctid/xmin/xmax values (except `tid_layout`,
//! which checks that append-only tables get heap's TIDs), EXPLAIN output, sizes or
//! timings (those legitimately differ between access methods); print counts,
//! sums, row contents and error messages. Multi-row RETURNING and row-level
//! NOTICEs come out in scan order, which differs too: wrap them in a CTE with
//! ORDER BY or aggregate them.
//!
//! `tests/sql/not_compared/unsupported.sql` lists statements that orioledb
//! refuses on purpose; [`unsupported_statements_fail_with_their_sqlstate`] runs
//! it statement by statement and checks the expected SQLSTATEs.
//!
//! Adding a script: put it in `tests/sql/` and add a line to `parity_tests!`
//! below ([`every_script_has_a_test`] fails until you do).

#[macro_use]
mod common;

use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The access methods compared, in diff order (expected, actual), each
/// with the index method scripts name as `:ix` (secondary indexes: a
/// PostgreSQL btree on heap, the engine's `orioledb_btree` on orioledb).
const AMS: [(&str, &str); 2] = [("heap", "btree"), ("orioledb", "orioledb_btree")];

/// One `#[test]` per script of `tests/sql/`.
macro_rules! parity_tests {
    ($($test:ident => $script:literal,)*) => {
        /// The scripts that have a test, for [`every_script_has_a_test`].
        const SCRIPTS: &[&str] = &[$($script),*];
        $(
            #[test]
            fn $test() {
                run_parity($script);
            }
        )*
    };
}

parity_tests! {
    parity_dml => "dml",
    parity_copy_freeze => "copy_freeze",
    parity_ddl => "ddl",
    parity_constraints => "constraints",
    parity_indexes => "indexes",
    parity_index_kinds => "index_kinds",
    parity_types => "types",
    parity_primary_key => "primary_key",
    parity_partitions => "partitions",
    parity_triggers => "triggers",
    parity_transactions => "transactions",
    parity_churn => "churn",
    parity_toast => "toast",
    parity_self_modify => "self_modify",
    parity_scans => "scans",
    parity_scan_kinds => "scan_kinds",
    parity_tid_layout => "tid_layout",
    parity_secondary => "secondary",
}

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("sql")
}

/// Where the outputs of a failed comparison are kept.
fn output_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("sql_parity")
}

/// A fresh database `name` (with the extension) whose new tables use `am`;
/// checks that a new session really gets that default.
fn parity_db(env: &TestEnv, name: &str, am: &str) {
    let mut c = fresh_db(env, name);
    // statement_timeout: a hang (say, a backend waiting on itself) fails the
    // test instead of stalling CI.
    c.batch_execute(&format!(
        "ALTER DATABASE \"{name}\" SET default_table_access_method = {am};\n\
         ALTER DATABASE \"{name}\" SET statement_timeout = '60s';"
    ))
    .unwrap_or_else(|e| panic!("configuring database {name}: {}", describe(&e)));
    drop(c);
    let mut c = connect(env, name);
    let got = show(&mut c, "default_table_access_method");
    assert_eq!(got, am, "database {name} does not default to {am}");
}

/// Run `script` (SQL text) with psql in database `db`; stdout and stderr in the
/// order psql wrote them (both go to one pipe).
fn run_psql(env: &TestEnv, db: &str, ix: &str, script: &str) -> String {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = client_command(env, "psql");
    // -a echoes the script, so a diff shows the statements next to their output
    cmd.args(["-X", "-q", "-a", "-v", "ON_ERROR_STOP=0", "-v", &format!("ix={ix}")])
        .args(["-d", db, "-f", "-"])
        // the same messages in both runs whatever the caller's environment
        .env("LC_MESSAGES", "C")
        .env_remove("PGOPTIONS")
        .env_remove("PSQLRC")
        .stdin(Stdio::piped())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run psql ({cmd:?}): {e}"));
    // Our copies of the pipe's write end must go, or reading never sees EOF.
    drop(cmd);
    let mut stdin = child.stdin.take().expect("psql stdin");
    let input = script.to_owned();
    // Feed the script from another thread: psql's output could fill the pipe
    // while we are still writing.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut out = Vec::new();
    reader.read_to_end(&mut out).expect("read psql output");
    let status = child.wait().expect("wait for psql");
    feeder.join().expect("psql input thread");
    // Exit status 3 would mean a script error with ON_ERROR_STOP, which is off;
    // 1 and 2 mean psql itself failed (e.g. no connection).
    assert!(
        status.success(),
        "psql failed in {db} ({status}):\n{}",
        String::from_utf8_lossy(&out)
    );
    String::from_utf8_lossy(&out).replace(db, "<db>")
}

fn run_parity(script: &str) {
    let (env, _g) = require_server!();
    let path = sql_dir().join(format!("{script}.sql"));
    let sql = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let t0 = std::time::Instant::now();
    let mut outputs = Vec::new();
    for (am, ix) in AMS {
        let db = format!("parity_{script}_{am}");
        parity_db(&env, &db, am);
        outputs.push(run_psql(&env, &db, ix, &sql));
    }
    let (heap, oriole) = (&outputs[0], &outputs[1]);
    eprintln!(
        "sql_parity {script}: {} output lines, {:.1}s",
        heap.lines().count(),
        t0.elapsed().as_secs_f64()
    );
    if heap != oriole {
        let dir = output_dir();
        let _ = std::fs::create_dir_all(&dir);
        for ((am, _), out) in AMS.iter().zip(&outputs) {
            let _ = std::fs::write(dir.join(format!("{script}.{am}.out")), out);
        }
        panic!(
            "tests/sql/{script}.sql: orioledb output differs from heap output \
             (outputs kept in {}):\n--- heap\n+++ orioledb\n{}",
            dir.display(),
            line_diff(heap, oriole, 3)
        );
    }
}

// ------------------------------------------------------------------ diff

/// A unified-style diff of two texts by lines (`-` only in `a`, `+` only in
/// `b`), with `context` unchanged lines around each change and `@@ -l +l @@`
/// headers giving 1-based line numbers. Longest common subsequence; fine for
/// the few thousand lines a script prints.
fn line_diff(a: &str, b: &str, context: usize) -> String {
    let a: Vec<&str> = a.lines().collect();
    let b: Vec<&str> = b.lines().collect();
    // Trim the common prefix and suffix so the table only covers the changes.
    let pre = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    // lcs[i][j] = LCS length of am[i..] and bm[j..]
    let w = bm.len() + 1;
    let mut lcs = vec![0u32; (am.len() + 1) * w];
    for i in (0..am.len()).rev() {
        for j in (0..bm.len()).rev() {
            lcs[i * w + j] = if am[i] == bm[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    // The edit script over the whole texts: (tag, line in a, line in b).
    let mut ops: Vec<(char, usize, usize)> = (0..pre).map(|k| (' ', k, k)).collect();
    let (mut i, mut j) = (0, 0);
    while i < am.len() || j < bm.len() {
        if i < am.len() && j < bm.len() && am[i] == bm[j] {
            ops.push((' ', pre + i, pre + j));
            i += 1;
            j += 1;
        } else if i < am.len() && (j == bm.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
            // deletions first, like diff -u
            ops.push(('-', pre + i, pre + j));
            i += 1;
        } else {
            ops.push(('+', pre + i, pre + j));
            j += 1;
        }
    }
    for k in 0..suf {
        ops.push((' ', a.len() - suf + k, b.len() - suf + k));
    }
    // Group changes with their context into hunks.
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = String::new();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(context);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * context + 1 {
            end = changed[k];
            k += 1;
        }
        let end = (end + context + 1).min(ops.len());
        let hunk = &ops[start..end];
        let na = hunk.iter().filter(|o| o.0 != '+').count();
        let nb = hunk.iter().filter(|o| o.0 != '-').count();
        out += &format!("@@ -{},{na} +{},{nb} @@\n", hunk[0].1 + 1, hunk[0].2 + 1);
        for &(tag, ia, ib) in hunk {
            let line = if tag == '+' { b[ib] } else { a[ia] };
            out += &format!("{tag}{line}\n");
        }
    }
    out
}

#[test]
fn line_diff_shows_changes_with_context() {
    let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n";
    let b = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\n12\n13\n";
    assert_eq!(
        line_diff(a, b, 2),
        "@@ -3,5 +3,5 @@\n 3\n 4\n-5\n+five\n 6\n 7\n@@ -11,2 +11,3 @@\n 11\n 12\n+13\n"
    );
    assert_eq!(line_diff(a, a, 3), "");
    assert_eq!(line_diff("", "x\n", 3), "@@ -1,0 +1,1 @@\n+x\n");
}

#[test]
fn every_script_has_a_test() {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(sql_dir()).expect("read tests/sql") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("sql") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !SCRIPTS.contains(&stem.as_str()) {
            missing.push(stem);
        }
    }
    assert!(
        missing.is_empty(),
        "scripts in tests/sql/ without a test in tests/sql_parity.rs (add them to parity_tests!): {missing:?}"
    );
    for s in SCRIPTS {
        assert!(
            sql_dir().join(format!("{s}.sql")).exists(),
            "tests/sql/{s}.sql is missing"
        );
    }
}

// ------------------------------------------------------------------ not compared

/// A statement of the unsupported script and the SQLSTATE orioledb must raise
/// for it (`None`: it must succeed).
struct Stmt {
    sql: String,
    line: usize,
    expect: Option<String>,
}

/// Split a script into statements: a statement ends with a line whose last
/// non-blank character is `;`. Comment lines are skipped, except
/// `-- expect SQLSTATE xxxxx`, which applies to the next statement.
fn split_statements(text: &str) -> Vec<Stmt> {
    let mut stmts = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut expect = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(code) = t.strip_prefix("-- expect SQLSTATE ") {
            assert!(
                cur.is_empty(),
                "line {}: expectation inside a statement",
                n + 1
            );
            expect = Some(code.trim().to_string());
            continue;
        }
        if t.is_empty() || t.starts_with("--") {
            continue;
        }
        if cur.is_empty() {
            start = n + 1;
        }
        cur += line;
        cur.push('\n');
        if t.ends_with(';') {
            stmts.push(Stmt {
                sql: std::mem::take(&mut cur),
                line: start,
                expect: expect.take(),
            });
        }
    }
    assert!(
        cur.trim().is_empty(),
        "unterminated statement at line {start}"
    );
    assert!(
        expect.is_none(),
        "expectation without a statement at the end"
    );
    stmts
}

#[test]
fn unsupported_statements_fail_with_their_sqlstate() {
    let (env, _g) = require_server!();
    let path = sql_dir().join("not_compared").join("unsupported.sql");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let stmts = split_statements(&text);
    assert!(
        stmts.iter().any(|s| s.expect.is_some()),
        "no expectations in {}",
        path.display()
    );
    for (am, _) in AMS {
        let db = format!("parity_unsupported_{am}");
        parity_db(&env, &db, am);
        let mut c = connect(&env, &db);
        for s in &stmts {
            match (&s.expect, am) {
                (Some(code), "orioledb") => {
                    let e = expect_sqlstate(&mut c, &s.sql, code);
                    if code == "0A000" {
                        assert!(
                            e.message().contains("orioledb"),
                            "line {}: 0A000 from someone else than orioledb: {}",
                            s.line,
                            e.message()
                        );
                    }
                }
                _ => c.batch_execute(&s.sql).unwrap_or_else(|e| {
                    panic!(
                        "unsupported.sql line {} failed on {am} (it must succeed there): {}\n{}",
                        s.line,
                        describe(&e),
                        s.sql
                    )
                }),
            }
        }
    }
}
