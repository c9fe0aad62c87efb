-- A command meeting its own changes: rows modified twice by one statement, rows
-- changed by triggers of the statement updating them, MERGE, many
-- subtransactions, deferred triggers fetching older row versions, cursors over
-- rows the transaction keeps changing, COPY FREEZE.
CREATE TABLE t (id int PRIMARY KEY, v int, note text);
INSERT INTO t SELECT g, g * 10, NULL FROM generate_series(1, 10) g;

-- one statement matching a row twice: the second match is silently skipped
UPDATE t SET v = v + s.x FROM (VALUES (1, 1), (1, 2)) s(id, x) WHERE t.id = s.id;
SELECT id, v IN (11, 12) AS one_applied FROM t WHERE id = 1;
UPDATE t SET v = 11 WHERE id = 1; -- which match wins depends on the join plan
DELETE FROM t USING (VALUES (2), (2)) s(id) WHERE t.id = s.id;
SELECT count(*) FROM t WHERE id = 2;
-- a CTE updates a row that the outer statement then tries to delete or update
WITH u AS (UPDATE t SET v = -3 WHERE id = 3 RETURNING id) DELETE FROM t WHERE id IN (SELECT id FROM u);
SELECT id, v FROM t WHERE id = 3;
WITH u AS (UPDATE t SET v = -4 WHERE id = 4 RETURNING id) UPDATE t SET v = 4000 WHERE id IN (SELECT id FROM u);
SELECT id, v FROM t WHERE id = 4;
WITH d AS (DELETE FROM t WHERE id = 5 RETURNING id) UPDATE t SET v = 5000 WHERE id IN (SELECT id FROM d);
SELECT count(*) FROM t WHERE id = 5;

-- a BEFORE trigger changing the row its statement is updating or deleting
CREATE FUNCTION touch_self() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF pg_trigger_depth() > 1 THEN
    NULL;
  ELSIF TG_OP = 'UPDATE' AND NEW.note = 'touch' THEN
    UPDATE t SET v = v + 1 WHERE id = NEW.id;
  ELSIF TG_OP = 'DELETE' AND OLD.note = 'touch' THEN
    UPDATE t SET v = v + 1 WHERE id = OLD.id;
  ELSIF TG_OP = 'UPDATE' AND NEW.note = 'delete-self' THEN
    DELETE FROM t WHERE id = NEW.id;
  END IF;
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER touch_self BEFORE UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION touch_self();
UPDATE t SET note = 'touch' WHERE id = 6;
SELECT id, v, note FROM t WHERE id = 6;
UPDATE t SET note = 'delete-self' WHERE id = 7;
SELECT id, v, note FROM t WHERE id = 7;
UPDATE t SET note = 'touch' WHERE id = 8 AND false;
UPDATE t SET note = 'x' WHERE id = 8;
DROP TRIGGER touch_self ON t;
UPDATE t SET note = 'touch' WHERE id = 8;
CREATE TRIGGER touch_self BEFORE UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION touch_self();
DELETE FROM t WHERE id = 8;
SELECT id, v, note FROM t WHERE id = 8;
DROP TRIGGER touch_self ON t;

-- MERGE
CREATE TABLE src (id int, v int);
INSERT INTO src VALUES (1, 1), (6, 6), (9, 9), (20, 20), (21, 21);
MERGE INTO t USING src ON t.id = src.id
  WHEN MATCHED AND src.v = 9 THEN DELETE
  WHEN MATCHED THEN UPDATE SET v = t.v + src.v, note = 'merged'
  WHEN NOT MATCHED AND src.v > 20 THEN INSERT VALUES (src.id, src.v, 'merge-insert')
  WHEN NOT MATCHED THEN DO NOTHING;
SELECT * FROM t ORDER BY id;
-- a target row matched twice
INSERT INTO src VALUES (1, 100);
MERGE INTO t USING src ON t.id = src.id WHEN MATCHED THEN UPDATE SET v = 0;
MERGE INTO t USING src ON t.id = src.id WHEN MATCHED AND src.v = 1 THEN DELETE WHEN MATCHED THEN UPDATE SET v = 0;
-- MERGE changing the key and inserting keys that exist
MERGE INTO t USING (VALUES (10, 110), (11, 111)) s(id, v) ON t.id = s.id
  WHEN MATCHED THEN UPDATE SET id = s.v
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v);
MERGE INTO t USING (VALUES (12, 1), (12, 2)) s(id, v) ON t.id = s.id
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v);
SELECT * FROM t ORDER BY id;
BEGIN;
MERGE INTO t USING (SELECT generate_series(1, 30) AS id) s ON t.id = s.id
  WHEN MATCHED THEN UPDATE SET v = coalesce(t.v, 0) + 1
  WHEN NOT MATCHED THEN INSERT VALUES (s.id, -1, 'filled');
SELECT count(*), sum(v) FROM t;
ROLLBACK;
SELECT count(*), sum(v) FROM t;

-- many subtransactions (more than the 64 cached per backend)
CREATE TABLE sub (id int PRIMARY KEY, v int);
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    BEGIN
      INSERT INTO sub VALUES (i, i);
      UPDATE sub SET v = v * 2 WHERE id = i - 1;
      IF i % 3 = 0 THEN RAISE EXCEPTION 'undo %', i; END IF;
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
  END LOOP;
END $$;
SELECT count(*), sum(v), sum(id) FROM sub;
BEGIN;
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    BEGIN
      UPDATE sub SET v = v + 1 WHERE id = 1;
      DELETE FROM sub WHERE id = i + 1;
      IF i % 2 = 0 THEN RAISE EXCEPTION 'undo'; END IF;
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
  END LOOP;
END $$;
SELECT v FROM sub WHERE id = 1;
SELECT count(*), sum(v) FROM sub;
COMMIT;
SELECT count(*), sum(v) FROM sub;

-- deferred AFTER triggers see the row version they were queued for
CREATE TABLE dlog (n serial, what text);
CREATE FUNCTION log_versions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO dlog (what) VALUES (TG_OP || ' ' || coalesce(OLD::text, '-') || ' -> ' || coalesce(NEW::text, '-'));
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER versions AFTER INSERT OR UPDATE OR DELETE ON sub DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION log_versions();
BEGIN;
INSERT INTO sub VALUES (1000, 1);
UPDATE sub SET v = 2 WHERE id = 1000;
UPDATE sub SET v = 3 WHERE id = 1000;
UPDATE sub SET id = 1001 WHERE id = 1000;
DELETE FROM sub WHERE id = 1001;
SELECT count(*) FROM dlog;
COMMIT;
SELECT n, what FROM dlog ORDER BY n;
CREATE TRIGGER versions_now AFTER UPDATE ON sub FOR EACH ROW EXECUTE FUNCTION log_versions();
TRUNCATE dlog;
UPDATE sub SET v = -v WHERE id = 1;
SELECT n, what FROM dlog ORDER BY n;

-- cursors over rows the transaction keeps changing (sequential scans)
CREATE TABLE cur (id int PRIMARY KEY, v text);
INSERT INTO cur SELECT g, 'v' || g FROM generate_series(1, 8) g;
BEGIN;
DECLARE c CURSOR FOR SELECT id, v FROM cur;
FETCH 2 FROM c;
UPDATE cur SET id = id + 100 WHERE id = 5;
UPDATE cur SET v = 'changed' WHERE id = 6;
DELETE FROM cur WHERE id = 7;
INSERT INTO cur VALUES (0, 'new'), (50, 'new');
FETCH ALL FROM c;
SELECT id, v FROM cur ORDER BY id;
ROLLBACK;
BEGIN;
DECLARE c CURSOR FOR SELECT id, v FROM cur WHERE id = 3;
FETCH 1 FROM c;
UPDATE cur SET v = 'via cursor' WHERE CURRENT OF c;
UPDATE cur SET v = 'again' WHERE CURRENT OF c;
SELECT id, v FROM cur WHERE id = 3;
CLOSE c;
DECLARE c2 CURSOR FOR SELECT id, v FROM cur WHERE id = 4;
FETCH 1 FROM c2;
UPDATE cur SET v = 'before' WHERE id = 4;
UPDATE cur SET v = 'stale' WHERE CURRENT OF c2;
DELETE FROM cur WHERE CURRENT OF c2;
SELECT id, v FROM cur WHERE id = 4;
COMMIT;

-- TID scans
SELECT count(*) FROM cur WHERE ctid IN (SELECT ctid FROM cur WHERE id IN (1, 2, 3));
SELECT count(*) FROM cur WHERE ctid = ANY (ARRAY(SELECT ctid FROM cur));
BEGIN;
UPDATE cur SET v = 'tid' WHERE id = 1;
SELECT count(*) FROM cur WHERE ctid = (SELECT ctid FROM cur WHERE id = 1) AND v = 'tid';
COMMIT;

-- COPY FREEZE into a table created or truncated in the same transaction
BEGIN;
CREATE TABLE frozen (id int PRIMARY KEY, v text);
COPY frozen FROM STDIN WITH (FREEZE);
1	a
2	b
\.
SELECT * FROM frozen ORDER BY id;
COMMIT;
COPY frozen FROM STDIN WITH (FREEZE);
3	c
\.
BEGIN;
TRUNCATE frozen;
COPY frozen FROM STDIN WITH (FREEZE);
4	d
\.
COMMIT;
SELECT * FROM frozen ORDER BY id;
-- NOT VALID constraints validated later
ALTER TABLE frozen ADD CONSTRAINT v_len CHECK (length(v) = 2) NOT VALID;
ALTER TABLE frozen VALIDATE CONSTRAINT v_len;
UPDATE frozen SET v = 'dd';
ALTER TABLE frozen VALIDATE CONSTRAINT v_len;
