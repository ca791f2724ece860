import { appServices } from '@/server/app/services';
import { handleGatewayNotification } from '@/server/checkout/notifications';

/** 2C2P backend notification (backendReturnUrl): HTTP 200 only after the commit. */
export function POST(request: Request): Promise<Response> {
  return handleGatewayNotification(appServices(), '2c2p', request);
}
