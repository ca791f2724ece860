/**
 * POST /api/charges — the smallest Next.js Route Handler guarded by the idempotency core.
 *
 *   curl -X POST localhost:3000/api/charges -H 'x-customer-id: c1' \
 *        -H 'Idempotency-Key: 5f0c…' -H 'content-type: application/json' -d '{"amountMinor":1200}'
 *
 * The first request charges and answers 201; every retry with the same key and body gets the same
 * 201 back (Idempotency-Replayed: true) and charges nothing; the same key with another body is a 422.
 */
import { z } from 'zod';
import { respond } from '@payonce/idempotency';
import { withIdempotency } from '@payonce/idempotency/fetch';
import { exampleDatabase } from '../../../db';

const chargeInput = z.object({ amountMinor: z.number().int().positive() });

export const POST = withIdempotency(
  {
    store: () => exampleDatabase().store,
    // Stand-in for your authentication: whoever the session says the caller is.
    scope: (request) => {
      const customer = request.headers.get('x-customer-id');
      return customer ? `customer:${customer}` : undefined;
    },
    // Validated before the key is claimed: bad input is a 400 that claims and stores nothing.
    input: (body) => chargeInput.parse(body),
  },
  // One phase: the effect and the stored answer commit together, or not at all.
  {
    onePhase: async (tx, { request, input }) => {
      const customer = request.headers.get('x-customer-id')!;
      const [charge] = await tx<{ id: string }[]>`
        insert into example_charges (customer, amount_minor) values (${customer}, ${input.amountMinor})
        returning id`;
      return respond(201, { chargeId: charge!.id, amountMinor: input.amountMinor });
    },
  },
);
