-- The table access method `orioledb`. The handler is a plain C-ABI symbol of
-- orioledb_rs.so that returns a pointer to a static TableAmRoutine.
CREATE FUNCTION orioledb_tableam_handler(internal)
    RETURNS table_am_handler
    LANGUAGE c
    STRICT
    AS 'MODULE_PATHNAME', 'orioledb_tableam_handler';

COMMENT ON FUNCTION orioledb_tableam_handler(internal) IS
    'table access method handler for orioledb (orioledb_rs)';

CREATE ACCESS METHOD orioledb TYPE TABLE HANDLER orioledb_tableam_handler;

COMMENT ON ACCESS METHOD orioledb IS
    'index-organized, compressed, VACUUM-free tables (orioledb_rs)';
