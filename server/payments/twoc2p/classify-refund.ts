/**
 * What the Payment Maintenance API's answers mean for a refund, as pure functions: refund (processType
 * R) and refund status (RS), each answer in, PayOnce's RefundOutcome or RefundQueryOutcome out.
 */
import type { RefundOutcome, RefundQuery, RefundQueryOutcome, RefundRequest, RefundStatus } from '@/server/payments/gateway';
import { assertNever, chargeOrRefundFailure, queryFailure, refundOutcomeOf, stringField } from '@/server/payments/transport';
import { claimAmountToMinor } from './amounts';
import { maintenanceClassOf, respClassOf, respCodeOf, respDescOf, unavailableOf } from './codes';
import type { Exchange } from './exchange';
import type { Claims } from './jwt';

/** The signed refund record (processType R or RS with respCode 00) as a RefundStatus; null if malformed. */
export function refundRecord(claims: Claims, expected: { outTradeNo: string; refundId: string; currency: string }): RefundStatus | null {
  if (stringField(claims, 'invoiceNo') !== expected.outTradeNo || stringField(claims, 'idempotencyID') !== expected.refundId) return null;
  const gatewayRefundId = stringField(claims, 'refundReferenceNo');
  const currency = stringField(claims, 'currencyCode') ?? expected.currency;
  if (currency !== expected.currency) return null;
  const amountMinor = claimAmountToMinor(claims.amount, currency);
  switch (stringField(claims, 'status')) {
    case 'RF':
    case undefined:
      if (!gatewayRefundId || amountMinor === null) return null;
      return { kind: 'succeeded', gatewayRefundId, amountMinor };
    case 'RP':
      return { kind: 'pending' };
    case 'RR':
      return { kind: 'failed', code: 'RR', message: 'refund rejected' };
    default:
      return null;
  }
}

export function classifyRefundAnswer(exchange: Exchange, request: RefundRequest): RefundOutcome {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      return chargeOrRefundFailure(exchange, 'refund');
    case 'plain':
      return plainRefundAnswer(exchange.body);
    case 'signed':
      return signedRefundAnswer(exchange.claims, request);
    default:
      return assertNever(exchange);
  }
}

/** Refused before processing, unsigned: the envelope or a field of it. */
function plainRefundAnswer(body: Claims): RefundOutcome {
  const code = respCodeOf(body);
  const respClass = respClassOf(code);
  switch (respClass) {
    case 'refused':
      return { kind: 'retryable', code, message: respDescOf(body) };
    case 'invalid':
      return { kind: 'failed', code, message: respDescOf(body) };
    case 'success':
    case 'completed':
    case 'pending':
    case 'redirect':
    case 'not_found':
    case 'cancelled':
    case 'declined':
    case 'existing_invoice':
    case 'unknown':
      // 0999 and anything unexpected do not prove that nothing was refunded.
      return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message: respDescOf(body) };
    default:
      return assertNever(respClass);
  }
}

function signedRefundAnswer(claims: Claims, request: RefundRequest): RefundOutcome {
  const code = respCodeOf(claims);
  const message = respDescOf(claims);
  const maintenanceClass = maintenanceClassOf(code);
  switch (maintenanceClass) {
    case 'success':
      return refundSuccess(claims, request);
    case 'pending':
      return { kind: 'pending', gatewayRefundId: stringField(claims, 'refundReferenceNo') ?? null };
    case 'not_found':
    case 'refused':
      return { kind: 'failed', code, message };
    case 'unknown':
      return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message };
    default:
      return assertNever(maintenanceClass);
  }
}

function refundSuccess(claims: Claims, request: RefundRequest): RefundOutcome {
  const record = refundRecord(claims, { outTradeNo: request.outTradeNo, refundId: request.refundId, currency: request.currency });
  if (!record) return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund success without a matching refund record' };
  return refundOutcomeOf(record, stringField(claims, 'refundReferenceNo') ?? null, {
    code: 'MALFORMED_RESPONSE',
    message: 'refund success without a refund',
  });
}

export function classifyRefundStatus(exchange: Exchange, request: RefundQuery): RefundQueryOutcome {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      return queryFailure(exchange, 'refundStatusInquiry');
    case 'plain':
      return unavailableOf(exchange.body);
    case 'signed':
      return refundStatusAnswer(exchange.claims, request);
    default:
      return assertNever(exchange);
  }
}

function refundStatusAnswer(claims: Claims, request: RefundQuery): RefundQueryOutcome {
  const maintenanceClass = maintenanceClassOf(respCodeOf(claims));
  switch (maintenanceClass) {
    case 'success': {
      // The charge's currency is not in the query; the record carries its own.
      const currency = stringField(claims, 'currencyCode') ?? '';
      const record = refundRecord(claims, { outTradeNo: request.outTradeNo, refundId: request.refundId, currency });
      if (!record) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'refund status without a matching refund record' };
      return { kind: 'answered', refund: record };
    }
    case 'pending':
      return { kind: 'answered', refund: { kind: 'pending' } };
    case 'not_found':
      // 2C2P positively says it holds no refund under this idempotencyID for this invoice.
      return { kind: 'answered', refund: { kind: 'not_found' } };
    case 'refused':
    case 'unknown':
      return unavailableOf(claims);
    default:
      return assertNever(maintenanceClass);
  }
}
