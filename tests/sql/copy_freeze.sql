-- COPY ... FREEZE: refused unless the table's file is new in this
-- (sub)transaction; then the rows are inserted frozen, as heap does (their
-- visibility to older snapshots: tests/loads.rs).
CREATE TABLE cf_old (id int, v text);
BEGIN;
COPY cf_old FROM STDIN WITH (FREEZE);
1	a
\.
ROLLBACK;

BEGIN;
CREATE TABLE cf (id int, v text);
CREATE TABLE cfk (id int PRIMARY KEY, v text);
COPY cf FROM STDIN WITH (FREEZE);
1	one
2	two
3	three
4	four
\.
COPY cfk FROM STDIN WITH (FREEZE);
10	ten
20	twenty
30	thirty
\.
-- A cursor opened before the COPY is refused ("prior transaction activity").
SELECT count(*), sum(id) FROM cf;
SELECT count(*), sum(id) FROM cfk;
UPDATE cf SET v = v || '!' WHERE id % 2 = 0;
DELETE FROM cfk WHERE id = 20;
SELECT * FROM cf ORDER BY id;
SELECT * FROM cfk ORDER BY id;
COMMIT;

-- A rolled-back COPY FREEZE into a table truncated in its transaction
-- leaves the rows before the TRUNCATE.
BEGIN;
TRUNCATE cf;
COPY cf FROM STDIN WITH (FREEZE);
7	seven
\.
SELECT * FROM cf ORDER BY id;
ROLLBACK;
SELECT * FROM cf ORDER BY id;

-- A savepoint after the table's creation: FREEZE is refused there, and
-- allowed again once the savepoint is gone.
BEGIN;
CREATE TABLE cf2 (id int);
SAVEPOINT s;
COPY cf2 FROM STDIN WITH (FREEZE);
1
\.
ROLLBACK TO SAVEPOINT s;
RELEASE SAVEPOINT s;
COPY cf2 FROM STDIN WITH (FREEZE);
5
6
\.
COMMIT;
SELECT * FROM cf2 ORDER BY id;
VACUUM (FREEZE) cf;
VACUUM cfk;
SELECT * FROM cf ORDER BY id;
SELECT * FROM cfk ORDER BY id;
DROP TABLE cf_old, cf, cfk, cf2;
