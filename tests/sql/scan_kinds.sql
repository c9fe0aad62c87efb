-- Bitmap heap scans (btree equality, ranges, = ANY, BitmapOr/BitmapAnd, GIN,
-- BRIN), TID range scans and TABLESAMPLE. Heap and orioledb place rows
-- differently (ctids, rows per block), so only what does not depend on
-- placement is printed: rows found through bitmaps, TID ranges bounded by
-- rows' own ctids in tables that were only inserted into (in order), and
-- samples of 0% or 100%, or compared with themselves.
CREATE TABLE bm (id int PRIMARY KEY, a int, b int, c int, t text, tags int[]);
INSERT INTO bm SELECT g, g % 100, g % 37, g, 'r' || g, ARRAY[g % 5, g % 7]
FROM generate_series(1, 20000) g;
CREATE INDEX bm_a ON bm (a);
CREATE INDEX bm_b ON bm (b);
CREATE INDEX bm_tags ON bm USING gin (tags);
CREATE INDEX bm_c ON bm USING brin (c) WITH (pages_per_range = 2);
-- the same rows in a table without a primary key (stored in row-id order)
CREATE TABLE bn (id int, a int, b int, c int, t text, tags int[]);
INSERT INTO bn SELECT * FROM bm;
CREATE INDEX bn_a ON bn (a);
CREATE INDEX bn_b ON bn (b);
CREATE INDEX bn_tags ON bn USING gin (tags);
CREATE INDEX bn_c ON bn USING brin (c) WITH (pages_per_range = 2);
ANALYZE bm;
ANALYZE bn;
SET enable_seqscan = off;
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
SELECT count(*), sum(id) FROM bm WHERE a = 42;
SELECT id, a, b FROM bm WHERE a = 7 AND id < 1000 ORDER BY id;
SELECT count(*), sum(id) FROM bm WHERE a BETWEEN 10 AND 12;
SELECT count(*), sum(id) FROM bm WHERE a = ANY ('{1,3,99}');
SELECT count(*), sum(id) FROM bm WHERE a IN (4, 5) AND b < 3;
SELECT count(*), sum(id) FROM bm WHERE a = 5 OR b = 6;
SELECT id, a, b FROM bm WHERE a = 5 AND b = 6 ORDER BY id;
SELECT count(*), sum(id) FROM bm WHERE tags @> ARRAY[3, 4];
SELECT count(*), sum(id) FROM bm WHERE tags && ARRAY[6] AND a < 10;
SELECT count(*), sum(a) FROM bm WHERE c BETWEEN 5000 AND 5100;
SELECT count(*), sum(a) FROM bm WHERE c < 300 OR c > 19800;
SELECT count(*), sum(id) FROM bn WHERE a = 42;
SELECT count(*), sum(id) FROM bn WHERE a = 5 OR b = 6;
SELECT id, a, b FROM bn WHERE a = 5 AND b = 6 ORDER BY id;
SELECT count(*), sum(id) FROM bn WHERE tags @> ARRAY[3, 4];
SELECT count(*), sum(a) FROM bn WHERE c BETWEEN 5000 AND 5100;
-- a BRIN index built over a table stored in primary-key order that is not
-- the insertion (TID) order: its ranges must still summarize TID blocks
CREATE TABLE bk (id int PRIMARY KEY, seq int);
INSERT INTO bk SELECT (g * 7919) % 20011, g FROM generate_series(1, 20000) g;
CREATE INDEX bk_seq ON bk USING brin (seq) WITH (pages_per_range = 1);
SELECT count(*), sum(id) FROM bk WHERE seq BETWEEN 1000 AND 1500;
SELECT count(*), sum(id) FROM bk WHERE seq > 19900 OR seq < 5;
-- dead versions stay behind the indexes: the bitmap still names them
UPDATE bm SET a = a + 1000 WHERE id % 10 = 0;
DELETE FROM bm WHERE id % 17 = 0;
UPDATE bn SET a = a + 1000 WHERE id % 10 = 0;
DELETE FROM bn WHERE id % 17 = 0;
SELECT count(*), sum(id) FROM bm WHERE a = 40;
SELECT count(*), sum(id) FROM bm WHERE a >= 1000;
SELECT count(*), sum(id) FROM bm WHERE a = 1040 OR b = 6;
SELECT count(*), sum(a) FROM bm WHERE c BETWEEN 5000 AND 5100;
SELECT count(*), sum(id) FROM bn WHERE a = 40;
SELECT count(*), sum(id) FROM bn WHERE a >= 1000;
SELECT count(*), sum(a) FROM bn WHERE c BETWEEN 5000 AND 5100;
-- changes of the scanning transaction, then rolled back
BEGIN;
UPDATE bm SET b = 500 WHERE id BETWEEN 100 AND 300;
INSERT INTO bm VALUES (30001, 42, 500, 30001, 'new', ARRAY[3, 4]);
DELETE FROM bm WHERE a = 42 AND id < 5000;
SELECT count(*), sum(id) FROM bm WHERE b = 500;
SELECT count(*), sum(id) FROM bm WHERE a = 42;
SELECT count(*), sum(id) FROM bm WHERE tags @> ARRAY[3, 4];
SELECT count(*), sum(id) FROM bm WHERE c > 19990;
ROLLBACK;
SELECT count(*) FROM bm WHERE b = 500;
SELECT count(*), sum(id) FROM bm WHERE a = 42;
-- bitmap scans under UPDATE, DELETE and FOR UPDATE
UPDATE bm SET t = t || 'x' WHERE b = 3;
SELECT count(*) FROM bm WHERE t LIKE '%x';
WITH d AS (DELETE FROM bm WHERE a = 1 RETURNING id) SELECT count(*), sum(id) FROM d;
SELECT id FROM bm WHERE a = 2 ORDER BY id LIMIT 5 FOR UPDATE;
-- a bitmap scan rescanned as the inner side of a nested loop
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SET enable_material = off;
SELECT count(*), sum(x.id) FROM generate_series(1, 5) g JOIN bm x ON x.a = g;
SELECT g, (SELECT count(*) FROM bn WHERE bn.b = g) FROM generate_series(1, 4) g ORDER BY g;
RESET enable_hashjoin;
RESET enable_mergejoin;
RESET enable_material;
RESET enable_seqscan;
RESET enable_indexscan;
RESET enable_indexonlyscan;
SELECT count(*), sum(id), sum(a) FROM bm;

-- TID range scans: in tables only inserted into, in order, a range from one
-- row's ctid to another's holds the same rows under both access methods
CREATE TABLE tr (id int, v text);
INSERT INTO tr SELECT g, 'v' || g FROM generate_series(1, 3000) g;
CREATE TABLE trk (id int PRIMARY KEY, v text);
INSERT INTO trk SELECT g, 'v' || g FROM generate_series(1, 3000) g;
SELECT count(*), min(id), max(id) FROM tr WHERE ctid >= (SELECT ctid FROM tr WHERE id = 1000);
SELECT count(*), min(id), max(id) FROM tr
WHERE ctid > (SELECT ctid FROM tr WHERE id = 1000) AND ctid <= (SELECT ctid FROM tr WHERE id = 2000);
SELECT count(*), min(id), max(id) FROM tr WHERE ctid < (SELECT ctid FROM tr WHERE id = 700);
SELECT count(*), min(id), max(id) FROM trk
WHERE ctid >= (SELECT ctid FROM trk WHERE id = 10) AND ctid < (SELECT ctid FROM trk WHERE id = 2500);
SELECT count(*) FROM tr WHERE ctid >= '(0,0)';
SELECT count(*) FROM tr WHERE ctid < '(0,1)';
SELECT count(*) FROM tr WHERE ctid < '(0,0)';
SELECT count(*) FROM tr WHERE ctid > '(4294967295,65535)';
SELECT count(*) FROM tr WHERE ctid >= (SELECT ctid FROM tr WHERE id = 2000) AND ctid < (SELECT ctid FROM tr WHERE id = 1000);
-- deleted rows, rows of the scanning transaction
DELETE FROM tr WHERE id % 3 = 0;
SELECT count(*), sum(id) FROM tr WHERE ctid >= (SELECT ctid FROM tr WHERE id = 1000);
BEGIN;
DELETE FROM tr WHERE id BETWEEN 1500 AND 1600;
-- (where new rows go depends on free space, so only old rows are counted)
INSERT INTO tr SELECT g, 'w' FROM generate_series(5001, 5010) g;
SELECT count(*), sum(id) FROM tr WHERE ctid >= (SELECT ctid FROM tr WHERE id = 1000) AND id <= 3000;
SELECT count(*) FROM tr WHERE ctid >= (SELECT ctid FROM tr WHERE id = 1) AND id > 5000;
ROLLBACK;
-- both directions through a scroll cursor
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT id FROM trk WHERE ctid >= (SELECT ctid FROM trk WHERE id = 2990);
FETCH 3 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 3 FROM c;
FETCH ABSOLUTE 1 FROM c;
COMMIT;

-- TABLESAMPLE
SELECT count(*) FROM tr TABLESAMPLE BERNOULLI (100);
SELECT count(*) FROM tr TABLESAMPLE SYSTEM (100);
SELECT count(*) FROM tr TABLESAMPLE BERNOULLI (0);
SELECT count(*) FROM tr TABLESAMPLE SYSTEM (0);
SELECT count(*), sum(id) FROM bm TABLESAMPLE BERNOULLI (100) REPEATABLE (3);
SELECT count(*) BETWEEN 150 AND 450 AS plausible FROM trk TABLESAMPLE BERNOULLI (10);
SELECT (SELECT array_agg(id ORDER BY id) FROM trk TABLESAMPLE BERNOULLI (30) REPEATABLE (7))
     = (SELECT array_agg(id ORDER BY id) FROM trk TABLESAMPLE BERNOULLI (30) REPEATABLE (7)) AS same;
SELECT (SELECT array_agg(id ORDER BY id) FROM bm TABLESAMPLE SYSTEM (40) REPEATABLE (7))
       IS NOT DISTINCT FROM
       (SELECT array_agg(id ORDER BY id) FROM bm TABLESAMPLE SYSTEM (40) REPEATABLE (7)) AS same;
SELECT count(*) FILTER (WHERE v IS NULL) FROM trk TABLESAMPLE BERNOULLI (50);
BEGIN;
DELETE FROM trk WHERE id <= 100;
INSERT INTO trk VALUES (9001, 'n');
SELECT count(*), sum(id) FROM trk TABLESAMPLE SYSTEM (100);
ROLLBACK;
SELECT g, (SELECT count(*) FROM tr TABLESAMPLE BERNOULLI (100) WHERE id % 3 = g) FROM generate_series(0, 2) g ORDER BY g;
SELECT count(*) FROM (SELECT * FROM bm TABLESAMPLE BERNOULLI (100) LIMIT 10) s;
