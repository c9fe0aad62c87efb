-- Partitioned tables (range, list, hash, default partition, sub-partitions),
-- cross-partition UPDATE, ATTACH/DETACH, inheritance, generated columns.
CREATE TABLE meas (id int, day date, v numeric, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE meas_2023 PARTITION OF meas FOR VALUES FROM ('2023-01-01') TO ('2024-01-01');
CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE meas_def PARTITION OF meas DEFAULT;
INSERT INTO meas SELECT g, date '2023-06-01' + g * 10, g * 1.5 FROM generate_series(1, 60) g;
SELECT tableoid::regclass, count(*), sum(v) FROM meas GROUP BY 1 ORDER BY 1;
INSERT INTO meas VALUES (1, '2023-06-11', 0);
-- cross-partition UPDATE moves rows
UPDATE meas SET day = day + 365 WHERE id <= 5;
SELECT tableoid::regclass, id, day, v FROM meas WHERE id <= 5 ORDER BY id;
WITH u AS (UPDATE meas SET day = '2030-01-01' WHERE id IN (6, 7) RETURNING tableoid::regclass, id, day)
SELECT * FROM u ORDER BY id;
UPDATE meas SET day = '2023-12-31', id = id + 1000 WHERE id = 8;
SELECT tableoid::regclass, count(*), sum(v), sum(id) FROM meas GROUP BY 1 ORDER BY 1;
UPDATE meas SET day = '2024-05-05' WHERE id = 5;
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;
DELETE FROM meas WHERE day >= '2024-06-01' AND day < '2024-08-01';
SELECT tableoid::regclass, count(*), sum(v) FROM meas GROUP BY 1 ORDER BY 1;
-- cross-partition update inside a transaction, then rolled back
BEGIN;
UPDATE meas SET day = day - 365 WHERE tableoid = 'meas_2024'::regclass;
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;
ROLLBACK;
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;
-- ON CONFLICT through the parent
INSERT INTO meas VALUES (1, '2024-06-11', 100) ON CONFLICT (id, day) DO UPDATE SET v = meas.v + 1000 RETURNING tableoid::regclass, *;
INSERT INTO meas VALUES (1, '2024-06-11', 100) ON CONFLICT (id, day) DO UPDATE SET v = meas.v + 1000 RETURNING tableoid::regclass, *;
-- DETACH / ATTACH of populated partitions
ALTER TABLE meas DETACH PARTITION meas_def;
SELECT count(*) FROM meas_def;
CREATE TABLE meas_2030 (LIKE meas INCLUDING ALL);
INSERT INTO meas_2030 SELECT * FROM meas_def WHERE day >= '2030-01-01';
ALTER TABLE meas ATTACH PARTITION meas_2030 FOR VALUES FROM ('2030-01-01') TO ('2031-01-01');
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;
ALTER TABLE meas ATTACH PARTITION meas_def DEFAULT;
DELETE FROM meas_def WHERE day >= '2030-01-01';
ALTER TABLE meas ATTACH PARTITION meas_def DEFAULT;
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;
TRUNCATE meas_2023;
SELECT tableoid::regclass, count(*) FROM meas GROUP BY 1 ORDER BY 1;

-- list partitioning with sub-partitions and a partitioned secondary index
CREATE TABLE sales (id int, region text, amount int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE sales_eu PARTITION OF sales FOR VALUES IN ('de', 'fr');
CREATE TABLE sales_us PARTITION OF sales FOR VALUES IN ('us') PARTITION BY HASH (id);
CREATE TABLE sales_us0 PARTITION OF sales_us FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE sales_us1 PARTITION OF sales_us FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE INDEX ON sales (amount);
INSERT INTO sales SELECT g, (ARRAY['de', 'fr', 'us'])[g % 3 + 1], g * 10 FROM generate_series(1, 30) g;
INSERT INTO sales VALUES (100, 'jp', 1);
SELECT tableoid::regclass, count(*), sum(amount) FROM sales GROUP BY 1 ORDER BY 1;
UPDATE sales SET region = 'us' WHERE region = 'fr' AND id < 10;
UPDATE sales SET region = 'de' WHERE id = 3;
UPDATE sales SET region = 'jp' WHERE id = 4;
SELECT tableoid::regclass, count(*), sum(amount) FROM sales GROUP BY 1 ORDER BY 1;
SET enable_seqscan = off;
SELECT id, region, amount FROM sales WHERE amount BETWEEN 50 AND 90 ORDER BY id;
RESET enable_seqscan;
COPY sales FROM STDIN;
200	de	5
201	us	6
\.
SELECT tableoid::regclass, id FROM sales WHERE id >= 200 ORDER BY id;

-- inheritance
CREATE TABLE animal (id int PRIMARY KEY, name text);
CREATE TABLE dog (breed text) INHERITS (animal);
CREATE TABLE cat (lives int DEFAULT 9) INHERITS (animal);
INSERT INTO animal VALUES (1, 'generic');
INSERT INTO dog VALUES (2, 'rex', 'lab'), (3, 'fido', 'pug');
INSERT INTO cat (id, name) VALUES (4, 'tom');
SELECT tableoid::regclass, id, name FROM animal ORDER BY id;
SELECT id, name FROM ONLY animal ORDER BY id;
UPDATE animal SET name = upper(name) WHERE id IN (1, 3);
DELETE FROM animal WHERE id = 4;
SELECT tableoid::regclass, id, name FROM animal ORDER BY id;
ALTER TABLE animal ADD COLUMN age int DEFAULT 1;
SELECT * FROM dog ORDER BY id;
INSERT INTO dog VALUES (1, 'dup id across tables', 'mutt');
SELECT count(*) FROM animal WHERE id = 1;
UPDATE animal SET age = age + id;
SELECT tableoid::regclass, id, age FROM animal ORDER BY id, tableoid::regclass::text;

-- generated columns
CREATE TABLE gen (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED,
                  c text GENERATED ALWAYS AS ('#' || id) STORED,
                  ident bigint GENERATED BY DEFAULT AS IDENTITY);
INSERT INTO gen (id, a) VALUES (1, 10), (2, NULL);
INSERT INTO gen (id, a, b) VALUES (3, 1, 1);
UPDATE gen SET a = a + 1;
UPDATE gen SET id = 20 WHERE id = 2;
UPDATE gen SET b = 5;
INSERT INTO gen (id, a, ident) VALUES (4, 4, 100);
SELECT * FROM gen ORDER BY id;
CREATE TABLE genp (id int, k int GENERATED ALWAYS AS (id % 3) STORED) PARTITION BY RANGE (id);
CREATE TABLE genp0 PARTITION OF genp FOR VALUES FROM (0) TO (5);
CREATE TABLE genp1 PARTITION OF genp FOR VALUES FROM (5) TO (100);
INSERT INTO genp (id) SELECT generate_series(1, 10);
UPDATE genp SET id = id + 3 WHERE id < 4;
SELECT tableoid::regclass, id, k FROM genp ORDER BY id;
