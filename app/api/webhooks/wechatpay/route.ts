import { webhookRoute } from '@/server/app/webhook-route';

/** WeChat Pay v3 notification: 204 only after the commit; 5xx + {"code":"FAIL"} makes WeChat retry. */
export const POST = webhookRoute('wechatpay');
