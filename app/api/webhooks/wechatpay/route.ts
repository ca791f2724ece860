import { appServices } from '@/server/app/services';
import { handleGatewayNotification } from '@/server/checkout/notifications';

/** WeChat Pay v3 notification: 204 only after the commit; 5xx + {"code":"FAIL"} makes WeChat retry. */
export function POST(request: Request): Promise<Response> {
  return handleGatewayNotification(appServices(), 'wechatpay', request);
}
