-- Row ids fill blocks as heap fills pages, so an append-only table has the
-- TIDs heap would give it (this script prints ctids on purpose), the same
-- page count after ANALYZE, and the same TID-based samples; and command ids
-- read as heap's combo command ids.
CREATE TABLE w (id int, data text);
INSERT INTO w SELECT i, repeat('x', 100) FROM generate_series(1, 200) i;
SELECT ctid, id FROM w WHERE id IN (1, 58, 59, 116, 117, 200) ORDER BY id;
SELECT count(DISTINCT (ctid::text::point)[0]) AS blocks FROM w;
ANALYZE w;
SELECT relpages, reltuples FROM pg_class WHERE relname = 'w';
DELETE FROM w WHERE (ctid::text::point)[1] > 10;
SELECT ctid FROM w WHERE ctid > '(1,5)' AND ctid <= '(2,3)' ORDER BY ctid;
-- fillfactor leaves room in every block
CREATE TABLE ff (id int, name text) WITH (fillfactor = 10);
INSERT INTO ff SELECT i, repeat(i::text, 200) FROM generate_series(0, 9) i;
SELECT ctid, id FROM ff ORDER BY id;
SELECT id FROM ff TABLESAMPLE SYSTEM (50) REPEATABLE (0) ORDER BY id;
SELECT id FROM ff TABLESAMPLE BERNOULLI (50) REPEATABLE (0) ORDER BY id;
SELECT count(*) FROM ff TABLESAMPLE SYSTEM (100);
-- a row larger than the fillfactor allows shares a nearly empty block
CREATE TABLE big (a int, b text) WITH (fillfactor = 10);
ALTER TABLE big ALTER COLUMN b SET STORAGE plain;
INSERT INTO big SELECT 1, NULL;
INSERT INTO big SELECT 2, repeat('a', 1000);
INSERT INTO big SELECT 3, NULL;
SELECT ctid, a FROM big ORDER BY a;
-- a table with a primary key (rows of one width: heap's free-space map
-- sends a row that fits back to an earlier page, which filling forward
-- does not mimic)
CREATE TABLE k (id int PRIMARY KEY, v text, n numeric);
INSERT INTO k SELECT i, repeat('v', 250), 1000 + i FROM generate_series(1, 1000) i;
SELECT ctid, id FROM k WHERE id % 97 = 0 ORDER BY id;
-- combo command ids: inserted and deleted by one transaction
CREATE TABLE c (foobar int);
BEGIN;
INSERT INTO c SELECT 1 LIMIT 0;
INSERT INTO c SELECT 1 LIMIT 0;
INSERT INTO c SELECT 1 LIMIT 0;
INSERT INTO c VALUES (1);
INSERT INTO c VALUES (2);
SELECT ctid, cmin, * FROM c ORDER BY foobar;
SAVEPOINT s1;
UPDATE c SET foobar = foobar + 10;
SELECT ctid, cmin, * FROM c ORDER BY foobar;
ROLLBACK TO s1;
SELECT ctid, cmin, * FROM c ORDER BY foobar;
COMMIT;
SELECT ctid, cmin, * FROM c ORDER BY foobar;
BEGIN;
INSERT INTO c VALUES (444);
SELECT ctid, cmin, * FROM c ORDER BY foobar;
SAVEPOINT s1;
SELECT ctid, cmin, * FROM c ORDER BY foobar FOR UPDATE;
UPDATE c SET foobar = foobar + 10;
SELECT ctid, cmin, * FROM c ORDER BY foobar;
ROLLBACK TO s1;
COMMIT;
SELECT ctid, cmin, * FROM c ORDER BY foobar;
-- an UPDATE keeps the new version on its block while the block has room
CREATE TABLE fu (id int, t text) WITH (fillfactor = 50);
INSERT INTO fu SELECT i, repeat('u', 100) FROM generate_series(1, 100) i;
UPDATE fu SET t = t || 'x';
SELECT ctid, id FROM fu WHERE id % 9 = 0 ORDER BY id;
SELECT (ctid::text::point)[0] AS block, count(*) FROM fu GROUP BY 1 ORDER BY 1;
-- a small table with a primary key is read in insertion order, so an
-- UPDATE shifting unique keys succeeds as on heap (this prints rows without
-- ORDER BY on purpose)
CREATE TABLE pp (f1 int PRIMARY KEY, note text);
INSERT INTO pp VALUES (12, 'b'), (11, 'a'), (30, 'c');
SELECT * FROM pp;
UPDATE pp SET f1 = f1 + 1;
SELECT * FROM pp ORDER BY f1;
