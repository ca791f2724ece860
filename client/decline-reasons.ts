/**
 * What a gateway's decline means to the shopper, in the shopper's language. The 402 body carries the
 * adapter's `declineCode` and `gateway` (server/checkout/pay.ts DeclinedPayment); the gateway's own
 * message is for engineers (often English, sometimes internal) and is never shown as the reason.
 *
 * Every code an adapter in server/payments/ can return as `declined` is listed, so a new code shows
 * up here as a deliberate choice rather than as English text on the page. Unknown codes get the
 * fallback: the payment was refused, try another way to pay.
 */
import type { GatewayId } from '@/server/payments/gateway';
import type { Lang } from './i18n';

/** The shopper-facing meaning of a decline; several gateways' codes share one. */
export type DeclineReason =
  | 'insufficient_funds'
  | 'account_restricted'
  | 'card_declined'
  | 'expired_card'
  | 'incorrect_cvc'
  | 'invalid_card_number'
  | 'payment_code_invalid'
  | 'trade_closed'
  | 'buyer_mismatch'
  | 'order_changed'
  | 'invalid_request'
  | 'limit_exceeded'
  | 'currency_unsupported'
  | 'amount_invalid'
  | 'no_instrument'
  | 'processing_error'
  | 'authentication_failed'
  | 'cancelled'
  | 'unknown';

const TEXT: Record<DeclineReason, Record<Lang, string>> = {
  insufficient_funds: {
    zh: '余额不足，请充值后再试，或更换支付方式。',
    en: 'Insufficient balance. Top up and try again, or use another payment method.',
  },
  account_restricted: {
    zh: '您的账户暂时无法付款（账户受限），请更换支付方式。',
    en: 'Your account cannot pay right now (it is restricted). Please use another payment method.',
  },
  card_declined: {
    zh: '发卡行拒绝了这笔付款，请更换银行卡或支付方式。',
    en: 'Your bank declined this payment. Please use another card or payment method.',
  },
  expired_card: { zh: '银行卡已过期，请更换银行卡。', en: 'Your card has expired. Please use another card.' },
  incorrect_cvc: {
    zh: '银行卡背面的安全码不正确，请核对后重试。',
    en: "Your card's security code is incorrect. Please check it and try again.",
  },
  invalid_card_number: { zh: '卡号无效，请核对后重试。', en: 'The card number is not valid. Please check it and try again.' },
  payment_code_invalid: {
    zh: '付款码无效或已过期，请刷新付款码后重试。',
    en: 'The payment code is invalid or has expired. Refresh it and try again.',
  },
  trade_closed: {
    zh: '这笔订单在该支付方式下的交易已关闭，请换一种支付方式。',
    en: 'This payment method can no longer be used for this order. Please choose another one.',
  },
  buyer_mismatch: {
    zh: '付款账户与这笔交易的付款人不一致，请使用原账户付款，或更换支付方式。',
    en: 'This account is not the one that started the payment. Use the same account, or another payment method.',
  },
  order_changed: {
    zh: '订单信息与之前发起的付款不一致，请重新下单。',
    en: 'The order no longer matches the payment started earlier. Please place the order again.',
  },
  invalid_request: {
    zh: '支付信息有误，付款未能完成，请更换支付方式。',
    en: 'The payment details were not accepted. Please use another payment method.',
  },
  limit_exceeded: {
    zh: '超出支付限额或被风控拦截，请更换支付方式。',
    en: 'The payment exceeds a limit or was blocked for safety. Please use another payment method.',
  },
  currency_unsupported: {
    zh: '该支付方式不支持此币种，请更换支付方式。',
    en: 'This payment method does not support the currency. Please choose another one.',
  },
  amount_invalid: {
    zh: '订单金额超出该支付方式的范围，请更换支付方式。',
    en: 'This payment method cannot take this amount. Please choose another one.',
  },
  no_instrument: {
    zh: '未找到可用的付款账户或银行卡，请更换支付方式。',
    en: 'No account or card is available to pay with. Please use another payment method.',
  },
  processing_error: {
    zh: '银行处理这笔付款时出错，请稍后再试，或更换支付方式。',
    en: 'The bank could not process this payment. Try again later, or use another payment method.',
  },
  authentication_failed: {
    zh: '发卡行的身份验证没有完成，可以再验证一次。',
    en: 'Your card was not authenticated (3D Secure); you can authenticate again.',
  },
  cancelled: { zh: '这笔付款已被取消，请重新支付或更换支付方式。', en: 'This payment was cancelled. Pay again or choose another method.' },
  unknown: { zh: '支付被拒绝，请更换支付方式。', en: 'The payment was declined. Please use another payment method.' },
};

/** Codes any adapter may answer: the app's own refusals before calling a gateway. */
const COMMON: Record<string, DeclineReason> = {
  // server/checkout/pay.ts: the order's trade at this gateway was closed when it moved elsewhere.
  TRADE_CLOSED: 'trade_closed',
  UNSUPPORTED_CURRENCY: 'currency_unsupported',
  INVALID_CURRENCY: 'currency_unsupported',
  INVALID_AMOUNT: 'amount_invalid',
};

const BY_GATEWAY: Record<GatewayId, Record<string, DeclineReason>> = {
  // server/payments/alipay/classify.ts DeclineSubCode and its own checks; sandbox/alipay.ts sub_codes.
  alipay: {
    'ACQ.BUYER_BALANCE_NOT_ENOUGH': 'insufficient_funds',
    'ACQ.BUYER_ENABLE_STATUS_FORBID': 'account_restricted',
    'ACQ.PAYMENT_AUTH_CODE_INVALID': 'payment_code_invalid',
    'ACQ.CONTEXT_INCONSISTENT': 'order_changed',
    'ACQ.TRADE_HAS_CLOSE': 'trade_closed',
    'ACQ.TRADE_BUYER_NOT_MATCH': 'buyer_mismatch',
    'ACQ.INVALID_PARAMETER': 'invalid_request',
    NO_PAYMENT_CODE: 'no_instrument',
  },
  // server/payments/wechatpay/classify.ts: create errors, final trade_state, and its own checks.
  wechatpay: {
    NOT_ENOUGH: 'insufficient_funds',
    ACCOUNT_ERROR: 'account_restricted',
    PARAM_ERROR: 'invalid_request',
    INVALID_REQUEST: 'invalid_request',
    ORDER_CLOSED: 'trade_closed',
    CLOSED: 'trade_closed',
    REVOKED: 'cancelled',
    RULE_LIMIT: 'limit_exceeded',
    TRADE_ERROR: 'limit_exceeded',
    OUT_TRADE_NO_USED: 'trade_closed',
    // PAYERROR says only "the payment failed"; trade_state_desc says why (see wechatReason).
    PAYERROR: 'unknown',
  },
  // server/payments/stripe/classify.ts (classifyPay) and failure.ts (classifyError): error.decline_code || error.code, and its own checks.
  stripe: {
    insufficient_funds: 'insufficient_funds',
    generic_decline: 'card_declined',
    card_declined: 'card_declined',
    do_not_honor: 'card_declined',
    // Stripe advises not to tell the shopper a card was reported lost, stolen or fraudulent.
    lost_card: 'card_declined',
    stolen_card: 'card_declined',
    fraudulent: 'card_declined',
    pickup_card: 'card_declined',
    restricted_card: 'account_restricted',
    card_not_supported: 'card_declined',
    card_velocity_exceeded: 'limit_exceeded',
    withdrawal_count_limit_exceeded: 'limit_exceeded',
    expired_card: 'expired_card',
    incorrect_cvc: 'incorrect_cvc',
    invalid_cvc: 'incorrect_cvc',
    incorrect_number: 'invalid_card_number',
    invalid_number: 'invalid_card_number',
    invalid_expiry_month: 'expired_card',
    invalid_expiry_year: 'expired_card',
    // Stripe.js's own checks of the card element, before anything reaches Stripe (the card step).
    incomplete_number: 'invalid_card_number',
    incomplete_expiry: 'expired_card',
    invalid_expiry_month_past: 'expired_card',
    invalid_expiry_year_past: 'expired_card',
    incomplete_cvc: 'incorrect_cvc',
    processing_error: 'processing_error',
    // Stripe.js: the buyer failed or closed the 3-D Secure challenge (the card step).
    payment_intent_authentication_failure: 'authentication_failed',
    authentication_required: 'card_declined',
    payment_intent_canceled: 'cancelled',
    payment_failed: 'card_declined',
    amount_too_small: 'amount_invalid',
    amount_too_large: 'amount_invalid',
    INVALID_ATTEMPT: 'invalid_request',
    INVALID_OUT_TRADE_NO: 'invalid_request',
    NO_PAYMENT_METHOD: 'no_instrument',
  },
  // server/payments/twoc2p/codes.ts: 4xxx respCodes are the card host's declines; 0003 cancelled;
  // 9004–9010 and 9015 refused for their content (sandbox/twoc2p-wire.ts RESP_DESC).
  '2c2p': {
    '4005': 'card_declined',
    '4014': 'invalid_card_number',
    '4051': 'insufficient_funds',
    '4054': 'expired_card',
    '4062': 'account_restricted',
    '0003': 'cancelled',
    '9004': 'invalid_request',
    '9005': 'invalid_request',
    '9006': 'invalid_request',
    '9008': 'invalid_request',
    '9009': 'amount_invalid',
    '9010': 'currency_unsupported',
    '9015': 'order_changed',
    NO_TEST_CARD: 'no_instrument',
  },
};

/** WeChat Pay's PAYERROR carries its reason only in trade_state_desc (e.g. "支付失败，用户余额不足"). */
function wechatReason(gatewayMessage: string | undefined): DeclineReason {
  if (!gatewayMessage) return 'unknown';
  if (/余额不足|NOT_ENOUGH/.test(gatewayMessage)) return 'insufficient_funds';
  if (/账户异常|限制|ACCOUNT_ERROR/.test(gatewayMessage)) return 'account_restricted';
  return 'unknown';
}

export function declineReasonOf(gateway: string, code: string | undefined, gatewayMessage?: string): DeclineReason {
  if (!code) return 'unknown';
  const table = BY_GATEWAY[gateway as GatewayId];
  const known = table?.[code] ?? COMMON[code];
  if (gateway === 'wechatpay' && code === 'PAYERROR') return wechatReason(gatewayMessage);
  if (known) return known;
  // A 2C2P 4xxx we have no row for is still the card host saying no.
  if (gateway === '2c2p' && /^4\d{3}$/.test(code)) return 'card_declined';
  return 'unknown';
}

/** The shopper's text for a decline. */
export function declineText(lang: Lang, gateway: string, code: string | undefined, gatewayMessage?: string): string {
  return TEXT[declineReasonOf(gateway, code, gatewayMessage)][lang];
}

/** Every code listed above, for the test that each one has shopper text. */
export const KNOWN_DECLINE_CODES: { gateway: GatewayId; code: string }[] = (Object.keys(BY_GATEWAY) as GatewayId[]).flatMap((gateway) =>
  [...Object.keys(BY_GATEWAY[gateway]), ...Object.keys(COMMON)].map((code) => ({ gateway, code })),
);
