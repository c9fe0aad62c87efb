-- Primary-key access: equality, IN / = ANY, ranges, ORDER BY both ways with
-- LIMIT, nested-loop lookups, cross-type integer comparisons, composite and
-- text ("C") keys, updates and deletes located by key (including key
-- changes), ADD / DROP PRIMARY KEY on tables with rows, TRUNCATE, and
-- cursors. On orioledb these run on the primary tree (the custom scan) and
-- the table is stored in key order; results must equal heap's.
CREATE TABLE k (id int PRIMARY KEY, v text, n int);
INSERT INTO k SELECT g, 'v' || g, g % 10 FROM generate_series(1, 2000) g ORDER BY md5(g::text);
ANALYZE k;
SELECT * FROM k WHERE id = 777;
SELECT * FROM k WHERE id = 0;
SELECT * FROM k WHERE id IN (5, 3, 1999, 2001, 3) ORDER BY id;
SELECT * FROM k WHERE id = ANY (ARRAY[10, NULL, 12]) ORDER BY id;
SELECT count(*), min(id), max(id) FROM k WHERE id > 1990;
SELECT count(*), min(id), max(id) FROM k WHERE id >= 100 AND id < 200;
SELECT count(*) FROM k WHERE id > 100 AND id > 150 AND id <= 160 AND id < 170;
SELECT count(*) FROM k WHERE id BETWEEN 500 AND 400;
SELECT id FROM k ORDER BY id LIMIT 5;
SELECT id FROM k ORDER BY id DESC LIMIT 5;
SELECT id FROM k WHERE id < 50 ORDER BY id DESC LIMIT 3;
SELECT id FROM k WHERE id > 1995 ORDER BY id;
SELECT id, n FROM k WHERE id < 30 AND n = 3 ORDER BY id;
-- cross-type integer bounds, in and out of int4's range
SELECT id FROM k WHERE id = 42::int8;
SELECT id FROM k WHERE id = 42::int2;
SELECT count(*) FROM k WHERE id = 5000000000::int8;
SELECT count(*) FROM k WHERE id < 5000000000::int8;
SELECT count(*) FROM k WHERE id > -5000000000::int8 AND id < 3;
SELECT count(*) FROM k WHERE id > 5000000000::int8;
SELECT count(*) FROM k WHERE id IN (1::int8, 5000000000::int8);
-- parameters: prepared statements and nested loops
PREPARE q(int) AS SELECT v FROM k WHERE id = $1;
EXECUTE q(11);
EXECUTE q(12);
EXECUTE q(NULL);
DEALLOCATE q;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT g, k.v FROM generate_series(1, 5) g JOIN k ON k.id = g * 100 ORDER BY g;
SELECT count(*) FROM k a JOIN k b ON b.id = a.id + 1 WHERE a.id < 100;
RESET enable_hashjoin;
RESET enable_mergejoin;
-- changes located by key
UPDATE k SET v = 'changed' WHERE id = 10 RETURNING *;
WITH u AS (UPDATE k SET id = id + 10000 WHERE id BETWEEN 20 AND 22 RETURNING id, v) SELECT * FROM u ORDER BY id;
WITH d AS (DELETE FROM k WHERE id IN (30, 31, 32) RETURNING id) SELECT * FROM d ORDER BY id;
SELECT id, v FROM k WHERE id < 35 OR id > 10000 ORDER BY id;
BEGIN;
UPDATE k SET n = n + 1 WHERE id = 40;
UPDATE k SET n = n + 1 WHERE id = 40;
SELECT n FROM k WHERE id = 40;
ROLLBACK;
SELECT n FROM k WHERE id = 40;
-- a cursor over a key range, both directions
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT id FROM k WHERE id BETWEEN 100 AND 105 ORDER BY id;
FETCH 3 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH LAST FROM c;
COMMIT;
-- composite key, text under "C", with leading-column ranges
CREATE TABLE c2 (a text COLLATE "C", b int, x int, PRIMARY KEY (a, b));
INSERT INTO c2 SELECT chr(97 + g % 5), g, g * 2 FROM generate_series(1, 200) g;
SELECT * FROM c2 WHERE a = 'c' AND b = 12;
SELECT count(*) FROM c2 WHERE a = 'c';
SELECT b FROM c2 WHERE a = 'b' AND b > 180 ORDER BY b;
SELECT a, b FROM c2 WHERE a > 'c' ORDER BY a, b LIMIT 4;
SELECT a, b FROM c2 WHERE a IN ('a', 'e') AND b < 20 ORDER BY a, b;
SELECT a, b FROM c2 ORDER BY a DESC, b DESC LIMIT 3;
-- keys of other types
CREATE TABLE ty (u uuid, d date, t timestamptz, f bool, PRIMARY KEY (u, d, t, f));
INSERT INTO ty SELECT md5(g::text)::uuid, date '2020-01-01' + g, timestamptz '2020-01-01 00:00+00' + g * interval '1 hour', g % 2 = 0
  FROM generate_series(1, 50) g;
SELECT count(*) FROM ty WHERE u = md5('7')::uuid;
SELECT d FROM ty WHERE u = md5('7')::uuid AND d = date '2020-01-08';
SELECT count(*) FROM ty WHERE u > 'f0000000-0000-0000-0000-000000000000';
CREATE TABLE big8 (id int8 PRIMARY KEY, s smallint);
INSERT INTO big8 VALUES (-9223372036854775808, 1), (9223372036854775807, 2), (0, 3), (-1, 4);
SELECT * FROM big8 WHERE id < 0 ORDER BY id;
SELECT * FROM big8 WHERE id >= -1 ORDER BY id DESC;
SELECT * FROM big8 WHERE id = 9223372036854775807;
-- keys added to and dropped from a table with rows; TRUNCATE keeps the key
CREATE TABLE later (a int, b text);
INSERT INTO later SELECT g, 'b' || g FROM generate_series(1, 500) g ORDER BY random();
CREATE INDEX later_b ON later (b);
ALTER TABLE later ADD PRIMARY KEY (a);
SELECT * FROM later WHERE a = 250;
SELECT a FROM later WHERE b = 'b77';
SELECT count(*), sum(a) FROM later;
UPDATE later SET b = 'x' WHERE a < 5;
SELECT * FROM later WHERE a < 7 ORDER BY a;
ALTER TABLE later DROP CONSTRAINT later_pkey;
SELECT count(*), sum(a) FROM later;
SELECT * FROM later WHERE a = 250;
INSERT INTO later VALUES (250, 'dup');
SELECT * FROM later WHERE a = 250 ORDER BY b;
ALTER TABLE later ADD PRIMARY KEY (a);
DELETE FROM later WHERE b = 'dup';
ALTER TABLE later ADD PRIMARY KEY (a);
SELECT * FROM later WHERE a BETWEEN 248 AND 252 ORDER BY a;
TRUNCATE later;
INSERT INTO later VALUES (3, 'c'), (1, 'a'), (2, 'b');
SELECT * FROM later WHERE a = 2;
SELECT * FROM later ORDER BY a;
-- a key column's type changes: the table is rewritten
ALTER TABLE later ALTER COLUMN a TYPE int8;
SELECT * FROM later WHERE a = 3;
-- deferrable primary key: two live versions of one key inside a transaction
CREATE TABLE df (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v int);
INSERT INTO df SELECT g, g FROM generate_series(1, 5) g;
BEGIN;
UPDATE df SET id = id + 1;
SELECT * FROM df WHERE id IN (1, 2, 6) ORDER BY id;
COMMIT;
SELECT * FROM df ORDER BY id;
-- numeric keys: scales, signs, NaN and infinities in numeric's order
CREATE TABLE nk (n numeric PRIMARY KEY, v int);
INSERT INTO nk VALUES ('NaN', 1), ('Infinity', 2), ('-Infinity', 3), (0, 4), (-0.5, 5), (0.5, 6),
  (12.30, 7), (12.3001, 8), (-12.3, 9), (100, 10), (99.99999, 11), (1e-20, 12), (-1e20, 13);
SELECT n FROM nk ORDER BY n;
SELECT n FROM nk ORDER BY n DESC LIMIT 4;
SELECT v FROM nk WHERE n = 12.3;
SELECT v FROM nk WHERE n = 12.300000;
SELECT n FROM nk WHERE n > 0 AND n < 100 ORDER BY n;
SELECT n FROM nk WHERE n >= 'Infinity' ORDER BY n;
SELECT n FROM nk WHERE n IN (0, 0.5, 'NaN', 7) ORDER BY n;
INSERT INTO nk VALUES (12.300, 99);
-- text keys under the C.utf8 collation
CREATE TABLE tk (s text COLLATE "C.utf8" PRIMARY KEY);
INSERT INTO tk VALUES ('b'), ('a'), ('é'), ('Z'), ('ab'), (''), ('a b');
SELECT s FROM tk ORDER BY s;
SELECT s FROM tk WHERE s > 'a' AND s < 'b' ORDER BY s;
SELECT s FROM tk WHERE s = 'é';
-- re-keying gives only the table a new file: a TRUNCATE later in the same
-- transaction must not empty its toast table and indexes in place
CREATE TABLE rt (id int NOT NULL, v int, big text);
CREATE INDEX rt_v ON rt (v);
INSERT INTO rt SELECT g, g, (SELECT string_agg(md5((g * 1000 + i)::text), '') FROM generate_series(1, 200) i) FROM generate_series(1, 100) g;
BEGIN; ALTER TABLE rt ADD PRIMARY KEY (id); TRUNCATE rt; ROLLBACK;
SELECT count(*), sum(length(big)) FROM rt;
SET enable_seqscan = off;
SELECT id FROM rt WHERE v = 5;
RESET enable_seqscan;
BEGIN; ALTER TABLE rt ADD PRIMARY KEY (id); SAVEPOINT s; TRUNCATE rt; ROLLBACK TO s; COMMIT;
SELECT count(*), sum(length(big)) FROM rt WHERE id > 50;
-- keyset pagination with a row comparison, and partitionwise nested loops
SELECT id FROM k WHERE (id, n) > (100, 0) ORDER BY id, n LIMIT 3;
CREATE TABLE pa (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
CREATE TABLE pa1 PARTITION OF pa FOR VALUES FROM (0) TO (500);
CREATE TABLE pa2 PARTITION OF pa FOR VALUES FROM (500) TO (1000);
CREATE TABLE pb (id int, w int) PARTITION BY RANGE (id);
CREATE TABLE pb1 PARTITION OF pb FOR VALUES FROM (0) TO (500) USING heap;
CREATE TABLE pb2 PARTITION OF pb FOR VALUES FROM (500) TO (1000) USING heap;
INSERT INTO pa SELECT g, g FROM generate_series(0, 999) g;
INSERT INTO pb SELECT g, g % 50 FROM generate_series(0, 999) g;
ANALYZE pa; ANALYZE pb;
SET enable_partitionwise_join = on;
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(*), sum(a.v) FROM pb b JOIN pa a USING (id) WHERE b.w < 3;
RESET enable_partitionwise_join;
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_indexscan;
RESET enable_bitmapscan;
-- Text keys under ICU collations (keyed by the collation's sort key, then
-- the bytes) and float keys: key order, equality, ranges, both directions.
CREATE TABLE ik (s text COLLATE "en-x-icu" PRIMARY KEY, n int);
INSERT INTO ik SELECT s, row_number() OVER () FROM unnest(ARRAY[
  'a', 'A', 'b', 'B', 'ab', 'Ab', 'aB', 'äb', 'Äb', 'ae', 'æ', 'résumé', 'resume',
  'Resume', 'RESUME', 'résume', 'co-op', 'coop', 'co op', 'zebra', 'Zebra', 'Éclair',
  'eclair', '10', '9', '1', '', ' ', '-', 'straße', 'strasse', 'Straße', 'ǅ', 'ǆ',
  'Ω', 'ω', 'ёлка', 'елка', 'Ёлка', '日本', '中国', 'a' || chr(769), 'á']) s;
INSERT INTO ik SELECT 'k' || g || repeat('x', g % 7), g FROM generate_series(1, 300) g ORDER BY md5(g::text);
ANALYZE ik;
SELECT s FROM ik ORDER BY s LIMIT 60;
SELECT s FROM ik ORDER BY s DESC LIMIT 20;
SELECT s, n FROM ik WHERE s = 'résumé';
SELECT s, n FROM ik WHERE s = 'Résumé';
SELECT s FROM ik WHERE s IN ('A', 'æ', 'straße', 'nope') ORDER BY s;
SELECT s FROM ik WHERE s > 'a' AND s <= 'b' ORDER BY s;
SELECT s FROM ik WHERE s >= 'Resume' AND s < 'zebra' ORDER BY s DESC LIMIT 15;
SELECT s FROM ik WHERE s < 'B' ORDER BY s;
SELECT count(*) FROM ik WHERE s BETWEEN 'k1' AND 'k2';
SELECT s FROM ik WHERE s = 'ab'::varchar;
UPDATE ik SET s = s || '!' WHERE s IN ('a', 'Zebra') RETURNING s;
WITH d AS (DELETE FROM ik WHERE s > 'k5' AND s < 'k6' RETURNING s) SELECT s FROM d ORDER BY s;
SELECT s FROM ik WHERE s < 'b' ORDER BY s;
INSERT INTO ik VALUES ('résumé', 0);
CREATE TABLE ivk (s varchar(20) COLLATE "sv-x-icu", c char(6) COLLATE "de-x-icu", PRIMARY KEY (s, c));
INSERT INTO ivk VALUES ('ö', 'a'), ('z', 'a'), ('o', 'b  '), ('ä', 'x'), ('aa', 'A'), ('z', 'ä'), ('z', 'b');
SELECT s, c, length(c) FROM ivk ORDER BY s, c;
SELECT s, c FROM ivk WHERE s = 'z' AND c > 'a ' ORDER BY s DESC, c DESC;
SELECT s FROM ivk WHERE s > 'z' ORDER BY s;
CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE TABLE cik (s text COLLATE ci PRIMARY KEY, n int);
INSERT INTO cik VALUES ('Hello', 1), ('world', 2), ('ABC', 3);
INSERT INTO cik VALUES ('hello', 4);
SELECT s, n FROM cik WHERE s = 'HELLO';
SELECT s, n FROM cik WHERE s IN ('abc', 'WORLD') ORDER BY s;
SELECT s FROM cik ORDER BY s DESC;
CREATE TABLE fk8 (f float8 PRIMARY KEY, n int);
INSERT INTO fk8 VALUES ('NaN', 1), ('Infinity', 2), ('-Infinity', 3), (0, 4), (-1.5, 5),
  (1e-300, 6), (-1e-300, 7), (1e300, 8), (2.5, 9), (-2.5e10, 10);
INSERT INTO fk8 VALUES ('-0', 11);
INSERT INTO fk8 VALUES ('-NaN', 12);
SELECT f, n FROM fk8 ORDER BY f;
SELECT f, n FROM fk8 ORDER BY f DESC LIMIT 3;
SELECT f, n FROM fk8 WHERE f = '-0';
SELECT f, n FROM fk8 WHERE f = 'NaN';
SELECT f, n FROM fk8 WHERE f > 1 ORDER BY f;
SELECT f, n FROM fk8 WHERE f >= '-Infinity' AND f < 0 ORDER BY f DESC;
CREATE TABLE fk4 (f float4, g int, PRIMARY KEY (f, g));
INSERT INTO fk4 SELECT (g % 13 - 6) / 4.0, g FROM generate_series(1, 200) g ORDER BY md5(g::text);
INSERT INTO fk4 VALUES ('NaN', 1), ('-0', 1000);
SELECT f, g FROM fk4 WHERE f = 0 ORDER BY f, g LIMIT 5;
SELECT f, count(*) FROM fk4 GROUP BY f ORDER BY f;
SELECT f, g FROM fk4 WHERE f = 1.25::float4 AND g > 150 ORDER BY f, g;
SELECT f, g FROM fk4 ORDER BY f DESC, g DESC LIMIT 4;
-- Text keys under a libc language collation: the tree compares them with
-- strcoll_l under the collation's locale, so equality, IN lists, ranges and
-- ORDER BY in both directions all follow the collation.
CREATE COLLATION en_libc (provider = libc, locale = 'en_US.UTF-8');
CREATE TABLE lk (s text COLLATE en_libc, n int, PRIMARY KEY (s, n));
INSERT INTO lk SELECT s, g FROM unnest(ARRAY['b', 'B', 'a', 'A', 'ä', 'co-op', 'coop', 'Zeta', 'zeta', 'élan', 'elan', '10', '9', '']) s,
  generate_series(1, 3) g;
ANALYZE lk;
SELECT s, n FROM lk ORDER BY s, n LIMIT 20;
SELECT s, n FROM lk ORDER BY s DESC, n DESC LIMIT 8;
SELECT s, n FROM lk WHERE s = 'coop' ORDER BY n;
SELECT s, n FROM lk WHERE s = 'ä' AND n >= 2 ORDER BY n;
SELECT s, n FROM lk WHERE s IN ('a', 'B', 'nope') ORDER BY s, n;
SELECT s FROM lk WHERE s > 'b' AND s < 'e' ORDER BY s, n;
SELECT count(*) FROM lk WHERE s < 'B';
UPDATE lk SET n = n + 10 WHERE s = 'zeta' RETURNING s, n;
DELETE FROM lk WHERE s = 'Zeta' AND n = 2 RETURNING s, n;
SELECT l.s, l.n FROM (VALUES ('elan'), ('A')) v(s) JOIN lk l ON l.s = v.s COLLATE en_libc ORDER BY 1, 2;
CREATE TABLE lkc (c char(4) COLLATE en_libc PRIMARY KEY, v int);
INSERT INTO lkc VALUES ('ab', 1), ('Ab  ', 2), ('b', 3);
INSERT INTO lkc VALUES ('ab  ', 4);
SELECT c, v FROM lkc WHERE c = 'ab' ;
SELECT c, v FROM lkc ORDER BY c;
SELECT c, v FROM lkc WHERE c > 'a' ORDER BY c DESC;
-- a composite key with an integer before the collated column
CREATE TABLE lk2 (g int, s text COLLATE en_libc, PRIMARY KEY (g, s));
INSERT INTO lk2 SELECT g % 3, s FROM unnest(ARRAY['b', 'B', 'a', 'A', 'ä', 'co-op', 'coop', 'élan', 'elan']) s, generate_series(1, 3) g;
SELECT g, s FROM lk2 WHERE g = 1 ORDER BY g, s;
SELECT g, s FROM lk2 WHERE g = 2 AND s >= 'b' ORDER BY g DESC, s DESC;
SELECT g, s FROM lk2 WHERE g IN (0, 2) AND s < 'c' ORDER BY g, s;
