-- Values bigger than a page: compressed and out-of-line (TOAST) storage, read
-- whole and in slices, updated, deleted, rolled back, copied between tables.
-- Incompressible data comes from md5() so it is deterministic.
CREATE FUNCTION noise(n int, seed int DEFAULT 0) RETURNS text LANGUAGE sql IMMUTABLE AS
  $$ SELECT string_agg(md5((g + seed)::text), '') FROM generate_series(1, (n + 31) / 32) g $$;
CREATE TABLE docs (id int PRIMARY KEY, title text, body text, data bytea, meta jsonb, nums int[]);
INSERT INTO docs VALUES
  (1, 'compressible', repeat('abc', 10000), NULL, NULL, NULL),
  (2, 'incompressible', noise(20000), NULL, NULL, NULL),
  (3, 'bytea', NULL, decode(noise(40000, 7), 'hex'), NULL, NULL),
  (4, 'jsonb', NULL, NULL, (SELECT jsonb_object_agg('k' || g, noise(40, g)) FROM generate_series(1, 500) g), NULL),
  (5, 'array', NULL, NULL, NULL, (SELECT array_agg(g) FROM generate_series(1, 5000) g)),
  (6, 'just over', noise(2700), NULL, NULL, NULL),
  (7, 'several big', noise(3000, 1), decode(noise(6000, 2), 'hex'), to_jsonb(noise(3000, 3)), NULL),
  (8, 'huge', noise(1000000, 9), NULL, NULL, NULL);
SELECT id, title, length(body), md5(body), length(data), md5(data), length(meta::text), md5(meta::text),
       array_length(nums, 1), (SELECT sum(x) FROM unnest(nums) x) FROM docs ORDER BY id;
-- slices
SELECT id, substr(body, 1, 10), substr(body, 5000, 20), substr(body, length(body) - 5, 10) FROM docs WHERE body IS NOT NULL ORDER BY id;
SELECT encode(substr(data, 15000, 8), 'hex'), octet_length(data) FROM docs WHERE id = 3;
SELECT meta -> 'k250', nums[4321] FROM docs WHERE id IN (4, 5) ORDER BY id;
SELECT count(*) FROM docs WHERE body LIKE '%' || substr(noise(20000), 19000, 30) || '%';
-- updates of a toasted column and of other columns next to it
UPDATE docs SET title = title || ' (renamed)' WHERE id IN (2, 7);
UPDATE docs SET body = body || 'tail' WHERE id = 1;
UPDATE docs SET body = noise(10000, 5) WHERE id = 6;
UPDATE docs SET data = NULL, body = 'now small' WHERE id = 7;
UPDATE docs SET id = 20 WHERE id = 2;
UPDATE docs SET nums[5000] = -1 WHERE id = 5;
SELECT id, title, length(body), md5(body), length(data), md5(data), (SELECT sum(x) FROM unnest(nums) x) FROM docs ORDER BY id;
-- rolled back changes leave the old values readable
BEGIN;
UPDATE docs SET body = noise(30000, 11) WHERE id = 20;
DELETE FROM docs WHERE id = 8;
SELECT id, md5(body) FROM docs WHERE id IN (8, 20) ORDER BY id;
ROLLBACK;
SELECT id, md5(body) FROM docs WHERE id IN (8, 20) ORDER BY id;
BEGIN;
SAVEPOINT s;
UPDATE docs SET body = noise(30000, 12) WHERE id = 20;
ROLLBACK TO s;
UPDATE docs SET body = body || '!' WHERE id = 20;
COMMIT;
SELECT id, length(body), md5(body) FROM docs WHERE id = 20;
-- a value read by a cursor before it is updated and deleted
BEGIN;
DECLARE c CURSOR FOR SELECT id, md5(body), length(body) FROM docs WHERE id IN (1, 20) ORDER BY id;
FETCH 1 FROM c;
UPDATE docs SET body = 'gone' WHERE id IN (1, 20);
DELETE FROM docs WHERE id = 20;
FETCH 1 FROM c;
COMMIT;
SELECT id, body FROM docs WHERE id IN (1, 20) ORDER BY id;
-- copies between tables and through a CTE
CREATE TABLE docs_copy AS SELECT * FROM docs;
INSERT INTO docs_copy SELECT id + 100, title, body, data, meta, nums FROM docs;
WITH moved AS (DELETE FROM docs_copy WHERE id > 100 RETURNING *)
SELECT count(*), sum(length(body)), sum(length(data)), md5(string_agg(md5(coalesce(body, '')), '' ORDER BY id)) FROM moved;
SELECT id, length(body), md5(body), md5(data), md5(meta::text) FROM docs_copy ORDER BY id;
-- storage and compression settings
CREATE TABLE st (id int PRIMARY KEY, e text, m text, p text COMPRESSION pglz);
ALTER TABLE st ALTER COLUMN e SET STORAGE EXTERNAL;
INSERT INTO st VALUES (1, repeat('e', 9000), repeat('m', 9000), repeat('p', 9000));
INSERT INTO st VALUES (2, noise(5000), noise(5000), noise(5000));
ALTER TABLE st ALTER COLUMN e SET STORAGE EXTENDED, ALTER COLUMN m SET STORAGE EXTERNAL;
UPDATE st SET e = e || '.';
SELECT id, length(e), md5(e), length(m), md5(m), length(p), md5(p) FROM st ORDER BY id;
-- STORAGE MAIN values stay inline if they fit, else heap moves them out of line
CREATE TABLE m1 (id int PRIMARY KEY, m text);
ALTER TABLE m1 ALTER COLUMN m SET STORAGE MAIN;
INSERT INTO m1 VALUES (1, noise(3200)), (2, noise(9600)), (3, repeat('m', 20000));
SELECT id, length(m), md5(m) FROM m1 ORDER BY id;
-- STORAGE PLAIN values are never moved (orioledb's smaller row limit: see not_compared/)
CREATE TABLE plain (id int PRIMARY KEY, a text);
ALTER TABLE plain ALTER COLUMN a SET STORAGE PLAIN;
INSERT INTO plain VALUES (1, noise(1500)), (2, repeat('p', 2000));
SELECT id, length(a), md5(a) FROM plain ORDER BY id;
-- many toasted rows, then TRUNCATE and VACUUM
INSERT INTO docs_copy (id, body) SELECT g, noise(4000, g) FROM generate_series(1000, 1100) g;
SELECT count(*), sum(length(body)) FROM docs_copy WHERE id >= 1000;
DELETE FROM docs_copy WHERE id % 2 = 0 AND id >= 1000;
VACUUM docs_copy;
SELECT count(*), sum(length(body)), md5(string_agg(body, '' ORDER BY id)) FROM docs_copy WHERE id >= 1000;
TRUNCATE docs_copy;
SELECT count(*) FROM docs_copy;

-- STORAGE PLAIN on a toastable type: a row that fits a heap page (8160
-- bytes) is stored (orioledb moves the value out of line); a larger one is
-- "row is too big" on both.
CREATE TABLE plain_rows (id int PRIMARY KEY, a text);
ALTER TABLE plain_rows ALTER COLUMN a SET STORAGE PLAIN;
INSERT INTO plain_rows SELECT 1, string_agg(md5(g::text), '') FROM generate_series(1, 100) g;
INSERT INTO plain_rows SELECT 2, repeat('p', 8100);
INSERT INTO plain_rows SELECT 3, repeat('p', 9000);
UPDATE plain_rows SET a = a || 'q' WHERE id = 2;
SELECT id, length(a), md5(a) FROM plain_rows ORDER BY id;
DELETE FROM plain_rows WHERE id = 1;
SELECT id, length(a), md5(a) FROM plain_rows ORDER BY id;
