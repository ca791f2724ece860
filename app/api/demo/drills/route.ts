import { z } from 'zod';
import { appServices } from '@/server/app/services';
import { armDemoDrill, DEMO_DRILLS, DemoDrillError, lateBuyer } from '@/server/demo/drills';
import { isSecureRequest, sessionSecret, verifySession } from '@/server/http/session';
import { controlRequestRefusal } from '@/server/http/control-requests';

/**
 * The page's fault switchboard (demo mode only; a 404 otherwise). Everything is this browser's: a
 * drill is armed for its session's next payment, and only its own armed drills are listed.
 *   GET  → { drills, armed }: this session's faults not fired yet
 *   POST { drill }                     arms a drill for this session's next payment (201 { drill, id })
 *   POST { drill: 'late_buyer', orderId? }  the buyer completes, now, every trade the order (default:
 *                                           this customer's newest) opened
 */
const body = z.discriminatedUnion('drill', [
  z.object({ drill: z.literal('late_buyer'), orderId: z.uuid().optional() }),
  z.object({ drill: z.enum(DEMO_DRILLS.filter((d) => d !== 'late_buyer') as [Exclude<(typeof DEMO_DRILLS)[number], 'late_buyer'>]) }),
]);

const notFound = () => Response.json({ error: 'not found' }, { status: 404 });

function customerOf(request: Request): string | undefined {
  return verifySession(sessionSecret(), request.headers.get('cookie'), { secure: isSecureRequest(request) });
}

export function GET(request: Request): Response {
  const services = appServices();
  if (!services.demo || !services.faultInjector) return notFound();
  const customerId = customerOf(request);
  const armed = customerId ? services.faultInjector.list(customerId).map(({ id, point }) => ({ id, point })) : [];
  return Response.json({ drills: DEMO_DRILLS, armed }, { headers: { 'Cache-Control': 'private, no-store' } });
}

export async function POST(request: Request): Promise<Response> {
  const services = appServices();
  if (!services.demo || !services.faultInjector) return notFound();
  const refused = controlRequestRefusal(request);
  if (refused) return refused;
  const parsed = body.safeParse(await request.json().catch(() => undefined));
  if (!parsed.success) return Response.json({ error: 'invalid drill', issues: parsed.error.issues }, { status: 400 });
  // The page has a session from its first query; a drill belongs to it.
  const customerId = customerOf(request);
  if (!customerId) return Response.json({ error: 'no session: open the checkout page first' }, { status: 401 });
  try {
    if (parsed.data.drill === 'late_buyer') {
      return Response.json({ drill: 'late_buyer', ...(await lateBuyer(services, customerId, parsed.data.orderId)) });
    }
    return Response.json(armDemoDrill(services, parsed.data.drill, customerId), { status: 201 });
  } catch (error) {
    if (error instanceof DemoDrillError) return Response.json({ error: error.message }, { status: error.status });
    throw error;
  }
}
