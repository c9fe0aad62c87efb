//! orioledb_rs: an index-organized table access method for stock PostgreSQL 15.
//!
//! The storage engine is the `orioledb_engine` crate (sources in `src/engine/`,
//! no pgrx); `pg` and `am` are the PostgreSQL glue.
pub use orioledb_engine as engine;

use pgrx::prelude::*;

pub mod am;
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
        pgrx::error!("orioledb_rs: shared page pool was not created");
    });
    TableIterator::once((info.buffers as i64, info.bytes as i64, info.latches as i64))
}

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
        // No toast table yet (relation_needs_toast_table = false).
        let toast = Spi::get_one::<bool>(
            "SELECT reltoastrelid = 0 FROM pg_class WHERE oid = 't_create'::regclass",
        )
        .unwrap();
        assert_eq!(toast, Some(true));
    }

    #[pg_test]
    fn select_is_not_supported_yet() {
        Spi::run("CREATE TABLE t_select (id int) USING orioledb").unwrap();
        expect_error(
            "SELECT * FROM t_select",
            "0A000",
            "orioledb: scanning table \"t_select\" is not supported yet",
        );
        expect_error(
            "SELECT count(*) FROM t_select WHERE id = 1",
            "0A000",
            "scanning",
        );
    }

    #[pg_test]
    fn dml_is_not_supported_yet() {
        Spi::run("CREATE TABLE t_dml (id int) USING orioledb").unwrap();
        expect_error(
            "INSERT INTO t_dml VALUES (1)",
            "0A000",
            "orioledb: inserting into table \"t_dml\" is not supported yet",
        );
        expect_error(
            "COPY t_dml FROM PROGRAM 'echo 1'",
            "0A000",
            "inserting into",
        );
        expect_error("UPDATE t_dml SET id = 2", "0A000", "not supported yet");
        expect_error("DELETE FROM t_dml", "0A000", "not supported yet");
        expect_error("CREATE INDEX ON t_dml (id)", "0A000", "building indexes");
        expect_error(
            "CREATE TABLE t_pk (id int PRIMARY KEY) USING orioledb",
            "0A000",
            "building indexes",
        );
        expect_error(
            "CREATE TABLE t_ctas USING orioledb AS SELECT 1 AS x",
            "0A000",
            "inserting into",
        );
    }

    #[pg_test]
    fn ddl_around_empty_tables_works() {
        Spi::run("CREATE TABLE t_ddl (id int) USING orioledb").unwrap();
        Spi::run("ANALYZE t_ddl").unwrap();
        assert_eq!(
            Spi::get_one::<i64>("SELECT pg_relation_size('t_ddl')").unwrap(),
            Some(0)
        );
        // TRUNCATE in a later (sub)transaction just assigns a new relfilenode.
        let node = "SELECT relfilenode::int8 FROM pg_class WHERE oid = 't_ddl'::regclass";
        let before = Spi::get_one::<i64>(node).unwrap();
        assert_eq!(sqlstate_of("TRUNCATE t_ddl"), None);
        assert_ne!(Spi::get_one::<i64>(node).unwrap(), before);
        // In the creating (sub)transaction PostgreSQL truncates in place, which
        // needs the engine.
        expect_error(
            "DO $$ BEGIN CREATE TABLE t_tr (id int) USING orioledb; TRUNCATE t_tr; END $$",
            "0A000",
            "orioledb: TRUNCATE of table \"t_tr\" in the transaction that created it",
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
        assert!(meta.unwrap_or(0) as usize >= want, "metadata region too small: {meta:?}");
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
