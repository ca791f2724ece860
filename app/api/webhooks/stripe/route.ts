import { webhookRoute } from '@/server/app/webhook-route';

/** Stripe webhook endpoint: any 2xx acknowledges, so it answers 2xx only after the commit. */
export const POST = webhookRoute('stripe');
