import { webhookRoute } from '@/server/app/webhook-route';

/** 2C2P backend notification (backendReturnUrl): HTTP 200 only after the commit. */
export const POST = webhookRoute('2c2p');
