import { z } from 'zod';
import { appServices } from '@/server/app/services';
import { FAULT_POINTS } from '@/server/checkout/fault-points';
import { controlRequestRefusal } from '@/server/http/control-requests';

/**
 * Arms faults for the failure drills (CHECKOUT_FAULTS=1 only; otherwise this route is a 404).
 *   GET    → the armed faults
 *   POST   { point, action: { kind: 'throw' | 'delay' | 'crash' | 'terminate', ms? }, procedure?, gateway?, times? }
 *   DELETE → disarm everything
 */
const faultSpec = z.object({
  point: z.enum(FAULT_POINTS),
  action: z.discriminatedUnion('kind', [
    z.object({ kind: z.literal('throw') }),
    z.object({ kind: z.literal('delay'), ms: z.number().int().min(0).max(120_000) }),
    z.object({ kind: z.literal('crash') }),
    z.object({ kind: z.literal('terminate') }),
  ]),
  procedure: z.string().min(1).optional(),
  gateway: z.string().min(1).optional(),
  times: z.number().int().min(1).max(1000).optional(),
});

function injector() {
  return appServices().faultInjector;
}

const notFound = () => Response.json({ error: 'not found' }, { status: 404 });

export function GET(): Response {
  const faults = injector();
  return faults ? Response.json({ faults: faults.list() }) : notFound();
}

export async function POST(request: Request): Promise<Response> {
  const faults = injector();
  if (!faults) return notFound();
  const refused = controlRequestRefusal(request);
  if (refused) return refused;
  const parsed = faultSpec.safeParse(await request.json().catch(() => undefined));
  if (!parsed.success) {
    return Response.json({ error: 'invalid fault', issues: parsed.error.issues }, { status: 400 });
  }
  return Response.json({ fault: faults.arm(parsed.data) }, { status: 201 });
}

export function DELETE(request: Request): Response {
  const faults = injector();
  if (!faults) return notFound();
  const refused = controlRequestRefusal(request);
  if (refused) return refused;
  faults.clear();
  return new Response(null, { status: 204 });
}
