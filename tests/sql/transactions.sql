-- Transactions in one session: savepoints and ROLLBACK TO SAVEPOINT, cursors that
-- keep their snapshot, WHERE CURRENT OF, SCROLL cursors and FETCH BACKWARD, WITH
-- HOLD cursors, SELECT ... FOR UPDATE/SHARE, errors inside transactions.
CREATE TABLE acc (id int PRIMARY KEY, owner text, balance int);
INSERT INTO acc SELECT g, 'o' || g, 100 * g FROM generate_series(1, 10) g;

-- savepoints
BEGIN;
UPDATE acc SET balance = balance - 50 WHERE id = 1;
SAVEPOINT a;
UPDATE acc SET balance = balance + 50 WHERE id = 2;
DELETE FROM acc WHERE id = 3;
INSERT INTO acc VALUES (11, 'o11', 1100);
SELECT id, balance FROM acc WHERE id <= 3 OR id = 11 ORDER BY id;
ROLLBACK TO SAVEPOINT a;
SELECT id, balance FROM acc WHERE id <= 3 OR id = 11 ORDER BY id;
SAVEPOINT b;
UPDATE acc SET id = 30 WHERE id = 3;
SAVEPOINT c;
UPDATE acc SET balance = 0 WHERE id = 30;
RELEASE SAVEPOINT c;
SELECT id, balance FROM acc WHERE id IN (3, 30) ORDER BY id;
ROLLBACK TO b;
SELECT id, balance FROM acc WHERE id IN (3, 30) ORDER BY id;
INSERT INTO acc VALUES (1, 'dup', 0);
ROLLBACK TO b;
INSERT INTO acc VALUES (12, 'o12', 1200);
COMMIT;
SELECT id, balance FROM acc ORDER BY id;
-- an error aborts the whole transaction without savepoints
BEGIN;
UPDATE acc SET balance = 0 WHERE id = 12;
INSERT INTO acc VALUES (1, 'dup', 0);
SELECT 1;
COMMIT;
SELECT id, balance FROM acc WHERE id = 12;
-- nested savepoints with the same row updated at each level
BEGIN;
UPDATE acc SET balance = 1 WHERE id = 5;
SAVEPOINT s1;
UPDATE acc SET balance = 2 WHERE id = 5;
SAVEPOINT s2;
UPDATE acc SET balance = 3 WHERE id = 5;
SAVEPOINT s3;
DELETE FROM acc WHERE id = 5;
SELECT count(*) FROM acc WHERE id = 5;
ROLLBACK TO s3;
SELECT balance FROM acc WHERE id = 5;
ROLLBACK TO s2;
SELECT balance FROM acc WHERE id = 5;
RELEASE s1;
SELECT balance FROM acc WHERE id = 5;
COMMIT;
SELECT balance FROM acc WHERE id = 5;
-- a row inserted and deleted in an aborted subtransaction
BEGIN;
SAVEPOINT s;
INSERT INTO acc VALUES (50, 'sub', 5);
ROLLBACK TO s;
INSERT INTO acc VALUES (50, 'main', 6);
SAVEPOINT t;
DELETE FROM acc WHERE id = 50;
ROLLBACK TO t;
COMMIT;
SELECT * FROM acc WHERE id = 50;

-- cursors keep their snapshot
BEGIN;
DECLARE c1 CURSOR FOR SELECT id, balance FROM acc WHERE id <= 4 ORDER BY id;
FETCH 1 FROM c1;
UPDATE acc SET balance = -1 WHERE id <= 4;
DELETE FROM acc WHERE id = 3;
INSERT INTO acc VALUES (0, 'zero', 0);
FETCH ALL FROM c1;
SELECT id, balance FROM acc WHERE id <= 4 ORDER BY id;
CLOSE c1;
ROLLBACK;
-- a cursor over an index scan updated WHERE CURRENT OF
SET enable_seqscan = off;
SET enable_sort = off;
BEGIN;
DECLARE c2 CURSOR FOR SELECT id, balance FROM acc WHERE id BETWEEN 2 AND 6 ORDER BY id;
FETCH 2 FROM c2;
UPDATE acc SET balance = balance + 1 WHERE CURRENT OF c2;
FETCH 1 FROM c2;
DELETE FROM acc WHERE CURRENT OF c2;
FETCH 1 FROM c2;
UPDATE acc SET id = 400 WHERE CURRENT OF c2 RETURNING *;
FETCH ALL FROM c2;
COMMIT;
RESET enable_seqscan;
RESET enable_sort;
SELECT id, balance FROM acc ORDER BY id;
-- FOR UPDATE cursor with a sort
BEGIN;
DECLARE c3 CURSOR FOR SELECT id, balance FROM acc ORDER BY balance DESC FOR UPDATE;
FETCH 1 FROM c3;
UPDATE acc SET balance = 0 WHERE CURRENT OF c3;
FETCH 2 FROM c3;
DELETE FROM acc WHERE CURRENT OF c3;
COMMIT;
SELECT id, balance FROM acc ORDER BY id;
-- a SCROLL cursor over a sequential scan, read backwards
CREATE TABLE seq (n int, s text);
INSERT INTO seq SELECT g, 's' || g FROM generate_series(1, 8) g;
BEGIN;
DECLARE c4 SCROLL CURSOR FOR SELECT n, s FROM seq WHERE n % 2 = 0;
FETCH ALL FROM c4;
FETCH BACKWARD 2 FROM c4;
FETCH PRIOR FROM c4;
FETCH FIRST FROM c4;
FETCH LAST FROM c4;
FETCH ABSOLUTE 2 FROM c4;
FETCH RELATIVE -1 FROM c4;
FETCH BACKWARD ALL FROM c4;
MOVE FORWARD 3 IN c4;
FETCH NEXT FROM c4;
COMMIT;
BEGIN;
DECLARE c5 SCROLL CURSOR FOR SELECT n FROM seq WHERE n > 5 ORDER BY n;
FETCH LAST FROM c5;
FETCH BACKWARD ALL FROM c5;
CLOSE c5;
COMMIT;
-- WITH HOLD cursor survives commit and sees its snapshot
BEGIN;
DECLARE c6 CURSOR WITH HOLD FOR SELECT n, s FROM seq ORDER BY n;
FETCH 2 FROM c6;
COMMIT;
DELETE FROM seq WHERE n > 2;
FETCH ALL FROM c6;
CLOSE c6;
SELECT count(*) FROM seq;
-- cursor over a table modified inside a loop (PL/pgSQL FOR over a query)
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT id FROM acc ORDER BY id LOOP
    UPDATE acc SET balance = balance + 1000 WHERE id = r.id;
    INSERT INTO acc VALUES (r.id + 10000, 'copy', 0);
  END LOOP;
END $$;
SELECT count(*), sum(balance) FROM acc;

-- SELECT ... FOR UPDATE / SHARE in one session
BEGIN;
SELECT id, balance FROM acc WHERE id IN (1, 2) ORDER BY id FOR UPDATE;
SELECT id, balance FROM acc WHERE id IN (1, 2) ORDER BY id FOR UPDATE NOWAIT;
SELECT id FROM acc WHERE id = 1 FOR SHARE;
SELECT id FROM acc WHERE id = 1 FOR KEY SHARE;
SELECT id FROM acc WHERE id = 1 FOR NO KEY UPDATE;
SELECT id FROM acc WHERE id BETWEEN 1 AND 4 ORDER BY id FOR UPDATE SKIP LOCKED;
UPDATE acc SET balance = balance + 1 WHERE id = 1;
SELECT id, balance FROM acc WHERE id = 1 FOR UPDATE;
DELETE FROM acc WHERE id = 2;
SELECT id FROM acc WHERE id = 2 FOR UPDATE;
COMMIT;
SELECT id, balance FROM acc WHERE id IN (1, 2) ORDER BY id;
BEGIN;
SELECT id FROM acc WHERE id = 1 FOR SHARE;
SAVEPOINT s;
SELECT id FROM acc WHERE id = 1 FOR UPDATE;
UPDATE acc SET balance = 7 WHERE id = 1;
ROLLBACK TO s;
SELECT id, balance FROM acc WHERE id = 1 FOR UPDATE;
UPDATE acc SET balance = 8 WHERE id = 1;
COMMIT;
SELECT id, balance FROM acc WHERE id = 1;
-- locking a join and a subquery
BEGIN;
SELECT a.id, b.id FROM acc a JOIN acc b ON b.id = a.id + 10000 WHERE a.id < 5 ORDER BY a.id FOR UPDATE OF a;
SELECT count(*) FROM (SELECT id FROM acc WHERE id > 10000 FOR SHARE) s;
COMMIT;
-- repeatable read and serializable see their snapshot
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*), sum(balance) FROM acc;
UPDATE acc SET balance = balance - 1 WHERE id = 1;
SELECT count(*), sum(balance) FROM acc;
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT id, balance FROM acc WHERE id = 1;
UPDATE acc SET balance = 0 WHERE id = 1;
SELECT id, balance FROM acc WHERE id = 1 FOR UPDATE;
COMMIT;
SELECT id, balance FROM acc WHERE id = 1;

-- a SCROLL cursor over an index scan, read backwards
SET enable_seqscan = off;
SET enable_sort = off;
BEGIN;
DECLARE c7 SCROLL CURSOR FOR SELECT id FROM acc WHERE id BETWEEN 3 AND 9 ORDER BY id;
FETCH 3 FROM c7;
FETCH BACKWARD 2 FROM c7;
FETCH LAST FROM c7;
FETCH BACKWARD 1 FROM c7;
COMMIT;
RESET enable_seqscan;
RESET enable_sort;

-- system columns: compared as booleans, their values differ between access methods
CREATE TABLE sys (id int PRIMARY KEY, v int);
BEGIN;
INSERT INTO sys VALUES (1, 1);
INSERT INTO sys VALUES (2, 2), (3, 3);
SELECT id, cmin, xmin = pg_current_xact_id()::xid AS mine, xmax = '0' AS no_xmax FROM sys ORDER BY id;
COMMIT;
SELECT id, xmin = xmin AS has_xmin, xmax = '0' AS no_xmax, tableoid = 'sys'::regclass AS toid FROM sys ORDER BY id;
-- the upsert idiom "RETURNING (xmax = 0) AS inserted"
INSERT INTO sys VALUES (1, 10) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v RETURNING id, v, (xmax = 0) AS inserted;
INSERT INTO sys VALUES (4, 40) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v RETURNING id, v, (xmax = 0) AS inserted;
BEGIN;
UPDATE sys SET v = v + 1 WHERE id = 2 RETURNING id, xmin = pg_current_xact_id()::xid AS mine, xmax = '0' AS no_xmax;
SELECT id, xmin = pg_current_xact_id()::xid AS mine FROM sys ORDER BY id;
SELECT id FROM sys WHERE id = 3 FOR UPDATE;
SELECT id, xmax = pg_current_xact_id()::xid AS locked_by_me FROM sys WHERE id = 3;
COMMIT;
-- INSERT/UPDATE ... RETURNING system columns describe the new row version
BEGIN;
INSERT INTO sys VALUES (5, 5) RETURNING xmin = pg_current_xact_id()::xid AS xmin_mine, xmax::text, cmin::text, cmax::text;
INSERT INTO sys VALUES (6, 6) RETURNING ctid AS ins_ctid \gset
SELECT ctid = :'ins_ctid'::tid AS same_ctid FROM sys WHERE id = 6;
UPDATE sys SET v = 7 WHERE id = 6 RETURNING xmin = pg_current_xact_id()::xid AS xmin_mine, xmax::text, cmin::text, cmax::text;
UPDATE sys SET v = 8 WHERE id = 6 RETURNING ctid AS upd_ctid \gset
SELECT ctid = :'upd_ctid'::tid AS same_ctid FROM sys WHERE id = 6;
DELETE FROM sys WHERE id = 6 RETURNING xmin = pg_current_xact_id()::xid AS xmin_mine, xmax = pg_current_xact_id()::xid AS xmax_mine, ctid = :'upd_ctid'::tid AS same_ctid;
COMMIT;
-- row locks of several strengths across subtransactions
BEGIN;
SELECT id FROM sys WHERE id = 1 FOR KEY SHARE;
SAVEPOINT s1;
SELECT id FROM sys WHERE id = 1 FOR SHARE;
SAVEPOINT s2;
UPDATE sys SET v = -1 WHERE id = 1;
ROLLBACK TO s2;
SELECT id, v FROM sys WHERE id = 1 FOR NO KEY UPDATE;
UPDATE sys SET v = -2 WHERE id = 1;
RELEASE s1;
SELECT id, v FROM sys WHERE id = 1 FOR UPDATE;
COMMIT;
SELECT id, v FROM sys WHERE id = 1;

-- cmin/cmax of rows this transaction inserted and then deleted in a
-- rolled-back savepoint: heap's combo command ids
CREATE TABLE combo_t (id int, v text);
BEGIN;
INSERT INTO combo_t VALUES (1, 'a');
INSERT INTO combo_t VALUES (2, 'b');
SAVEPOINT s1;
DELETE FROM combo_t;
ROLLBACK TO s1;
SELECT cmin, cmax, id, v FROM combo_t ORDER BY id;
SAVEPOINT s2;
UPDATE combo_t SET v = v || 'x' WHERE id = 1;
ROLLBACK TO s2;
SELECT cmin, cmax, id, v FROM combo_t ORDER BY id;
COMMIT;
SELECT id, v FROM combo_t ORDER BY id;
