/*
 * store_pg_schema.h - the PostgreSQL store's schema, as numbered migrations
 * (store_pg.c applies those above the version recorded in tm_meta, in one
 * transaction under an advisory lock, so nodes starting at once are safe).
 *
 * Invariants the schema keeps:
 *  - a stream's next seq is its row's head + 1, taken by the UPDATE that
 *    locks the row in the transaction writing the event (tm_append): seqs
 *    are dense and commit in order; no sequence object is involved;
 *  - first_retained / trimmed_epoch record what retention removed, so a gap
 *    is known exactly (trimmed_epoch: the epoch of seq first_retained - 1);
 *  - request keys are bytes (bytea): a client's id may be any string;
 *  - a request record's node names the node running it; tm_nodes holds
 *    each live node's lease (until_ms, on the database's clock).
 */
#ifndef TM_STORE_PG_SCHEMA_H
#define TM_STORE_PG_SCHEMA_H

/* The version this build writes; a database recording a higher one is refused. */
#define TM_PG_SCHEMA_VERSION 4

/* The advisory lock key taken while migrating (any constant; "tidemark"). */
#define TM_PG_LOCK_KEY "7516391447221381"

static const char *const tm_pg_migrations[TM_PG_SCHEMA_VERSION] = {
    /* 1: the whole store (tm_append of one event) */
    "CREATE TABLE tm_kv(k text PRIMARY KEY, v bytea NOT NULL);"
    "CREATE TABLE tm_sessions(id text PRIMARY KEY, version text, client text,"
    "  created_ms bigint NOT NULL, last_seen_ms bigint NOT NULL, next_r bigint NOT NULL);"
    "CREATE INDEX tm_sessions_seen ON tm_sessions(last_seen_ms);"
    "CREATE TABLE tm_session_attrs(session text NOT NULL, name text NOT NULL, value text NOT NULL,"
    "  PRIMARY KEY(session, name));"
    "CREATE INDEX tm_session_attrs_name ON tm_session_attrs(name, session);"
    "CREATE TABLE tm_streams(sid bigserial PRIMARY KEY, session text NOT NULL, name text NOT NULL,"
    "  head bigint NOT NULL DEFAULT 0, first_retained bigint NOT NULL DEFAULT 1,"
    "  closed boolean NOT NULL DEFAULT false, trimmed_epoch text NOT NULL DEFAULT '',"
    "  UNIQUE(session, name));"
    "CREATE TABLE tm_events(sid bigint NOT NULL, seq bigint NOT NULL, epoch text NOT NULL,"
    "  created_ms bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY(sid, seq));"
    "CREATE TABLE tm_requests(session text NOT NULL, key bytea NOT NULL, state int NOT NULL,"
    "  tool text, stream text, message text, response bytea, updated_ms bigint NOT NULL,"
    "  node text NOT NULL, PRIMARY KEY(session, key));"
    "CREATE INDEX tm_requests_started ON tm_requests(updated_ms) WHERE state = 1;"
    "CREATE TABLE tm_nodes(node text PRIMARY KEY, until_ms bigint NOT NULL);"
    "CREATE TABLE tm_rowids(tbl text PRIMARY KEY, last bigint NOT NULL);"
    "CREATE TABLE tm_rows(tbl text NOT NULL, id bigint NOT NULL, doc text NOT NULL,"
    "  PRIMARY KEY(tbl, id));"
    "CREATE TABLE tm_busmsg(id bigserial PRIMARY KEY, ms bigint NOT NULL, data bytea NOT NULL);"
    /* the database's clock in ms: leases compare on one clock */
    "CREATE FUNCTION tm_now() RETURNS bigint LANGUAGE sql AS"
    "  $$SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint$$;"
    /* append: seq from the locked row; -1 no stream, -2 closed */
    "CREATE FUNCTION tm_append(p_session text, p_name text, p_epoch text, p_data bytea,"
    "  p_final boolean, p_req bytea, p_now bigint, p_keep bigint, p_cut bigint)"
    " RETURNS bigint LANGUAGE plpgsql AS $$\n"
    "DECLARE s record; v_first bigint; v_last bigint; v_te text;\n"
    "BEGIN\n"
    "  UPDATE tm_streams SET head = head + 1, closed = p_final\n"
    "   WHERE session = p_session AND name = p_name AND NOT closed\n"
    "   RETURNING sid, head, first_retained INTO s;\n"
    "  IF NOT FOUND THEN\n"
    "    PERFORM 1 FROM tm_streams WHERE session = p_session AND name = p_name;\n"
    "    RETURN CASE WHEN FOUND THEN -2 ELSE -1 END;\n"
    "  END IF;\n"
    "  INSERT INTO tm_events(sid, seq, epoch, created_ms, data)\n"
    "    VALUES (s.sid, s.head, p_epoch, p_now, p_data);\n"
    "  IF p_req IS NOT NULL THEN\n"
    "    UPDATE tm_requests SET state = 2, response = p_data, updated_ms = p_now\n"
    "     WHERE session = p_session AND key = p_req;\n"
    "  END IF;\n"
    "  v_first := s.first_retained;\n"
    "  IF p_keep > 0 AND s.head - v_first + 1 > p_keep THEN v_first := s.head - p_keep + 1; END IF;\n"
    "  IF p_cut IS NOT NULL THEN\n"
    "    SELECT max(seq) INTO v_last FROM tm_events WHERE sid = s.sid AND created_ms < p_cut;\n"
    "    IF v_last IS NOT NULL AND v_last + 1 > v_first THEN v_first := v_last + 1; END IF;\n"
    "  END IF;\n"
    "  IF v_first > s.first_retained THEN\n"
    "    SELECT epoch INTO v_te FROM tm_events WHERE sid = s.sid AND seq = v_first - 1;\n"
    "    DELETE FROM tm_events WHERE sid = s.sid AND seq < v_first;\n"
    "    UPDATE tm_streams SET first_retained = v_first, trimmed_epoch = coalesce(v_te, '')\n"
    "     WHERE sid = s.sid;\n"
    "  END IF;\n"
    "  RETURN s.head;\n"
    "END $$;"
    /* age retention of streams nobody appends to */
    "CREATE FUNCTION tm_retain_age(p_cut bigint) RETURNS void LANGUAGE plpgsql AS $$\n"
    "DECLARE r record;\n"
    "BEGIN\n"
    "  FOR r IN SELECT sid, max(seq) AS last FROM tm_events WHERE created_ms < p_cut GROUP BY sid LOOP\n"
    "    UPDATE tm_streams SET first_retained = r.last + 1, trimmed_epoch =\n"
    "      (SELECT epoch FROM tm_events WHERE sid = r.sid AND seq = r.last)\n"
    "     WHERE sid = r.sid AND first_retained <= r.last;\n"
    "    DELETE FROM tm_events WHERE sid = r.sid AND seq <= r.last;\n"
    "  END LOOP;\n"
    "END $$;"
    "CREATE FUNCTION tm_session_drop(p_id text) RETURNS void LANGUAGE sql AS $$\n"
    "  DELETE FROM tm_events WHERE sid IN (SELECT sid FROM tm_streams WHERE session = p_id);\n"
    "  DELETE FROM tm_streams WHERE session = p_id;\n"
    "  DELETE FROM tm_requests WHERE session = p_id;\n"
    "  DELETE FROM tm_session_attrs WHERE session = p_id;\n"
    "$$;"
    "CREATE FUNCTION tm_session_delete(p_id text) RETURNS boolean LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  DELETE FROM tm_sessions WHERE id = p_id;\n"
    "  IF NOT FOUND THEN RETURN false; END IF;\n"
    "  PERFORM tm_session_drop(p_id);\n"
    "  RETURN true;\n"
    "END $$;"
    "CREATE FUNCTION tm_expire(p_before bigint) RETURNS SETOF text LANGUAGE plpgsql AS $$\n"
    "DECLARE v text;\n"
    "BEGIN\n"
    "  FOR v IN DELETE FROM tm_sessions WHERE last_seen_ms < p_before RETURNING id LOOP\n"
    "    PERFORM tm_session_drop(v);\n"
    "    RETURN NEXT v;\n"
    "  END LOOP;\n"
    "END $$;"
    /* one attribute set (p_value not NULL) or removed; false: no such session */
    "CREATE FUNCTION tm_set_attr(p_id text, p_name text, p_value text) RETURNS boolean"
    " LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  PERFORM 1 FROM tm_sessions WHERE id = p_id FOR SHARE;\n"
    "  IF NOT FOUND THEN RETURN false; END IF;\n"
    "  IF p_value IS NULL THEN\n"
    "    DELETE FROM tm_session_attrs WHERE session = p_id AND name = p_name;\n"
    "  ELSE\n"
    "    INSERT INTO tm_session_attrs(session, name, value) VALUES (p_id, p_name, p_value)\n"
    "      ON CONFLICT (session, name) DO UPDATE SET value = EXCLUDED.value;\n"
    "  END IF;\n"
    "  RETURN true;\n"
    "END $$;"
    /* 0 recorded, -1 no session, -2 the key exists */
    "CREATE FUNCTION tm_req_begin(p_session text, p_key bytea, p_tool text, p_stream text,"
    "  p_message text, p_now bigint, p_node text) RETURNS int LANGUAGE plpgsql AS $$\n"
    "BEGIN\n"
    "  PERFORM 1 FROM tm_sessions WHERE id = p_session;\n"
    "  IF NOT FOUND THEN RETURN -1; END IF;\n"
    "  INSERT INTO tm_requests(session, key, state, tool, stream, message, updated_ms, node)\n"
    "    VALUES (p_session, p_key, 1, p_tool, p_stream, p_message, p_now, p_node)\n"
    "    ON CONFLICT DO NOTHING;\n"
    "  RETURN CASE WHEN FOUND THEN 0 ELSE -2 END;\n"
    "END $$;"
    /* an application row: ids 1, 2, ... per table in commit order (the
     * counter row is locked until the transaction ends) */
    "CREATE FUNCTION tm_row_insert(p_tbl text, p_doc text) RETURNS bigint LANGUAGE plpgsql AS $$\n"
    "DECLARE v bigint;\n"
    "BEGIN\n"
    "  INSERT INTO tm_rowids(tbl, last) VALUES (p_tbl, 1)\n"
    "    ON CONFLICT (tbl) DO UPDATE SET last = tm_rowids.last + 1 RETURNING last INTO v;\n"
    "  INSERT INTO tm_rows(tbl, id, doc) VALUES (p_tbl, v, p_doc);\n"
    "  RETURN v;\n"
    "END $$;",
    /* 2: tm_append takes a run of events of one stream (the writer groups
     * a batch's consecutive appends to a stream): one UPDATE of the stream
     * row and one INSERT of the run. p_blob holds the events' bytes end to
     * end, p_lens their lengths; p_final and p_req belong to the last one.
     * Returns the run's first seq, -1 no stream, -2 closed, -3 the record
     * p_req is finished or another node's (a node taken for dead whose call
     * a survivor took over): nothing is written. */
    "DROP FUNCTION tm_append(text, text, text, bytea, boolean, bytea, bigint, bigint, bigint);"
    "CREATE FUNCTION tm_append(p_session text, p_name text, p_epoch text, p_blob bytea,"
    "  p_lens int[], p_final boolean, p_req bytea, p_now bigint, p_keep bigint, p_cut bigint,"
    "  p_node text) RETURNS bigint LANGUAGE plpgsql AS $$\n"
    "DECLARE s record; n int := cardinality(p_lens); v_first bigint; v_last bigint; v_te text;\n"
    "  q record;\n"
    "BEGIN\n"
    "  IF p_req IS NOT NULL THEN\n"
    "    SELECT state, node INTO q FROM tm_requests WHERE session = p_session AND key = p_req\n"
    "      FOR UPDATE;\n"
    "    IF FOUND AND (q.state <> 1 OR q.node <> p_node) THEN RETURN -3; END IF;\n"
    "  END IF;\n"
    "  UPDATE tm_streams SET head = head + n, closed = p_final\n"
    "   WHERE session = p_session AND name = p_name AND NOT closed\n"
    "   RETURNING sid, head, first_retained INTO s;\n"
    "  IF NOT FOUND THEN\n"
    "    PERFORM 1 FROM tm_streams WHERE session = p_session AND name = p_name;\n"
    "    RETURN CASE WHEN FOUND THEN -2 ELSE -1 END;\n"
    "  END IF;\n"
    "  INSERT INTO tm_events(sid, seq, epoch, created_ms, data)\n"
    "    SELECT s.sid, s.head - n + u.o, p_epoch, p_now,\n"
    "           substring(p_blob FROM (u.off + 1)::int FOR u.len)\n"
    "      FROM (SELECT o, len, sum(len) OVER (ORDER BY o) - len AS off\n"
    "              FROM unnest(p_lens) WITH ORDINALITY AS x(len, o)) u;\n"
    "  IF p_req IS NOT NULL THEN\n"
    "    UPDATE tm_requests SET state = 2, updated_ms = p_now,\n"
    "           response = substring(p_blob FROM length(p_blob) - p_lens[n] + 1)\n"
    "     WHERE session = p_session AND key = p_req;\n"
    "  END IF;\n"
    "  v_first := s.first_retained;\n"
    "  IF p_keep > 0 AND s.head - v_first + 1 > p_keep THEN v_first := s.head - p_keep + 1; END IF;\n"
    "  IF p_cut IS NOT NULL THEN\n"
    "    SELECT max(seq) INTO v_last FROM tm_events WHERE sid = s.sid AND created_ms < p_cut;\n"
    "    IF v_last IS NOT NULL AND v_last + 1 > v_first THEN v_first := v_last + 1; END IF;\n"
    "  END IF;\n"
    "  IF v_first > s.first_retained THEN\n"
    "    SELECT epoch INTO v_te FROM tm_events WHERE sid = s.sid AND seq = v_first - 1;\n"
    "    DELETE FROM tm_events WHERE sid = s.sid AND seq < v_first;\n"
    "    UPDATE tm_streams SET first_retained = v_first, trimmed_epoch = coalesce(v_te, '')\n"
    "     WHERE sid = s.sid;\n"
    "  END IF;\n"
    "  RETURN s.head - n + 1;\n"
    "END $$;",
    /* 3: tm_row_insert moves the counter with a plain UPDATE (the INSERT
     * only for a table's first row). Effects run in savepoints, and an
     * INSERT ... ON CONFLICT DO UPDATE of a row that an earlier savepoint
     * of the same transaction updated leaves a MultiXact as each old
     * version's xmax: every later look-up of the counter walked the
     * row's HOT chain resolving one MultiXact a version (half the writer
     * backend's CPU with 16 callers). A plain UPDATE leaves plain xids. */
    "CREATE OR REPLACE FUNCTION tm_row_insert(p_tbl text, p_doc text) RETURNS bigint"
    " LANGUAGE plpgsql AS $$\n"
    "DECLARE v bigint;\n"
    "BEGIN\n"
    "  UPDATE tm_rowids SET last = last + 1 WHERE tbl = p_tbl RETURNING last INTO v;\n"
    "  IF NOT FOUND THEN\n"
    "    INSERT INTO tm_rowids(tbl, last) VALUES (p_tbl, 1)\n"
    "      ON CONFLICT (tbl) DO UPDATE SET last = tm_rowids.last + 1 RETURNING last INTO v;\n"
    "  END IF;\n"
    "  INSERT INTO tm_rows(tbl, id, doc) VALUES (p_tbl, v, p_doc);\n"
    "  RETURN v;\n"
    "END $$;",
    /* 4: tm_req_mine, sent in the writer's pipeline before an effect:
     * the record is locked until the commit when it is started and this
     * node's; otherwise it raises, which aborts the batch at once (no
     * statement after it runs, the effect's included) without a round
     * trip to ask first. TM001: no record; TM002: finished or another
     * node's. */
    "CREATE FUNCTION tm_req_mine(p_session text, p_key bytea, p_node text) RETURNS void"
    " LANGUAGE plpgsql AS $$\n"
    "DECLARE q record;\n"
    "BEGIN\n"
    "  SELECT state, node INTO q FROM tm_requests WHERE session = p_session AND key = p_key\n"
    "    FOR UPDATE;\n"
    "  IF NOT FOUND THEN\n"
    "    RAISE EXCEPTION 'no request record' USING ERRCODE = 'TM001';\n"
    "  ELSIF q.state <> 1 OR q.node <> p_node THEN\n"
    "    RAISE EXCEPTION 'the request record is not this node''s started one'\n"
    "      USING ERRCODE = 'TM002';\n"
    "  END IF;\n"
    "END $$;",
};

#endif
