-- Statements that orioledb refuses on purpose, for now (0A000 "not supported
-- yet") or because of its smaller row limit (54000). Not compared with heap:
-- tests/sql_parity.rs runs this file statement by statement (a statement ends
-- with a line ending in ';') in a heap database and in an orioledb database.
-- Every statement must succeed on heap. On orioledb, a statement preceded by a
-- line "-- expect SQLSTATE xxxxx" must fail with that SQLSTATE; every other
-- statement must succeed. When orioledb gains one of these features, move the
-- statement to a compared script.
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
CREATE INDEX t_v ON t (v);

-- CLUSTER on an index other than the primary key (the table keeps its own
-- order); on the primary key, and VACUUM FULL, work
CLUSTER t USING t_pkey;
VACUUM FULL t;
ALTER TABLE t CLUSTER ON t_v;
-- expect SQLSTATE 0A000
CLUSTER t;

-- rows that cannot be made smaller than orioledb's item limit (about 2.5 kB)
-- but fit into a heap page (8160 bytes): many fixed-width columns
DO $$ BEGIN EXECUTE 'CREATE TABLE wide_fixed (' || (SELECT string_agg('c' || g || ' int8 DEFAULT ' || g, ', ') FROM generate_series(1, 400) g) || ')'; END $$;
-- expect SQLSTATE 54000
INSERT INTO wide_fixed DEFAULT VALUES;
SELECT count(*) FROM t;
