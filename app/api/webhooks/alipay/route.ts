import { appServices } from '@/server/app/services';
import { handleGatewayNotification } from '@/server/checkout/notifications';

/** Alipay's asynchronous notification (notify_url): answered `success` only after the commit. */
export function POST(request: Request): Promise<Response> {
  return handleGatewayNotification(appServices(), 'alipay', request);
}
