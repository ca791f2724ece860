import { z } from 'zod';
import { appServices } from '../../../../server/app-services';
import { armDemoDrill, DEMO_DRILLS, DemoDrillError, lateBuyer } from '../../../../server/demo-drills';
import { GATEWAY_IDS } from '../../../../server/payments/gateway-ids';
import { isSecureRequest, sessionSecret, verifySession } from '../../../../server/session';

/**
 * The page's fault switchboard (demo mode only; a 404 otherwise).
 *   GET  → the faults armed on this instance
 *   POST { drill, gateway }          arms a drill for the next payment through that gateway
 *   POST { drill: 'late_buyer', orderId? }  the buyer completes, now, every trade the order (default:
 *                                           this customer's newest) opened
 */
const body = z.discriminatedUnion('drill', [
  z.object({ drill: z.literal('late_buyer'), orderId: z.uuid().optional() }),
  z.object({
    drill: z.enum(DEMO_DRILLS.filter((d) => d !== 'late_buyer') as [Exclude<(typeof DEMO_DRILLS)[number], 'late_buyer'>]),
    gateway: z.enum(GATEWAY_IDS),
  }),
]);

const notFound = () => Response.json({ error: 'not found' }, { status: 404 });

export function GET(): Response {
  const services = appServices();
  if (!services.demo || !services.faults) return notFound();
  return Response.json({ drills: DEMO_DRILLS, armed: services.faults.list() });
}

export async function POST(request: Request): Promise<Response> {
  const services = appServices();
  if (!services.demo || !services.faults) return notFound();
  const parsed = body.safeParse(await request.json().catch(() => undefined));
  if (!parsed.success) return Response.json({ error: 'invalid drill', issues: parsed.error.issues }, { status: 400 });
  try {
    if (parsed.data.drill === 'late_buyer') {
      const customerId = verifySession(sessionSecret(), request.headers.get('cookie'), {
        secure: isSecureRequest(request),
      });
      if (!customerId) return Response.json({ error: 'no session' }, { status: 401 });
      return Response.json({ drill: 'late_buyer', ...(await lateBuyer(services, customerId, parsed.data.orderId)) });
    }
    return Response.json(await armDemoDrill(services, parsed.data.drill, parsed.data.gateway), { status: 201 });
  } catch (error) {
    if (error instanceof DemoDrillError) return Response.json({ error: error.message }, { status: error.status });
    throw error;
  }
}
