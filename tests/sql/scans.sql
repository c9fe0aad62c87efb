-- Scans driven in unusual ways: rescans (correlated subqueries, nested loops),
-- LIMIT, scans of tables changed earlier in the same transaction, index builds
-- inside a transaction that changed the rows, DISTINCT/aggregates/window
-- functions over the rows, functions reading the table.
CREATE TABLE a (id int PRIMARY KEY, x int, s text);
CREATE TABLE b (id int PRIMARY KEY, a_id int, y int);
INSERT INTO a SELECT g, g % 7, 's' || g FROM generate_series(1, 300) g;
INSERT INTO b SELECT g, g % 310, g % 13 FROM generate_series(1, 900) g;
-- correlated subqueries rescan the inner table once per outer row
SELECT a.id, (SELECT count(*) FROM b WHERE b.a_id = a.id) AS n, (SELECT max(y) FROM b WHERE b.a_id = a.id) AS m
  FROM a WHERE a.id <= 12 ORDER BY a.id;
SELECT count(*) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.a_id = a.id AND b.y = 3);
SELECT count(*) FROM a WHERE id NOT IN (SELECT a_id FROM b WHERE a_id IS NOT NULL);
-- nested loops with plain and index rescans of the inner side
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_material = off;
SELECT count(*), sum(a.x * b.y) FROM a JOIN b ON b.a_id = a.id WHERE a.id < 40;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(*), sum(a.x * b.y) FROM a JOIN b ON b.a_id = a.id WHERE a.id < 40;
RESET enable_indexscan;
RESET enable_bitmapscan;
SELECT count(*) FROM a a1 JOIN a a2 ON a2.x = a1.x AND a2.id > a1.id WHERE a1.id < 30;
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_material;
-- LIMIT / OFFSET, DISTINCT, window functions, grouping sets
SELECT id, s FROM a ORDER BY id DESC LIMIT 3 OFFSET 5;
SELECT DISTINCT x FROM a ORDER BY x;
SELECT x, count(*), string_agg(id::text, ',' ORDER BY id) FILTER (WHERE id < 30) FROM a GROUP BY x ORDER BY x;
SELECT id, x, sum(id) OVER (PARTITION BY x ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM a WHERE id <= 15 ORDER BY id;
SELECT x, y, count(*) FROM a JOIN b ON b.a_id = a.id GROUP BY GROUPING SETS ((x), (y), ()) ORDER BY x NULLS FIRST, y NULLS FIRST;
SELECT count(*) FROM (SELECT * FROM a LIMIT 10) s;
SELECT count(*) FROM a, LATERAL (SELECT * FROM b WHERE b.a_id = a.id LIMIT 1) l;
-- a SQL function and a PL/pgSQL function reading the table
CREATE FUNCTION a_count() RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT count(*) FROM a $$;
CREATE FUNCTION a_sum_volatile() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN (SELECT sum(x) FROM a); END $$;
BEGIN;
SELECT a_count(), a_sum_volatile();
DELETE FROM a WHERE id > 250;
UPDATE a SET x = x + 1 WHERE id <= 10;
SELECT a_count(), a_sum_volatile();
-- a volatile function sees the changes of the statement calling it, a stable one does not
UPDATE a SET x = a_count() WHERE id = 1;
UPDATE a SET x = a_sum_volatile() WHERE id = 2;
SELECT id, x FROM a WHERE id IN (1, 2) ORDER BY id;
ROLLBACK;
SELECT a_count(), a_sum_volatile();

-- scans after changes earlier in the same transaction
BEGIN;
INSERT INTO a SELECT g, 100, 'new' FROM generate_series(1001, 1100) g;
UPDATE a SET x = 200 WHERE id BETWEEN 1 AND 50;
DELETE FROM a WHERE id BETWEEN 51 AND 100;
UPDATE a SET id = id + 5000 WHERE id BETWEEN 101 AND 120;
SELECT count(*), sum(x), sum(id) FROM a;
SELECT x, count(*) FROM a GROUP BY x HAVING count(*) > 40 ORDER BY x;
SET LOCAL enable_seqscan = off;
SELECT count(*), sum(x), sum(id) FROM a WHERE id > 0;
SELECT id, x FROM a WHERE id IN (1, 51, 101, 5101, 1001) ORDER BY id;
COMMIT;
SELECT count(*), sum(x), sum(id) FROM a;

-- an index built inside the transaction that changed the rows
BEGIN;
UPDATE a SET s = 'upd-' || id WHERE id % 10 = 0;
DELETE FROM a WHERE id % 10 = 1;
CREATE INDEX a_s ON a (s);
CREATE INDEX a_x_part ON a (x) WHERE x >= 100;
SET LOCAL enable_seqscan = off;
SELECT id, s FROM a WHERE s IN ('upd-20', 's20', 's21', 's22') ORDER BY id;
SELECT count(*) FROM a WHERE s LIKE 'upd-%' AND s > 'upd';
SELECT count(*), sum(id) FROM a WHERE x >= 100;
SAVEPOINT sp;
CREATE INDEX a_s2 ON a (s, x);
UPDATE a SET s = 'again' WHERE id = 30;
ROLLBACK TO sp;
SELECT id, s FROM a WHERE s = 'upd-30';
COMMIT;
SET enable_seqscan = off;
SELECT id, s FROM a WHERE s IN ('upd-20', 's20', 's21', 's22', 'again') ORDER BY id;
SELECT count(*) FROM pg_indexes WHERE tablename = 'a';
RESET enable_seqscan;

-- rows re-read through an index after their key changed several times
CREATE TABLE hops (id int PRIMARY KEY, k int UNIQUE, v text);
INSERT INTO hops SELECT g, g, 'v' FROM generate_series(1, 50) g;
UPDATE hops SET k = k + 100;
UPDATE hops SET k = k - 100 WHERE id % 2 = 0;
UPDATE hops SET id = id + 1000 WHERE id % 5 = 0;
UPDATE hops SET v = 'w' WHERE k > 100;
SET enable_seqscan = off;
SELECT count(*), sum(id), sum(k) FROM hops WHERE k > 0;
SELECT count(*), sum(id), sum(k) FROM hops WHERE id > 0;
SELECT id, k, v FROM hops WHERE k IN (2, 3, 102, 103) OR id IN (1005, 1010) ORDER BY id;
RESET enable_seqscan;
SELECT count(*), sum(id), sum(k), count(*) FILTER (WHERE v = 'w') FROM hops;
