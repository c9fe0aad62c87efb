-- Secondary indexes (btree on text with collations, numeric, multi-column,
-- expression, partial, unique, INCLUDE, hash, gin, gist), primary keys on
-- collated text and numeric, index scans forced with enable_seqscan = off,
-- index-only scans, indexes created on populated tables, REINDEX.
CREATE TABLE people (id int PRIMARY KEY, name text COLLATE "en-x-icu", city varchar(20),
                     score numeric, tags text[], doc jsonb, born date);
INSERT INTO people
SELECT g, (ARRAY['alice', 'Bob', 'carol', 'Dave', 'émile', 'Zoë', 'zed', 'ALICE'])[g % 8 + 1] || (g / 8),
       (ARRAY['Paris', 'Berlin', NULL, 'Rome'])[g % 4 + 1], (g * 37 % 101) / 7.0,
       ARRAY['t' || g % 3, 't' || g % 5], jsonb_build_object('k', g % 6, 'even', g % 2 = 0),
       date '2000-01-01' + g * 13
FROM generate_series(1, 200) g;
CREATE INDEX people_name ON people (name);
CREATE INDEX people_name_c ON people (name COLLATE "C");
CREATE INDEX people_city_score ON people (city, score DESC NULLS LAST);
CREATE INDEX people_score ON people (score);
CREATE INDEX people_lower ON people (lower(name));
CREATE INDEX people_partial ON people (born) WHERE score > 10;
CREATE UNIQUE INDEX people_uniq ON people (name, id) INCLUDE (city);
CREATE INDEX people_hash ON people USING hash (city);
CREATE INDEX people_tags ON people USING gin (tags);
CREATE INDEX people_doc ON people USING gin (doc jsonb_path_ops);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT id, name FROM people WHERE name = 'carol3';
SELECT id, name FROM people WHERE name BETWEEN 'alice' AND 'bob' ORDER BY name, id LIMIT 10;
SELECT id, name FROM people WHERE name COLLATE "C" BETWEEN 'alice' AND 'bob' ORDER BY name COLLATE "C", id LIMIT 10;
SELECT name FROM people ORDER BY name DESC, id DESC LIMIT 5;
SELECT name FROM people ORDER BY name COLLATE "C" LIMIT 5;
SELECT count(*), min(score), max(score) FROM people WHERE score BETWEEN 3.5 AND 7.25;
SELECT id, score FROM people WHERE score > 14 ORDER BY score, id;
SELECT city, count(*), sum(score) FROM people WHERE city = 'Rome' GROUP BY city;
SELECT count(*) FROM people WHERE city IS NULL;
SELECT id, city, score FROM people WHERE city = 'Paris' ORDER BY city, score DESC NULLS LAST, id LIMIT 5;
SELECT id, name FROM people WHERE lower(name) = 'alice7' ORDER BY id;
SELECT count(*), min(born), max(born) FROM people WHERE born > '2005-01-01' AND score > 10;
SELECT name, id, city FROM people WHERE name = 'Zoë4' ORDER BY id;
SELECT count(*) FROM people WHERE tags @> ARRAY['t1', 't4'];
SELECT count(*) FROM people WHERE doc @> '{"k": 3}';
-- index-only scan candidates
SELECT count(*) FROM people WHERE id > 50;
SELECT id FROM people WHERE id BETWEEN 95 AND 105 ORDER BY id DESC;
-- modifications through index scans
UPDATE people SET score = score + 100 WHERE name LIKE 'carol%' AND id < 50;
UPDATE people SET name = 'renamed' || id WHERE city = 'Berlin' AND id > 190;
DELETE FROM people WHERE score BETWEEN 5 AND 6;
SELECT id, name, score FROM people WHERE score > 100 ORDER BY score, id;
SELECT id, name FROM people WHERE name LIKE 'renamed%' ORDER BY name;
SELECT count(*), sum(score), count(DISTINCT name) FROM people;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*), sum(score), count(DISTINCT name) FROM people;
REINDEX TABLE people;
SET enable_seqscan = off;
SELECT count(*) FROM people WHERE name > 'm';
SELECT count(*) FROM people WHERE score < 3;
RESET enable_seqscan;
-- index build over a table with updated and deleted rows
CREATE INDEX people_city2 ON people (city, name);
SET enable_seqscan = off;
SELECT city, count(*) FROM people WHERE city > '' GROUP BY city ORDER BY city;
RESET enable_seqscan;
-- unique index creation failing on duplicates
CREATE UNIQUE INDEX people_city_uniq ON people (city) WHERE id IN (9, 13, 14);
CREATE UNIQUE INDEX people_name_uniq ON people (name);

-- primary keys on collated text and numeric
CREATE TABLE words (w text COLLATE "en-x-icu" PRIMARY KEY, n int);
INSERT INTO words VALUES ('b', 1), ('B', 2), ('a', 3), ('A', 4), ('é', 5), ('e', 6), ('E', 7), ('ä', 8), ('z', 9), ('', 10);
INSERT INTO words VALUES ('b', 100);
SELECT w, n FROM words ORDER BY w;
SET enable_seqscan = off;
SELECT w, n FROM words WHERE w > 'a' ORDER BY w;
SELECT w, n FROM words WHERE w = 'é';
RESET enable_seqscan;
UPDATE words SET w = w || w WHERE n % 2 = 0;
SELECT w, n FROM words ORDER BY w;
CREATE TABLE words_c (w text COLLATE "C" PRIMARY KEY, n int);
INSERT INTO words_c SELECT w, n FROM words;
SELECT w, n FROM words_c ORDER BY w;
CREATE TABLE nums (k numeric PRIMARY KEY, v text);
INSERT INTO nums VALUES (1, 'a'), (1.0001, 'b'), (-5, 'c'), (1e20, 'd'), ('NaN', 'e'), (0.5, 'f');
INSERT INTO nums VALUES (1.000, 'dup');
INSERT INTO nums VALUES ('0.50', 'dup');
SELECT k, v FROM nums ORDER BY k;
SET enable_seqscan = off;
SELECT k, v FROM nums WHERE k > 0.75 ORDER BY k;
SELECT k, v FROM nums WHERE k = 1;
RESET enable_seqscan;
CREATE TABLE multi (a int, b text, c date, PRIMARY KEY (b, a, c));
INSERT INTO multi SELECT g % 3, 'x' || (g % 4), date '2020-01-01' + g FROM generate_series(1, 24) g;
INSERT INTO multi VALUES (1, 'x1', '2020-01-02');
SET enable_seqscan = off;
SELECT a, b, c FROM multi WHERE b = 'x2' AND a = 1 ORDER BY c;
SELECT count(*) FROM multi WHERE b > 'x1';
RESET enable_seqscan;
UPDATE multi SET b = 'y' WHERE a = 0;
SELECT b, count(*) FROM multi GROUP BY b ORDER BY b;

-- BRIN and hash indexes
CREATE TABLE br (id int PRIMARY KEY, ts int);
CREATE INDEX br_brin ON br USING brin (ts);
INSERT INTO br SELECT g, g FROM generate_series(1, 20000) g;
SELECT count(*) FROM br WHERE ts BETWEEN 100 AND 200;
SELECT brin_summarize_new_values('br_brin') >= 0;
CREATE INDEX br_brin2 ON br USING brin (ts) WITH (pages_per_range = 2);
UPDATE br SET ts = -ts WHERE id % 100 = 0;
SELECT count(*) FROM br WHERE ts BETWEEN -2000 AND 200;
VACUUM br;
CREATE INDEX br_hash ON br USING hash (ts);
SET enable_seqscan = off;
SELECT count(*) FROM br WHERE ts = -500;
RESET enable_seqscan;

-- unique index builds over dead, deleted-by-me and rolled-back versions
CREATE TABLE ux (id int PRIMARY KEY, k int);
INSERT INTO ux VALUES (1, 1), (2, 2);
UPDATE ux SET k = 10 WHERE id = 1;
INSERT INTO ux VALUES (3, 1);
CREATE UNIQUE INDEX ux_k ON ux (k);
SET enable_seqscan = off;
SELECT * FROM ux WHERE k = 1;
SELECT * FROM ux WHERE k = 10;
RESET enable_seqscan;
DROP INDEX ux_k;
BEGIN;
UPDATE ux SET k = 20 WHERE id = 2;
INSERT INTO ux VALUES (4, 2);
CREATE UNIQUE INDEX ux_k ON ux (k);
SET LOCAL enable_seqscan = off;
SELECT * FROM ux WHERE k IN (2, 20) ORDER BY id;
INSERT INTO ux VALUES (5, 2);
COMMIT;
BEGIN;
DELETE FROM ux WHERE id = 4;
INSERT INTO ux VALUES (6, 2);
DROP INDEX ux_k;
CREATE UNIQUE INDEX ux_k ON ux (k);
SAVEPOINT a;
INSERT INTO ux VALUES (7, 2);
ROLLBACK TO a;
COMMIT;
SELECT * FROM ux ORDER BY id;
-- unique index build with a row inserted and deleted in an aborted subxact
BEGIN;
SAVEPOINT s;
INSERT INTO ux VALUES (8, 1);
ROLLBACK TO s;
DROP INDEX ux_k;
INSERT INTO ux VALUES (9, 20);
CREATE UNIQUE INDEX ux_k ON ux (k);
ROLLBACK;
SELECT * FROM ux ORDER BY id;
