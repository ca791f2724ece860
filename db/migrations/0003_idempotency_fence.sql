-- The fence of an atomic phase. The statement that records a recovery point or the final response
-- passes the number of rows its UPDATE matched: 1 while the request still holds the key's lease,
-- 0 once another request has taken the key over. Raising (rather than returning no row) is what
-- lets that statement travel in one round trip with the COMMIT behind it: the error aborts the
-- transaction, so the COMMIT rolls back everything the phase did.
CREATE FUNCTION idempotency_assert_owned(matched bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF matched <> 1 THEN
    RAISE EXCEPTION 'idempotency key lease lost: another request took this key over'
      USING ERRCODE = 'IK001';
  END IF;
END
$$;
