-- Triggers: BEFORE/AFTER, ROW/STATEMENT, modifying NEW, skipping rows, transition
-- tables, triggers writing to other tables, constraint triggers, row-level
-- triggers on partitions.
CREATE TABLE tlog (n serial, tg text, op text, old_id int, new_id int, info text);
CREATE FUNCTION log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO tlog (tg, op, old_id, new_id, info)
  VALUES (TG_NAME, TG_OP,
          CASE WHEN TG_OP IN ('UPDATE', 'DELETE') THEN OLD.id END,
          CASE WHEN TG_OP IN ('INSERT', 'UPDATE') THEN NEW.id END,
          TG_WHEN || ' ' || TG_LEVEL);
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END $$;
CREATE FUNCTION log_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO tlog (tg, op, info) VALUES (TG_NAME, TG_OP, TG_WHEN || ' ' || TG_LEVEL);
  RETURN NULL;
END $$;
CREATE TABLE t (id int PRIMARY KEY, v text, touched int DEFAULT 0);
CREATE TRIGGER a_before_row BEFORE INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION log_row();
CREATE TRIGGER b_after_row AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION log_row();
CREATE TRIGGER c_before_stmt BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON t FOR EACH STATEMENT EXECUTE FUNCTION log_stmt();
CREATE TRIGGER d_after_stmt AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON t FOR EACH STATEMENT EXECUTE FUNCTION log_stmt();
INSERT INTO t (id, v) VALUES (1, 'one');
UPDATE t SET v = 'uno' WHERE id = 1;
UPDATE t SET id = 2 WHERE id = 1;
DELETE FROM t WHERE id = 2;
UPDATE t SET v = 'nothing' WHERE id = 42;
SELECT n, tg, op, old_id, new_id, info FROM tlog ORDER BY n;
TRUNCATE tlog;
INSERT INTO t (id, v) SELECT g, 'v' || g FROM generate_series(1, 5) g;
UPDATE t SET v = v || '!' WHERE id > 2;
DELETE FROM t WHERE id = 5;
SELECT tg, op, old_id, new_id, info, count(*) FROM tlog GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3 NULLS FIRST, 4 NULLS FIRST;
TRUNCATE t;
SELECT tg, op, info FROM tlog WHERE op = 'TRUNCATE' ORDER BY n;
DROP TRIGGER a_before_row ON t;
DROP TRIGGER b_after_row ON t;
DROP TRIGGER c_before_stmt ON t;
DROP TRIGGER d_after_stmt ON t;

-- BEFORE ROW triggers that modify NEW, skip rows, or change the key
CREATE FUNCTION tweak() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.v = 'keep' THEN RETURN NULL; END IF;
    RETURN OLD;
  END IF;
  IF NEW.v = 'skip' THEN RETURN NULL; END IF;
  IF NEW.v = 'rekey' THEN NEW.id := NEW.id + 1000; END IF;
  NEW.touched := coalesce(NEW.touched, 0) + 1;
  NEW.v := lower(NEW.v);
  RETURN NEW;
END $$;
CREATE TRIGGER tweak BEFORE INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION tweak();
INSERT INTO t (id, v) VALUES (1, 'ONE'), (2, 'skip'), (3, 'rekey'), (4, 'keep');
SELECT * FROM t ORDER BY id;
UPDATE t SET v = 'TWICE' WHERE id = 1;
UPDATE t SET v = 'skip' WHERE id = 1;
UPDATE t SET v = 'rekey' WHERE id = 1003;
SELECT * FROM t ORDER BY id;
DELETE FROM t;
SELECT * FROM t ORDER BY id;
INSERT INTO t (id, v) VALUES (4, 'conflict') ON CONFLICT (id) DO UPDATE SET v = 'UPSERTED';
SELECT * FROM t ORDER BY id;
COPY t (id, v) FROM STDIN;
7	COPIED
8	skip
\.
SELECT * FROM t ORDER BY id;
DROP TRIGGER tweak ON t;

-- transition tables
CREATE FUNCTION show_transition() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  o text; n text;
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    SELECT string_agg(id || '=' || coalesce(v, 'null'), ',' ORDER BY id) INTO o FROM old_rows;
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    SELECT string_agg(id || '=' || coalesce(v, 'null'), ',' ORDER BY id) INTO n FROM new_rows;
  END IF;
  RAISE NOTICE '% %: old [%] new [%]', TG_NAME, TG_OP, o, n;
  RETURN NULL;
END $$;
CREATE TRIGGER tt_ins AFTER INSERT ON t REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION show_transition();
CREATE TRIGGER tt_upd AFTER UPDATE ON t REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION show_transition();
CREATE TRIGGER tt_del AFTER DELETE ON t REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION show_transition();
INSERT INTO t (id, v) SELECT g, 'n' || g FROM generate_series(10, 14) g;
UPDATE t SET v = v || 'u' WHERE id BETWEEN 11 AND 13;
UPDATE t SET id = id + 100 WHERE id IN (10, 14);
DELETE FROM t WHERE id > 100;
UPDATE t SET v = 'none' WHERE false;
INSERT INTO t (id, v) VALUES (12, 'dup') ON CONFLICT (id) DO UPDATE SET v = 'upserted';
WITH w AS (DELETE FROM t WHERE id = 11 RETURNING *) INSERT INTO t SELECT id + 50, v, touched FROM w;
SELECT * FROM t ORDER BY id;

-- a trigger that maintains a summary table; AFTER trigger sees the row
CREATE TABLE totals (k text PRIMARY KEY, total int);
CREATE TABLE entries (id int PRIMARY KEY, k text, amount int);
CREATE FUNCTION upd_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    UPDATE totals SET total = total - OLD.amount WHERE k = OLD.k;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO totals VALUES (NEW.k, NEW.amount) ON CONFLICT (k) DO UPDATE SET total = totals.total + NEW.amount;
    PERFORM 1 FROM entries WHERE id = NEW.id;
    IF NOT FOUND THEN RAISE EXCEPTION 'row % not visible to its AFTER trigger', NEW.id; END IF;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER upd_totals AFTER INSERT OR UPDATE OR DELETE ON entries FOR EACH ROW EXECUTE FUNCTION upd_totals();
INSERT INTO entries SELECT g, (ARRAY['a', 'b', 'c'])[g % 3 + 1], g FROM generate_series(1, 30) g;
UPDATE entries SET k = 'a' WHERE k = 'b' AND id < 10;
UPDATE entries SET amount = amount * 2 WHERE k = 'c';
DELETE FROM entries WHERE id > 25;
SELECT * FROM totals ORDER BY k;
SELECT k, sum(amount) FROM entries GROUP BY k ORDER BY k;

-- deferred constraint trigger
CREATE FUNCTION check_balance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT sum(amount) FROM entries) % 2 <> 0 THEN
    RAISE EXCEPTION 'odd total %', (SELECT sum(amount) FROM entries);
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER balance AFTER INSERT OR UPDATE ON entries DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION check_balance();
BEGIN;
INSERT INTO entries VALUES (100, 'a', 1);
INSERT INTO entries VALUES (101, 'a', 1);
COMMIT;
BEGIN;
INSERT INTO entries VALUES (102, 'a', 1);
COMMIT;
SELECT count(*), sum(amount) FROM entries;

-- row triggers on partitions, cross-partition update fires DELETE + INSERT
CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
CREATE TABLE pt2 PARTITION OF pt FOR VALUES FROM (100) TO (200);
TRUNCATE tlog;
CREATE TRIGGER pt_row AFTER INSERT OR UPDATE OR DELETE ON pt FOR EACH ROW EXECUTE FUNCTION log_row();
INSERT INTO pt VALUES (1, 'a'), (150, 'b');
UPDATE pt SET id = 101 WHERE id = 1;
UPDATE pt SET v = 'c' WHERE id = 150;
SELECT tg, op, old_id, new_id, info FROM tlog ORDER BY n;
SELECT tableoid::regclass, * FROM pt ORDER BY id;
