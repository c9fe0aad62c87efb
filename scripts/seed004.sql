-- Seed 004's workload (../shared/seeds/004*): n rows inserted once, then
-- three passes of single-row updates by item_code, each pass one
-- transaction; table and index bytes after each phase (after a CHECKPOINT).
-- Run by scripts/seed004.sh, which sets: n, am, opts (WITH options),
-- size (an expression for the table's bytes), keys (extra text column).
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SELECT set_config('seed4.n', :'n', false) \gset
DROP TABLE IF EXISTS t4;
CREATE TABLE t4 (item_code char(10), order_id char(10), order_flag char(1), order_date timestamp, check_flag char(1), check_date timestamp, delivery_flag char(1), delivery_date timestamp, delivery_complite_flag char(1), delivery_complite_date timestamp) USING :am WITH (:opts);
ALTER TABLE t4 SET (autovacuum_enabled = false);
CREATE INDEX t4_idx ON t4(item_code);
INSERT INTO t4 (item_code, order_id, order_flag, order_date) SELECT concat('item', lpad(i::bpchar, 6, '0')), 'admin', 'Y', now() FROM generate_series(1, :n) i;
CHECKPOINT;
\pset tuples_only on
\pset format unaligned
SELECT 'insert', :size, pg_relation_size('t4_idx'), :keys;
DO $$ BEGIN FOR i IN 1..current_setting('seed4.n')::int LOOP UPDATE t4 SET check_flag = 'Y', check_date = now() WHERE item_code = concat('item', lpad(i::bpchar, 6, '0'))::bpchar; END LOOP; END $$;
CHECKPOINT;
SELECT 'check', :size, pg_relation_size('t4_idx'), :keys;
DO $$ BEGIN FOR i IN 1..current_setting('seed4.n')::int LOOP UPDATE t4 SET delivery_flag = 'Y', delivery_date = now() WHERE item_code = concat('item', lpad(i::bpchar, 6, '0'))::bpchar; END LOOP; END $$;
CHECKPOINT;
SELECT 'delivery', :size, pg_relation_size('t4_idx'), :keys;
DO $$ BEGIN FOR i IN 1..current_setting('seed4.n')::int LOOP UPDATE t4 SET delivery_complite_flag = 'Y', delivery_complite_date = now() WHERE item_code = concat('item', lpad(i::bpchar, 6, '0'))::bpchar; END LOOP; END $$;
CHECKPOINT;
SELECT 'complete', :size, pg_relation_size('t4_idx'), :keys;
-- Nobody writes any more: orioledb's background sweep prunes what the
-- last pass left and packs the leaves (am/quiet.rs); heap keeps it
-- (autovacuum is off). The first checkpoint writes the packed pages, the
-- next punches out the extents they superseded.
\o /dev/null
SELECT pg_sleep(5);
\o
CHECKPOINT;
CHECKPOINT;
SELECT 'settled', :size, pg_relation_size('t4_idx'), :keys;
