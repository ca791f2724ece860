/** How the console writes times and gateways. */
import type { Lang } from '@/client/i18n';
import { GATEWAY_NAMES, isGatewayId } from '@/server/payments/gateway-ids';

/** The merchant's clock: orders are placed and shipped on Beijing time, wherever the operator sits. */
export const beijingTime = new Intl.DateTimeFormat('zh-CN', {
  timeZone: 'Asia/Shanghai',
  month: '2-digit',
  day: '2-digit',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hour12: false,
});

/** The list's column: to the minute is enough to tell orders apart by eye, and it keeps the row on one line. */
export const beijingMinute = new Intl.DateTimeFormat('zh-CN', {
  timeZone: 'Asia/Shanghai',
  month: '2-digit',
  day: '2-digit',
  hour: '2-digit',
  minute: '2-digit',
  hour12: false,
});

/** The processor's own name (Stripe, not the shop's 银行卡): what an operator looks up at the gateway. */
export function gatewayName(id: string, lang: Lang): string {
  return isGatewayId(id) ? GATEWAY_NAMES[id][lang] : id;
}
