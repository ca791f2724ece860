/**
 * /api/trpc/* — the tRPC example as a Next.js App Router route (docs/adopt.md §4): tRPC's fetch
 * handler from server.ts, as GET (queries) and POST (mutations). A mutation goes unbatched, its
 * input as the JSON body:
 *
 *   curl -X POST localhost:3000/api/trpc/charges.create -H 'x-customer-id: c1' \
 *        -H 'Idempotency-Key: 5f0c…' -H 'content-type: application/json' -d '{"amountMinor":1200}'
 *
 * The first request charges and answers 201; every retry with the same key and input gets the same
 * 201 back (Idempotency-Replayed: true) and charges nothing; the same key with another input is a 422.
 */
import { exampleApp } from '../../../../db';

// Nothing is opened here: the pool and the tables come with the first request (db.ts).
const handler = async (request: Request) => (await exampleApp()).handler(request);

export { handler as GET, handler as POST };
