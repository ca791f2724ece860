CREATE TABLE "payment_events" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "payment_events_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"stream" text NOT NULL,
	"seq" integer NOT NULL,
	"order_id" uuid,
	"at" timestamp with time zone NOT NULL,
	"kind" text NOT NULL,
	"data" jsonb NOT NULL,
	"prev_hash" text NOT NULL,
	"hash" text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "payment_events_stream_seq_idx" ON "payment_events" USING btree ("stream","seq");--> statement-breakpoint
CREATE INDEX "payment_events_order_idx" ON "payment_events" USING btree ("order_id");--> statement-breakpoint
-- The only way a row enters the journal. Appends to one stream queue on a transaction-scoped advisory
-- lock (held to COMMIT), so the chain's head is read and extended by one transaction at a time; other
-- streams never wait. The content hashed is fixed text — stream, seq, order, time to the microsecond
-- in UTC, kind and jsonb's own canonical text — so `npm run audit` can rebuild it outside the
-- database and compare.
CREATE FUNCTION append_payment_event(p_stream text, p_order_id uuid, p_kind text, p_data jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_seq integer;
  v_prev text;
  v_at timestamptz := clock_timestamp();
  v_content text;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('payment_events:' || p_stream, 0));
  SELECT seq, hash INTO v_seq, v_prev FROM payment_events WHERE stream = p_stream ORDER BY seq DESC LIMIT 1;
  v_seq := coalesce(v_seq, 0) + 1;
  v_prev := coalesce(v_prev, repeat('0', 64));
  v_content := p_stream || E'\n' || v_seq::text || E'\n' || coalesce(p_order_id::text, '') || E'\n'
    || to_char(v_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || E'\n' || p_kind || E'\n' || p_data::text;
  INSERT INTO payment_events (stream, seq, order_id, at, kind, data, prev_hash, hash)
  VALUES (p_stream, v_seq, p_order_id, v_at, p_kind, p_data, v_prev,
          encode(sha256(convert_to(v_prev || E'\n' || v_content, 'UTF8')), 'hex'));
END
$$;
--> statement-breakpoint
-- Append-only in the database too, not just in the app: an UPDATE, DELETE or TRUNCATE fails. (Whoever
-- can switch this trigger off can also edit rows; the hash chain is what shows that they did.)
CREATE FUNCTION payment_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'payment_events is append-only: % refused', TG_OP USING ERRCODE = 'PE001';
END
$$;
--> statement-breakpoint
CREATE TRIGGER payment_events_no_update BEFORE UPDATE OR DELETE ON payment_events
  FOR EACH ROW EXECUTE FUNCTION payment_events_append_only();
--> statement-breakpoint
CREATE TRIGGER payment_events_no_truncate BEFORE TRUNCATE ON payment_events
  FOR EACH STATEMENT EXECUTE FUNCTION payment_events_append_only();
