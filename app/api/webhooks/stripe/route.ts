import { appServices } from '@/server/app/services';
import { handleGatewayNotification } from '@/server/checkout/notifications';

/** Stripe webhook endpoint: any 2xx acknowledges, so it answers 2xx only after the commit. */
export function POST(request: Request): Promise<Response> {
  return handleGatewayNotification(appServices(), 'stripe', request);
}
