-- Secondary indexes of the method :ix (btree on heap, orioledb_btree on
-- orioledb tables: sql_parity.rs sets it) give the rows a btree gives:
-- every common type, equality, ranges, IN, ORDER BY both ways with LIMIT,
-- NULLS FIRST/LAST, multi-column keys, INCLUDE, partial and expression
-- indexes, read as index scans, index-only scans and bitmap scans, after
-- updates (of indexed columns and of others), deletes and rollbacks;
-- CREATE INDEX CONCURRENTLY, REINDEX (CONCURRENTLY) and DROP.
CREATE TABLE sx (
    id int PRIMARY KEY,
    i2 int2, i4 int, i8 int8, num numeric, f4 float4, f8 float8,
    tc text COLLATE "C", td text, vc varchar(20), bp char(6), by bytea,
    d date, ts timestamp, tz timestamptz, tm time, iv interval,
    u uuid, b bool, ip inet, other int
);
INSERT INTO sx
SELECT g, (g % 50 - 25)::int2, g % 97, (g::int8 * 1000003) % 10007 - 5000,
       round((g % 113) / 7.0, 3), (g % 31) / 4.0, (g % 29) / 3.0 - 4,
       'k' || (g % 200), 'Word ' || (g % 41), 'v' || (g % 23), 'c' || (g % 13),
       decode(lpad(to_hex(g % 251), 2, '0'), 'hex'),
       date '2024-01-01' + g % 400, timestamp '2024-01-01' + (g % 300) * interval '37 minutes',
       timestamptz '2024-01-01 00:00+00' + (g % 500) * interval '1 hour',
       time '00:00' + (g % 1440) * interval '1 minute', (g % 60) * interval '1 day' + (g % 7) * interval '1 hour',
       ('00000000-0000-0000-0000-' || lpad(to_hex(g % 300), 12, '0'))::uuid,
       g % 3 = 0, ('10.' || (g % 4) || '.' || (g % 256) || '.0/' || (24 + g % 9))::inet, g
FROM generate_series(1, 4000) g;
-- NULLs in every indexed column of some rows
UPDATE sx SET i4 = NULL, td = NULL, num = NULL, ts = NULL WHERE id % 53 = 0;
CREATE INDEX sx_i2 ON sx USING :ix (i2);
CREATE INDEX sx_i4 ON sx USING :ix (i4);
CREATE INDEX sx_i8_desc ON sx USING :ix (i8 DESC);
CREATE INDEX sx_num ON sx USING :ix (num NULLS FIRST);
CREATE INDEX sx_f ON sx USING :ix (f4, f8);
CREATE INDEX sx_tc ON sx USING :ix (tc);
CREATE INDEX sx_td ON sx USING :ix (td) INCLUDE (other);
CREATE INDEX sx_vc ON sx USING :ix (vc, bp);
CREATE INDEX sx_by ON sx USING :ix (by);
CREATE INDEX sx_dt ON sx USING :ix (d, ts DESC NULLS LAST);
CREATE INDEX sx_tz ON sx USING :ix (tz);
CREATE INDEX sx_tm ON sx USING :ix (tm, iv);
CREATE INDEX sx_u ON sx USING :ix (u);
CREATE INDEX sx_b ON sx USING :ix (b, i4);
CREATE INDEX sx_ip ON sx USING :ix (ip);
CREATE INDEX sx_partial ON sx USING :ix (i4) WHERE b;
CREATE INDEX sx_expr ON sx USING :ix (lower(td), (i4 * 2));
CREATE INDEX CONCURRENTLY sx_cic ON sx USING :ix (other);
-- changes: indexed columns, other columns only, deletes, rolled back
UPDATE sx SET i4 = i4 + 1000, tc = tc || 'x', td = upper(td) WHERE id % 10 = 0;
UPDATE sx SET other = other + 1 WHERE id % 7 = 0;
DELETE FROM sx WHERE id % 17 = 0;
BEGIN;
UPDATE sx SET i4 = -1, td = 'gone' WHERE id % 3 = 0;
DELETE FROM sx WHERE id % 5 = 0;
ROLLBACK;
BEGIN;
SAVEPOINT a;
INSERT INTO sx (id, i4, td, other) VALUES (10001, 5, 'Word 5', 1);
ROLLBACK TO a;
INSERT INTO sx (id, i4, td, other, b) VALUES (10002, 6, 'Word 6', 2, true);
COMMIT;
ANALYZE sx;
SET enable_seqscan = off;
-- index scans and index-only scans, then bitmap scans
SET enable_bitmapscan = off;
\set run 'SELECT count(*), sum(id) FROM sx WHERE i2 = -3; SELECT count(*), sum(id) FROM sx WHERE i2 BETWEEN -5 AND 5; SELECT count(*), sum(id) FROM sx WHERE i4 = 42; SELECT count(*), sum(id) FROM sx WHERE i4 > 1090; SELECT count(*), sum(id) FROM sx WHERE i4 IN (1, 2, 3, 1010); SELECT count(*), sum(id) FROM sx WHERE i4 = ANY (ARRAY[7, 8]); SELECT count(*), sum(id) FROM sx WHERE i4 IS NULL; SELECT count(*) FROM sx WHERE i4 IS NOT NULL; SELECT count(*), sum(id) FROM sx WHERE i8 >= 4000; SELECT count(*), sum(id) FROM sx WHERE i8 < -4900; SELECT count(*), sum(id) FROM sx WHERE num = 5.143; SELECT count(*), sum(id) FROM sx WHERE num > 15; SELECT count(*), sum(id) FROM sx WHERE num IS NULL; SELECT count(*), sum(id) FROM sx WHERE f4 = 2.5 AND f8 < 0; SELECT count(*), sum(id) FROM sx WHERE f4 < 1; SELECT count(*), sum(id) FROM sx WHERE tc = $$k42$$; SELECT count(*), sum(id) FROM sx WHERE tc >= $$k19$$ AND tc < $$k2$$; SELECT count(*), sum(id) FROM sx WHERE td = $$Word 7$$; SELECT count(*), sum(id) FROM sx WHERE td > $$WORD$$ AND td < $$Word 2$$; SELECT count(*), sum(id) FROM sx WHERE vc = $$v3$$ AND bp = $$c3$$; SELECT count(*), sum(id) FROM sx WHERE vc < $$v15$$; SELECT count(*), sum(id) FROM sx WHERE by = $$\\x0a$$; SELECT count(*), sum(id) FROM sx WHERE by > $$\\xf0$$; SELECT count(*), sum(id) FROM sx WHERE d = $$2024-02-01$$; SELECT count(*), sum(id) FROM sx WHERE d BETWEEN $$2024-03-01$$ AND $$2024-03-05$$ AND ts > $$2024-01-02$$; SELECT count(*), sum(id) FROM sx WHERE tz < $$2024-01-03 00:00+00$$; SELECT count(*), sum(id) FROM sx WHERE tm = $$01:40$$; SELECT count(*), sum(id) FROM sx WHERE tm > $$23:00$$ AND iv > $$1 day$$; SELECT count(*), sum(id) FROM sx WHERE u = $$00000000-0000-0000-0000-00000000002a$$; SELECT count(*), sum(id) FROM sx WHERE b AND i4 < 10; SELECT count(*), sum(id) FROM sx WHERE ip = $$10.1.5.0/29$$; SELECT count(*), sum(id) FROM sx WHERE ip > $$10.3.0.0/24$$; SELECT count(*), sum(id) FROM sx WHERE b AND i4 = 9; SELECT count(*), sum(id) FROM sx WHERE lower(td) = $$word 9$$ AND i4 * 2 > 50; SELECT count(*), sum(id) FROM sx WHERE other BETWEEN 100 AND 200; SELECT count(*), sum(id) FROM sx WHERE i2 = 3::int8; SELECT count(*), sum(id) FROM sx WHERE i2 < 100000 AND i2 > -4::int8; SELECT count(*), sum(id) FROM sx WHERE i4 < 3000000000 AND i4 >= 1095::int2; SELECT count(*), sum(id) FROM sx WHERE i8 = 17::int2 OR i8 > 4990;'
:run
-- ordered, both directions, with LIMIT
SELECT i4, id FROM sx WHERE i4 < 5 ORDER BY i4, id LIMIT 5;
SELECT i4 FROM sx ORDER BY i4 DESC LIMIT 5;
SELECT i4 FROM sx ORDER BY i4 NULLS FIRST LIMIT 3;
SELECT i8 FROM sx ORDER BY i8 DESC LIMIT 4;
SELECT i8 FROM sx ORDER BY i8 LIMIT 4;
SELECT num FROM sx ORDER BY num NULLS FIRST LIMIT 3;
SELECT num FROM sx ORDER BY num DESC NULLS LAST LIMIT 3;
SELECT tc FROM sx WHERE tc > 'k95' ORDER BY tc LIMIT 4;
SELECT td, other FROM sx WHERE td IS NOT NULL ORDER BY td DESC, other LIMIT 4;
SELECT d, ts FROM sx WHERE d = '2024-01-05' ORDER BY d, ts DESC NULLS LAST LIMIT 3;
SELECT u FROM sx ORDER BY u DESC LIMIT 2;
SELECT ip FROM sx ORDER BY ip LIMIT 3;
SELECT f4, f8 FROM sx WHERE f4 > 7 ORDER BY f4 DESC, f8 DESC LIMIT 3;
-- cursors moving both ways over index scans (i8 is unique)
BEGIN;
DECLARE cx SCROLL CURSOR FOR SELECT i8, id FROM sx WHERE i8 BETWEEN 0 AND 40 ORDER BY i8 DESC;
FETCH 3 FROM cx;
FETCH BACKWARD 2 FROM cx;
FETCH LAST FROM cx;
FETCH BACKWARD 1 FROM cx;
FETCH FIRST FROM cx;
FETCH ABSOLUTE 4 FROM cx;
DECLARE cy SCROLL CURSOR FOR SELECT i8 FROM sx WHERE i8 < -4980 ORDER BY i8;
FETCH ALL FROM cy;
FETCH BACKWARD ALL FROM cy;
FETCH NEXT FROM cy;
COMMIT;
RESET enable_bitmapscan;
SET enable_indexscan = off;
SET enable_indexonlyscan = off;
:run
RESET enable_indexscan;
RESET enable_indexonlyscan;
-- rebuilt: the same answers
REINDEX INDEX sx_i4;
REINDEX INDEX CONCURRENTLY sx_td;
REINDEX TABLE sx;
SET enable_bitmapscan = off;
SELECT count(*), sum(id) FROM sx WHERE i4 > 1090;
SELECT td, other FROM sx WHERE td IS NOT NULL ORDER BY td DESC, other LIMIT 4;
SELECT count(*), sum(id) FROM sx WHERE other BETWEEN 100 AND 200;
-- TRUNCATE empties them; rows inserted afterwards are found
BEGIN;
TRUNCATE sx;
INSERT INTO sx (id, i4, td, other) VALUES (1, 1, 'a', 1), (2, 2, 'b', 2);
SELECT i4 FROM sx WHERE i4 > 0 ORDER BY i4;
ROLLBACK;
SELECT count(*) FROM sx WHERE i4 > 0;
DROP INDEX sx_i4;
DROP INDEX CONCURRENTLY sx_cic;
SELECT count(*), sum(id) FROM sx WHERE i4 = 42;
SELECT count(*) FROM sx WHERE other BETWEEN 100 AND 200;
RESET enable_bitmapscan;
RESET enable_seqscan;
DROP TABLE sx;
-- text under a libc language collation (compared by its locale in the
-- tree) and under ICU (sort keys), both ways, with ranges and IN
CREATE COLLATION sx_libc (provider = libc, locale = 'en_US.UTF-8');
CREATE TABLE sc (id int PRIMARY KEY, l text COLLATE sx_libc, i text COLLATE "en-x-icu", n int);
INSERT INTO sc SELECT row_number() OVER (), s, s, g
FROM unnest(ARRAY['b', 'B', 'a', 'A', 'ä', 'co-op', 'coop', 'Zeta', 'zeta', 'élan', 'elan', '10', '9', '']) s,
     generate_series(1, 3) g;
INSERT INTO sc VALUES (100, NULL, NULL, 1), (101, NULL, NULL, 2);
CREATE INDEX sc_l ON sc USING :ix (l, n);
CREATE INDEX sc_i ON sc USING :ix (i DESC, n);
CREATE INDEX sc_ld ON sc USING :ix (l DESC NULLS LAST, n DESC);
CREATE INDEX sc_nl ON sc USING :ix (n, l NULLS FIRST);
ANALYZE sc;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT l, n FROM sc ORDER BY l, n LIMIT 8;
SELECT l, n FROM sc WHERE l > 'b' AND l < 'e' ORDER BY l, n;
SELECT l, n FROM sc WHERE l = 'coop' AND n >= 2 ORDER BY l, n;
SELECT count(*) FROM sc WHERE l IN ('a', 'B', 'nope');
SELECT i, n FROM sc ORDER BY i DESC, n LIMIT 8;
SELECT i, n FROM sc WHERE i <= 'b' ORDER BY i DESC, n LIMIT 6;
SELECT i FROM sc WHERE i = 'élan' ORDER BY i DESC, n;
SELECT l, n FROM sc ORDER BY l DESC NULLS LAST, n DESC LIMIT 8;
SELECT l, n FROM sc WHERE l < 'co' ORDER BY l DESC NULLS LAST, n DESC;
SELECT l, n FROM sc WHERE l >= 'Z' ORDER BY l NULLS FIRST, n LIMIT 6;
SELECT n, l FROM sc WHERE n = 2 ORDER BY n, l NULLS FIRST;
SELECT n, l FROM sc WHERE n = 2 AND l IS NULL;
SELECT n, l FROM sc WHERE n = 3 AND l > 'b' ORDER BY n, l NULLS FIRST;
RESET enable_bitmapscan;
SELECT count(*) FROM sc WHERE l >= 'co' AND l < 'd';
SELECT count(*) FROM sc WHERE i > 'a';
RESET enable_seqscan;
DROP TABLE sc;
