-- The index access method `orioledb_btree`: secondary indexes of orioledb
-- tables stored in engine trees (src/am/secondary). Its operator classes
-- use btree's operators and comparison functions, so the planner orders by
-- them as by btree's. Integers of every width share one family, with the
-- cross-type operators, as in btree's integer_ops (a bigint column compared
-- with an int literal is an index condition); other classes list only
-- same-type operators.
CREATE FUNCTION orioledb_btree_handler(internal)
    RETURNS index_am_handler
    LANGUAGE c
    STRICT
    AS 'MODULE_PATHNAME', 'orioledb_btree_handler';

COMMENT ON FUNCTION orioledb_btree_handler(internal) IS
    'index access method handler for orioledb_btree (orioledb_rs)';

CREATE ACCESS METHOD orioledb_btree TYPE INDEX HANDLER orioledb_btree_handler;

COMMENT ON ACCESS METHOD orioledb_btree IS
    'ordered secondary indexes of orioledb tables, stored and compressed by the engine (orioledb_rs)';

CREATE OPERATOR FAMILY integer_ops USING orioledb_btree;

CREATE OPERATOR CLASS int2_ops DEFAULT FOR TYPE int2 USING orioledb_btree FAMILY integer_ops AS
    OPERATOR 1 < (int2, int2), OPERATOR 2 <= (int2, int2), OPERATOR 3 = (int2, int2),
    OPERATOR 4 >= (int2, int2), OPERATOR 5 > (int2, int2),
    FUNCTION 1 btint2cmp(int2, int2);

CREATE OPERATOR CLASS int4_ops DEFAULT FOR TYPE int4 USING orioledb_btree FAMILY integer_ops AS
    OPERATOR 1 < (int4, int4), OPERATOR 2 <= (int4, int4), OPERATOR 3 = (int4, int4),
    OPERATOR 4 >= (int4, int4), OPERATOR 5 > (int4, int4),
    FUNCTION 1 btint4cmp(int4, int4);

CREATE OPERATOR CLASS int8_ops DEFAULT FOR TYPE int8 USING orioledb_btree FAMILY integer_ops AS
    OPERATOR 1 < (int8, int8), OPERATOR 2 <= (int8, int8), OPERATOR 3 = (int8, int8),
    OPERATOR 4 >= (int8, int8), OPERATOR 5 > (int8, int8),
    FUNCTION 1 btint8cmp(int8, int8);

ALTER OPERATOR FAMILY integer_ops USING orioledb_btree ADD
    OPERATOR 1 < (int2, int4), OPERATOR 2 <= (int2, int4), OPERATOR 3 = (int2, int4),
    OPERATOR 4 >= (int2, int4), OPERATOR 5 > (int2, int4),
    FUNCTION 1 (int2, int4) btint24cmp(int2, int4),
    OPERATOR 1 < (int2, int8), OPERATOR 2 <= (int2, int8), OPERATOR 3 = (int2, int8),
    OPERATOR 4 >= (int2, int8), OPERATOR 5 > (int2, int8),
    FUNCTION 1 (int2, int8) btint28cmp(int2, int8),
    OPERATOR 1 < (int4, int2), OPERATOR 2 <= (int4, int2), OPERATOR 3 = (int4, int2),
    OPERATOR 4 >= (int4, int2), OPERATOR 5 > (int4, int2),
    FUNCTION 1 (int4, int2) btint42cmp(int4, int2),
    OPERATOR 1 < (int4, int8), OPERATOR 2 <= (int4, int8), OPERATOR 3 = (int4, int8),
    OPERATOR 4 >= (int4, int8), OPERATOR 5 > (int4, int8),
    FUNCTION 1 (int4, int8) btint48cmp(int4, int8),
    OPERATOR 1 < (int8, int2), OPERATOR 2 <= (int8, int2), OPERATOR 3 = (int8, int2),
    OPERATOR 4 >= (int8, int2), OPERATOR 5 > (int8, int2),
    FUNCTION 1 (int8, int2) btint82cmp(int8, int2),
    OPERATOR 1 < (int8, int4), OPERATOR 2 <= (int8, int4), OPERATOR 3 = (int8, int4),
    OPERATOR 4 >= (int8, int4), OPERATOR 5 > (int8, int4),
    FUNCTION 1 (int8, int4) btint84cmp(int8, int4);

CREATE OPERATOR CLASS oid_ops DEFAULT FOR TYPE oid USING orioledb_btree AS
    OPERATOR 1 < (oid, oid), OPERATOR 2 <= (oid, oid), OPERATOR 3 = (oid, oid),
    OPERATOR 4 >= (oid, oid), OPERATOR 5 > (oid, oid),
    FUNCTION 1 btoidcmp(oid, oid);

CREATE OPERATOR CLASS bool_ops DEFAULT FOR TYPE bool USING orioledb_btree AS
    OPERATOR 1 < (bool, bool), OPERATOR 2 <= (bool, bool), OPERATOR 3 = (bool, bool),
    OPERATOR 4 >= (bool, bool), OPERATOR 5 > (bool, bool),
    FUNCTION 1 btboolcmp(bool, bool);

CREATE OPERATOR CLASS float4_ops DEFAULT FOR TYPE float4 USING orioledb_btree AS
    OPERATOR 1 < (float4, float4), OPERATOR 2 <= (float4, float4), OPERATOR 3 = (float4, float4),
    OPERATOR 4 >= (float4, float4), OPERATOR 5 > (float4, float4),
    FUNCTION 1 btfloat4cmp(float4, float4);

CREATE OPERATOR CLASS float8_ops DEFAULT FOR TYPE float8 USING orioledb_btree AS
    OPERATOR 1 < (float8, float8), OPERATOR 2 <= (float8, float8), OPERATOR 3 = (float8, float8),
    OPERATOR 4 >= (float8, float8), OPERATOR 5 > (float8, float8),
    FUNCTION 1 btfloat8cmp(float8, float8);

CREATE OPERATOR CLASS numeric_ops DEFAULT FOR TYPE numeric USING orioledb_btree AS
    OPERATOR 1 < (numeric, numeric), OPERATOR 2 <= (numeric, numeric), OPERATOR 3 = (numeric, numeric),
    OPERATOR 4 >= (numeric, numeric), OPERATOR 5 > (numeric, numeric),
    FUNCTION 1 numeric_cmp(numeric, numeric);

CREATE OPERATOR CLASS money_ops DEFAULT FOR TYPE money USING orioledb_btree AS
    OPERATOR 1 < (money, money), OPERATOR 2 <= (money, money), OPERATOR 3 = (money, money),
    OPERATOR 4 >= (money, money), OPERATOR 5 > (money, money),
    FUNCTION 1 cash_cmp(money, money);

CREATE OPERATOR CLASS text_ops DEFAULT FOR TYPE text USING orioledb_btree AS
    OPERATOR 1 < (text, text), OPERATOR 2 <= (text, text), OPERATOR 3 = (text, text),
    OPERATOR 4 >= (text, text), OPERATOR 5 > (text, text),
    FUNCTION 1 bttextcmp(text, text);

CREATE OPERATOR CLASS bpchar_ops DEFAULT FOR TYPE bpchar USING orioledb_btree AS
    OPERATOR 1 < (bpchar, bpchar), OPERATOR 2 <= (bpchar, bpchar), OPERATOR 3 = (bpchar, bpchar),
    OPERATOR 4 >= (bpchar, bpchar), OPERATOR 5 > (bpchar, bpchar),
    FUNCTION 1 bpcharcmp(bpchar, bpchar);

CREATE OPERATOR CLASS bytea_ops DEFAULT FOR TYPE bytea USING orioledb_btree AS
    OPERATOR 1 < (bytea, bytea), OPERATOR 2 <= (bytea, bytea), OPERATOR 3 = (bytea, bytea),
    OPERATOR 4 >= (bytea, bytea), OPERATOR 5 > (bytea, bytea),
    FUNCTION 1 byteacmp(bytea, bytea);

CREATE OPERATOR CLASS name_ops DEFAULT FOR TYPE name USING orioledb_btree AS
    OPERATOR 1 < (name, name), OPERATOR 2 <= (name, name), OPERATOR 3 = (name, name),
    OPERATOR 4 >= (name, name), OPERATOR 5 > (name, name),
    FUNCTION 1 btnamecmp(name, name);

CREATE OPERATOR CLASS char_ops DEFAULT FOR TYPE "char" USING orioledb_btree AS
    OPERATOR 1 < ("char", "char"), OPERATOR 2 <= ("char", "char"), OPERATOR 3 = ("char", "char"),
    OPERATOR 4 >= ("char", "char"), OPERATOR 5 > ("char", "char"),
    FUNCTION 1 btcharcmp("char", "char");

CREATE OPERATOR CLASS date_ops DEFAULT FOR TYPE date USING orioledb_btree AS
    OPERATOR 1 < (date, date), OPERATOR 2 <= (date, date), OPERATOR 3 = (date, date),
    OPERATOR 4 >= (date, date), OPERATOR 5 > (date, date),
    FUNCTION 1 date_cmp(date, date);

CREATE OPERATOR CLASS time_ops DEFAULT FOR TYPE time USING orioledb_btree AS
    OPERATOR 1 < (time, time), OPERATOR 2 <= (time, time), OPERATOR 3 = (time, time),
    OPERATOR 4 >= (time, time), OPERATOR 5 > (time, time),
    FUNCTION 1 time_cmp(time, time);

CREATE OPERATOR CLASS timetz_ops DEFAULT FOR TYPE timetz USING orioledb_btree AS
    OPERATOR 1 < (timetz, timetz), OPERATOR 2 <= (timetz, timetz), OPERATOR 3 = (timetz, timetz),
    OPERATOR 4 >= (timetz, timetz), OPERATOR 5 > (timetz, timetz),
    FUNCTION 1 timetz_cmp(timetz, timetz);

CREATE OPERATOR CLASS timestamp_ops DEFAULT FOR TYPE timestamp USING orioledb_btree AS
    OPERATOR 1 < (timestamp, timestamp), OPERATOR 2 <= (timestamp, timestamp), OPERATOR 3 = (timestamp, timestamp),
    OPERATOR 4 >= (timestamp, timestamp), OPERATOR 5 > (timestamp, timestamp),
    FUNCTION 1 timestamp_cmp(timestamp, timestamp);

CREATE OPERATOR CLASS timestamptz_ops DEFAULT FOR TYPE timestamptz USING orioledb_btree AS
    OPERATOR 1 < (timestamptz, timestamptz), OPERATOR 2 <= (timestamptz, timestamptz), OPERATOR 3 = (timestamptz, timestamptz),
    OPERATOR 4 >= (timestamptz, timestamptz), OPERATOR 5 > (timestamptz, timestamptz),
    FUNCTION 1 timestamptz_cmp(timestamptz, timestamptz);

CREATE OPERATOR CLASS interval_ops DEFAULT FOR TYPE interval USING orioledb_btree AS
    OPERATOR 1 < (interval, interval), OPERATOR 2 <= (interval, interval), OPERATOR 3 = (interval, interval),
    OPERATOR 4 >= (interval, interval), OPERATOR 5 > (interval, interval),
    FUNCTION 1 interval_cmp(interval, interval);

CREATE OPERATOR CLASS uuid_ops DEFAULT FOR TYPE uuid USING orioledb_btree AS
    OPERATOR 1 < (uuid, uuid), OPERATOR 2 <= (uuid, uuid), OPERATOR 3 = (uuid, uuid),
    OPERATOR 4 >= (uuid, uuid), OPERATOR 5 > (uuid, uuid),
    FUNCTION 1 uuid_cmp(uuid, uuid);

CREATE OPERATOR CLASS inet_ops DEFAULT FOR TYPE inet USING orioledb_btree AS
    OPERATOR 1 < (inet, inet), OPERATOR 2 <= (inet, inet), OPERATOR 3 = (inet, inet),
    OPERATOR 4 >= (inet, inet), OPERATOR 5 > (inet, inet),
    FUNCTION 1 network_cmp(inet, inet);

CREATE OPERATOR CLASS macaddr_ops DEFAULT FOR TYPE macaddr USING orioledb_btree AS
    OPERATOR 1 < (macaddr, macaddr), OPERATOR 2 <= (macaddr, macaddr), OPERATOR 3 = (macaddr, macaddr),
    OPERATOR 4 >= (macaddr, macaddr), OPERATOR 5 > (macaddr, macaddr),
    FUNCTION 1 macaddr_cmp(macaddr, macaddr);

CREATE OPERATOR CLASS macaddr8_ops DEFAULT FOR TYPE macaddr8 USING orioledb_btree AS
    OPERATOR 1 < (macaddr8, macaddr8), OPERATOR 2 <= (macaddr8, macaddr8), OPERATOR 3 = (macaddr8, macaddr8),
    OPERATOR 4 >= (macaddr8, macaddr8), OPERATOR 5 > (macaddr8, macaddr8),
    FUNCTION 1 macaddr8_cmp(macaddr8, macaddr8);

CREATE OPERATOR CLASS pg_lsn_ops DEFAULT FOR TYPE pg_lsn USING orioledb_btree AS
    OPERATOR 1 < (pg_lsn, pg_lsn), OPERATOR 2 <= (pg_lsn, pg_lsn), OPERATOR 3 = (pg_lsn, pg_lsn),
    OPERATOR 4 >= (pg_lsn, pg_lsn), OPERATOR 5 > (pg_lsn, pg_lsn),
    FUNCTION 1 pg_lsn_cmp(pg_lsn, pg_lsn);
