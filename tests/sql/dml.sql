-- Basic DML: multi-row INSERT, INSERT ... SELECT, COPY, UPDATE (incl. primary key
-- columns), DELETE, RETURNING, NULLs, wide rows, UPDATE ... FROM the same table,
-- writable CTEs, a transaction seeing its own earlier commands, ctid lookups.
CREATE TABLE items (id int PRIMARY KEY, name text, qty int, price numeric(10,2));
INSERT INTO items VALUES (1, 'apple', 10, 1.50), (2, 'banana', 20, 0.25),
    (3, 'cherry', NULL, 12.00), (4, NULL, 5, NULL);
INSERT INTO items VALUES (5, 'date', 7, 3.10) RETURNING *;
INSERT INTO items SELECT g, 'gen' || g, g % 7, g / 3.0 FROM generate_series(10, 60) g;
INSERT INTO items VALUES (1, 'dup', 0, 0);
SELECT count(*), sum(id), sum(qty), sum(price), count(name), count(qty), count(price) FROM items;
SELECT * FROM items WHERE id < 10 ORDER BY id;

COPY items (id, name, qty, price) FROM STDIN;
100	copied one	1	1.01
101	\N	2	\N
102	tab\there	3	3.03
103	back\\slash	4	4.04
\.
COPY items FROM STDIN WITH (FORMAT csv);
200,"csv, quoted",5,5.55
201,,6,
\.
SELECT * FROM items WHERE id >= 100 ORDER BY id;
-- a failing COPY leaves nothing behind
COPY items (id, name) FROM STDIN;
300	ok
1	duplicate
\.
SELECT count(*) FROM items WHERE id = 300;

-- UPDATE of non-key and key columns
UPDATE items SET qty = qty + 1 WHERE id BETWEEN 10 AND 20;
WITH u AS (UPDATE items SET id = id + 1000 WHERE id IN (1, 2) RETURNING id, name)
SELECT * FROM u ORDER BY id;
UPDATE items SET id = 3 WHERE id = 5;
UPDATE items SET id = id + 1 WHERE id = 10;
UPDATE items SET id = id + 100 WHERE id BETWEEN 50 AND 55;
UPDATE items SET id = id - 100 WHERE id BETWEEN 150 AND 155;
SELECT id, name, qty FROM items WHERE id < 60 ORDER BY id;
UPDATE items SET name = upper(name), price = price * 2 WHERE name LIKE 'gen2%';
SELECT id, name, price FROM items WHERE name LIKE 'GEN%' ORDER BY id;
UPDATE items SET qty = NULL WHERE id = 1001;
UPDATE items SET qty = 99 WHERE qty IS NULL;
SELECT id, qty FROM items WHERE qty = 99 ORDER BY id;
-- no-op update and update of a missing row
UPDATE items SET qty = qty WHERE id = 3;
UPDATE items SET qty = 1 WHERE id = -1;
-- several updates of one row in one statement series
UPDATE items SET qty = 1 WHERE id = 4;
UPDATE items SET qty = qty + 1 WHERE id = 4;
UPDATE items SET qty = qty + 1 WHERE id = 4;
SELECT id, qty FROM items WHERE id = 4;

-- DELETE
DELETE FROM items WHERE id % 5 = 0 AND id < 100;
DELETE FROM items WHERE id = 4 RETURNING *;
DELETE FROM items WHERE id = 4 RETURNING *;
WITH d AS (DELETE FROM items WHERE id BETWEEN 30 AND 40 RETURNING id) SELECT count(*), sum(id) FROM d;
SELECT count(*), sum(id), sum(qty) FROM items;

-- UPDATE ... FROM the same table
UPDATE items a SET qty = b.qty * 10 FROM items b WHERE b.id = a.id + 1 AND a.id BETWEEN 10 AND 20;
SELECT id, qty FROM items WHERE id BETWEEN 10 AND 21 ORDER BY id;
DELETE FROM items a USING items b WHERE a.id = b.id + 1 AND b.id BETWEEN 41 AND 45;
SELECT id FROM items WHERE id BETWEEN 40 AND 50 ORDER BY id;

-- writable CTEs that modify and read
WITH moved AS (DELETE FROM items WHERE id >= 200 RETURNING *),
     ins AS (INSERT INTO items SELECT id + 300, name, qty, price FROM moved RETURNING *)
SELECT id, name FROM ins ORDER BY id;
WITH u AS (UPDATE items SET qty = 0 WHERE id > 500 RETURNING id, qty)
SELECT i.id, i.qty AS old_qty, u.qty AS new_qty FROM items i JOIN u USING (id) ORDER BY id;
SELECT id, qty FROM items WHERE id > 500 ORDER BY id;

-- a transaction sees its own earlier commands
BEGIN;
INSERT INTO items VALUES (700, 'tx', 1, 1);
SELECT id, name, qty FROM items WHERE id = 700;
UPDATE items SET qty = qty + 1 WHERE id = 700;
SELECT id, name, qty FROM items WHERE id = 700;
UPDATE items SET id = 701 WHERE id = 700;
SELECT id, name, qty FROM items WHERE id >= 700 ORDER BY id;
DELETE FROM items WHERE id = 701;
SELECT count(*) FROM items WHERE id >= 700;
INSERT INTO items VALUES (700, 'again', 5, 5);
COMMIT;
SELECT id, name, qty FROM items WHERE id >= 700 ORDER BY id;
BEGIN;
DELETE FROM items WHERE id = 700;
INSERT INTO items VALUES (700, 'reinserted', 6, 6);
ROLLBACK;
SELECT id, name, qty FROM items WHERE id >= 700 ORDER BY id;

-- ctid lookups (values differ between access methods; only counts are compared)
SELECT count(*) FROM items WHERE ctid = (SELECT ctid FROM items WHERE id = 700);
SELECT count(*) FROM items a JOIN items b ON a.ctid = b.ctid;
SELECT count(DISTINCT ctid) = count(*) FROM items;
UPDATE items SET qty = 42 WHERE ctid = (SELECT ctid FROM items WHERE id = 700);
SELECT id, qty FROM items WHERE id = 700;
DELETE FROM items WHERE ctid = (SELECT ctid FROM items WHERE id = 700);
SELECT count(*) FROM items WHERE id = 700;
SELECT count(*) FROM items WHERE ctid = '(0,0)';
SELECT count(*) FROM items WHERE ctid = '(4294967294,65535)';

-- table without a primary key: duplicates, NULLs everywhere
CREATE TABLE nokey (a int, b text);
INSERT INTO nokey VALUES (1, 'x'), (1, 'x'), (NULL, NULL), (2, NULL), (NULL, 'y');
SELECT a, b, count(*) FROM nokey GROUP BY a, b ORDER BY a NULLS FIRST, b NULLS FIRST;
UPDATE nokey SET b = 'z' WHERE a = 1;
DELETE FROM nokey WHERE a IS NULL AND b IS NULL;
SELECT a, b FROM nokey ORDER BY a NULLS FIRST, b NULLS FIRST;
CREATE TABLE nocols ();
INSERT INTO nocols DEFAULT VALUES;
INSERT INTO nocols SELECT FROM generate_series(1, 3);
SELECT count(*) FROM nocols;

-- wide-ish rows (up to ~2000 bytes)
CREATE TABLE wide (id int PRIMARY KEY, a text, b bytea, c varchar(1000));
INSERT INTO wide SELECT g, repeat(chr(65 + g % 26), 900 + g), decode(repeat(lpad(to_hex(g), 2, '0'), 500), 'hex'), repeat('c', 400)
    FROM generate_series(1, 40) g;
SELECT count(*), sum(length(a)), sum(length(b)), sum(length(c)), sum(octet_length(a || c)) FROM wide;
UPDATE wide SET a = repeat('u', 1500) WHERE id % 3 = 0;
UPDATE wide SET c = NULL, b = '\x00' WHERE id % 4 = 0;
SELECT id, length(a), md5(a), length(b), md5(b), length(c) FROM wide ORDER BY id;
DELETE FROM wide WHERE id > 30;
SELECT count(*), sum(length(a)) FROM wide;
COPY (SELECT id, a FROM wide WHERE id <= 2 ORDER BY id) TO STDOUT WITH (FORMAT csv);
COPY (SELECT * FROM nokey ORDER BY a, b) TO STDOUT;

-- bulk COPY (batched multi-row inserts), also failing half-way
CREATE TABLE bulk (id int PRIMARY KEY, tag text DEFAULT 'copied', n int);
CREATE INDEX bulk_n ON bulk (n);
\copy bulk (id) FROM PROGRAM 'seq 1 5000'
SELECT count(*), sum(id), min(tag), max(tag) FROM bulk;
\copy bulk (id, n) FROM PROGRAM '(seq 5001 7000; echo 3000) | sed "s/.*/&,&/"' WITH (FORMAT csv)
\copy bulk (id, n) FROM PROGRAM 'seq 5001 6000 | sed "s/.*/&,&/"' WITH (FORMAT csv)
SELECT count(*), sum(id), sum(n) FROM bulk;
SET enable_seqscan = off;
SELECT count(*), sum(id) FROM bulk WHERE n BETWEEN 5500 AND 5599;
RESET enable_seqscan;
CREATE TABLE bulk_part (id int, PRIMARY KEY (id)) PARTITION BY RANGE (id);
CREATE TABLE bulk_part1 PARTITION OF bulk_part FOR VALUES FROM (0) TO (2500);
CREATE TABLE bulk_part2 PARTITION OF bulk_part FOR VALUES FROM (2500) TO (10000);
\copy bulk_part FROM PROGRAM 'seq 1 4000'
SELECT tableoid::regclass, count(*), sum(id) FROM bulk_part GROUP BY 1 ORDER BY 1;
