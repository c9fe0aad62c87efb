-- orioledb_rs walkthrough. scripts/run.sh runs it in database "postgres" with
--   psql -v ON_ERROR_STOP=1 -e -f sql/demo.sql
-- after CREATE EXTENSION orioledb_rs. Run it yourself the same way.
--
-- How to extend: add a new numbered section at the end (an \echo header, the
-- statements, and a DROP of whatever it created, so the file can be re-run).
-- A statement that is *expected* to fail for now goes between
-- \set ON_ERROR_STOP 0 / \set ON_ERROR_STOP 1 with a comment saying why.
-- Still to add from the seed walkthrough (scenario tbl1) once rows are stored:
-- 100 rows of 3000 random bytes, the toast tree, and the sizes for compress
-- -1, 1 and 20.

\pset footer off

\echo
\echo '== 1. The table access method "orioledb" is registered'
SELECT amname, amtype FROM pg_am WHERE amname = 'orioledb';

SELECT orioledb_rs_version();

\echo
\echo '== 2. Settings (orioledb.main_buffers is the shared page pool, fixed at server start)'
SHOW orioledb.main_buffers;
SELECT name, setting, unit, context, short_desc
  FROM pg_settings
 WHERE name LIKE 'orioledb.%'
 ORDER BY name;

-- Compression levels are per session: -1 = off (default), 0 = zstd default, 1..22.
SET orioledb.default_compress = 3;
SHOW orioledb.default_compress;
RESET orioledb.default_compress;

-- The shared page pool (orioledb.main_buffers / 8 kB pages) as this backend sees it.
SELECT * FROM orioledb_pool_info();

\echo
\echo '== 3. A table stored by orioledb (seed scenario tbl1, schema only for now)'
-- The seed declares "id int PRIMARY KEY"; building indexes is not supported
-- yet, so the key is left out until it is.
DROP TABLE IF EXISTS tbl1;
CREATE TABLE tbl1 (
    id  int,
    c1  int,
    ts  timestamp,
    lob bytea
) USING orioledb;
-- \d+ shows "Access method: orioledb"
\d+ tbl1
SELECT c.relname, a.amname
  FROM pg_class c JOIN pg_am a ON a.oid = c.relam
 WHERE c.relname = 'tbl1';

\echo
\echo '== 4. Row storage is still being built: scans and DML raise SQLSTATE 0A000 (expected)'
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
INSERT INTO tbl1 VALUES (1, 1, now(), '\x00');
SELECT count(*) FROM tbl1;
\set VERBOSITY default
\set ON_ERROR_STOP 1

\echo
\echo '== 5. Each table is a tree in the engine; CHECKPOINT writes its files'
-- tbl3 = tbl1 WITH (compress = 1): the levels are stored in reloptions.
DROP TABLE IF EXISTS tbl3;
CREATE TABLE tbl3 (id int, c1 int, ts timestamp, lob bytea) USING orioledb WITH (compress = 1);
CHECKPOINT;
-- Files: orioledb_data/<database oid>/<relfilenode> (+ <relfilenode>-<checkpoint>.map)
SELECT reloid, tree, file, pages, file_bytes, compress FROM orioledb_trees ORDER BY reloid::text;
SELECT orioledb_relation_size('tbl1'::regclass) AS tbl1_bytes,
       orioledb_relation_size('tbl3'::regclass) AS tbl3_bytes,
       pg_relation_size('tbl3') AS pg_relation_size;   -- stock PostgreSQL sees no file under base/
SELECT * FROM orioledb_table WHERE reloid = 'tbl3'::regclass;

DROP TABLE tbl1, tbl3;

\echo
\echo '== done'
