/**
 * What each outbox email says to the shopper: pure functions from an outbox row's topic and payload
 * to a subject and body, so the wording is tested without a database and the relay only delivers.
 *
 * Written for the buyer, not for us: the gateway as the buyer knows it (支付宝, not `alipay`), the
 * amount as a price (¥168.00), and the time in Beijing time, whatever time zone the server runs in.
 */
import type { RefundReason } from '@/db/schema';
import { REFUND_EMAIL_TOPIC } from '@/server/checkout/refunds';
import { ORDER_PAID_EMAIL_TOPIC } from '@/server/checkout/settle';
import { GATEWAY_NAMES, isGatewayId } from '@/server/payments/gateway-ids';
import { formatBeijingLong } from './beijing-time';

/**
 * An outbox row's payload, as settle.ts (ORDER_PAID_EMAIL_TOPIC) and refunds.ts (REFUND_EMAIL_TOPIC)
 * write it. `paidAt` and `refundedAt` came later: rows queued before them still render, without the
 * time.
 */
export interface EmailPayload {
  orderId: string;
  customerId: string | null;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  gateway: string;
  /** ISO 8601, the order's paid_at (order-paid emails). */
  paidAt?: string;
  refundId?: string;
  reason?: string;
  /** ISO 8601, the refund's settled_at (refund emails). */
  refundedAt?: string;
}

export interface RenderedEmail {
  subject: string;
  body: string;
}

/** The gateway as the buyer chose it on the checkout page; an unknown id is shown as it is. */
export function gatewayName(gateway: string, lang: 'zh' | 'en' = 'zh'): string {
  return isGatewayId(gateway) ? GATEWAY_NAMES[gateway][lang] : gateway;
}

/**
 * The shopper chose a language on the page, which the server does not see; every email says
 * everything in Chinese first, then in English after a blank line, and its subject in both.
 */
function bilingual(zh: RenderedEmail, en: RenderedEmail): RenderedEmail {
  return { subject: `${zh.subject} / ${en.subject}`, body: `${zh.body}\n\n${en.body}` };
}

/** `3 Dec 2026, 20:15 (Beijing time)`. */
function englishTime(iso: string | undefined): string[] {
  if (!iso) return [];
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return [];
  const text = new Intl.DateTimeFormat('en-GB', {
    timeZone: 'Asia/Shanghai',
    day: 'numeric',
    month: 'short',
    year: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    hour12: false,
  }).format(at);
  return [`${text} (Beijing time)`];
}

const CURRENCY_SYMBOLS: Record<string, string> = { CNY: '¥' };

/**
 * `¥168.00`, `¥12,800.00`; another currency as `USD 168.00`. Integer arithmetic on minor units
 * (every currency the checkout sells in has two decimals): no float ever rounds a price.
 */
export function formatAmount(minor: number, currency: string): string {
  const sign = minor < 0 ? '-' : '';
  const abs = Math.abs(minor);
  const major = Math.floor(abs / 100).toLocaleString('en-US');
  const cents = String(abs % 100).padStart(2, '0');
  const symbol = CURRENCY_SYMBOLS[currency];
  return `${sign}${symbol ?? `${currency} `}${major}.${cents}`;
}

/** The time as a line of the receipt, or no line for a row queued before payloads carried it. */
function timeLine(label: string, iso: string | undefined): string[] {
  if (!iso) return [];
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? [] : [`${label}：${formatBeijingLong(at)}`];
}

const REFUND_WHY: Record<RefundReason, string> = {
  duplicate_charge: '该订单已支付，这笔重复付款已原路退回。',
  order_not_payable: '该订单已关闭，这笔付款已原路退回。',
  merchant: '商家已为您的订单办理退款，款项将原路退回。',
};

const REFUND_WHY_EN: Record<RefundReason, string> = {
  duplicate_charge: 'This order was already paid: this second payment has been refunded to where it came from.',
  order_not_payable: 'This order was closed: this payment has been refunded to where it came from.',
  merchant: 'The shop has refunded your order: the money goes back to where it came from.',
};

/** A receipt the way Chinese shops write one: a sentence, then one `label：value` line each. */
export function renderOrderPaidEmail(p: EmailPayload): RenderedEmail {
  return bilingual(
    {
      subject: `支付成功：订单 ${p.outTradeNo}`,
      body: [
        `您的订单 ${p.outTradeNo} 已支付成功，感谢惠顾！`,
        `支付金额：${formatAmount(p.amountMinor, p.currency)}`,
        `支付方式：${gatewayName(p.gateway)}`,
        ...timeLine('支付时间', p.paidAt),
      ].join('\n'),
    },
    {
      subject: `Payment received: order ${p.outTradeNo}`,
      body: [
        `Your order ${p.outTradeNo} is paid. Thank you!`,
        `Amount: ${formatAmount(p.amountMinor, p.currency)}`,
        `Paid with: ${gatewayName(p.gateway, 'en')}`,
        ...englishTime(p.paidAt).map((t) => `Paid at: ${t}`),
      ].join('\n'),
    },
  );
}

export function renderRefundEmail(p: EmailPayload): RenderedEmail {
  const why = p.reason && Object.hasOwn(REFUND_WHY, p.reason) ? REFUND_WHY[p.reason as RefundReason] : '这笔付款已原路退回。';
  const whyEn =
    p.reason && Object.hasOwn(REFUND_WHY_EN, p.reason)
      ? REFUND_WHY_EN[p.reason as RefundReason]
      : 'This payment has been refunded to where it came from.';
  return bilingual(
    {
      subject: `退款通知：订单 ${p.outTradeNo}`,
      body: [
        why,
        `退款金额：${formatAmount(p.amountMinor, p.currency)}`,
        `退回至：${gatewayName(p.gateway)}`,
        ...timeLine('退款时间', p.refundedAt),
        ...(p.refundId ? [`退款单号：${p.refundId}`] : []),
      ].join('\n'),
    },
    {
      subject: `Refund: order ${p.outTradeNo}`,
      body: [
        whyEn,
        `Amount refunded: ${formatAmount(p.amountMinor, p.currency)}`,
        `Refunded to: ${gatewayName(p.gateway, 'en')}`,
        ...englishTime(p.refundedAt).map((t) => `Refunded at: ${t}`),
        ...(p.refundId ? [`Refund number: ${p.refundId}`] : []),
      ].join('\n'),
    },
  );
}

/** The email for one outbox row. A topic without a template is a bug in whoever queued it. */
export function renderEmail(topic: string, payload: EmailPayload): RenderedEmail {
  switch (topic) {
    case ORDER_PAID_EMAIL_TOPIC:
      return renderOrderPaidEmail(payload);
    case REFUND_EMAIL_TOPIC:
      return renderRefundEmail(payload);
    default:
      throw new Error(`no email template for outbox topic ${JSON.stringify(topic)}`);
  }
}
