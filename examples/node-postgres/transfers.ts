/**
 * POST /transfers — a fetch-style handler (a Next.js Route Handler, Hono, Bun, Deno) on node-postgres:
 * the transfer and its stored answer commit together, and a retry with the same key gets the same 201.
 */
import { z } from 'zod';
import { respond } from '@payonce/idempotency';
import { withIdempotency } from '@payonce/idempotency/fetch';
import { exampleDatabase } from './db';

const transferInput = z.object({ amountMinor: z.number().int().positive() });

export const POST = withIdempotency(
  {
    store: () => exampleDatabase().store,
    // Stand-in for your authentication.
    scope: (request) => {
      const customer = request.headers.get('x-customer-id');
      return customer ? `customer:${customer}` : undefined;
    },
    input: (body) => transferInput.parse(body),
  },
  {
    onePhase: async (client, { request, input }) => {
      const customer = request.headers.get('x-customer-id')!;
      const { rows } = await client.query<{ id: string }>(
        'insert into example_transfers (customer, amount_minor) values ($1, $2) returning id',
        [customer, input.amountMinor],
      );
      return respond(201, { transferId: rows[0]!.id, amountMinor: input.amountMinor });
    },
  },
);
