//! orioledb_rs: an index-organized table access method for stock PostgreSQL 15.
//!
//! The storage engine is the `orioledb_engine` crate (sources in `src/engine/`,
//! no pgrx); `pg` and `am` are the PostgreSQL glue.
pub use orioledb_engine as engine;

use pgrx::prelude::*;

pub mod am;
pub mod hooks;
pub mod pg;

pgrx::pg_module_magic!();

/// Version of the loaded library (useful to spot a stale `.so` after upgrades).
#[pg_extern]
fn orioledb_rs_version() -> &'static str {
    pg::require_preloaded();
    env!("CARGO_PKG_VERSION")
}

/// The shared page pool as seen by the calling backend.
#[pg_extern]
fn orioledb_pool_info() -> TableIterator<
    'static,
    (
        name!(buffers, i64),
        name!(region_bytes, i64),
        name!(latches, i64),
    ),
> {
    pg::require_preloaded();
    let info = pg::shmem::pool_info().unwrap_or_else(|| {
        pg::error::internal("orioledb_rs: shared page pool was not created");
    });
    TableIterator::once((info.buffers as i64, info.bytes as i64, info.latches as i64))
}

/// Every engine tree of the current database: its relation file number,
/// data file, pages (in the tree, in the shared pool, dirty there), bytes on
/// disk and compression level. The `orioledb_trees` view adds the table.
#[pg_extern]
#[allow(clippy::type_complexity)] // pgrx's named-column row type
fn orioledb_tree_stats() -> TableIterator<
    'static,
    (
        name!(relnode, pg_sys::Oid),
        name!(file, String),
        name!(pages, i64),
        name!(resident_pages, i64),
        name!(dirty_pages, i64),
        name!(file_bytes, i64),
        name!(compress, i32),
        name!(key_attnums, Option<Vec<i16>>),
    ),
> {
    pg::require_preloaded();
    let engine = pg::engine::engine();
    // SAFETY: plain read of the backend's database OID.
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let rows: Vec<_> = crate::pg::engine::tree_ids()
        .into_iter()
        .filter(|t| t.db == db)
        .filter_map(|t| {
            let tree = engine.tree(t).ok()?;
            let s = tree.stats();
            Some((
                pg_sys::Oid::from(t.rel),
                format!("{}/{}/{}", pg::engine::DATA_DIR, t.db, t.rel),
                s.pages as i64,
                s.resident_pages as i64,
                s.dirty_pages as i64,
                s.file_bytes as i64,
                tree.compress(),
                tree.get(am::layout::table::DESC_KEY)
                    .ok()
                    .flatten()
                    .and_then(|b| am::layout::key_desc::KeyDesc::decode(&b))
                    .map(|d| d.cols.iter().map(|c| c.attnum).collect()),
            ))
        })
        .collect();
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
CREATE VIEW orioledb_trees AS
SELECT c.oid::regclass AS reloid, t.relnode,
       CASE c.relkind WHEN 't' THEN 'toast' WHEN 'i' THEN 'index' ELSE 'primary' END AS tree, t.file,
       t.pages, t.resident_pages, t.dirty_pages, t.file_bytes, t.compress,
       CASE WHEN t.key_attnums IS NULL THEN 'row id'
            ELSE (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY u.ord)
                  FROM unnest(t.key_attnums) WITH ORDINALITY u(n, ord)
                  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = u.n)
       END AS key,
       CASE c.relkind
            WHEN 't' THEN (SELECT o.oid::regclass FROM pg_class o WHERE o.reltoastrelid = c.oid)
            WHEN 'i' THEN (SELECT i.indrelid::regclass FROM pg_index i WHERE i.indexrelid = c.oid)
            ELSE c.oid::regclass END AS "table"
FROM orioledb_tree_stats() t
LEFT JOIN pg_class c ON c.relfilenode = t.relnode AND c.reltablespace = 0;
"#,
    name = "orioledb_trees_view",
    requires = [orioledb_tree_stats]
);

/// Bytes of relation `rel`'s engine files on disk: for its primary tree and
/// its toast tree, the data file and the checkpoint map(s) present in
/// `orioledb_data/<database oid>/` (the row-id map is part of the primary
/// tree); for an `orioledb_btree` index, its tree's; ERROR if `rel` is
/// neither an orioledb table nor such an index.
#[pg_extern]
fn orioledb_tree_bytes(rel: pg_sys::Oid) -> i64 {
    let Some((db, relnode)) = pg::engine_relfile(rel) else {
        // Raises the "not an orioledb table" ERROR.
        let _ = orioledb_tree_of(rel);
        return 0;
    };
    let mut nodes = vec![relnode.to_u32()];
    // SAFETY: a syscache lookup of the relation's kind.
    let table = unsafe { pg_sys::get_rel_relkind(rel) } as u8 == pg_sys::RELKIND_RELATION;
    if let Some((_, n)) = pg::toast_relation_of(rel).filter(|_| table).and_then(pg::orioledb_relfile) {
        nodes.push(n.to_u32());
    }
    let dir = std::path::Path::new(pg::engine::DATA_DIR).join(db.to_u32().to_string());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut total = 0u64;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = nodes.iter().any(|n| {
            let n = n.to_string();
            name == n
                || name
                    .strip_prefix(&format!("{n}-"))
                    .is_some_and(|rest| rest.ends_with(".map"))
        });
        if ours {
            total += e.metadata().map_or(0, |m| held_bytes(&m));
        }
    }
    total as i64
}

/// The bytes a file holds on disk: its length, less the holes each engine
/// checkpoint punches where superseded page images were (what `du`
/// counts; never more than the length, so a file without holes counts its
/// length although its last block is allocated whole).
fn held_bytes(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.len().min(m.blocks() * 512)
}

/// The primary tree of orioledb table `rel`, or the tree of `orioledb_btree`
/// index `rel` (Err if it has none in the engine); an ERROR (42809) naming
/// `rel` if it is neither.
fn orioledb_tree_of(rel: pg_sys::Oid) -> orioledb_engine::Result<orioledb_engine::Tree> {
    pg::require_preloaded();
    let Some((db, relnode)) = pg::engine_relfile(rel) else {
        // SAFETY: name lookup for the message; NULL (no such relation) is handled.
        let name = unsafe {
            let n = pg_sys::get_rel_name(rel);
            if n.is_null() {
                format!("with OID {}", rel.to_u32())
            } else {
                format!("\"{}\"", std::ffi::CStr::from_ptr(n).to_string_lossy())
            }
        };
        pg::error::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("relation {name} is not an orioledb table"),
        );
    };
    pg::engine::engine().tree(pg::engine::tree_id(db, relnode))
}

/// Verifies table `rel`'s primary tree (key order, high keys and right links,
/// every page reachable exactly once, every stored page image's checksum)
/// and returns a summary; a violation is an ERROR (XX001) naming it. Meant
/// for tests and diagnosis: run it while nothing writes to the table. It
/// holds the table's SHARE UPDATE EXCLUSIVE lock, as VACUUM does, so the
/// background sweep of quiet tables (`am::maintenance::quiet`), which merges leaves,
/// waits for it (and it for a round of that sweep).
#[pg_extern]
fn orioledb_check(rel: pg_sys::Oid) -> String {
    // SAFETY: a lock of the relation's OID for this transaction.
    unsafe { pg_sys::LockRelationOid(rel, pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE) };
    let tree = match orioledb_tree_of(rel) {
        // SAFETY: a syscache lookup of the relation's kind.
        Err(orioledb_engine::EngineError::NoSuchTree(_))
            if unsafe { pg_sys::get_rel_relkind(rel) } as u8 == pg_sys::RELKIND_TOASTVALUE =>
        {
            // A toast relation gets its tree with its first value.
            return "ok: no tree yet, 0 keys".into();
        }
        r => r.unwrap_or_else(|e| pg::engine::report(e)),
    };
    // In the tree's own key order (libc-collated keys compare by locale).
    let tree = am::layout::table::Table::open(tree).tree.clone();
    match tree.check() {
        Ok(r) => format!(
            "ok: {} levels, {} pages, {} keys",
            r.levels, r.pages, r.keys
        ),
        Err(v) => {
            pg::error::raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("orioledb: tree of relation {} is damaged: {v}", rel.to_u32()),
            );
        }
    }
}

/// The compression levels stored for table `rel` (see the table options).
#[pg_extern]
fn orioledb_table_compression(
    rel: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(compress, i32),
        name!(primary_compress, i32),
        name!(toast_compress, i32),
    ),
> {
    pg::require_preloaded();
    let (c, p, t) = am::storage::levels::table_compression(rel);
    TableIterator::once((c, p, t))
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION orioledb_relation_size(rel regclass) RETURNS bigint
LANGUAGE sql STRICT STABLE AS $$
    SELECT orioledb_tree_bytes(rel)
         + coalesce((SELECT sum(CASE WHEN a.amname = 'orioledb_btree'
                                     THEN orioledb_tree_bytes(i.indexrelid)
                                     ELSE pg_relation_size(i.indexrelid) END)
                     FROM pg_index i
                     JOIN pg_class ic ON ic.oid = i.indexrelid
                     JOIN pg_am a ON a.oid = ic.relam
                     WHERE i.indrelid = rel
                        OR i.indrelid = (SELECT reltoastrelid FROM pg_class WHERE oid = rel)),
                    0)::bigint
$$;
COMMENT ON FUNCTION orioledb_relation_size(regclass) IS
  'Bytes an orioledb table occupies on disk: its engine files (primary and toast trees, with their checkpoint maps) plus its indexes (an orioledb_btree index''s engine files)';

CREATE FUNCTION orioledb_table_description(rel oid) RETURNS text
LANGUAGE sql STRICT STABLE AS $$
WITH lv AS (SELECT * FROM orioledb_table_compression(rel)),
cols AS (
    SELECT a.attnum,
           CASE WHEN a.attisdropped THEN '' ELSE a.attname::text END AS col,
           CASE WHEN a.attisdropped THEN '' ELSE format_type(a.atttypid, a.atttypmod) END AS typ,
           coalesce(co.collname::text, '(null)') AS coll,
           (NOT a.attnotnull)::text AS nul,
           a.attisdropped::text AS dropped,
           CASE a.attcompression WHEN 'p' THEN 'pglz' WHEN 'l' THEN 'lz4' ELSE '' END AS comp
    FROM pg_attribute a
    LEFT JOIN pg_collation co ON co.oid = a.attcollation
    WHERE a.attrelid = rel AND a.attnum > 0
),
w AS (
    SELECT greatest(6, max(length(col))) AS c, greatest(4, max(length(typ))) AS t,
           greatest(9, max(length(coll))) AS l, 8 AS n, 7 AS d,
           greatest(11, max(length(comp))) AS p
    FROM cols
)
SELECT format('Compress = %s, Primary compress = %s, TOAST compress = %s',
              lv.compress, lv.primary_compress, lv.toast_compress)
       || E'\n' || format(' %s | %s | %s | %s | %s | %s ',
              lpad('Column', w.c), lpad('Type', w.t), lpad('Collation', w.l),
              lpad('Nullable', w.n), lpad('Dropped', w.d), lpad('Compression', w.p))
       || coalesce(E'\n' || (SELECT string_agg(format(' %s | %s | %s | %s | %s | %s ',
              lpad(col, w.c), lpad(typ, w.t), lpad(coll, w.l), lpad(nul, w.n),
              lpad(dropped, w.d), lpad(comp, w.p)), E'\n' ORDER BY attnum) FROM cols), '')
FROM lv, w
$$;

CREATE VIEW orioledb_table AS
SELECT d.oid AS datoid, c.oid AS reloid, c.relfilenode AS relnode,
       orioledb_table_description(c.oid) AS description
FROM pg_class c
JOIN pg_am am ON am.oid = c.relam AND am.amname = 'orioledb'
CROSS JOIN (SELECT oid FROM pg_database WHERE datname = current_database()) d
WHERE c.relkind IN ('r', 'm');
"#,
    name = "orioledb_table_view",
    requires = [orioledb_tree_bytes, orioledb_table_compression]
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Creates `sqlstate_of(text)`: runs a statement in a subtransaction and
    /// returns the SQLSTATE it failed with, or NULL if it succeeded.
    fn install_sqlstate_of() {
        Spi::run(
            "CREATE OR REPLACE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text
             LANGUAGE plpgsql AS $$
             BEGIN EXECUTE q; RETURN NULL;
             EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$",
        )
        .unwrap();
    }

    fn sqlstate_of(stmt: &str) -> Option<String> {
        install_sqlstate_of();
        Spi::get_one_with_args::<String>("SELECT pg_temp.sqlstate_of($1)", &[stmt.into()]).unwrap()
    }

    fn expect_error(stmt: &str, sqlstate: &str, message_part: &str) {
        let got =
            sqlstate_of(stmt).unwrap_or_else(|| panic!("{stmt}: expected an error, got none"));
        assert!(
            got.starts_with(&format!("{sqlstate}: ")) && got.contains(message_part),
            "{stmt}: expected {sqlstate} containing {message_part:?}, got {got:?}"
        );
    }

    fn show(guc: &str) -> String {
        Spi::get_one::<String>(&format!("SHOW {guc}"))
            .unwrap()
            .unwrap()
    }

    /// A map-entry deletion still queued when a table is emptied in place
    /// (an ERROR between a pruning and the end of its change leaves it, and
    /// a savepoint rollback keeps it) never hits a new row's entry, which
    /// would hide the row from reads by its TID: row ids go on after the
    /// truncation (what this checks; the tree's queue is also dropped
    /// then, which only a restart of row ids would make matter).
    #[pg_test]
    fn a_map_entry_deletion_queued_before_an_in_place_truncation_misses_new_rows() {
        use orioledb_engine::key_format::is_map_key;
        use std::ops::Bound::Unbounded;
        Spi::run("CREATE TABLE t_mapq (id int PRIMARY KEY, v int) USING orioledb").unwrap();
        Spi::run("INSERT INTO t_mapq VALUES (1, 1)").unwrap();
        let q = |sql: &str| Spi::get_one::<String>(sql).unwrap().unwrap();
        let relnode = || q("SELECT relfilenode::text FROM pg_class WHERE relname = 't_mapq'");
        let (node, ctid) = (relnode(), q("SELECT ctid::text FROM t_mapq"));
        // SAFETY: reading a process global.
        let db = unsafe { pg_sys::MyDatabaseId };
        let id = crate::pg::engine::tree_id(db, pg_sys::Oid::from(node.parse::<u32>().unwrap()));
        let tree = crate::pg::engine::engine().tree(id).unwrap();
        let keys = |t: &orioledb_engine::Tree| -> Vec<Vec<u8>> {
            t.range(Unbounded, Unbounded, orioledb_engine::Direction::Forward)
                .map(|kv| kv.unwrap().0)
                .collect()
        };
        let version = keys(&tree)
            .into_iter()
            .find(|k| crate::am::layout::table::is_version_key(k))
            .expect("row 1's version");
        crate::am::layout::table::version_pruned(id, &version);
        Spi::run("TRUNCATE t_mapq").unwrap();
        assert_eq!(relnode(), node, "a table created in this transaction is emptied in place");
        Spi::run("INSERT INTO t_mapq VALUES (2, 2)").unwrap();
        assert_ne!(q("SELECT ctid::text FROM t_mapq"), ctid, "row ids go on");
        let maps = keys(&tree).iter().filter(|k| is_map_key(k)).count();
        assert_eq!(maps, 1, "the new row's map entry is there");
    }

    #[pg_test]
    fn am_is_registered_once_as_table_am() {
        let n =
            Spi::get_one::<i64>("SELECT count(*) FROM pg_am WHERE amname = 'orioledb'").unwrap();
        assert_eq!(n, Some(1));
        let t = Spi::get_one::<String>("SELECT amtype::text FROM pg_am WHERE amname = 'orioledb'")
            .unwrap();
        assert_eq!(t.as_deref(), Some("t"));
        let h =
            Spi::get_one::<String>("SELECT amhandler::text FROM pg_am WHERE amname = 'orioledb'")
                .unwrap();
        assert_eq!(h.as_deref(), Some("orioledb_tableam_handler"));
    }

    #[pg_test]
    fn every_callback_is_set() {
        assert!(crate::am::routine::all_callbacks_set());
    }

    #[pg_test]
    fn create_table_uses_orioledb() {
        Spi::run("CREATE TABLE t_create (id int, v text) USING orioledb").unwrap();
        let am = Spi::get_one::<String>(
            "SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam
             WHERE c.oid = 't_create'::regclass",
        )
        .unwrap();
        assert_eq!(am.as_deref(), Some("orioledb"));
        // A text column may need toasting: the toast relation uses our AM
        // too (decision 9); an all-fixed-width table gets none.
        let toast = Spi::get_one::<String>(
            "SELECT a.amname::text FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
             JOIN pg_am a ON a.oid = t.relam WHERE c.oid = 't_create'::regclass",
        )
        .unwrap();
        assert_eq!(toast.as_deref(), Some("orioledb"));
        Spi::run("CREATE TABLE t_fixed (id int, x float8) USING orioledb").unwrap();
        let none = Spi::get_one::<bool>(
            "SELECT reltoastrelid = 0 FROM pg_class WHERE oid = 't_fixed'::regclass",
        )
        .unwrap();
        assert_eq!(none, Some(true));
    }

    #[pg_test]
    fn rows_round_trip_through_scans_and_indexes() {
        Spi::run("CREATE TABLE t_rows (id int PRIMARY KEY, v text, n numeric) USING orioledb")
            .unwrap();
        Spi::run("INSERT INTO t_rows SELECT g, 'v' || g, g / 3.0 FROM generate_series(1, 2000) g")
            .unwrap();
        let q = |sql: &str| Spi::get_one::<i64>(sql).unwrap();
        assert_eq!(q("SELECT count(*) FROM t_rows"), Some(2000));
        assert_eq!(
            q("SELECT sum(id) FROM t_rows WHERE v LIKE 'v1%'"),
            Some(1_514_596)
        );
        Spi::run("SET enable_seqscan = off").unwrap();
        assert_eq!(
            q("SELECT count(*) FROM t_rows WHERE id BETWEEN 10 AND 19"),
            Some(10)
        );
        let v = Spi::get_one::<String>("SELECT v FROM t_rows WHERE id = 1234").unwrap();
        assert_eq!(v.as_deref(), Some("v1234"));
        Spi::run("RESET enable_seqscan").unwrap();
        // ctid names a version; WHERE ctid finds it.
        let found = Spi::get_one::<i64>(
            "SELECT count(*) FROM t_rows WHERE ctid = (SELECT ctid FROM t_rows WHERE id = 7)",
        )
        .unwrap();
        assert_eq!(found, Some(1));
    }

    #[pg_test]
    fn dml_follows_heap_semantics() {
        Spi::run("CREATE TABLE t_dml (id int PRIMARY KEY, v int) USING orioledb").unwrap();
        Spi::run("INSERT INTO t_dml SELECT g, g FROM generate_series(1, 100) g").unwrap();
        Spi::run("UPDATE t_dml SET v = v * 10 WHERE id <= 50").unwrap();
        Spi::run("DELETE FROM t_dml WHERE id > 90").unwrap();
        Spi::run("UPDATE t_dml SET id = id + 1000 WHERE id = 1").unwrap();
        let q = |sql: &str| Spi::get_one::<i64>(sql).unwrap();
        assert_eq!(q("SELECT count(*) FROM t_dml"), Some(90));
        assert_eq!(q("SELECT sum(v)::int8 FROM t_dml"), Some(15570));
        assert_eq!(q("SELECT v::int8 FROM t_dml WHERE id = 1001"), Some(10));
        expect_error(
            "INSERT INTO t_dml VALUES (2, 0)",
            "23505",
            "duplicate key value",
        );
        Spi::run("INSERT INTO t_dml VALUES (2, 0) ON CONFLICT (id) DO UPDATE SET v = -1").unwrap();
        assert_eq!(q("SELECT v::int8 FROM t_dml WHERE id = 2"), Some(-1));
        // An update the same command already made is not seen again.
        Spi::run("UPDATE t_dml SET v = v + 1").unwrap();
        assert_eq!(q("SELECT v::int8 FROM t_dml WHERE id = 2"), Some(0));
        Spi::run(
            "CREATE TABLE t_ctas USING orioledb AS SELECT g AS x FROM generate_series(1, 5) g",
        )
        .unwrap();
        assert_eq!(q("SELECT sum(x)::int8 FROM t_ctas"), Some(15));
    }

    #[pg_test]
    fn ddl_around_empty_tables_works() {
        Spi::run("CREATE TABLE t_ddl (id int) USING orioledb").unwrap();
        Spi::run("ANALYZE t_ddl").unwrap();
        // An empty tree is its root page (hooks::sizes).
        assert_eq!(
            Spi::get_one::<i64>("SELECT pg_relation_size('t_ddl')").unwrap(),
            Some(8192)
        );
        // TRUNCATE in a later (sub)transaction just assigns a new relfilenode.
        let node = "SELECT relfilenode::int8 FROM pg_class WHERE oid = 't_ddl'::regclass";
        let before = Spi::get_one::<i64>(node).unwrap();
        assert_eq!(sqlstate_of("TRUNCATE t_ddl"), None);
        assert_ne!(Spi::get_one::<i64>(node).unwrap(), before);
        // In the creating (sub)transaction PostgreSQL truncates in place: the
        // engine empties the same tree.
        Spi::run("DO $$ BEGIN CREATE TABLE t_tr (id int) USING orioledb; TRUNCATE t_tr; END $$")
            .unwrap();
        let trees = "SELECT count(*) FROM orioledb_trees WHERE reloid = 't_tr'::regclass";
        assert_eq!(Spi::get_one::<i64>(trees).unwrap(), Some(1));
        let check = Spi::get_one::<String>("SELECT orioledb_check('t_tr'::regclass)").unwrap();
        assert_eq!(check.as_deref(), Some("ok: 1 levels, 1 pages, 0 keys"));
        assert_eq!(
            sqlstate_of("SELECT orioledb_check('pg_class'::regclass)").map(|e| e[..5].to_string()),
            Some("42809".into())
        );
        Spi::run("DROP TABLE t_ddl").unwrap();
        let n =
            Spi::get_one::<i64>("SELECT count(*) FROM pg_class WHERE relname = 't_ddl'").unwrap();
        assert_eq!(n, Some(0));
    }

    #[pg_test]
    fn gucs_have_documented_defaults() {
        assert_eq!(show("orioledb.main_buffers"), "128MB");
        assert_eq!(show("orioledb.default_compress"), "-1");
        assert_eq!(show("orioledb.default_primary_compress"), "-1");
        assert_eq!(show("orioledb.default_toast_compress"), "-1");
        assert_eq!(crate::pg::guc::main_buffers(), 16384);
        assert_eq!(crate::pg::guc::default_compress(), -1);
    }

    #[pg_test]
    fn compress_gucs_validate_range() {
        Spi::run("SET orioledb.default_compress = 3").unwrap();
        assert_eq!(show("orioledb.default_compress"), "3");
        assert_eq!(crate::pg::guc::default_compress(), 3);
        Spi::run("SET orioledb.default_toast_compress = 0").unwrap();
        assert_eq!(crate::pg::guc::default_toast_compress(), 0);
        Spi::run("SET orioledb.default_primary_compress = 22").unwrap();
        assert_eq!(crate::pg::guc::default_primary_compress(), 22);
        expect_error(
            "SET orioledb.default_compress = 23",
            "22023",
            "orioledb.default_compress",
        );
        expect_error(
            "SET orioledb.default_compress = -2",
            "22023",
            "orioledb.default_compress",
        );
        expect_error(
            "SET orioledb.main_buffers = 1000",
            "55P02",
            "orioledb.main_buffers",
        );
        let ctx = Spi::get_one::<String>(
            "SELECT context FROM pg_settings WHERE name = 'orioledb.main_buffers'",
        )
        .unwrap();
        assert_eq!(ctx.as_deref(), Some("postmaster"));
    }

    #[pg_test]
    fn guc_prefix_is_reserved() {
        // MarkGUCPrefixReserved: unknown orioledb.* names are rejected, not
        // silently turned into placeholders.
        expect_error(
            "SET orioledb.no_such_setting = 1",
            "42602",
            "orioledb.no_such_setting",
        );
    }

    #[pg_test]
    fn pool_region_exists() {
        let size = Spi::get_one::<i64>(
            "SELECT size FROM pg_shmem_allocations WHERE name = 'orioledb_rs page pool'",
        )
        .unwrap();
        assert!(
            size.unwrap_or(0) >= 16384 * 8192,
            "pool region too small: {size:?}"
        );
        let meta = Spi::get_one::<i64>(
            "SELECT size FROM pg_shmem_allocations WHERE name = 'orioledb_rs engine metadata'",
        )
        .unwrap();
        let want = orioledb_engine::meta::MetaRegion::size(
            crate::pg::shmem::MAX_TREES,
            crate::pg::shmem::meta_chunks(16384),
        );
        assert!(
            meta.unwrap_or(0) as usize >= want,
            "metadata region too small: {meta:?}"
        );
        let buffers = Spi::get_one::<i64>("SELECT buffers FROM orioledb_pool_info()").unwrap();
        assert_eq!(buffers, Some(16384));
        let pool = crate::pg::shmem::attach_pool().expect("pool attaches");
        assert_eq!(pool.nbuffers(), 16384);
        let latches = crate::pg::shmem::PgLatches::get().expect("latches exist");
        use crate::engine::latch::{LatchMode, LatchSet};
        assert!(latches.len() >= 16384);
        assert!(latches.try_acquire(0, LatchMode::Exclusive));
        assert!(latches.try_acquire(1, LatchMode::Shared));
        latches.release(1, LatchMode::Shared);
        latches.release(0, LatchMode::Exclusive);
        latches.acquire(5, LatchMode::Shared);
        latches.release(5, LatchMode::Shared);
    }

    /// Runs `stmt` in a subtransaction; on failure returns
    /// "SQLSTATE: message | DETAIL: ... | HINT: ...", on success None.
    fn full_error_of(stmt: &str) -> Option<String> {
        Spi::run(
            "CREATE OR REPLACE FUNCTION pg_temp.full_error_of(q text) RETURNS text
             LANGUAGE plpgsql AS $$
             DECLARE st text; m text; d text; h text;
             BEGIN EXECUTE q; RETURN NULL;
             EXCEPTION WHEN OTHERS THEN
               GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, m = MESSAGE_TEXT,
                   d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
               RETURN st || ': ' || m || ' | DETAIL: ' || d || ' | HINT: ' || h;
             END $$",
        )
        .unwrap();
        Spi::get_one_with_args::<String>("SELECT pg_temp.full_error_of($1)", &[stmt.into()])
            .unwrap()
    }

    /// Like `expect_error`, also checking DETAIL/HINT text.
    fn expect_error_parts(stmt: &str, sqlstate: &str, parts: &[&str]) {
        let got =
            full_error_of(stmt).unwrap_or_else(|| panic!("{stmt}: expected an error, got none"));
        assert!(
            got.starts_with(&format!("{sqlstate}: ")),
            "{stmt}: expected {sqlstate}, got {got:?}"
        );
        for part in parts {
            assert!(got.contains(part), "{stmt}: expected {part:?} in {got:?}");
        }
    }

    /// Stored compression levels of `table` through the Rust API.
    fn levels(table: &str) -> (i32, i32, i32) {
        let oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{table}'::regclass::oid"))
            .unwrap()
            .unwrap();
        crate::am::storage::levels::table_compression(oid)
    }

    fn reloptions(table: &str) -> Option<String> {
        Spi::get_one::<String>(&format!(
            "SELECT reloptions::text FROM pg_class WHERE oid = '{table}'::regclass"
        ))
        .unwrap()
    }

    fn exists(table: &str) -> bool {
        Spi::get_one::<bool>(&format!("SELECT to_regclass('{table}') IS NOT NULL"))
            .unwrap()
            .unwrap()
    }

    #[pg_test]
    fn compress_option_is_stored_on_create() {
        Spi::run("CREATE TABLE t_opt_c1 (id int) USING orioledb WITH (compress = 1)").unwrap();
        assert_eq!(
            reloptions("t_opt_c1").as_deref(),
            Some("{compress=1}")
        );
        assert_eq!(levels("t_opt_c1"), (1, 1, 1));
        Spi::run(
            "CREATE TABLE t_opt_c2 (id int) USING orioledb WITH (compress = 1, toast_compress = 5)",
        )
        .unwrap();
        assert_eq!(levels("t_opt_c2"), (1, 1, 5));
        assert_eq!(
            reloptions("t_opt_c2").as_deref(),
            Some("{compress=1,toast_compress=5}")
        );
        // Strings, zstd's default level 0 and "off".
        Spi::run(
            "CREATE TABLE t_opt_c3 (id int) USING orioledb
             WITH (primary_compress = '22', toast_compress = 0, compress = ' -1')",
        )
        .unwrap();
        assert_eq!(levels("t_opt_c3"), (-1, 22, 0));
        // No options and default GUCs: nothing stored (no `Options:` line
        // in \d+, as for heap); it reads as off.
        Spi::run("CREATE TABLE t_opt_c4 (id int) USING orioledb").unwrap();
        assert_eq!(reloptions("t_opt_c4"), None);
        assert_eq!(levels("t_opt_c4"), (-1, -1, -1));
        // IF NOT EXISTS on an existing table leaves its levels alone.
        Spi::run("CREATE TABLE IF NOT EXISTS t_opt_c1 (id int) USING orioledb WITH (compress = 9)")
            .unwrap();
        assert_eq!(levels("t_opt_c1"), (1, 1, 1));
        // A table without stored levels (before the hook) reads as off.
        Spi::run("CREATE TABLE t_opt_c5 (id int)").unwrap();
        assert_eq!(levels("t_opt_c5"), (-1, -1, -1));
    }

    #[pg_test]
    fn compress_gucs_are_table_defaults() {
        Spi::run("SET orioledb.default_compress = 3").unwrap();
        Spi::run("CREATE TABLE t_opt_g1 (id int) USING orioledb").unwrap();
        assert_eq!(levels("t_opt_g1"), (3, 3, 3));
        Spi::run("SET orioledb.default_primary_compress = 7").unwrap();
        Spi::run("CREATE TABLE t_opt_g2 (id int) USING orioledb").unwrap();
        assert_eq!(levels("t_opt_g2"), (3, 7, 3));
        Spi::run("SET orioledb.default_toast_compress = 0").unwrap();
        Spi::run("CREATE TABLE t_opt_g3 (id int) USING orioledb WITH (primary_compress = 2)")
            .unwrap();
        assert_eq!(levels("t_opt_g3"), (3, 2, 0));
        // compress given: it beats every GUC.
        Spi::run("CREATE TABLE t_opt_g4 (id int) USING orioledb WITH (compress = 1)").unwrap();
        assert_eq!(levels("t_opt_g4"), (1, 1, 1));
        // Later GUC changes do not touch existing tables.
        Spi::run("SET orioledb.default_compress = 9").unwrap();
        assert_eq!(levels("t_opt_g1"), (3, 3, 3));
        assert_eq!(levels("t_opt_g2"), (3, 7, 3));
        Spi::run("RESET orioledb.default_compress").unwrap();
        Spi::run("RESET orioledb.default_primary_compress").unwrap();
        Spi::run("RESET orioledb.default_toast_compress").unwrap();
    }

    #[pg_test]
    fn compress_option_values_are_validated() {
        let detail = "Valid values are integers from -1 (off) to 22; 0 means zstd's default level.";
        for (opts, option, shown) in [
            ("compress = 23", "compress", "\"23\""),
            ("compress = -2", "compress", "\"-2\""),
            ("compress = 'abc'", "compress", "\"abc\""),
            ("compress = abc", "compress", "\"abc\""),
            ("compress = 1.5", "compress", "\"1.5\""),
            ("compress", "compress", "no value given"),
            ("primary_compress = 99", "primary_compress", "\"99\""),
            (
                "compress = 1, toast_compress = true",
                "toast_compress",
                "\"true\"",
            ),
        ] {
            let stmt = format!("CREATE TABLE t_opt_bad (id int) USING orioledb WITH ({opts})");
            let msg = format!("invalid value for orioledb option \"{option}\": {shown}");
            expect_error_parts(&stmt, "22023", &[&msg, detail]);
            assert!(!exists("t_opt_bad"));
        }
        expect_error(
            "CREATE TABLE t_opt_bad (id int) USING orioledb WITH (compress = 1, compress = 2)",
            "22023",
            "parameter \"compress\" specified more than once",
        );
    }

    #[pg_test]
    fn compress_option_refused_on_heap_tables() {
        let msg = "option \"compress\" is only valid for tables using the orioledb access method";
        expect_error_parts(
            "CREATE TABLE t_opt_heap (id int) USING heap WITH (compress = 1)",
            "22023",
            &[msg, "would use access method \"heap\""],
        );
        assert!(!exists("t_opt_heap"));
        // default_table_access_method is heap here.
        expect_error(
            "CREATE TABLE t_opt_heap (id int) WITH (fillfactor = 50, compress = 1)",
            "22023",
            msg,
        );
        expect_error(
            "CREATE TABLE t_opt_heap (id int) WITH (toast_compress = 1)",
            "22023",
            "option \"toast_compress\" is only valid for tables using the orioledb access method",
        );
        expect_error(
            "CREATE TABLE t_opt_heap USING heap WITH (compress = 1) AS SELECT 1 AS x",
            "22023",
            msg,
        );
        assert!(!exists("t_opt_heap"));
        // A partitioned parent has no access method in PostgreSQL 15.
        expect_error_parts(
            "CREATE TABLE t_opt_part (id int) PARTITION BY RANGE (id) WITH (compress = 1)",
            "22023",
            &[msg, "has no access method"],
        );
        // Heap options keep working on heap tables.
        Spi::run("CREATE TABLE t_opt_heap (id int) WITH (fillfactor = 50)").unwrap();
        assert_eq!(reloptions("t_opt_heap").as_deref(), Some("{fillfactor=50}"));
    }

    #[pg_test]
    fn alter_table_sets_and_resets_compression() {
        Spi::run("CREATE TABLE t_opt_a (id int) USING orioledb WITH (compress = 1)").unwrap();
        Spi::run("ALTER TABLE t_opt_a SET (compress = 4)").unwrap();
        assert_eq!(levels("t_opt_a"), (4, 4, 4));
        Spi::run("ALTER TABLE t_opt_a SET (toast_compress = 9)").unwrap();
        assert_eq!(levels("t_opt_a"), (4, 4, 9));
        Spi::run("ALTER TABLE t_opt_a SET (compress = 2, primary_compress = 6)").unwrap();
        assert_eq!(levels("t_opt_a"), (2, 6, 2));
        Spi::run("ALTER TABLE t_opt_a RESET (primary_compress)").unwrap();
        assert_eq!(levels("t_opt_a"), (2, 2, 2));
        Spi::run("SET orioledb.default_compress = 5").unwrap();
        Spi::run("ALTER TABLE t_opt_a RESET (compress)").unwrap();
        assert_eq!(levels("t_opt_a"), (5, 5, 5));
        Spi::run("RESET orioledb.default_compress").unwrap();
        // Mixed with heap options and other subcommands.
        Spi::run("ALTER TABLE t_opt_a SET (fillfactor = 70, compress = 3), ADD COLUMN v text")
            .unwrap();
        assert_eq!(
            reloptions("t_opt_a").as_deref(),
            Some("{fillfactor=70,compress=3}")
        );
        // Heap options alone still work although heap's parser does not know ours.
        Spi::run("ALTER TABLE t_opt_a SET (fillfactor = 50)").unwrap();
        Spi::run("ALTER TABLE t_opt_a RESET (fillfactor)").unwrap();
        assert_eq!(
            reloptions("t_opt_a").as_deref(),
            Some("{compress=3}")
        );
        expect_error(
            "ALTER TABLE t_opt_a SET (fillfactor = 5)",
            "22023",
            "fillfactor",
        );
        expect_error_parts(
            "ALTER TABLE t_opt_a SET (primary_compress = 30)",
            "22023",
            &[
                "invalid value for orioledb option \"primary_compress\": \"30\"",
                "from -1 (off) to 22",
            ],
        );
        expect_error("ALTER TABLE t_opt_a RESET (compress = 1)", "42601", "RESET");
        assert_eq!(levels("t_opt_a"), (3, 3, 3));
        // Missing tables: PostgreSQL's own messages.
        assert_eq!(
            sqlstate_of("ALTER TABLE IF EXISTS t_opt_missing SET (compress = 1)"),
            None
        );
        expect_error(
            "ALTER TABLE t_opt_missing SET (compress = 1)",
            "42P01",
            "t_opt_missing",
        );
        // Ownership is checked even when only our options are changed.
        Spi::run(
            "DO $$ BEGIN
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 't_opt_role') THEN
                 CREATE ROLE t_opt_role;
               END IF;
             END $$",
        )
        .unwrap();
        install_sqlstate_of();
        Spi::run("SET ROLE t_opt_role").unwrap();
        let got = Spi::get_one::<String>(
            "SELECT pg_temp.sqlstate_of('ALTER TABLE t_opt_a SET (compress = 1)')",
        );
        Spi::run("RESET ROLE").unwrap();
        let got = got.unwrap();
        let got = got.expect("non-owner must fail");
        assert!(
            got.starts_with("42501: ") && got.contains("must be owner"),
            "{got}"
        );
        assert_eq!(levels("t_opt_a"), (3, 3, 3));
    }

    #[pg_test]
    fn alter_non_orioledb_tables_refuses_compress() {
        Spi::run("CREATE TABLE t_opt_ah (id int) USING heap").unwrap();
        let msg = "option \"compress\" is only valid for tables using the orioledb access method";
        expect_error_parts(
            "ALTER TABLE t_opt_ah SET (compress = 1)",
            "22023",
            &[msg, "uses access method \"heap\""],
        );
        expect_error("ALTER TABLE t_opt_ah RESET (compress)", "22023", msg);
        expect_error(
            "ALTER TABLE t_opt_ah SET (fillfactor = 60, compress = 1)",
            "22023",
            msg,
        );
        Spi::run("ALTER TABLE t_opt_ah SET (fillfactor = 60)").unwrap();
        assert_eq!(reloptions("t_opt_ah").as_deref(), Some("{fillfactor=60}"));
    }

    #[pg_test]
    fn index_compress_option_makes_engine_indexes_or_is_refused() {
        Spi::run("CREATE TABLE t_opt_i (id int) USING orioledb").unwrap();
        Spi::run("CREATE TABLE t_opt_ih (id int)").unwrap();
        Spi::run("CREATE INDEX t_opt_i_idx ON t_opt_i (id) WITH (compress = 1)").unwrap();
        let am = Spi::get_one::<String>(
            "SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.relname = 't_opt_i_idx'",
        );
        assert_eq!(am, Ok(Some("orioledb_btree".to_string())));
        expect_error_parts(
            "CREATE INDEX ON t_opt_ih (id) WITH (compress = 1)",
            "0A000",
            &[
                "orioledb: indexes using access method \"btree\" are not compressed",
                "HINT: ",
                "ALTER TABLE t_opt_ih SET (compress",
            ],
        );
        expect_error(
            "CREATE INDEX ON t_opt_i USING hash (id) WITH (primary_compress = 1)",
            "0A000",
            "indexes using access method \"hash\" are not compressed",
        );
        expect_error(
            "CREATE TABLE t_opt_pk (id int, PRIMARY KEY (id) WITH (compress = 1)) USING orioledb",
            "0A000",
            "are not compressed",
        );
        Spi::run("CREATE INDEX t_opt_ih_idx ON t_opt_ih (id)").unwrap();
        expect_error(
            "ALTER INDEX t_opt_ih_idx SET (compress = 1)",
            "0A000",
            "are not compressed",
        );
        Spi::run("ALTER INDEX t_opt_ih_idx SET (fillfactor = 80)").unwrap();
    }

    #[pg_test]
    fn heap_options_still_work_on_orioledb_tables() {
        Spi::run(
            "CREATE TABLE t_opt_ff (id int) USING orioledb WITH (fillfactor = 70, compress = 2)",
        )
        .unwrap();
        assert_eq!(
            reloptions("t_opt_ff").as_deref(),
            Some("{fillfactor=70,compress=2}")
        );
        expect_error(
            "CREATE TABLE t_opt_ff2 (id int) USING orioledb WITH (fillfactor = 5, compress = 2)",
            "22023",
            "fillfactor",
        );
        expect_error(
            "CREATE TABLE t_opt_ff2 (id int) USING orioledb WITH (no_such_option = 1)",
            "22023",
            "unrecognized parameter \"no_such_option\"",
        );
    }

    #[pg_test]
    fn default_table_access_method_picks_up_options() {
        Spi::run("SET default_table_access_method = orioledb").unwrap();
        Spi::run("CREATE TABLE t_opt_d (id int) WITH (compress = 4, primary_compress = 8)")
            .unwrap();
        let am = Spi::get_one::<String>(
            "SELECT a.amname::text FROM pg_class c JOIN pg_am a ON a.oid = c.relam
             WHERE c.oid = 't_opt_d'::regclass",
        )
        .unwrap();
        assert_eq!(am.as_deref(), Some("orioledb"));
        assert_eq!(levels("t_opt_d"), (4, 8, 4));
        // CREATE TABLE AS (no rows: the engine cannot store them yet),
        // materialized views and partitions.
        Spi::run("CREATE TABLE t_opt_ctas WITH (compress = 6) AS SELECT 1 AS x WITH NO DATA")
            .unwrap();
        assert_eq!(levels("t_opt_ctas"), (6, 6, 6));
        Spi::run("CREATE MATERIALIZED VIEW t_opt_mv WITH (toast_compress = 2) AS SELECT 1 AS x WITH NO DATA")
            .unwrap();
        assert_eq!(levels("t_opt_mv"), (-1, -1, 2));
        Spi::run("ALTER MATERIALIZED VIEW t_opt_mv SET (compress = 1)").unwrap();
        assert_eq!(levels("t_opt_mv"), (1, 1, 1));
        Spi::run("CREATE TABLE t_opt_p (id int) PARTITION BY RANGE (id)").unwrap();
        Spi::run("CREATE TABLE t_opt_p1 PARTITION OF t_opt_p FOR VALUES FROM (1) TO (10) WITH (compress = 7)")
            .unwrap();
        assert_eq!(levels("t_opt_p1"), (7, 7, 7));
        // Temporary orioledb tables take options too.
        Spi::run("CREATE TEMP TABLE t_opt_tmp (id int) WITH (compress = 3)").unwrap();
        assert_eq!(levels("t_opt_tmp"), (3, 3, 3));
        Spi::run("RESET default_table_access_method").unwrap();
    }

    #[pg_test]
    fn version_function_works() {
        let v = Spi::get_one::<String>("SELECT orioledb_rs_version()").unwrap();
        assert_eq!(v.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    }
}

/// Hooks for `cargo pgrx test`: the server must preload the library.
#[cfg(any(test, feature = "pg_test"))]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'orioledb_rs'"]
    }
}
