/**
 * A gateway's notification endpoint (app/api/webhooks/*): the notification handled and acknowledged
 * after its commit (../checkout/notifications.ts) — unless this instance is draining
 * (../http/drain.ts), when it is refused with 503 + Retry-After before anything is read, and the
 * gateway delivers it again, to an instance that stays.
 */
import { handleGatewayNotification, notificationRefusal } from '@/server/checkout/notifications';
import { isDraining } from '@/server/http/drain';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId } from '@/server/payments/gateway';
import { appServices } from './services';

export function webhookRoute(gateway: GatewayId, services: () => CheckoutServices = appServices): (request: Request) => Promise<Response> {
  return async (request) => {
    if (isDraining()) return notificationRefusal('SHUTTING_DOWN', 'this instance is shutting down; deliver again');
    return handleGatewayNotification(services(), gateway, request);
  };
}
