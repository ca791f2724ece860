import { webhookRoute } from '@/server/app/webhook-route';

/** Alipay's asynchronous notification (notify_url): answered `success` only after the commit. */
export const POST = webhookRoute('alipay');
