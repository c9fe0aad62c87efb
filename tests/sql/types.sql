-- Data types stored and read back, and used as primary keys (orioledb orders rows
-- by the key, so each key type's ordering matters): int2/4/8, numeric, float,
-- text/varchar/char with collations, uuid, date, time, timestamp(tz), interval,
-- bytea, bool, jsonb/json, arrays, ranges, enums, composites, domains, oid, inet.
SET timezone = 'UTC';
SET extra_float_digits = 0;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE pair AS (x int, y text);
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE alltypes (
  id serial PRIMARY KEY, i2 int2, i4 int4, i8 int8, num numeric(20, 6), f4 float4, f8 float8,
  t text COLLATE "en-x-icu", vc varchar(10), ch char(5), u uuid, d date, tm time, ts timestamp(3),
  tz timestamptz, iv interval, by bytea, b bool, j jsonb, js json, ia int[], ta text[],
  r int8range, m mood, p pair, dp posint, o oid, ip inet, mo money, bi bit(4), x xml);
INSERT INTO alltypes (i2, i4, i8, num, f4, f8, t, vc, ch, u, d, tm, ts, tz, iv, by, b, j, js, ia, ta, r, m, p, dp, o, ip, mo, bi, x) VALUES
  (32767, 2147483647, 9223372036854775807, 12345678901234.123456, 1.5, 1e300, 'Zürich', 'ten chars!', 'ab',
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', '23:59:59.999999', '2024-01-01 12:34:56.789',
   '2024-01-01 12:34:56.789+05', '1 year 2 mons 3 days 04:05:06', '\xdeadbeef00', true,
   '{"a": [1, 2, {"b": null}], "c": "d"}', '{"keep": "spacing" , "dup": 1, "dup": 2}',
   '{1,2,NULL,4}', '{"a b",NULL,"c,d"}', '[1,10)', 'happy', ROW(1, 'one'), 1, 42, '192.168.1.0/24', 12.34, B'1010',
   '<a b="c">text</a>'),
  (-32768, -2147483648, -9223372036854775808, -0.000001, '-Infinity', 'NaN', '', '', '', '00000000-0000-0000-0000-000000000000',
   '4713-01-01 BC', '00:00', '1900-01-01', '-infinity', '-178000000 years', '\x', false, '[]', '[]', '{}', '{}', 'empty', 'sad',
   ROW(NULL, NULL), 2147483647, 0, '::1', -0.01, B'0000', ''),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO alltypes (dp) VALUES (0);
INSERT INTO alltypes (vc) VALUES ('eleven chars');
INSERT INTO alltypes (i2) VALUES (32768);
SELECT * FROM alltypes ORDER BY id;
SELECT id, pg_column_size(alltypes.*) > 0 AS sized, md5(alltypes::text) FROM alltypes ORDER BY id;
UPDATE alltypes SET j = j || '{"new": true}', ia = ia || 5, ta[2] = 'filled', p.y = 'changed', r = r * '[5,20)',
                    m = 'ok', iv = iv * 2, ts = ts + interval '1 day', by = by || '\x01'::bytea
 WHERE id = 1;
UPDATE alltypes SET j = '{"x": 1}', i8 = i8 + 1 WHERE id = 2;
SELECT j, ia, ta, p, r, m, iv, ts, by FROM alltypes WHERE id = 1;
SELECT id, j, i8 FROM alltypes WHERE id = 2;
SELECT id FROM alltypes WHERE j @> '{"c": "d"}' ORDER BY id;
SELECT id FROM alltypes WHERE j ? 'new' AND 2 = ANY (ia) AND t = 'zürich' COLLATE "und-x-icu" ORDER BY id;
SELECT id, (p).x, (p).y FROM alltypes ORDER BY id;
SELECT count(*) FILTER (WHERE b), count(*) FILTER (WHERE NOT b), count(*) FILTER (WHERE b IS NULL) FROM alltypes;

-- each ordered type as a primary key: values come back in key order
CREATE TABLE k_i2 (k int2 PRIMARY KEY);
INSERT INTO k_i2 VALUES (0), (-1), (1), (32767), (-32768), (256), (-256), (255);
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_i2;
CREATE TABLE k_i8 (k int8 PRIMARY KEY);
INSERT INTO k_i8 VALUES (0), (-1), (1), (9223372036854775807), (-9223372036854775808), (4294967296), (-4294967296);
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_i8;
SET enable_seqscan = off;
SELECT k FROM k_i8 WHERE k < 0 ORDER BY k DESC;
RESET enable_seqscan;
CREATE TABLE k_f8 (k float8 PRIMARY KEY);
INSERT INTO k_f8 VALUES (0), (1.5), (-1.5), ('Infinity'), ('-Infinity'), ('NaN'), (1e-300);
INSERT INTO k_f8 VALUES ('-0');
INSERT INTO k_f8 VALUES ('NaN');
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_f8;
CREATE TABLE k_uuid (k uuid PRIMARY KEY, n int);
INSERT INTO k_uuid SELECT md5(g::text)::uuid, g FROM generate_series(1, 50) g;
INSERT INTO k_uuid VALUES (md5('7')::uuid, 0);
SELECT k, n FROM k_uuid ORDER BY k LIMIT 5;
SELECT n FROM k_uuid WHERE k = md5('42')::uuid;
CREATE TABLE k_date (k date PRIMARY KEY);
INSERT INTO k_date VALUES ('2000-01-01'), ('1999-12-31'), ('infinity'), ('-infinity'), ('0001-01-01 BC'), ('2100-03-01');
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_date;
CREATE TABLE k_ts (k timestamp PRIMARY KEY, z timestamptz UNIQUE);
INSERT INTO k_ts VALUES ('2000-01-01 00:00:00.000001', '2000-01-01 00:00:00+00'), ('1999-12-31 23:59:59.999999', '2000-01-01 00:00:00+01'),
  ('infinity', 'infinity'), ('-infinity', '-infinity'), ('1970-01-01', '1970-01-01 00:00:00-12');
INSERT INTO k_ts VALUES ('2001-01-01', '2000-01-01 01:00:00+02');
SELECT k, z FROM k_ts ORDER BY k;
SELECT k, z FROM k_ts ORDER BY z;
CREATE TABLE k_bytea (k bytea PRIMARY KEY);
INSERT INTO k_bytea VALUES ('\x'), ('\x00'), ('\x0000'), ('\x01'), ('\xff'), ('\x00ff'), ('\xfe00');
SELECT string_agg(encode(k, 'hex'), ' ' ORDER BY k) FROM k_bytea;
INSERT INTO k_bytea VALUES ('\x0000');
CREATE TABLE k_bool (k bool PRIMARY KEY, v int);
INSERT INTO k_bool VALUES (true, 1), (false, 0);
INSERT INTO k_bool VALUES (true, 2) ON CONFLICT (k) DO UPDATE SET v = k_bool.v + 10;
SELECT * FROM k_bool ORDER BY k;
CREATE TABLE k_text (k varchar(20) COLLATE "C" PRIMARY KEY, c char(4) UNIQUE);
INSERT INTO k_text VALUES ('a', 'a'), ('a ', 'b'), ('a\0', 'c'), ('ab', 'd'), ('A', 'e'), ('', 'f'), ('ß', 'g'), ('a b', 'h');
INSERT INTO k_text VALUES ('x', 'a  ');
SELECT string_agg(quote_literal(k), ' ' ORDER BY k) FROM k_text;
SELECT string_agg(quote_literal(c), ' ' ORDER BY c) FROM k_text;
CREATE TABLE k_enum (k mood PRIMARY KEY);
INSERT INTO k_enum VALUES ('happy'), ('sad'), ('ok');
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_enum;
CREATE TABLE k_arr (k int[] PRIMARY KEY);
INSERT INTO k_arr VALUES ('{1,2}'), ('{1}'), ('{}'), ('{2}'), ('{1,NULL}');
SELECT string_agg(k::text, ' ' ORDER BY k) FROM k_arr;
CREATE TABLE k_interval (k interval PRIMARY KEY);
INSERT INTO k_interval VALUES ('1 day'), ('30 days'), ('-1 sec'), ('1 year');
INSERT INTO k_interval VALUES ('24 hours');
INSERT INTO k_interval VALUES ('1 mon');
INSERT INTO k_interval VALUES ('360 days');
SELECT string_agg(k::text, ', ' ORDER BY k) FROM k_interval;
-- more key types stored in key order; ranges and ORDER BY through the key
INSERT INTO k_interval SELECT make_interval(mins => g * 7, days => g % 3, months => g % 2) FROM generate_series(1, 60) g
  ON CONFLICT DO NOTHING;
CREATE TABLE k_money (k money PRIMARY KEY);
INSERT INTO k_money VALUES ('-1.50'), ('0'), ('12.34'), ('-92233720368547758.08'), ('92233720368547758.07'), ('0.01');
CREATE TABLE k_lsn (k pg_lsn PRIMARY KEY);
INSERT INTO k_lsn VALUES ('0/0'), ('0/1'), ('1/0'), ('FFFFFFFF/FFFFFFFF'), ('7FFFFFFF/FFFFFFFF'), ('80000000/0');
CREATE TABLE k_char (k "char" PRIMARY KEY);
INSERT INTO k_char VALUES ('a'), ('A'), ('z'), (E'\x01'::text::"char"), ('~'), ('é'::text::"char");
CREATE TABLE k_mac (k macaddr PRIMARY KEY, k8 macaddr8 UNIQUE);
INSERT INTO k_mac VALUES ('08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05'), ('ff:ff:ff:ff:ff:ff', 'ff:ff:ff:ff:ff:ff:ff:ff'),
  ('00:00:00:00:00:00', '00:00:00:00:00:00:00:00'), ('08:00:2b:01:02:04', '08:00:2b:01:02:03:04:06'), ('80:00:00:00:00:01', '80:00:00:00:00:00:00:01');
CREATE TABLE k_mac8 (k macaddr8 PRIMARY KEY);
INSERT INTO k_mac8 SELECT k8 FROM k_mac;
CREATE TABLE k_timetz (k timetz PRIMARY KEY);
INSERT INTO k_timetz VALUES ('00:00+00'), ('01:00+01'), ('23:59:59.999999-12'), ('12:00+05:30'), ('12:00-05:30'), ('00:00:00.000001+14'), ('06:30+00');
CREATE TABLE k_name (k name PRIMARY KEY);
INSERT INTO k_name VALUES ('a'), ('A'), ('ab'), (''), ('zz'), ('a b'), (repeat('x', 63));
CREATE TABLE k_inet (k inet PRIMARY KEY);
INSERT INTO k_inet VALUES ('10.0.0.0/8'), ('10.0.0.1'), ('10.0.0.0'), ('10.0.0.0/16'), ('10.1.0.0/16'), ('9.255.255.255'), ('192.168.1.0/24'),
  ('::1'), ('::/0'), ('2001:db8::/32'), ('2001:db8::1'), ('0.0.0.0/0'), ('10.0.0.1/31'), ('255.255.255.255');
CREATE TABLE k_cidr (k cidr PRIMARY KEY);
INSERT INTO k_cidr VALUES ('10.0.0.0/8'), ('10.0.0.0/16'), ('10.1.0.0/16'), ('0.0.0.0/0'), ('2001:db8::/32'), ('192.168.1.0/24'), ('10.0.0.1/32');
SET enable_seqscan = off;
SET enable_sort = off;
SELECT k FROM k_interval WHERE k > '1 day' AND k <= '1 mon 2 days' ORDER BY k;
SELECT k FROM k_interval WHERE k = '720 hours';
SELECT k FROM k_money WHERE k >= '0' ORDER BY k DESC;
SELECT k FROM k_lsn WHERE k > '0/1' ORDER BY k;
SELECT k FROM k_lsn ORDER BY k DESC LIMIT 2;
SELECT k::text, ascii(k::text) FROM k_char WHERE k > 'A' ORDER BY k;
SELECT k FROM k_mac WHERE k < '80:00:00:00:00:01' ORDER BY k DESC;
SELECT k FROM k_mac8 ORDER BY k;
SELECT k FROM k_timetz WHERE k >= '06:30+00' ORDER BY k;
SELECT k FROM k_timetz ORDER BY k DESC LIMIT 3;
SELECT k FROM k_name WHERE k >= 'a' ORDER BY k;
SELECT k FROM k_inet ORDER BY k;
SELECT k FROM k_inet WHERE k > '10.0.0.0/8' AND k < '192.168.1.0/24' ORDER BY k DESC;
SELECT k FROM k_cidr ORDER BY k;
SELECT k FROM k_cidr WHERE k IN ('10.0.0.0/16', '2001:db8::/32', '1.0.0.0/8') ORDER BY k;
RESET enable_sort;
RESET enable_seqscan;
CREATE TABLE k_comp (a int, b text, c bool, PRIMARY KEY (c, b, a));
INSERT INTO k_comp VALUES (1, 'x', true), (1, 'x', false), (2, 'x', true), (1, 'y', true), (-1, '', false);
SELECT * FROM k_comp ORDER BY c, b, a;
-- Which duplicate is reported depends on the order the rows are updated in
-- (physical order), so only the error itself is compared.
\set VERBOSITY terse
UPDATE k_comp SET c = NOT c WHERE a = 1;
\set VERBOSITY default
SELECT * FROM k_comp ORDER BY c, b, a;
