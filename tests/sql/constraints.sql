-- Constraints: UNIQUE (incl. NULLs, multi-column, NULLS NOT DISTINCT), deferrable
-- unique, CHECK, NOT NULL, exclusion, foreign keys in both directions, ON CONFLICT.
CREATE TABLE u (id int PRIMARY KEY, code text UNIQUE, a int, b int, UNIQUE (a, b));
INSERT INTO u VALUES (1, 'a', 1, 1), (2, 'b', 1, 2), (3, NULL, NULL, 1), (4, NULL, NULL, 1);
INSERT INTO u VALUES (5, 'a', 5, 5);
INSERT INTO u VALUES (5, 'e', 1, 1);
UPDATE u SET code = 'b' WHERE id = 1;
UPDATE u SET code = 'z' WHERE id = 1;
UPDATE u SET code = 'a' WHERE id = 2;
SELECT * FROM u ORDER BY id;
-- swapping unique values through a third value, in a transaction
BEGIN;
UPDATE u SET code = 'tmp' WHERE id = 1;
UPDATE u SET code = 'z' WHERE id = 2;
UPDATE u SET code = 'a' WHERE id = 1;
COMMIT;
SELECT id, code FROM u ORDER BY id;
-- a non-deferrable unique constraint is checked per row
UPDATE u SET id = id + 1 WHERE id = 2;
CREATE TABLE nnd (x int, UNIQUE NULLS NOT DISTINCT (x));
INSERT INTO nnd VALUES (NULL);
INSERT INTO nnd VALUES (NULL);
SELECT count(*) FROM nnd;

-- deferrable unique constraints
CREATE TABLE d (id int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v int UNIQUE DEFERRABLE INITIALLY DEFERRED);
INSERT INTO d SELECT g, g FROM generate_series(1, 10) g;
UPDATE d SET id = id + 1;
SELECT id, v FROM d ORDER BY id;
UPDATE d SET v = 11 - v;
SELECT id, v FROM d ORDER BY id;
BEGIN;
UPDATE d SET v = 1 WHERE id = 2;
SELECT id, v FROM d WHERE v = 1 ORDER BY id;
UPDATE d SET v = 100 WHERE id = 11;
COMMIT;
SELECT id, v FROM d WHERE v IN (1, 100) ORDER BY id;
BEGIN;
UPDATE d SET v = 5 WHERE id = 2;
COMMIT;
BEGIN;
SET CONSTRAINTS ALL DEFERRED;
INSERT INTO d VALUES (2, 1000);
INSERT INTO d VALUES (3, 1001);
DELETE FROM d WHERE id = 2 AND v <> 1000;
DELETE FROM d WHERE id = 3 AND v <> 1001;
SET CONSTRAINTS ALL IMMEDIATE;
COMMIT;
SELECT id, v FROM d ORDER BY id;
BEGIN;
SET CONSTRAINTS d_pkey DEFERRED;
INSERT INTO d VALUES (4, 2000);
SET CONSTRAINTS d_pkey IMMEDIATE;
ROLLBACK;
SELECT count(*) FROM d;

-- CHECK, NOT NULL, exclusion
CREATE TABLE chk (id int PRIMARY KEY, n int NOT NULL CHECK (n > 0), r int4range,
                  EXCLUDE USING gist (r WITH &&));
INSERT INTO chk VALUES (1, 1, '[1,5)'), (2, 2, '[5,10)');
INSERT INTO chk VALUES (3, 0, '[20,30)');
INSERT INTO chk VALUES (3, NULL, '[20,30)');
INSERT INTO chk VALUES (3, 3, '[4,6)');
UPDATE chk SET r = '[3,7)' WHERE id = 2;
UPDATE chk SET n = -1 WHERE id = 1;
SELECT * FROM chk ORDER BY id;

-- foreign keys
CREATE TABLE parent (id int PRIMARY KEY, name text UNIQUE);
CREATE TABLE child (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE CASCADE ON UPDATE CASCADE,
                    pname text REFERENCES parent (name) ON DELETE SET NULL ON UPDATE RESTRICT);
INSERT INTO parent SELECT g, 'p' || g FROM generate_series(1, 5) g;
INSERT INTO child SELECT g, g % 5 + 1, 'p' || (g % 3 + 1) FROM generate_series(1, 20) g;
INSERT INTO child VALUES (100, 99, NULL);
INSERT INTO child VALUES (100, NULL, 'nobody');
INSERT INTO child VALUES (100, NULL, NULL);
UPDATE child SET pid = 42 WHERE id = 1;
SELECT pid, count(*) FROM child GROUP BY pid ORDER BY pid NULLS FIRST;
DELETE FROM parent WHERE id = 1;
SELECT pid, count(*) FROM child GROUP BY pid ORDER BY pid NULLS FIRST;
UPDATE parent SET id = 50 WHERE id = 2;
SELECT pid, count(*) FROM child GROUP BY pid ORDER BY pid NULLS FIRST;
UPDATE parent SET name = 'renamed' WHERE name = 'p3';
DELETE FROM parent WHERE name = 'p3';
SELECT pname, count(*) FROM child GROUP BY pname ORDER BY pname NULLS FIRST;
TRUNCATE parent;
BEGIN;
TRUNCATE child, parent;
SELECT (SELECT count(*) FROM parent), (SELECT count(*) FROM child);
ROLLBACK;
SELECT (SELECT count(*) FROM parent), (SELECT count(*) FROM child);
-- FK referencing a table without rows yet, added to a populated table
CREATE TABLE orders (id int PRIMARY KEY, customer int);
INSERT INTO orders SELECT g, g % 4 FROM generate_series(1, 12) g;
CREATE TABLE customers (id int PRIMARY KEY);
ALTER TABLE orders ADD FOREIGN KEY (customer) REFERENCES customers;
INSERT INTO customers VALUES (0), (1), (2), (3);
ALTER TABLE orders ADD CONSTRAINT orders_customer_fk FOREIGN KEY (customer) REFERENCES customers;
DELETE FROM customers WHERE id = 3;
-- deferred FK: child first, parent later
CREATE TABLE dchild (id int PRIMARY KEY, pid int REFERENCES customers DEFERRABLE INITIALLY DEFERRED);
BEGIN;
INSERT INTO dchild VALUES (1, 10);
INSERT INTO customers VALUES (10);
COMMIT;
BEGIN;
INSERT INTO dchild VALUES (2, 11);
COMMIT;
SELECT * FROM dchild ORDER BY id;
-- self-referencing FK
CREATE TABLE tree (id int PRIMARY KEY, up int REFERENCES tree ON DELETE CASCADE);
INSERT INTO tree VALUES (1, NULL), (2, 1), (3, 2), (4, 1), (5, 4);
DELETE FROM tree WHERE id = 2;
SELECT * FROM tree ORDER BY id;
UPDATE tree SET up = 9 WHERE id = 5;

-- ON CONFLICT
CREATE TABLE kv (k int PRIMARY KEY, v text, n int DEFAULT 1, alt text UNIQUE);
INSERT INTO kv (k, v) VALUES (1, 'one'), (2, 'two');
INSERT INTO kv (k, v) VALUES (1, 'uno') ON CONFLICT DO NOTHING;
INSERT INTO kv (k, v) VALUES (1, 'uno'), (3, 'three') ON CONFLICT (k) DO NOTHING RETURNING *;
INSERT INTO kv (k, v) VALUES (1, 'uno') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, n = kv.n + 1 RETURNING *;
INSERT INTO kv (k, v) VALUES (1, 'eins') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, n = kv.n + 1 WHERE kv.n > 5 RETURNING *;
INSERT INTO kv (k, v) VALUES (2, 'x'), (2, 'y') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;
INSERT INTO kv (k, v) VALUES (2, 'x'), (2, 'y') ON CONFLICT (k) DO NOTHING;
INSERT INTO kv (k, v, alt) VALUES (10, 'ten', 'A') ON CONFLICT (alt) DO UPDATE SET n = kv.n + 100;
INSERT INTO kv (k, v, alt) VALUES (11, 'eleven', 'A') ON CONFLICT (alt) DO UPDATE SET n = kv.n + 100;
INSERT INTO kv (k, v, alt) VALUES (10, 'ten', 'B') ON CONFLICT (alt) DO UPDATE SET n = kv.n + 100;
INSERT INTO kv (k, v, alt) VALUES (12, 'twelve', 'A') ON CONFLICT (alt) DO UPDATE SET k = 13;
INSERT INTO kv (k, v, alt) VALUES (14, 'x', 'A') ON CONFLICT (alt) DO UPDATE SET k = 1;
INSERT INTO kv (k, v) SELECT g, 'bulk' || g FROM generate_series(1, 20) g
    ON CONFLICT (k) DO UPDATE SET n = kv.n + 10 WHERE kv.k % 2 = 0;
SELECT * FROM kv ORDER BY k;
BEGIN;
INSERT INTO kv (k, v) VALUES (100, 'a') ON CONFLICT (k) DO UPDATE SET v = 'b';
INSERT INTO kv (k, v) VALUES (100, 'a') ON CONFLICT (k) DO UPDATE SET v = kv.v || 'c';
INSERT INTO kv (k, v) VALUES (100, 'a') ON CONFLICT (k) DO UPDATE SET v = kv.v || 'd' RETURNING k, v;
SAVEPOINT s;
INSERT INTO kv (k, v) VALUES (100, 'a') ON CONFLICT (k) DO UPDATE SET v = 'lost';
ROLLBACK TO s;
INSERT INTO kv (k, v) VALUES (101, 'a') ON CONFLICT DO NOTHING;
COMMIT;
SELECT * FROM kv WHERE k >= 100 ORDER BY k;
-- ON CONFLICT on a deferrable constraint is refused
INSERT INTO d VALUES (5, 5) ON CONFLICT (id) DO NOTHING;
-- arbiter on a partial unique index
CREATE TABLE pu (id int, active bool, v int);
CREATE UNIQUE INDEX pu_active ON pu (id) WHERE active;
INSERT INTO pu VALUES (1, true, 1), (1, false, 2);
INSERT INTO pu VALUES (1, true, 3) ON CONFLICT (id) WHERE active DO UPDATE SET v = pu.v + 10;
INSERT INTO pu VALUES (1, false, 4) ON CONFLICT (id) WHERE active DO UPDATE SET v = pu.v + 10;
SELECT * FROM pu ORDER BY id, active, v;
