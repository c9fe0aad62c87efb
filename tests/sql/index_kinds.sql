-- Every built-in index kind on the same rows as heap, after updates that
-- change indexed columns, deletes and rolled-back changes, read through the
-- index (sequential scans off) as index scans and as bitmap scans.
CREATE TABLE ik (
    id int PRIMARY KEY,
    n int,
    s text COLLATE "C",
    p point,
    r int4range,
    tags text[],
    doc jsonb
);
INSERT INTO ik
SELECT g, g % 97, 'k' || (g % 500), point(g % 50, g / 50), int4range(g, g + g % 20),
       ARRAY['t' || (g % 7), 't' || (g % 11)], jsonb_build_object('a', g % 13, 'b', g % 3 = 0)
FROM generate_series(1, 3000) g;
CREATE INDEX ik_btree ON ik (n, s);
CREATE INDEX ik_hash ON ik USING hash (s);
CREATE INDEX ik_gist_p ON ik USING gist (p);
CREATE INDEX ik_gist_r ON ik USING gist (r);
CREATE INDEX ik_spgist_p ON ik USING spgist (p);
CREATE INDEX ik_spgist_s ON ik USING spgist (s);
CREATE INDEX ik_spgist_r ON ik USING spgist (r);
CREATE INDEX ik_gin_tags ON ik USING gin (tags);
CREATE INDEX ik_gin_doc ON ik USING gin (doc jsonb_path_ops);
CREATE INDEX ik_brin ON ik USING brin (id) WITH (pages_per_range = 1);
-- changes of indexed columns, deletes, and changes that roll back
UPDATE ik SET n = n + 1000, s = s || 'x', p = point(p[0] + 100, p[1]), r = int4range(lower(r) + 5000, upper(r) + 5000),
              tags = tags || ARRAY['moved'], doc = doc || '{"moved": true}'
 WHERE id % 10 = 0;
DELETE FROM ik WHERE id % 17 = 0;
BEGIN;
UPDATE ik SET n = -1, s = 'gone', p = point(-1, -1), tags = ARRAY['gone'], doc = '{"gone": 1}' WHERE id % 3 = 0;
DELETE FROM ik WHERE id % 5 = 0;
ROLLBACK;
BEGIN;
SAVEPOINT a;
INSERT INTO ik VALUES (10001, 5, 'k5', point(5, 5), int4range(1, 2), ARRAY['t1'], '{"a": 1}');
ROLLBACK TO a;
INSERT INTO ik VALUES (10002, 6, 'k6', point(6, 6), int4range(3, 4), ARRAY['t2'], '{"a": 2}');
COMMIT;
SET enable_seqscan = off;
-- as index scans where the kind has them, then as bitmap scans
SET enable_bitmapscan = off;
SELECT count(*), sum(id) FROM ik WHERE n = 5;
SELECT count(*), sum(id) FROM ik WHERE n BETWEEN 1000 AND 1010 AND s > 'k1';
SELECT count(*), sum(id) FROM ik WHERE s = 'k42';
SELECT count(*), sum(id) FROM ik WHERE s = 'k40x';
SELECT count(*), sum(id) FROM ik WHERE p <@ box '((0,0),(10,10))';
SELECT id FROM ik ORDER BY p <-> point(3, 3), id LIMIT 5;
SELECT count(*), sum(id) FROM ik WHERE r && int4range(100, 120);
SELECT count(*), sum(id) FROM ik WHERE r && int4range(5100, 5120);
SELECT count(*), sum(id) FROM ik WHERE s LIKE 'k49%';
SELECT count(*), sum(id) FROM ik WHERE s ^@ 'k12';
RESET enable_bitmapscan;
SET enable_indexscan = off;
SELECT count(*), sum(id) FROM ik WHERE n = 5;
SELECT count(*), sum(id) FROM ik WHERE s = 'k42';
SELECT count(*), sum(id) FROM ik WHERE p <@ box '((0,0),(10,10))';
SELECT count(*), sum(id) FROM ik WHERE r && int4range(100, 120);
SELECT count(*), sum(id) FROM ik WHERE tags @> ARRAY['t3'];
SELECT count(*), sum(id) FROM ik WHERE tags @> ARRAY['moved', 't1'];
SELECT count(*), sum(id) FROM ik WHERE doc @> '{"a": 4}';
SELECT count(*), sum(id) FROM ik WHERE doc @> '{"moved": true}';
SELECT count(*), sum(id) FROM ik WHERE id BETWEEN 500 AND 700;
SELECT count(*), sum(id) FROM ik WHERE s ^@ 'k12';
RESET enable_indexscan;
RESET enable_seqscan;
-- the indexes agree with a full scan
SELECT count(*), sum(id), sum(n), count(DISTINCT s) FROM ik;
-- REINDEX keeps the results
REINDEX TABLE ik;
SET enable_seqscan = off;
SELECT count(*), sum(id) FROM ik WHERE p <@ box '((0,0),(10,10))';
SELECT count(*), sum(id) FROM ik WHERE tags @> ARRAY['t3'];
SELECT count(*), sum(id) FROM ik WHERE s = 'k42';
RESET enable_seqscan;
-- concurrent builds and rebuilds find the same rows
CREATE INDEX CONCURRENTLY ik_c_n ON ik (n);
CREATE INDEX CONCURRENTLY ik_c_part ON ik (s) WHERE n < 50;
CREATE INDEX CONCURRENTLY ik_c_gin ON ik USING gin (tags);
CREATE UNIQUE INDEX CONCURRENTLY ik_c_twice ON ik ((id * 2));
-- a unique build over a duplicate fails and leaves an invalid index
CREATE UNIQUE INDEX CONCURRENTLY ik_c_dup ON ik ((CASE WHEN id IN (1, 2) THEN 0 ELSE id END));
SELECT c.relname, i.indisvalid, i.indisready
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'ik'::regclass AND c.relname LIKE 'ik_c_%' ORDER BY 1;
INSERT INTO ik VALUES (10003, 5, 'k5', point(1, 1), int4range(1, 2), ARRAY['t3'], '{"a": 3}');
UPDATE ik SET n = n + 1, s = s || 'y' WHERE id % 9 = 0;
-- rebuild the invalid index once the duplicate is gone; rebuild the others
DELETE FROM ik WHERE id = 2;
REINDEX INDEX CONCURRENTLY ik_c_dup;
REINDEX INDEX CONCURRENTLY ik_btree;
REINDEX TABLE CONCURRENTLY ik;
SELECT c.relname, i.indisvalid, i.indisready
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'ik'::regclass ORDER BY 1;
INSERT INTO ik VALUES (10004, 1, 'k1', point(1, 1), int4range(1, 2), ARRAY['t1'], '{"a": 1}');
INSERT INTO ik VALUES (2, 1, 'k1', point(1, 1), int4range(1, 2), ARRAY['t1'], '{"a": 1}');
SET enable_seqscan = off;
SELECT count(*), sum(id) FROM ik WHERE n = 5;
SELECT count(*), sum(id) FROM ik WHERE n BETWEEN 1000 AND 1010;
SELECT count(*), sum(id) FROM ik WHERE n < 50 AND s = 'k42';
SELECT count(*), sum(id) FROM ik WHERE n < 50 AND s > 'k4';
SELECT count(*), sum(id) FROM ik WHERE id * 2 BETWEEN 100 AND 400;
SELECT count(*), sum(id) FROM ik WHERE tags @> ARRAY['t3'];
SELECT count(*), sum(id) FROM ik WHERE s = 'k42';
SELECT count(*), sum(id) FROM ik WHERE p <@ box '((0,0),(10,10))';
SELECT count(*), sum(id) FROM ik WHERE r && int4range(100, 120);
SELECT count(*), sum(id) FROM ik WHERE doc @> '{"a": 4}';
SELECT count(*), sum(id) FROM ik WHERE id BETWEEN 500 AND 700;
RESET enable_seqscan;
SELECT count(*), sum(id), sum(n), count(DISTINCT s) FROM ik;
