/**
 * What the Stripe adapter makes of Stripe's answers (server/payments/stripe/classify.ts and
 * failure.ts), from answers as the wire carries them. No database, no sandbox, no network.
 *
 * The fixtures were recorded from the PSP sandbox (sandbox/stripe.ts, which answers in the API
 * reference's shapes, parsed unchanged by stripe-node) with the requests the adapter makes, and are
 * trimmed to the fields the adapter reads plus a few to recognise them by. The 403 and 429 bodies,
 * which the sandbox never sends, are in Stripe's documented error shape. SDK errors are made from
 * recorded error bodies the way stripe-node makes them (StripeError.generate with the HTTP status),
 * connection errors with the `detail` stripe-node was seen to attach. Where a test needs a state the
 * recordings lack (processing, a missing field, an unknown status), it changes the recording in place.
 *
 *   node --import tsx --test test/unit/stripe-classify.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Stripe from 'stripe';
import type { ChargeRequest, RefundQueryOutcome, RefundRequest } from '@/server/payments/gateway';
import {
  classifyCancel,
  classifyCardStep,
  classifyClose,
  classifyEarlierIntents,
  classifyEarlierRefund,
  classifyEvent,
  classifyPay,
  classifyRefund,
  classifyRefundStatus,
  classifyTrade,
  closeVerdict,
  findRefundIn,
  inCurrency,
  oldestFirst,
  type Settled,
} from '@/server/payments/stripe/classify';
import {
  classifyBareStatus,
  classifyChargeFailure,
  classifyError,
  classifyRefundFailure,
  classifyRefundListFailure,
  classifyUnreadReplay,
  refusalMayBeThisRefund,
  statusMayHaveBeenProcessed,
  type Failure,
} from '@/server/payments/stripe/failure';

// ---------------------------------------------------------------------------------------------
// Recorded answers

/** POST /v1/payment_intents confirm=true with the ok test buyer → 200. */
const PI_PAID = {
  id: 'pi_8L3Fim76xYZgJdVcIiC8ayE4',
  object: 'payment_intent',
  amount: 1230,
  amount_received: 1230,
  capture_method: 'automatic_async',
  client_secret: 'pi_8L3Fim76xYZgJdVcIiC8ayE4_secret_DckAI14qup9mD3SyMUFBG2FPQ',
  created: 1796485922,
  currency: 'cny',
  description: 'PayOnce',
  last_payment_error: null,
  latest_charge: 'ch_Z3yc5lTWgXviXGEreNQHhvUz',
  livemode: false,
  metadata: { out_trade_no: 'POD2E24D68C152D8CEC9', attempt: '1', notify_url: 'http://127.0.0.1:46645/hook' },
  payment_method: 'pm_4CscSBS6uHkqsdgwtipNrpG2',
  status: 'succeeded',
};

/** The PaymentIntent a 402 (insufficient_funds test buyer) carries in error.payment_intent. */
const PI_DECLINED = {
  id: 'pi_WucXSAmeasjUxgGyZjZPp5WE',
  object: 'payment_intent',
  amount: 1230,
  amount_received: 0,
  client_secret: 'pi_WucXSAmeasjUxgGyZjZPp5WE_secret_RyOkBCCNRtjz5VAOL5uc4xAuS',
  created: 1796485923,
  currency: 'cny',
  last_payment_error: {
    type: 'card_error',
    code: 'card_declined',
    decline_code: 'insufficient_funds',
    message: 'Your card has insufficient funds.',
    charge: 'ch_rxgLfkbuAmirstqAGjFkUW26',
    doc_url: 'https://docs.stripe.com/error-codes/card-declined',
  },
  latest_charge: 'ch_rxgLfkbuAmirstqAGjFkUW26',
  metadata: { out_trade_no: 'POC7565EEF958A2F656B', attempt: '1', notify_url: 'http://127.0.0.1:46645/hook' },
  payment_method: null,
  status: 'requires_payment_method',
};

/** POST /v1/payment_intents for the card step (no payment method, no confirm) → 200. */
const PI_OPEN = {
  id: 'pi_H5YaPt2DflOesQfKlZr4eYHZ',
  object: 'payment_intent',
  amount: 1230,
  amount_received: 0,
  cancellation_reason: null,
  client_secret: 'pi_H5YaPt2DflOesQfKlZr4eYHZ_secret_oxjXgicjFGRDrQIF5rh5rdflk',
  created: 1796485923,
  currency: 'cny',
  last_payment_error: null,
  latest_charge: null,
  metadata: { out_trade_no: 'PO385E8B0039D080168E', attempt: '1', notify_url: 'http://127.0.0.1:46645/hook' },
  payment_method: null,
  status: 'requires_payment_method',
};

/** POST /v1/payment_intents/{PI_OPEN}/cancel cancellation_reason=abandoned → 200. */
const PI_CANCELED = {
  ...PI_OPEN,
  canceled_at: 1796485923,
  cancellation_reason: 'abandoned',
  status: 'canceled',
};

/** Error bodies, each with the HTTP status it came with. */
const ERRORS = {
  /** create confirm=true, the insufficient_funds test buyer (payment_method, payment_intent trimmed). */
  insufficientFunds: {
    status: 402,
    error: {
      type: 'card_error',
      code: 'card_declined',
      decline_code: 'insufficient_funds',
      message: 'Your card has insufficient funds.',
      charge: 'ch_rxgLfkbuAmirstqAGjFkUW26',
      doc_url: 'https://docs.stripe.com/error-codes/card-declined',
    },
  },
  /** The same key again with the other test buyer. */
  idempotency: {
    status: 400,
    error: {
      type: 'idempotency_error',
      message:
        "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than 'k-POD2E24D68C152D8CEC9' if you meant to execute a different request.",
    },
  },
  /** create with currency=xyz (the list of currencies trimmed). */
  invalidCurrency: {
    status: 400,
    error: {
      type: 'invalid_request_error',
      message: 'Invalid currency: xyz. Stripe currently supports these currencies: usd, aed, afn, …',
      param: 'currency',
    },
  },
  /** cancel of PI_PAID (error.payment_intent trimmed). */
  cancelPaid: {
    status: 400,
    error: {
      type: 'invalid_request_error',
      code: 'payment_intent_unexpected_state',
      message:
        'You cannot cancel this PaymentIntent because it has a status of succeeded. Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, processing.',
      payment_intent: PI_PAID,
      doc_url: 'https://docs.stripe.com/error-codes/payment-intent-unexpected-state',
    },
  },
  /** POST /v1/refunds of 1000 on a charge of 1230 already refunded 500. */
  amountTooLarge: {
    status: 400,
    error: {
      type: 'invalid_request_error',
      message: 'Refund amount (CNY 10.00) is greater than unrefunded amount on charge (CNY 7.30)',
      code: 'amount_too_large',
      param: 'amount',
      doc_url: 'https://docs.stripe.com/error-codes/amount-too-large',
    },
  },
  /** GET /v1/refunds?payment_intent=pi_doesnotexist. */
  resourceMissing: {
    status: 404,
    error: {
      type: 'invalid_request_error',
      message: "No such payment_intent: 'pi_doesnotexist'",
      code: 'resource_missing',
      param: 'payment_intent',
      doc_url: 'https://docs.stripe.com/error-codes/resource-missing',
    },
  },
  /** Any call with a wrong secret key. */
  authentication: { status: 401, error: { type: 'invalid_request_error', message: 'Invalid API Key provided: sk_live_*rong' } },
  /** A restricted key without the permission (Stripe's documented shape). */
  permission: {
    status: 403,
    error: {
      type: 'invalid_request_error',
      message:
        "The provided key 'rk_test_***abc' does not have the required permissions for this endpoint on account 'acct_1DweCmwBS9YKlIpS'.",
    },
  },
  /** Rate limited (Stripe's documented shape). */
  rateLimit: {
    status: 429,
    error: {
      type: 'invalid_request_error',
      code: 'rate_limit',
      message: 'Request rate limit exceeded.',
      doc_url: 'https://docs.stripe.com/error-codes/rate-limit',
    },
  },
  /** A second create with one key while the first is executing. */
  keyInUse: {
    status: 409,
    error: {
      type: 'invalid_request_error',
      code: 'idempotency_key_in_use',
      message:
        'There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): payonce-POD2E24D68C152D8CEC9-attempt-1. Please try again later.',
      doc_url: 'https://docs.stripe.com/error-codes/idempotency-key-in-use',
    },
  },
  /** The sandbox's fault fail_before_charge, Stripe's own failure before executing. */
  unknown500: { status: 500, error: { type: 'api_error', message: 'An unknown error occurred' } },
  /** 503 in front of Stripe (the adapter test's unavailable search). */
  unavailable503: { status: 503, error: { type: 'api_error', message: 'Service unavailable' } },
} as const;

/** POST /v1/refunds amount=500 of PI_PAID, Idempotency-Key payonce-refund-RF1 → 200. */
const REFUND = {
  id: 're_pR94twzSJLgZplKTy4M3j90K',
  object: 'refund',
  amount: 500,
  balance_transaction: 'txn_PNMCuQgqDX04GFvQZ7VByyoB',
  charge: 'ch_Z3yc5lTWgXviXGEreNQHhvUz',
  created: 1796485923,
  currency: 'cny',
  metadata: { refund_id: 'RF1', out_trade_no: 'POD2E24D68C152D8CEC9' },
  payment_intent: 'pi_8L3Fim76xYZgJdVcIiC8ayE4',
  reason: 'duplicate',
  status: 'succeeded',
};

const ACCOUNT = 'acct_1DweCmwBS9YKlIpS';

/** Webhook deliveries to the PaymentIntent's notify_url, as the body arrived (data.object trimmed). */
const EVENTS = {
  succeeded: {
    id: 'evt_xepvQT0QsNex3DrMjtO6EULE',
    object: 'event',
    account: ACCOUNT,
    api_version: '2026-10-28.endive',
    created: 1796485922,
    data: { object: PI_PAID },
    livemode: false,
    pending_webhooks: 1,
    request: { id: 'req_tmWBZ1uGi4xvP2', idempotency_key: 'k-POD2E24D68C152D8CEC9' },
    type: 'payment_intent.succeeded',
  },
  paymentFailed: {
    id: 'evt_cl6ALH5gLNUwpY6rzl1qFMGD',
    object: 'event',
    account: ACCOUNT,
    api_version: '2026-10-28.endive',
    created: 1796485923,
    data: { object: PI_DECLINED },
    livemode: false,
    pending_webhooks: 1,
    request: { id: 'req_l0ugPudygerk32', idempotency_key: null },
    type: 'payment_intent.payment_failed',
  },
  chargeRefunded: {
    id: 'evt_Rk39U1rdUg3RvM7vYNmBO6XK',
    object: 'event',
    account: ACCOUNT,
    api_version: '2026-10-28.endive',
    created: 1796485923,
    data: {
      object: {
        id: 'ch_Z3yc5lTWgXviXGEreNQHhvUz',
        object: 'charge',
        amount: 1230,
        amount_refunded: 500,
        currency: 'cny',
        metadata: { attempt: '1', notify_url: 'http://127.0.0.1:46645/hook', out_trade_no: 'POD2E24D68C152D8CEC9' },
        payment_intent: 'pi_8L3Fim76xYZgJdVcIiC8ayE4',
        status: 'succeeded',
      },
    },
    livemode: false,
    pending_webhooks: 1,
    request: { id: 'req_jFNejmMT6sHdjV', idempotency_key: 'payonce-refund-RF1' },
    type: 'charge.refunded',
  },
  refundCreated: {
    id: 'evt_Za0k2vanjZ6wQ9uquprYq98g',
    object: 'event',
    account: ACCOUNT,
    api_version: '2026-10-28.endive',
    created: 1796485923,
    data: { object: REFUND },
    livemode: false,
    pending_webhooks: 1,
    request: { id: 'req_jFNejmMT6sHdjV', idempotency_key: 'payonce-refund-RF1' },
    type: 'refund.created',
  },
};

// ---------------------------------------------------------------------------------------------
// Helpers

/** A recorded body as the SDK's parsed type (stripe-node parses JSON into these unchanged). */
const intent = (json: object, changes: object = {}) => ({ ...json, ...changes }) as unknown as Stripe.PaymentIntent;
const refund = (json: object, changes: object = {}) => ({ ...json, ...changes }) as unknown as Stripe.Refund;
const event = (json: object, changes: object = {}) => ({ ...json, ...changes }) as unknown as Stripe.Event;
const eventOf = (base: { data: { object: object } }, objectChanges: object, changes: object = {}) =>
  event({ ...base, data: { object: { ...base.data.object, ...objectChanges } }, ...changes });

/** The SDK's error for a recorded error answer, made as stripe-node makes it. */
function sdkError(answer: { status: number; error: object }): Error {
  return Stripe.errors.StripeError.generate({ ...answer.error, statusCode: answer.status } as Stripe.StripeRawError);
}

/** A StripeConnectionError as stripe-node throws it: its message, and the Node error in `detail`. */
function connectionError(message: string, detail: { name: string; code: string; message: string }): Error {
  const cause = Object.assign(new Error(detail.message), { code: detail.code });
  cause.name = detail.name;
  return new Stripe.errors.StripeConnectionError({ message, detail: cause } as Stripe.StripeRawError);
}

const REFUSED = connectionError('An error occurred with our connection to Stripe.', {
  name: 'Error',
  code: 'ECONNREFUSED',
  message: 'connect ECONNREFUSED 127.0.0.1:9',
});
const TIMED_OUT = connectionError('Request aborted due to timeout being reached (100ms)', {
  name: 'TypeError',
  code: 'ETIMEDOUT',
  message: 'ETIMEDOUT',
});
const RESET = connectionError('An error occurred with our connection to Stripe. Request was retried 1 times.', {
  name: 'Error',
  code: 'ECONNRESET',
  message: 'socket hang up',
});

const fail = (answer: { status: number; error: object }, earlier = false): Failure => classifyError(sdkError(answer), earlier);

function chargeRequest(overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo: 'POD2E24D68C152D8CEC9',
    amountMinor: 1230,
    currency: 'CNY',
    subject: 'PayOnce',
    attempt: 1,
    notifyUrl: 'http://127.0.0.1:46645/hook',
    ...overrides,
  };
}

function refundRequest(overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo: 'POD2E24D68C152D8CEC9',
    gatewayTradeNo: 'pi_8L3Fim76xYZgJdVcIiC8ayE4',
    refundId: 'RF1',
    amountMinor: 500,
    chargeAmountMinor: 1230,
    currency: 'CNY',
    reason: 'PayOnce: duplicate payment of the order',
    ...overrides,
  };
}

const CARD_STEP = { publishableKey: 'pk_test_sandbox', scriptUrl: 'http://127.0.0.1:46645/v3/' };

// ---------------------------------------------------------------------------------------------
// failure.ts

describe('statusMayHaveBeenProcessed (a try the SDK saw answered)', () => {
  it('a 409 (the key is in use: the first request is executing) may have been processed', () => {
    assert.equal(statusMayHaveBeenProcessed(409), true);
  });
  it('a 500 or 504 may have been processed', () => {
    assert.equal(statusMayHaveBeenProcessed(500), true);
    assert.equal(statusMayHaveBeenProcessed(504), true);
  });
  it('a refusal in front of Stripe (502, 503) or a rate limit (429) was not', () => {
    for (const status of [429, 502, 503]) assert.equal(statusMayHaveBeenProcessed(status), false, String(status));
  });
  it('a success or a client error was not (Stripe does not execute a refused request)', () => {
    for (const status of [200, 400, 402, 404]) assert.equal(statusMayHaveBeenProcessed(status), false, String(status));
  });
});

describe('classifyError (an SDK error)', () => {
  it('402 card_error: card_declined under its decline_code', () => {
    assert.deepEqual(fail(ERRORS.insufficientFunds), {
      kind: 'card_declined',
      code: 'insufficient_funds',
      message: 'Your card has insufficient funds.',
    });
  });
  it('402 card_error without a decline_code: its code', () => {
    const { decline_code: _dc, ...error } = ERRORS.insufficientFunds.error;
    assert.deepEqual(fail({ status: 402, error: { ...error, code: 'expired_card' } }), {
      kind: 'card_declined',
      code: 'expired_card',
      message: 'Your card has insufficient funds.',
    });
  });
  it('402 card_error with neither: card_declined', () => {
    const { decline_code: _dc, code: _c, ...error } = ERRORS.insufficientFunds.error;
    assert.equal(fail({ status: 402, error }).code, 'card_declined');
  });
  it('400 idempotency_error: an idempotency conflict', () => {
    assert.deepEqual(fail(ERRORS.idempotency), {
      kind: 'idempotency_conflict',
      code: 'idempotency_error',
      message: ERRORS.idempotency.error.message,
    });
  });
  it('400 invalid_request_error with a code: refused under that code, with the PaymentIntent it carries', () => {
    const failure = fail(ERRORS.cancelPaid);
    assert.ok(failure.kind === 'invalid_request', JSON.stringify(failure));
    assert.equal(failure.code, 'payment_intent_unexpected_state');
    assert.equal(failure.intent?.id, PI_PAID.id);
    assert.equal(failure.intent?.status, 'succeeded');
  });
  it('400 invalid_request_error without a code or a PaymentIntent: invalid_request_error, no intent', () => {
    assert.deepEqual(fail(ERRORS.invalidCurrency), {
      kind: 'invalid_request',
      code: 'invalid_request_error',
      message: ERRORS.invalidCurrency.error.message,
    });
  });
  it('404 resource_missing: refused', () => {
    assert.deepEqual(fail(ERRORS.resourceMissing), {
      kind: 'invalid_request',
      code: 'resource_missing',
      message: ERRORS.resourceMissing.error.message,
    });
  });
  it('429: not sent (rate limited)', () => {
    assert.deepEqual(fail(ERRORS.rateLimit), { kind: 'not_sent', code: 'rate_limit', message: 'Request rate limit exceeded.' });
  });
  it('429 after a try that may have reached Stripe: in doubt', () => {
    assert.deepEqual(fail(ERRORS.rateLimit, true), {
      kind: 'in_doubt',
      code: 'rate_limit_AFTER_EARLIER_TRY',
      message: 'Request rate limit exceeded. (an earlier try may have reached Stripe)',
    });
  });
  it('401: not sent (authentication_error)', () => {
    assert.deepEqual(fail(ERRORS.authentication), {
      kind: 'not_sent',
      code: 'authentication_error',
      message: ERRORS.authentication.error.message,
    });
  });
  it('403: not sent (permission_error)', () => {
    assert.deepEqual(fail(ERRORS.permission), { kind: 'not_sent', code: 'permission_error', message: ERRORS.permission.error.message });
  });
  it('a refused connection: not sent, under the socket error’s code', () => {
    assert.deepEqual(classifyError(REFUSED, false), {
      kind: 'not_sent',
      code: 'ECONNREFUSED',
      message: 'An error occurred with our connection to Stripe.',
    });
  });
  it('a refused connection after a try that may have reached Stripe: in doubt', () => {
    const failure = classifyError(REFUSED, true);
    assert.equal(failure.kind, 'in_doubt');
    assert.equal(failure.code, 'ECONNREFUSED_AFTER_EARLIER_TRY');
  });
  it('a timeout or a reset: in doubt (the request may have been executed)', () => {
    assert.deepEqual(classifyError(TIMED_OUT, false), {
      kind: 'in_doubt',
      code: 'ETIMEDOUT',
      message: 'Request aborted due to timeout being reached (100ms)',
    });
    assert.equal(classifyError(RESET, false).code, 'ECONNRESET');
    assert.equal(classifyError(RESET, false).kind, 'in_doubt');
  });
  it('a connection error with no code at all: in doubt, CONNECTION_ERROR', () => {
    const bare = new Stripe.errors.StripeConnectionError({ message: 'An error occurred with our connection to Stripe.' });
    assert.deepEqual(classifyError(bare, false), {
      kind: 'in_doubt',
      code: 'CONNECTION_ERROR',
      message: 'An error occurred with our connection to Stripe.',
    });
  });
  it('503 api_error: not sent (refused in front of Stripe)', () => {
    assert.deepEqual(fail(ERRORS.unavailable503), { kind: 'not_sent', code: 'HTTP_503', message: 'Service unavailable' });
  });
  it('500 api_error: in doubt under HTTP_500 (Stripe may have begun executing it)', () => {
    assert.deepEqual(fail(ERRORS.unknown500), { kind: 'in_doubt', code: 'HTTP_500', message: 'An unknown error occurred' });
  });
  it('409 idempotency_key_in_use: in doubt under its code', () => {
    assert.deepEqual(fail(ERRORS.keyInUse), { kind: 'in_doubt', code: 'idempotency_key_in_use', message: ERRORS.keyInUse.error.message });
  });
  it('an answer that is not JSON (no status on the error): in doubt, api_error', () => {
    const unreadable = new Stripe.errors.StripeAPIError({ message: 'Invalid JSON received from the Stripe API' });
    assert.deepEqual(classifyError(unreadable, false), {
      kind: 'in_doubt',
      code: 'api_error',
      message: 'Invalid JSON received from the Stripe API',
    });
  });
  it('an error the SDK does not recognise: in doubt, SDK_ERROR', () => {
    assert.deepEqual(classifyError(new TypeError('fetch is not a function'), false), {
      kind: 'in_doubt',
      code: 'SDK_ERROR',
      message: 'fetch is not a function',
    });
    assert.equal(classifyError('a string', false).code, 'SDK_ERROR');
  });
});

describe('classifyBareStatus (an error status the SDK read as the resource)', () => {
  it('a success is no failure', () => {
    assert.equal(classifyBareStatus(200, false), undefined);
    assert.equal(classifyBareStatus(200, true), undefined);
  });
  it('a 503 from a proxy: not sent', () => {
    assert.deepEqual(classifyBareStatus(503, false), {
      kind: 'not_sent',
      code: 'HTTP_503',
      message: 'HTTP 503 without a Stripe error body',
    });
  });
  it('a 503 after a try that may have reached Stripe: in doubt', () => {
    assert.equal(classifyBareStatus(503, true)?.kind, 'in_doubt');
  });
  it('any other error status (a 404 or 500 page): in doubt', () => {
    assert.deepEqual(classifyBareStatus(404, false), {
      kind: 'in_doubt',
      code: 'HTTP_404',
      message: 'HTTP 404 without a Stripe error body',
    });
    assert.equal(classifyBareStatus(500, false)?.kind, 'in_doubt');
  });
});

describe('classifyUnreadReplay', () => {
  it('a replayed PaymentIntent that could not be read again is indeterminate, whatever the failure', () => {
    assert.deepEqual(classifyUnreadReplay(PI_OPEN.id, fail(ERRORS.unavailable503)), {
      kind: 'indeterminate',
      code: 'HTTP_503',
      message: `PaymentIntent ${PI_OPEN.id} could not be read again: Service unavailable`,
    });
  });
});

describe('classifyChargeFailure (a failed create)', () => {
  it('a declined card: declined', () => {
    const failure = fail(ERRORS.insufficientFunds);
    assert.ok(failure.kind !== 'idempotency_conflict', JSON.stringify(failure));
    assert.deepEqual(classifyChargeFailure(failure), {
      kind: 'declined',
      code: 'insufficient_funds',
      message: 'Your card has insufficient funds.',
    });
  });
  it('a refused request (an unknown currency): declined', () => {
    const failure = fail(ERRORS.invalidCurrency);
    assert.ok(failure.kind !== 'idempotency_conflict', JSON.stringify(failure));
    assert.equal(classifyChargeFailure(failure).kind, 'declined');
  });
  it('not sent: retryable', () => {
    assert.deepEqual(classifyChargeFailure({ kind: 'not_sent', code: 'ECONNREFUSED', message: 'refused' }), {
      kind: 'retryable',
      code: 'ECONNREFUSED',
      message: 'refused',
    });
  });
  it('in doubt: indeterminate', () => {
    assert.deepEqual(classifyChargeFailure({ kind: 'in_doubt', code: 'HTTP_500', message: 'An unknown error occurred' }), {
      kind: 'indeterminate',
      code: 'HTTP_500',
      message: 'An unknown error occurred',
    });
  });
});

describe('classifyRefundListFailure (a failed list of a PaymentIntent’s refunds)', () => {
  it('404 resource_missing: no such PaymentIntent, so no refund of it (answered not_found)', () => {
    assert.deepEqual(classifyRefundListFailure(fail(ERRORS.resourceMissing)), { kind: 'answered', refund: { kind: 'not_found' } });
  });
  it('another refusal or a transport failure: unavailable', () => {
    assert.deepEqual(classifyRefundListFailure(fail(ERRORS.authentication)), {
      kind: 'unavailable',
      code: 'authentication_error',
      message: ERRORS.authentication.error.message,
    });
    assert.equal(classifyRefundListFailure(fail(ERRORS.invalidCurrency)).kind, 'unavailable');
  });
});

describe('refusalMayBeThisRefund', () => {
  it('amount_too_large and charge_already_refunded are looked up', () => {
    assert.equal(refusalMayBeThisRefund(fail(ERRORS.amountTooLarge)), true);
    assert.equal(
      refusalMayBeThisRefund({ kind: 'invalid_request', code: 'charge_already_refunded', message: 'Charge has already been refunded.' }),
      true,
    );
  });
  it('any other failure is not', () => {
    assert.equal(refusalMayBeThisRefund(fail(ERRORS.resourceMissing)), false);
    assert.equal(refusalMayBeThisRefund(classifyError(REFUSED, false)), false);
  });
});

describe('classifyRefundFailure (a failed refund create)', () => {
  const tooLarge = () => fail(ERRORS.amountTooLarge);
  const answered = (refund: Extract<RefundQueryOutcome, { kind: 'answered' }>['refund']): RefundQueryOutcome => ({
    kind: 'answered',
    refund,
  });

  it('a refusal, not looked up (unknown PaymentIntent): failed for good', () => {
    assert.deepEqual(classifyRefundFailure(fail(ERRORS.resourceMissing)), {
      kind: 'failed',
      code: 'resource_missing',
      message: ERRORS.resourceMissing.error.message,
    });
  });
  it('amount_too_large, and the look-up finds this refund succeeded: succeeded', () => {
    const found = answered({ kind: 'succeeded', gatewayRefundId: REFUND.id, amountMinor: 500 });
    assert.deepEqual(classifyRefundFailure(tooLarge(), found), { kind: 'succeeded', gatewayRefundId: REFUND.id, amountMinor: 500 });
  });
  it('amount_too_large, and the look-up finds it pending: pending', () => {
    assert.deepEqual(classifyRefundFailure(tooLarge(), answered({ kind: 'pending' })), { kind: 'pending', gatewayRefundId: null });
  });
  it('amount_too_large, and the look-up finds nothing (or a failed one): failed for good', () => {
    const refused = { kind: 'failed', code: 'amount_too_large', message: ERRORS.amountTooLarge.error.message };
    assert.deepEqual(classifyRefundFailure(tooLarge(), answered({ kind: 'not_found' })), refused);
    assert.deepEqual(classifyRefundFailure(tooLarge(), answered({ kind: 'failed', code: 'refund_failed', message: 'x' })), refused);
  });
  it('amount_too_large, and the look-up failed: indeterminate', () => {
    assert.deepEqual(classifyRefundFailure(tooLarge(), { kind: 'unavailable', code: 'ECONNREFUSED', message: 'refused' }), {
      kind: 'indeterminate',
      code: 'amount_too_large',
      message: `${ERRORS.amountTooLarge.error.message} (and the look-up failed: refused)`,
    });
  });
  it('a 402: failed', () => {
    assert.equal(classifyRefundFailure(fail(ERRORS.insufficientFunds)).kind, 'failed');
  });
  it('not sent: retryable', () => {
    assert.deepEqual(classifyRefundFailure(classifyError(REFUSED, false)), {
      kind: 'retryable',
      code: 'ECONNREFUSED',
      message: 'An error occurred with our connection to Stripe.',
    });
  });
  it('in doubt: indeterminate', () => {
    assert.deepEqual(classifyRefundFailure(fail(ERRORS.unknown500)), {
      kind: 'indeterminate',
      code: 'HTTP_500',
      message: 'An unknown error occurred',
    });
  });
  it('an idempotency conflict: indeterminate under idempotency_error', () => {
    assert.deepEqual(classifyRefundFailure(fail(ERRORS.idempotency)), {
      kind: 'indeterminate',
      code: 'idempotency_error',
      message: ERRORS.idempotency.error.message,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// classify.ts: PaymentIntents

describe('oldestFirst', () => {
  it('orders by created, then by id', () => {
    const a = intent(PI_OPEN, { id: 'pi_b', created: 5 });
    const b = intent(PI_OPEN, { id: 'pi_a', created: 5 });
    const c = intent(PI_OPEN, { id: 'pi_c', created: 4 });
    assert.deepEqual(
      oldestFirst([a, b, c]).map((i) => i.id),
      ['pi_c', 'pi_a', 'pi_b'],
    );
  });
});

describe('classifyPay (a charge’s PaymentIntent)', () => {
  it('succeeded for the asked amount and currency: succeeded', () => {
    assert.deepEqual(classifyPay(intent(PI_PAID), chargeRequest()), {
      kind: 'succeeded',
      gatewayTradeNo: PI_PAID.id,
      amountMinor: 1230,
      currency: 'CNY',
    });
  });
  it('succeeded for another amount: indeterminate AMOUNT_MISMATCH', () => {
    assert.deepEqual(classifyPay(intent(PI_PAID), chargeRequest({ amountMinor: 1231 })), {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: `PaymentIntent ${PI_PAID.id} received 1230 cny, asked 1231 CNY`,
    });
  });
  it('succeeded in another currency: indeterminate AMOUNT_MISMATCH', () => {
    assert.equal(classifyPay(intent(PI_PAID), chargeRequest({ currency: 'USD' })).kind, 'indeterminate');
  });
  it('requires_payment_method with the last error: declined under its decline_code', () => {
    assert.deepEqual(classifyPay(intent(PI_DECLINED), chargeRequest()), {
      kind: 'declined',
      code: 'insufficient_funds',
      message: 'Your card has insufficient funds.',
    });
  });
  it('requires_payment_method with an error without decline_code or message: its code, "payment failed"', () => {
    const error = { type: 'card_error', code: 'expired_card' };
    assert.deepEqual(classifyPay(intent(PI_DECLINED, { last_payment_error: error }), chargeRequest()), {
      kind: 'declined',
      code: 'expired_card',
      message: 'payment failed',
    });
    assert.deepEqual(classifyPay(intent(PI_DECLINED, { last_payment_error: { type: 'card_error' } }), chargeRequest()), {
      kind: 'declined',
      code: 'payment_failed',
      message: 'payment failed',
    });
  });
  it('requires_payment_method without an error (never confirmed): indeterminate', () => {
    assert.deepEqual(classifyPay(intent(PI_OPEN), chargeRequest()), {
      kind: 'indeterminate',
      code: 'REQUIRES_PAYMENT_METHOD',
      message: `PaymentIntent ${PI_OPEN.id} was not confirmed`,
    });
  });
  it('canceled: declined payment_intent_canceled', () => {
    assert.deepEqual(classifyPay(intent(PI_CANCELED), chargeRequest()), {
      kind: 'declined',
      code: 'payment_intent_canceled',
      message: `PaymentIntent ${PI_OPEN.id} is canceled`,
    });
  });
  it('requires_capture (capture_method manual): authorized, holding the whole amount', () => {
    assert.deepEqual(classifyPay(intent(PI_OPEN, { status: 'requires_capture', amount: 1230 }), chargeRequest()), {
      kind: 'authorized',
      gatewayTradeNo: PI_OPEN.id,
      amountMinor: 1230,
      currency: 'CNY',
    });
    assert.equal(classifyPay(intent(PI_OPEN, { status: 'requires_capture', amount: 1000 }), chargeRequest()).kind, 'indeterminate');
  });
  it('requires_action, requires_confirmation, processing: indeterminate under the status', () => {
    for (const status of ['requires_action', 'requires_confirmation', 'processing']) {
      assert.deepEqual(classifyPay(intent(PI_OPEN, { status }), chargeRequest()), {
        kind: 'indeterminate',
        code: status,
        message: `PaymentIntent ${PI_OPEN.id} is ${status}`,
      });
    }
  });
  it('a status Stripe adds later: indeterminate UNKNOWN_STATUS', () => {
    assert.deepEqual(classifyPay(intent(PI_OPEN, { status: 'requires_reauthorization' }), chargeRequest()), {
      kind: 'indeterminate',
      code: 'UNKNOWN_STATUS',
      message: `PaymentIntent ${PI_OPEN.id} is requires_reauthorization`,
    });
  });
});

describe('classifyCardStep (the card step’s PaymentIntent)', () => {
  it('waiting for the buyer’s card: awaiting_buyer with Stripe.js, the publishable key and the client secret', () => {
    assert.deepEqual(classifyCardStep(intent(PI_OPEN), chargeRequest(), CARD_STEP), {
      kind: 'awaiting_buyer',
      action: {
        kind: 'card',
        scriptUrl: CARD_STEP.scriptUrl,
        publishableKey: CARD_STEP.publishableKey,
        clientSecret: PI_OPEN.client_secret,
      },
    });
  });
  it('after a declined card, or mid-3-D Secure, or unconfirmed: still waiting for the buyer', () => {
    for (const changes of [{}, { status: 'requires_action' }, { status: 'requires_confirmation' }]) {
      assert.equal(
        classifyCardStep(intent(PI_DECLINED, changes), chargeRequest(), CARD_STEP).kind,
        'awaiting_buyer',
        JSON.stringify(changes),
      );
    }
  });
  it('without a client secret: indeterminate MALFORMED_RESPONSE', () => {
    assert.deepEqual(classifyCardStep(intent(PI_OPEN, { client_secret: null }), chargeRequest(), CARD_STEP), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: `PaymentIntent ${PI_OPEN.id} without client_secret`,
    });
  });
  it('for another amount or currency: indeterminate AMOUNT_MISMATCH, no card form', () => {
    assert.deepEqual(classifyCardStep(intent(PI_OPEN), chargeRequest({ amountMinor: 999 }), CARD_STEP), {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: `PaymentIntent ${PI_OPEN.id} is for 1230 cny, asked 999 CNY`,
    });
    assert.equal(classifyCardStep(intent(PI_OPEN), chargeRequest({ currency: 'HKD' }), CARD_STEP).kind, 'indeterminate');
  });
  it('already paid, or closed, or past the buyer: read as a charge’s answer', () => {
    assert.equal(classifyCardStep(intent(PI_PAID), chargeRequest(), CARD_STEP).kind, 'succeeded');
    assert.equal(classifyCardStep(intent(PI_CANCELED), chargeRequest(), CARD_STEP).kind, 'declined');
    assert.equal(classifyCardStep(intent(PI_OPEN, { status: 'processing' }), chargeRequest(), CARD_STEP).kind, 'indeterminate');
  });
});

describe('classifyEarlierIntents (the "already paid" look-up before a charge)', () => {
  it('nothing, or only unpaid ones: the charge goes ahead', () => {
    assert.equal(classifyEarlierIntents([], chargeRequest()), undefined);
    assert.equal(classifyEarlierIntents([intent(PI_DECLINED), intent(PI_CANCELED)], chargeRequest()), undefined);
  });
  it('a succeeded one: the charge’s answer, charging nothing', () => {
    assert.deepEqual(classifyEarlierIntents([intent(PI_DECLINED), intent(PI_PAID)], chargeRequest()), {
      kind: 'succeeded',
      gatewayTradeNo: PI_PAID.id,
      amountMinor: 1230,
      currency: 'CNY',
    });
  });
  it('a succeeded one for another amount: indeterminate AMOUNT_MISMATCH', () => {
    assert.equal(classifyEarlierIntents([intent(PI_PAID)], chargeRequest({ amountMinor: 1231 }))?.kind, 'indeterminate');
  });
  it('one processing: indeterminate (money may still move); one requires_capture: the authorisation is the answer', () => {
    assert.deepEqual(classifyEarlierIntents([intent(PI_OPEN, { status: 'processing' })], chargeRequest()), {
      kind: 'indeterminate',
      code: 'PAYMENT_PROCESSING',
      message: `PaymentIntent ${PI_OPEN.id} is processing`,
    });
    assert.equal(
      classifyEarlierIntents([intent(PI_OPEN, { status: 'requires_capture', amount: 1230 })], chargeRequest())?.kind,
      'authorized',
    );
  });
  it('a succeeded one wins over one processing', () => {
    const outcome = classifyEarlierIntents([intent(PI_OPEN, { status: 'processing' }), intent(PI_PAID)], chargeRequest());
    assert.equal(outcome?.kind, 'succeeded');
  });
});

describe('inCurrency (the query behind an idempotency conflict)', () => {
  const paid = { kind: 'answered', trade: { kind: 'succeeded', gatewayTradeNo: PI_PAID.id, amountMinor: 1230, currency: 'CNY' } } as const;
  it('a payment in the asked currency, or no payment: unchanged', () => {
    assert.deepEqual(inCurrency(paid, 'CNY'), paid);
    assert.deepEqual(inCurrency({ kind: 'answered', trade: { kind: 'pending' } }, 'CNY'), { kind: 'answered', trade: { kind: 'pending' } });
    assert.deepEqual(inCurrency({ kind: 'unavailable', code: 'X', message: 'y' }, 'CNY'), { kind: 'unavailable', code: 'X', message: 'y' });
  });
  it('a payment in another currency: not this charge (unavailable CURRENCY_MISMATCH)', () => {
    assert.deepEqual(inCurrency(paid, 'USD'), {
      kind: 'unavailable',
      code: 'CURRENCY_MISMATCH',
      message: `PaymentIntent ${PI_PAID.id} was paid in CNY, asked USD`,
    });
  });
});

describe('classifyTrade (a query’s answer from the order’s PaymentIntents)', () => {
  it('none, the whole window read: not_found', () => {
    assert.deepEqual(classifyTrade([], true), { kind: 'answered', trade: { kind: 'not_found' } });
  });
  it('none, but the window was too busy to read whole: unavailable SEARCH_INCOMPLETE, never not_found', () => {
    assert.deepEqual(classifyTrade([], false), {
      kind: 'unavailable',
      code: 'SEARCH_INCOMPLETE',
      message: 'too many recent PaymentIntents to rule out one search does not show yet',
    });
  });
  it('some, none paid, but not all read: unavailable SEARCH_INCOMPLETE, never pending or closed', () => {
    for (const intents of [[intent(PI_DECLINED)], [intent(PI_CANCELED)]]) {
      assert.deepEqual(classifyTrade(intents, false), {
        kind: 'unavailable',
        code: 'SEARCH_INCOMPLETE',
        message: 'too many recent PaymentIntents to rule out one search does not show yet',
      });
    }
  });
  it('a succeeded one, even in a partial read: succeeded', () => {
    assert.equal(classifyTrade([intent(PI_DECLINED), intent(PI_PAID)], false).kind, 'answered');
  });
  it('a succeeded one: succeeded, the oldest when there are two', () => {
    const later = intent(PI_PAID, { id: 'pi_later', created: PI_PAID.created + 10 });
    assert.deepEqual(classifyTrade([later, intent(PI_DECLINED), intent(PI_PAID)], true), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo: PI_PAID.id, amountMinor: 1230, currency: 'CNY' },
    });
  });
  it('a succeeded one without amount_received: unavailable MALFORMED_RESPONSE', () => {
    assert.deepEqual(classifyTrade([intent(PI_PAID, { amount_received: 0 })], true), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: `succeeded PaymentIntent ${PI_PAID.id} without amount_received`,
    });
  });
  it('one still payable (declined, or never confirmed): pending', () => {
    assert.deepEqual(classifyTrade([intent(PI_CANCELED, { id: 'pi_x' }), intent(PI_DECLINED)], true), {
      kind: 'answered',
      trade: { kind: 'pending' },
    });
    assert.deepEqual(classifyTrade([intent(PI_OPEN, { status: 'requires_confirmation' })], true), {
      kind: 'answered',
      trade: { kind: 'pending' },
    });
  });
  it('only canceled ones: closed', () => {
    assert.deepEqual(classifyTrade([intent(PI_CANCELED)], true), { kind: 'answered', trade: { kind: 'closed' } });
  });
  it('one requires_capture: authorized, with what it holds', () => {
    assert.deepEqual(classifyTrade([intent(PI_DECLINED), intent(PI_OPEN, { status: 'requires_capture', amount: 1230 })], false), {
      kind: 'answered',
      trade: { kind: 'authorized', gatewayTradeNo: PI_OPEN.id, amountMinor: 1230, currency: 'CNY' },
    });
  });
  it('one processing or requires_action: unavailable (money may still move)', () => {
    for (const status of ['processing', 'requires_action']) {
      assert.deepEqual(classifyTrade([intent(PI_DECLINED), intent(PI_OPEN, { status })], true), {
        kind: 'unavailable',
        code: `PAYMENT_${status.toUpperCase()}`,
        message: `PaymentIntent ${PI_OPEN.id} is ${status}`,
      });
    }
  });
  it('one in a status Stripe adds later: unavailable UNKNOWN_STATUS', () => {
    assert.equal(classifyTrade([intent(PI_OPEN, { status: 'requires_reauthorization' })], true).kind, 'unavailable');
    assert.deepEqual(classifyTrade([intent(PI_OPEN, { status: 'requires_reauthorization' })], true), {
      kind: 'unavailable',
      code: 'UNKNOWN_STATUS',
      message: `PaymentIntent ${PI_OPEN.id} is requires_reauthorization`,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// classify.ts: closing

describe('closeVerdict (one PaymentIntent of an order being closed)', () => {
  it('canceled: final', () => {
    assert.deepEqual(closeVerdict(intent(PI_CANCELED)), { kind: 'final' });
  });
  it('succeeded: a payment to report', () => {
    assert.deepEqual(closeVerdict(intent(PI_PAID)), {
      kind: 'paid',
      trade: { gatewayTradeNo: PI_PAID.id, amountMinor: 1230, currency: 'CNY' },
    });
  });
  it('succeeded without amount_received: in doubt MALFORMED_RESPONSE', () => {
    assert.equal(closeVerdict(intent(PI_PAID, { amount_received: null })).kind, 'in_doubt');
  });
  it('payable or authorized: to cancel', () => {
    for (const status of ['requires_payment_method', 'requires_confirmation', 'requires_action', 'requires_capture']) {
      assert.deepEqual(closeVerdict(intent(PI_OPEN, { status })), { kind: 'cancel' }, status);
    }
  });
  it('processing: in doubt (cannot be canceled, may still succeed)', () => {
    assert.deepEqual(closeVerdict(intent(PI_OPEN, { status: 'processing' })), {
      kind: 'in_doubt',
      code: 'PAYMENT_PROCESSING',
      message: `PaymentIntent ${PI_OPEN.id} is processing`,
    });
  });
  it('a status Stripe adds later: in doubt UNKNOWN_STATUS', () => {
    assert.equal((closeVerdict(intent(PI_OPEN, { status: 'requires_reauthorization' })) as { code?: string }).code, 'UNKNOWN_STATUS');
  });
});

describe('classifyCancel (the answer to one cancel)', () => {
  it('canceled: final', () => {
    assert.deepEqual(classifyCancel(PI_OPEN.id, { ok: true, value: intent(PI_CANCELED) }), { kind: 'final' });
  });
  it('answered in another status: in doubt NOT_CANCELED', () => {
    assert.deepEqual(classifyCancel(PI_OPEN.id, { ok: true, value: intent(PI_OPEN, { status: 'processing' }) }), {
      kind: 'in_doubt',
      code: 'NOT_CANCELED',
      message: `PaymentIntent ${PI_OPEN.id} is processing after cancel`,
    });
  });
  it('refused because the buyer paid first: the payment, from the PaymentIntent the refusal carries', () => {
    assert.deepEqual(classifyCancel(PI_PAID.id, { ok: false, failure: fail(ERRORS.cancelPaid) }), {
      kind: 'paid',
      trade: { gatewayTradeNo: PI_PAID.id, amountMinor: 1230, currency: 'CNY' },
    });
  });
  it('refused because it is canceled already: final', () => {
    const alreadyCanceled = { status: 400, error: { ...ERRORS.cancelPaid.error, payment_intent: PI_CANCELED } };
    assert.deepEqual(classifyCancel(PI_OPEN.id, { ok: false, failure: fail(alreadyCanceled) }), { kind: 'final' });
  });
  it('refused while the PaymentIntent it carries is still payable: in doubt under the refusal', () => {
    const stillOpen = { status: 400, error: { ...ERRORS.cancelPaid.error, payment_intent: PI_OPEN } };
    assert.deepEqual(classifyCancel(PI_OPEN.id, { ok: false, failure: fail(stillOpen) }), {
      kind: 'in_doubt',
      code: 'payment_intent_unexpected_state',
      message: ERRORS.cancelPaid.error.message,
    });
  });
  it('refused without the PaymentIntent, or for another reason: in doubt', () => {
    const { payment_intent: _pi, ...bare } = ERRORS.cancelPaid.error;
    assert.equal(classifyCancel(PI_PAID.id, { ok: false, failure: fail({ status: 400, error: bare }) }).kind, 'in_doubt');
    assert.deepEqual(classifyCancel('pi_doesnotexist', { ok: false, failure: fail(ERRORS.resourceMissing) }), {
      kind: 'in_doubt',
      code: 'resource_missing',
      message: ERRORS.resourceMissing.error.message,
    });
  });
  it('a transport failure or an idempotency conflict: in doubt under its code', () => {
    assert.deepEqual(classifyCancel(PI_OPEN.id, { ok: false, failure: fail(ERRORS.unknown500) }), {
      kind: 'in_doubt',
      code: 'HTTP_500',
      message: 'An unknown error occurred',
    });
    assert.equal(
      (classifyCancel(PI_OPEN.id, { ok: false, failure: fail(ERRORS.idempotency) }) as { code?: string }).code,
      'idempotency_error',
    );
  });
});

describe('classifyClose (every PaymentIntent of the order, settled)', () => {
  const paid: Settled = { kind: 'paid', trade: { gatewayTradeNo: PI_PAID.id, amountMinor: 1230, currency: 'CNY' } };
  const second: Settled = { kind: 'paid', trade: { gatewayTradeNo: 'pi_second', amountMinor: 1230, currency: 'CNY' } };
  const doubt: Settled = { kind: 'in_doubt', code: 'HTTP_500', message: 'An unknown error occurred' };

  it('nothing found, or all final: closed', () => {
    assert.deepEqual(classifyClose([], true), { kind: 'closed' });
    assert.deepEqual(classifyClose([{ kind: 'final' }, { kind: 'final' }], true), { kind: 'closed' });
  });
  it('payments found: already_paid with every one, in order', () => {
    assert.deepEqual(classifyClose([paid, { kind: 'final' }, second], true), { kind: 'already_paid', charges: [paid.trade, second.trade] });
  });
  it('any doubt: indeterminate under the first one, even beside a payment', () => {
    const later: Settled = { kind: 'in_doubt', code: 'PAYMENT_PROCESSING', message: 'processing' };
    assert.deepEqual(classifyClose([paid, doubt, later], true), {
      kind: 'indeterminate',
      code: 'HTTP_500',
      message: 'An unknown error occurred',
    });
  });
  it('a look-up that could not read the whole window: indeterminate SEARCH_INCOMPLETE, whatever was found', () => {
    assert.deepEqual(classifyClose([paid], false), {
      kind: 'indeterminate',
      code: 'SEARCH_INCOMPLETE',
      message: 'too many recent PaymentIntents to rule out one search does not show yet',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// classify.ts: refunds

describe('classifyRefundStatus (a Refund)', () => {
  it('succeeded: succeeded with its id and amount', () => {
    assert.deepEqual(classifyRefundStatus(refund(REFUND)), { kind: 'succeeded', gatewayRefundId: REFUND.id, amountMinor: 500 });
  });
  it('pending, requires_action, a status Stripe adds later, or none: pending', () => {
    for (const status of ['pending', 'requires_action', 'in_review', null]) {
      assert.deepEqual(classifyRefundStatus(refund(REFUND, { status })), { kind: 'pending' }, String(status));
    }
  });
  it('failed: failed under its failure_reason', () => {
    assert.deepEqual(classifyRefundStatus(refund(REFUND, { status: 'failed', failure_reason: 'expired_or_canceled_card' })), {
      kind: 'failed',
      code: 'expired_or_canceled_card',
      message: `Refund ${REFUND.id} is failed`,
    });
  });
  it('canceled without a failure_reason: failed refund_canceled', () => {
    assert.deepEqual(classifyRefundStatus(refund(REFUND, { status: 'canceled' })), {
      kind: 'failed',
      code: 'refund_canceled',
      message: `Refund ${REFUND.id} is canceled`,
    });
  });
});

describe('findRefundIn (PayOnce’s refund in a page of the list)', () => {
  it('none with this refund_id (another one, or none at all): undefined', () => {
    assert.equal(findRefundIn([refund(REFUND), refund(REFUND, { id: 're_x', metadata: {} })], 'RF2'), undefined);
  });
  it('the one with this refund_id', () => {
    assert.equal(findRefundIn([refund(REFUND, { id: 're_other', metadata: { refund_id: 'RF9' } }), refund(REFUND)], 'RF1')?.id, REFUND.id);
  });
  it('two under one refund_id: the succeeded one, else the pending one, else the first', () => {
    const failed = refund(REFUND, { id: 're_failed', status: 'failed' });
    const pending = refund(REFUND, { id: 're_pending', status: 'pending' });
    assert.equal(findRefundIn([failed, pending, refund(REFUND)], 'RF1')?.id, REFUND.id);
    assert.equal(findRefundIn([failed, pending], 'RF1')?.id, 're_pending');
    assert.equal(findRefundIn([failed, refund(REFUND, { id: 're_canceled', status: 'canceled' })], 'RF1')?.id, 're_failed');
  });
});

describe('classifyEarlierRefund (the look-up before a refund)', () => {
  it('the look-up failed: go ahead (the key covers a repeat within the day)', () => {
    assert.equal(classifyEarlierRefund({ kind: 'unavailable', code: 'ECONNREFUSED', message: 'refused' }), undefined);
  });
  it('not found: go ahead', () => {
    assert.equal(classifyEarlierRefund({ kind: 'answered', refund: { kind: 'not_found' } }), undefined);
  });
  it('succeeded: that refund, nothing sent', () => {
    assert.deepEqual(
      classifyEarlierRefund({ kind: 'answered', refund: { kind: 'succeeded', gatewayRefundId: REFUND.id, amountMinor: 500 } }),
      {
        kind: 'succeeded',
        gatewayRefundId: REFUND.id,
        amountMinor: 500,
      },
    );
  });
  it('pending: pending', () => {
    assert.deepEqual(classifyEarlierRefund({ kind: 'answered', refund: { kind: 'pending' } }), { kind: 'pending', gatewayRefundId: null });
  });
  it('failed: failed', () => {
    assert.deepEqual(
      classifyEarlierRefund({ kind: 'answered', refund: { kind: 'failed', code: 'refund_canceled', message: 'canceled' } }),
      {
        kind: 'failed',
        code: 'refund_canceled',
        message: 'canceled',
      },
    );
  });
});

describe('classifyRefund (the Refund create answered)', () => {
  it('succeeded, as asked: succeeded', () => {
    assert.deepEqual(classifyRefund(refund(REFUND), refundRequest()), { kind: 'succeeded', gatewayRefundId: REFUND.id, amountMinor: 500 });
  });
  it('pending (or a status Stripe adds later): pending with its id', () => {
    assert.deepEqual(classifyRefund(refund(REFUND, { status: 'pending' }), refundRequest()), {
      kind: 'pending',
      gatewayRefundId: REFUND.id,
    });
    assert.deepEqual(classifyRefund(refund(REFUND, { status: 'in_review' }), refundRequest()), {
      kind: 'pending',
      gatewayRefundId: REFUND.id,
    });
  });
  it('failed: failed', () => {
    assert.deepEqual(classifyRefund(refund(REFUND, { status: 'failed', failure_reason: 'lost_or_stolen_card' }), refundRequest()), {
      kind: 'failed',
      code: 'lost_or_stolen_card',
      message: `Refund ${REFUND.id} is failed`,
    });
  });
  it('another amount: indeterminate REFUND_MISMATCH', () => {
    assert.deepEqual(classifyRefund(refund(REFUND), refundRequest({ amountMinor: 1230 })), {
      kind: 'indeterminate',
      code: 'REFUND_MISMATCH',
      message: `Refund ${REFUND.id} is 500 of ${PI_PAID.id}, asked 1230 of ${PI_PAID.id}`,
    });
  });
  it('of another PaymentIntent: indeterminate REFUND_MISMATCH', () => {
    const outcome = classifyRefund(refund(REFUND), refundRequest({ gatewayTradeNo: 'pi_other' }));
    assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    assert.equal(outcome.code, 'REFUND_MISMATCH');
  });
});

// ---------------------------------------------------------------------------------------------
// classify.ts: notifications (a verified Event)

describe('classifyEvent (a payment event)', () => {
  it('payment_intent.succeeded of a succeeded PaymentIntent of ours: succeeded', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.succeeded), ACCOUNT), {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.succeeded.id,
        merchantId: ACCOUNT,
        outTradeNo: 'POD2E24D68C152D8CEC9',
        status: 'succeeded',
        gatewayTradeNo: PI_PAID.id,
        amountMinor: 1230,
        currency: 'CNY',
      },
    });
  });
  it('payment_intent.succeeded taking less than the amount (a partial capture): the amount, and what was taken', () => {
    const partial = classifyEvent(eventOf(EVENTS.succeeded, { amount_received: 1000 }), ACCOUNT);
    assert.ok(partial.kind === 'verified', JSON.stringify(partial));
    assert.equal(partial.notification.amountMinor, 1230);
    assert.equal(partial.notification.capturedMinor, 1000);
    const whole = classifyEvent(event(EVENTS.succeeded), ACCOUNT);
    assert.ok(whole.kind === 'verified' && whole.notification.capturedMinor === undefined, JSON.stringify(whole));
  });
  it('payment_intent.amount_capturable_updated of a PaymentIntent requiring capture: authorized; canceled: canceled', () => {
    const held = classifyEvent(
      eventOf(EVENTS.succeeded, { status: 'requires_capture' }, { type: 'payment_intent.amount_capturable_updated' }),
      ACCOUNT,
    );
    assert.ok(held.kind === 'verified', JSON.stringify(held));
    assert.equal(held.notification.status, 'authorized');
    assert.equal(held.notification.amountMinor, 1230);
    const gone = classifyEvent(eventOf(EVENTS.succeeded, { status: 'canceled' }, { type: 'payment_intent.canceled' }), ACCOUNT);
    assert.ok(gone.kind === 'verified' && gone.notification.status === 'canceled', JSON.stringify(gone));
  });
  it('payment_intent.succeeded whose PaymentIntent is not succeeded: other', () => {
    const verdict = classifyEvent(eventOf(EVENTS.succeeded, { status: 'processing' }), ACCOUNT);
    assert.ok(verdict.kind === 'verified', JSON.stringify(verdict));
    assert.equal(verdict.notification.status, 'other');
  });
  it('payment_intent.payment_failed: other, with the PaymentIntent’s amount', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.paymentFailed), ACCOUNT), {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.paymentFailed.id,
        merchantId: ACCOUNT,
        outTradeNo: 'POC7565EEF958A2F656B',
        status: 'other',
        gatewayTradeNo: PI_DECLINED.id,
        amountMinor: 1230,
        currency: 'CNY',
      },
    });
  });
  it('an event without id: rejected', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.succeeded, { id: '' }), ACCOUNT), { kind: 'rejected', reason: 'event without id' });
  });
  it('another account’s event, even naming one of our orders: acknowledged and ignored', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.succeeded, { account: 'acct_1SomeoneElse00000' }), ACCOUNT), {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.succeeded.id,
        merchantId: ACCOUNT,
        outTradeNo: '',
        status: 'other',
        gatewayTradeNo: '',
        amountMinor: 0,
        currency: '',
      },
    });
  });
  it('an event with no account (the platform’s own): ours', () => {
    const { account: _a, ...own } = EVENTS.succeeded;
    const verdict = classifyEvent(event(own), ACCOUNT);
    assert.ok(verdict.kind === 'verified', JSON.stringify(verdict));
    assert.equal(verdict.notification.status, 'succeeded');
  });
  it('charge.refunded (a Charge, not a PaymentIntent): acknowledged and ignored', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.chargeRefunded), ACCOUNT), {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.chargeRefunded.id,
        merchantId: ACCOUNT,
        outTradeNo: '',
        status: 'other',
        gatewayTradeNo: '',
        amountMinor: 0,
        currency: '',
      },
    });
  });
  it('a PaymentIntent made without our out_trade_no: other, naming the PaymentIntent', () => {
    const verdict = classifyEvent(eventOf(EVENTS.succeeded, { metadata: { notify_url: 'http://127.0.0.1:46645/hook' } }), ACCOUNT);
    assert.ok(verdict.kind === 'verified', JSON.stringify(verdict));
    assert.deepEqual(
      [verdict.notification.status, verdict.notification.outTradeNo, verdict.notification.gatewayTradeNo],
      ['other', '', PI_PAID.id],
    );
  });
  it('an amount that is not a whole number of minor units: rejected', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.succeeded, { amount_received: '12.30' }), ACCOUNT), {
      kind: 'rejected',
      reason: 'invalid amount_received "12.30"',
    });
    assert.equal(classifyEvent(eventOf(EVENTS.succeeded, { amount_received: -1 }), ACCOUNT).kind, 'rejected');
    assert.equal(classifyEvent(eventOf(EVENTS.succeeded, { amount_received: 12.5 }), ACCOUNT).kind, 'rejected');
    assert.equal(classifyEvent(eventOf(EVENTS.succeeded, { amount: 12.5 }), ACCOUNT).kind, 'rejected');
  });
  it('a currency that is not three letters: rejected', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.succeeded, { currency: 'yuan' }), ACCOUNT), {
      kind: 'rejected',
      reason: 'invalid currency "yuan"',
    });
    assert.equal(classifyEvent(eventOf(EVENTS.succeeded, { currency: null }), ACCOUNT).kind, 'rejected');
  });
});

describe('classifyEvent (a refund event)', () => {
  it('refund.created of a refund of ours: a refund notification, succeeded', () => {
    assert.deepEqual(classifyEvent(event(EVENTS.refundCreated), ACCOUNT), {
      kind: 'refund',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.refundCreated.id,
        merchantId: ACCOUNT,
        outTradeNo: 'POD2E24D68C152D8CEC9',
        refundId: 'RF1',
        gatewayRefundId: REFUND.id,
        status: 'succeeded',
        amountMinor: 500,
        currency: 'CNY',
      },
    });
  });
  it('failed or canceled: failed', () => {
    for (const status of ['failed', 'canceled']) {
      const verdict = classifyEvent(eventOf(EVENTS.refundCreated, { status }, { type: 'refund.updated' }), ACCOUNT);
      assert.ok(verdict.kind === 'refund', JSON.stringify(verdict));
      assert.equal(verdict.notification.status, 'failed', status);
    }
  });
  it('pending, requires_action or a status Stripe adds later: other', () => {
    for (const status of ['pending', 'requires_action', 'in_review']) {
      const verdict = classifyEvent(eventOf(EVENTS.refundCreated, { status }, { type: 'refund.updated' }), ACCOUNT);
      assert.ok(verdict.kind === 'refund', JSON.stringify(verdict));
      assert.equal(verdict.notification.status, 'other', status);
    }
  });
  it('a refund made elsewhere (no refund_id): other, without amount, even with an odd amount', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.refundCreated, { metadata: {}, amount: 'x' }), ACCOUNT), {
      kind: 'refund',
      notification: {
        gateway: 'stripe',
        eventId: EVENTS.refundCreated.id,
        merchantId: ACCOUNT,
        outTradeNo: '',
        refundId: '',
        gatewayRefundId: REFUND.id,
        status: 'other',
        amountMinor: 0,
        currency: '',
      },
    });
  });
  it('a refund without id: rejected', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.refundCreated, { id: '' }), ACCOUNT), { kind: 'rejected', reason: 'refund without id' });
  });
  it('a refund of ours with an amount that is not minor units: rejected', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.refundCreated, { amount: 5.5 }), ACCOUNT), {
      kind: 'rejected',
      reason: 'invalid refund amount 5.5',
    });
  });
  it('a refund of ours with a currency that is not three letters: rejected', () => {
    assert.deepEqual(classifyEvent(eventOf(EVENTS.refundCreated, { currency: 'cn' }), ACCOUNT), {
      kind: 'rejected',
      reason: 'invalid refund currency "cn"',
    });
  });
});
