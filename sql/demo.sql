-- orioledb_rs walkthrough: the seed's tbl1 / tbl2 / tbl3 experiment.
-- scripts/run.sh runs it in database "postgres" with
--   psql -v ON_ERROR_STOP=1 -e -f sql/demo.sql
-- after CREATE EXTENSION orioledb_rs. Run it yourself the same way; it drops
-- what it creates, so it can be re-run. tests/walkthrough.rs checks the same
-- steps and figures.

\pset footer off

\echo
\echo '== 1. The access methods "orioledb" (tables) and "orioledb_btree" (their secondary indexes), and the settings'
SELECT amname, amtype FROM pg_am WHERE amname IN ('orioledb', 'orioledb_btree') ORDER BY 1;
SELECT orioledb_rs_version();
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'orioledb.%' ORDER BY name;

-- 3000 bytes of random data (incompressible), like the seed's lob column.
CREATE OR REPLACE FUNCTION pg_temp.random_bytes(n int) RETURNS bytea
LANGUAGE sql VOLATILE AS $$
  SELECT decode(string_agg(lpad(to_hex(floor(random() * 256)::int), 2, '0'), ''), 'hex')
  FROM generate_series(1, n)
$$;

\echo
\echo '== 2. tbl1: 100 rows of 3000 random bytes, a secondary index in the engine, CHECKPOINT'
DROP TABLE IF EXISTS tbl1, tbl2, tbl3, tbl20;
CREATE TABLE tbl1 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb;
CREATE INDEX idx_tbl1_ts ON tbl1 USING orioledb_btree (ts);
INSERT INTO tbl1 SELECT g, g, now(), pg_temp.random_bytes(3000) FROM generate_series(1, 100) g;
\d+ tbl1
CHECKPOINT;

\echo
\echo '== 3. Its files: orioledb_data/<database oid>/<relfilenode>[-<checkpoint>.map]'
-- The primary tree (the table body in primary-key order, with the row-id map
-- inside) is named by the table's relfilenode, the toast tree by its toast
-- relation's, the secondary index idx_tbl1_ts's tree by the index's. The
-- primary key stays a PostgreSQL btree in base/.
SELECT "table", reloid, tree, file, key, pages, file_bytes, compress
  FROM orioledb_trees WHERE "table" = 'tbl1'::regclass ORDER BY tree;
SELECT f AS file_in_orioledb_data, (pg_stat_file('orioledb_data/' || d.oid || '/' || f)).size
  FROM pg_database d, pg_ls_dir('orioledb_data/' || d.oid) f
 WHERE d.datname = current_database()
   AND split_part(split_part(f, '-', 1), '.', 1)::oid IN
       (SELECT relfilenode FROM pg_class WHERE oid IN ('tbl1'::regclass, 'idx_tbl1_ts'::regclass)
        UNION SELECT t.relfilenode FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid
              WHERE c.oid = 'tbl1'::regclass)
 ORDER BY 1;
SELECT relname, pg_relation_size(oid) FROM pg_class
 WHERE oid IN ('tbl1_pkey'::regclass, 'idx_tbl1_ts'::regclass) ORDER BY 1;
-- pg_relation_size() counts the primary tree's pages (8 kB each; stock
-- PostgreSQL would see no table file and report 0); orioledb_relation_size()
-- is the sum of every file above (engine files plus PostgreSQL's index files).
SELECT pg_relation_size('tbl1') AS pg_relation_size,
       orioledb_relation_size('tbl1'::regclass) AS orioledb_relation_size;

\echo
\echo '== 4. tbl2: the toast threshold (about a third of a page)'
CREATE TABLE tbl2 (id int PRIMARY KEY, lob bytea) USING orioledb;
INSERT INTO tbl2 VALUES (1, pg_temp.random_bytes(1000)), (2, pg_temp.random_bytes(2100));
CHECKPOINT;
-- 1000 and 2100 bytes: inline; no value went to toast, so there is no toast
-- tree and no toast file yet (it is created with the first toasted value)
SELECT orioledb_check(reltoastrelid) AS toast_tree FROM pg_class WHERE relname = 'tbl2';
SELECT tree, file FROM orioledb_trees WHERE "table" = 'tbl2'::regclass ORDER BY tree;
INSERT INTO tbl2 VALUES (3, pg_temp.random_bytes(3000));
CHECKPOINT;
-- 3000 bytes: moved to the toast tree, in 2000-byte chunks ("2 keys"), whose
-- file now exists
SELECT orioledb_check(reltoastrelid) AS toast_tree FROM pg_class WHERE relname = 'tbl2';
SELECT tree, file FROM orioledb_trees WHERE "table" = 'tbl2'::regclass ORDER BY tree;

\echo
\echo '== 5. tbl3 = tbl1 WITH (compress = 1), and compress = 20; their indexes too'
CREATE TABLE tbl3 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb WITH (compress = 1);
CREATE TABLE tbl20 (id int PRIMARY KEY, c1 int, ts timestamp, lob bytea) USING orioledb WITH (compress = 20);
-- WITH (compress = N) on an index of an orioledb table makes it an orioledb_btree index
CREATE INDEX idx_tbl3_ts ON tbl3 (ts) WITH (compress = 1);
CREATE INDEX idx_tbl20_ts ON tbl20 (ts) WITH (compress = 20);
INSERT INTO tbl3 SELECT * FROM tbl1;
INSERT INTO tbl20 SELECT * FROM tbl1;
CHECKPOINT;
SELECT "table", tree, compress, file_bytes FROM orioledb_trees
 WHERE "table" IN ('tbl1'::regclass, 'tbl3'::regclass, 'tbl20'::regclass) ORDER BY tree, compress;
SELECT * FROM orioledb_table WHERE reloid = 'tbl3'::regclass;

\echo
\echo '== 6. Reading by primary key: one descent into the table itself; by ts: its index'
EXPLAIN (COSTS OFF) SELECT c1 FROM tbl1 WHERE id = 42;
EXPLAIN (COSTS OFF) SELECT id FROM tbl1 WHERE id BETWEEN 10 AND 20 ORDER BY id DESC;
SELECT id, c1, length(lob) FROM tbl1 WHERE id BETWEEN 10 AND 12 ORDER BY id DESC;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT ts FROM tbl1 WHERE ts <= localtimestamp ORDER BY ts DESC LIMIT 3;
SELECT count(*) FROM tbl1 WHERE ts <= localtimestamp;
RESET enable_seqscan;

DROP TABLE tbl1, tbl2, tbl3, tbl20;

\echo
\echo '== done'
