/**
 * One journal event of the 幕后 view as a row: a title, its details and a tone, in the viewer's
 * language. Each event kind writes its own JSON shape; each describer reads its own fields.
 */
import type { Lang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { TimelineEvent } from '@/server/checkout/timeline';
import { GATEWAY_NAMES, isGatewayId } from '@/server/payments/gateway-ids';
import { FAULT, GUARD, OPERATION, ORDER_STATUS, OUTCOME, VIA } from './behind-words';

export interface Described {
  title: string;
  details: string;
  tone?: 'ok' | 'warn' | 'bad';
}

interface Event {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each event kind writes its own JSON shape; each describer reads its own fields
  d: Record<string, any>;
  lang: Lang;
  zh: boolean;
  /** The order's currency: what an event that names none (a hold, a decision on it) is in. */
  currency: string;
}

const gw = ({ lang }: Event, id: unknown) => (isGatewayId(id) ? GATEWAY_NAMES[id][lang] : String(id));
const money = (minor: unknown, currency: unknown) => (typeof minor === 'number' ? formatMoney(minor, String(currency ?? 'CNY')) : '');
const operation = ({ d, lang }: Event) => OPERATION[lang][String(d.operation)] ?? d.operation;
const via = ({ d, lang }: Event) => VIA[lang][String(d.via)] ?? d.via;
const eventId = ({ d }: Event) => String(d.eventId).slice(0, 24);
const orderMoney = (e: Event, minor: unknown) => money(minor, e.currency);
/** What a decision on an authorisation (capture, release) was made by: an operator, or PayOnce itself for an excess hold. */
const decidedBy = ({ d, zh }: Event) => (zh ? `决定人 ${d.by}` : `by ${d.by}`);
/** How a hold ended without a capture: released as decided, or lapsed at the gateway. */
const holdEnded = ({ d, zh }: Event) =>
  d.how === 'lapsed' ? (zh ? '授权在网关过期失效' : 'Hold lapsed at the gateway') : zh ? '授权已释放' : 'Hold released';
const orderStatus = ({ d, zh, lang }: Event) => `${zh ? '订单' : 'order'} ${ORDER_STATUS[lang][String(d.orderStatus)] ?? d.orderStatus}`;
const holdRole = ({ d, zh }: Event) =>
  d.role === 'excess' ? (zh ? '多出的授权' : 'an excess hold') : zh ? '本订单的授权' : 'the order’s hold';
/** An amount taken from a hold, and the hold beside it when the capture takes less (a partial capture). */
const fromHold = (e: Event, taken: unknown, held: unknown, currency: unknown = e.currency) => {
  if (taken === held) return money(taken, currency);
  return e.zh ? `${money(taken, currency)}（授权 ${money(held, currency)}）` : `${money(taken, currency)} of ${money(held, currency)} held`;
};

function request(e: Event): Described {
  const { d, zh, lang } = e;
  const guard = GUARD[lang][String(d.outcome)] ?? String(d.outcome);
  const key = typeof d.key === 'string' ? `${d.key.slice(0, 8)}…` : '—';
  const tone = d.status >= 500 || d.status === 409 || d.status === 422 ? 'warn' : d.status >= 400 ? 'bad' : 'ok';
  return {
    title: `${zh ? '请求' : 'Request'} ${d.procedure} → HTTP ${d.status}`,
    details: [
      `${zh ? '幂等键' : 'key'} ${key}`,
      d.gateway ? gw(e, d.gateway) : '',
      d.attempt ? (zh ? `第 ${d.attempt} 次尝试` : `attempt ${d.attempt}`) : '',
      `${zh ? '守卫' : 'guard'}: ${guard}`,
    ]
      .filter(Boolean)
      .join(' · '),
    tone,
  };
}

/** Gateway answers that are the call going as intended; a decline is the buyer's, anything else is worth a look. */
const OK_OUTCOMES = new Set(['succeeded', 'closed', 'authorized', 'captured', 'released']);

function gatewayAnswer(e: Event): Described {
  const { d, lang } = e;
  const tone = OK_OUTCOMES.has(String(d.outcome)) ? 'ok' : d.outcome === 'declined' ? 'bad' : 'warn';
  return {
    title: `← ${gw(e, d.gateway)} ${operation(e)}: ${OUTCOME[lang][String(d.outcome)] ?? d.outcome}`,
    details: [d.gatewayTradeNo, d.code, d.message, `${d.ms} ms`].filter(Boolean).join(' · '),
    tone,
  };
}

/** Each event kind's describer; a kind missing here shows as its name and its data. */
const DESCRIBERS: Record<string, (e: Event) => Described> = {
  request,
  'order.created': ({ d, zh }) => ({
    title: zh ? '创建订单，扣减库存' : 'Order created, stock taken',
    details: `${d.outTradeNo} · ${money(d.amountMinor, d.currency)}`,
  }),
  'attempt.started': (e) => ({
    title: e.zh ? `开始第 ${e.d.attempt} 次支付` : `Payment attempt ${e.d.attempt} started`,
    details: gw(e, e.d.gateway),
  }),
  'attempt.abandoned': (e) => ({
    title: e.zh ? `对账：第 ${e.d.attempt} 次尝试未扣款，订单重新可付` : `Reconciler: attempt ${e.d.attempt} took no money`,
    details: `${gw(e, e.d.gateway)} · ${e.d.trade}`,
  }),
  'gateway.call': (e) => ({
    title: `→ ${gw(e, e.d.gateway)} ${operation(e)}`,
    details: [e.d.outTradeNo, e.d.refundId, e.d.captureId, e.d.attempt ? (e.zh ? `尝试 ${e.d.attempt}` : `attempt ${e.d.attempt}`) : '']
      .filter(Boolean)
      .join(' · '),
  }),
  'gateway.answer': gatewayAnswer,
  'payment.succeeded': (e) => ({
    title: e.zh ? '扣款成功，订单已支付' : 'Charge succeeded, order paid',
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${via(e)} · ${e.d.gatewayTradeNo}`,
    tone: 'ok',
  }),
  'payment.declined': (e) => ({
    title: e.zh ? '支付被拒绝' : 'Payment declined',
    details: `${gw(e, e.d.gateway)} · ${e.d.code}`,
    tone: 'bad',
  }),
  'payment.awaiting_buyer': (e) => ({
    title: e.zh ? '交易已开，等待买家付款（扫码 / 银行卡 / 收银台）' : 'Trade open, waiting for the buyer (QR code / card / hosted page)',
    details: `${gw(e, e.d.gateway)} · ${e.d.step}`,
  }),
  'payment.excess': (e) => ({
    title: e.zh ? '多收的一笔：不保留，自动退款' : 'A charge that must not stay: refund queued',
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${via(e)} · ${e.d.refundId}`,
    tone: 'warn',
  }),
  'payment.authorized': (e) => ({
    title: e.zh ? '授权成功：款项已冻结，发货时请款' : 'Authorised: the money is held, to be captured at shipment',
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${via(e)} · ${e.d.gatewayTradeNo}`,
    tone: 'ok',
  }),
  'payment.excess_authorization': (e) => ({
    title: e.zh ? '多出的一笔授权：订单不能保留，释放它' : 'An authorisation the order cannot keep: its release decided',
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${via(e)} · ${orderStatus(e)} · ${e.d.captureId}`,
    tone: 'warn',
  }),
  'payment.captured': (e) => ({
    title: e.zh ? '请款成功，订单已支付' : 'Captured, order paid',
    details: `${gw(e, e.d.gateway)} · ${fromHold(e, e.d.amountMinor, e.d.authorizedMinor, e.d.currency)} · ${via(e)} · ${e.d.gatewayTradeNo}`,
    tone: 'ok',
  }),
  'payment.authorization_voided': (e) => ({
    title: e.zh ? `${holdEnded(e)}，未扣款` : `${holdEnded(e)}: nothing charged`,
    details: `${gw(e, e.d.gateway)} · ${orderMoney(e, e.d.amountMinor)} · ${holdRole(e)} · ${e.d.gatewayTradeNo}`,
  }),
  'authorization.capture_decided': (e) => ({
    title: e.zh ? '决定请款' : 'Capture decided',
    details: `${fromHold(e, e.d.amountMinor, e.d.authorizedMinor)} · ${decidedBy(e)} · ${e.d.captureId}`,
  }),
  'authorization.release_decided': (e) => ({
    title: e.zh ? '决定释放授权，不扣款' : 'Release decided: nothing to be charged',
    details: `${e.zh ? '授权' : 'held'} ${orderMoney(e, e.d.authorizedMinor)} · ${decidedBy(e)} · ${e.d.captureId}`,
  }),
  'trade.closed': (e) => ({ title: e.zh ? '关闭网关交易（不能再付款）' : 'Gateway trade closed', details: gw(e, e.d.gateway) }),
  'trade.payment_reversed': (e) => ({
    title: e.zh
      ? '关单时撤销了一笔刚完成的付款（已原路退回，此付款不计入订单）'
      : 'The close reversed a payment made that instant (refunded; it does not pay the order)',
    details: `${gw(e, e.d.gateway)} · ${e.d.message}`,
    tone: 'warn',
  }),
  'notification.processed': (e) => ({
    title: e.zh ? '收到网关通知：验签通过，已处理并确认' : 'Notification verified, processed, acknowledged',
    details: `${gw(e, e.d.gateway)} · ${e.d.about} · ${eventId(e)}`,
    tone: 'ok',
  }),
  'notification.duplicate': (e) => ({
    title: e.zh ? '重复通知：已确认，不再处理' : 'Duplicate notification: acknowledged, not processed again',
    details: `${gw(e, e.d.gateway)} · ${eventId(e)}`,
  }),
  'notification.in_flight': (e) => ({
    title: e.zh ? '通知到达时首条仍在处理：不确认，让网关稍后重发' : 'Notification while the first is in flight: not acknowledged',
    details: `${gw(e, e.d.gateway)} · ${eventId(e)}`,
    tone: 'warn',
  }),
  'refund.requested': (e) => ({
    title: e.zh ? `商家退款：${String(e.d.by)} 申请` : `Refund asked by ${String(e.d.by)}`,
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${e.d.refundId} · ${String(e.d.reason ?? '')}`,
  }),
  'refund.succeeded': (e) => ({
    title: e.zh ? '退款成功' : 'Refund succeeded',
    details: `${gw(e, e.d.gateway)} · ${money(e.d.amountMinor, e.d.currency)} · ${e.d.refundId}`,
    tone: 'ok',
  }),
  'refund.failed': ({ d, zh }) => ({
    title: zh ? '退款失败，已转人工' : 'Refund failed: a person follows up',
    details: String(d.error),
    tone: 'bad',
  }),
  'email.queued': ({ d, zh }) => ({
    title: zh ? (d.email === 'refund' ? '退款通知邮件入队' : '支付成功邮件入队') : `Email queued (${d.email})`,
    details: zh ? '与状态变更同一事务写入发件箱' : 'outbox, same transaction',
  }),
  'email.sent': ({ d, zh }) => ({ title: zh ? '邮件已发出' : 'Email sent', details: String(d.subject ?? '') }),
  'order.expired': ({ zh }) => ({ title: zh ? '订单过期，库存归还' : 'Order expired, stock returned', details: '' }),
  'order.voided': (e) => ({ title: e.zh ? '订单已取消，库存归还' : 'Order voided, stock returned', details: holdEnded(e) }),
  'fault.injected': ({ d, zh, lang }) => ({
    title:
      FAULT[lang][`${d.point}:${d.action}`] ??
      FAULT[lang][String(d.action)] ??
      `${zh ? '注入故障' : 'Fault injected'}: ${d.point} ${d.action}`,
    details: zh ? `演示 / 演练 · ${d.point}` : `demo / drill · ${d.point}`,
    tone: 'warn',
  }),
  'exception.recorded': ({ d, zh }) => ({
    title: zh ? '异常已记录，待人工处理' : 'Exception recorded for follow-up',
    details: String(d.exception),
    tone: 'bad',
  }),
};

/** `currency`: the order's, for the events that name none. */
export function describe(event: TimelineEvent, lang: Lang, currency: string): Described {
  const e: Event = { d: event.data, lang, zh: lang === 'zh', currency };
  return Object.hasOwn(DESCRIBERS, event.kind) ? DESCRIBERS[event.kind]!(e) : { title: event.kind, details: JSON.stringify(event.data) };
}
