-- Many rows and many versions: bulk load, repeated updates of the same rows (in one
-- transaction, across transactions, in procedures that COMMIT), delete and
-- re-insert of the same keys, statements that read the table they write
-- (no Halloween problem), and seq scans agreeing with index scans afterwards.
CREATE TABLE big (id int PRIMARY KEY, grp int, val int, pad text);
CREATE INDEX big_grp ON big (grp);
CREATE INDEX big_val ON big (val);
INSERT INTO big SELECT g, g % 50, g, repeat('p', g % 200) FROM generate_series(1, 20000) g;
SELECT count(*), sum(val), sum(length(pad)) FROM big;
-- statements that read what they write see only the rows as of their start
INSERT INTO big SELECT id + 20000, grp, val, pad FROM big WHERE id <= 5000;
SELECT count(*), max(id) FROM big;
UPDATE big SET id = id + 100000 WHERE id > 20000;
SELECT count(*), min(id), max(id) FROM big WHERE id > 20000;
UPDATE big SET id = id - 100000 + 1 WHERE id > 100000;
SELECT count(*), min(id), max(id) FROM big WHERE id > 20000;
DELETE FROM big WHERE id > 20000;
UPDATE big SET val = val + 1;
UPDATE big SET val = val + 1 WHERE grp < 25;
SELECT count(*), sum(val) FROM big;
-- the same row updated many times in one transaction and across transactions
BEGIN;
DO $$ BEGIN FOR i IN 1..300 LOOP UPDATE big SET val = val + 1 WHERE id = 7; END LOOP; END $$;
SELECT val FROM big WHERE id = 7;
COMMIT;
DO $$ BEGIN FOR i IN 1..200 LOOP UPDATE big SET grp = (grp + 1) % 50, val = val + 1 WHERE id = 8; END LOOP; END $$;
CREATE PROCEDURE churn(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    UPDATE big SET val = val + 1 WHERE id BETWEEN 100 AND 110;
    UPDATE big SET id = -id WHERE id = 200 OR id = -200;
    DELETE FROM big WHERE id = 300;
    INSERT INTO big VALUES (300, i, i, 'reinserted');
    COMMIT;
  END LOOP;
END $$;
CALL churn(150);
SELECT id, grp, val, pad FROM big WHERE id IN (7, 8, 100, 110, 200, -200, 300) ORDER BY id;
-- delete everything and re-insert the same keys
BEGIN;
DELETE FROM big WHERE id BETWEEN 1000 AND 1999;
INSERT INTO big SELECT g, -1, -g, 'again' FROM generate_series(1000, 1999) g;
COMMIT;
DELETE FROM big WHERE id BETWEEN 1500 AND 1599;
INSERT INTO big SELECT g, -2, -g, 'third' FROM generate_series(1500, 1599) g;
-- seq scans and index scans agree
SELECT count(*), sum(val), sum(grp), sum(id) FROM big;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*), sum(val), sum(grp), sum(id) FROM big WHERE id > -1000000;
SELECT count(*), sum(val), sum(id) FROM big WHERE grp >= -10;
SELECT count(*), sum(grp), sum(id) FROM big WHERE val > -1000000;
SELECT grp, count(*) FROM big WHERE grp < 0 GROUP BY grp ORDER BY grp;
SELECT id, val FROM big WHERE val BETWEEN -1505 AND -1495 ORDER BY val;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT grp, count(*), sum(val) FROM big GROUP BY grp ORDER BY grp LIMIT 5;
-- prepared statements reused across changes
PREPARE get(int) AS SELECT id, val FROM big WHERE id = $1;
PREPARE bump(int) AS UPDATE big SET val = val + 1000 WHERE id = $1 RETURNING val;
EXECUTE get(42);
EXECUTE bump(42);
EXECUTE bump(42);
EXECUTE get(42);
DELETE FROM big WHERE id = 42;
EXECUTE get(42);
EXECUTE bump(42);
-- an aborted bulk change leaves the old rows
BEGIN;
UPDATE big SET val = 0;
DELETE FROM big WHERE grp = 3;
ROLLBACK;
SELECT count(*), sum(val) FROM big;
TRUNCATE big;
INSERT INTO big SELECT g, g % 7, g, 'x' FROM generate_series(1, 1000) g;
SELECT count(*), sum(val) FROM big;
