/**
 * What the Payment Maintenance API's answers mean for a refund, as pure functions: refund (processType
 * R) and refund status (RS), each answer in, PayOnce's RefundOutcome or RefundQueryOutcome out.
 *
 * A refund's statuses are 2C2P's "Payment Maintenance Status Codes": RF refund confirmed, RP refund
 * pending, RFF refund failed, RR (RR1–RR3) refund rejected.
 */
import type { RefundOutcome, RefundQuery, RefundQueryOutcome, RefundRequest, RefundStatus } from '@/server/payments/gateway';
import { assertNever, chargeOrRefundFailure, queryFailure, refundOutcomeOf } from '@/server/payments/transport';
import { claimAmountToMinor } from './amounts';
import { maintenanceClassOf } from './codes';
import type { MaintenanceExchange } from './maintenance';
import type { XmlAnswer } from './xml';

type Fields = Readonly<Record<string, string>>;

const field = (fields: Fields, name: string): string | undefined => (fields[name] ? fields[name] : undefined);
const codeOf = (answer: XmlAnswer) => field(answer.fields, 'respCode') ?? '';
const descOf = (answer: XmlAnswer) => field(answer.fields, 'respDesc') ?? (codeOf(answer) || 'no respCode');

/**
 * One refund record (the refund answer itself, or an item of refund status's refundList) as a
 * RefundStatus; null when it is not a record of this refund or is malformed. `idempotencyID`, when
 * present, must be this refund's; 2C2P does not say that it echoes it [unverified].
 */
export function refundRecord(record: Fields, expected: { refundId: string; currency: string }): RefundStatus | null {
  const idempotencyId = field(record, 'idempotencyID');
  if (idempotencyId !== undefined && idempotencyId !== expected.refundId) return null;
  const currency = field(record, 'currencyCode') ?? expected.currency;
  if (currency !== expected.currency) return null;
  const gatewayRefundId = field(record, 'refundReferenceNo');
  const amountMinor = claimAmountToMinor(field(record, 'amount'), currency);
  const status = field(record, 'status') ?? '';
  if (status === 'RF') return gatewayRefundId && amountMinor !== null ? { kind: 'succeeded', gatewayRefundId, amountMinor } : null;
  if (status === 'RP') return { kind: 'pending' };
  if (status === 'RFF' || /^RR\d?$/.test(status))
    return { kind: 'failed', code: status, message: `refund ${status === 'RFF' ? 'failed' : 'rejected'}` };
  return null;
}

export function classifyRefundAnswer(exchange: MaintenanceExchange, request: RefundRequest): RefundOutcome {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      return chargeOrRefundFailure(exchange, 'refund');
    case 'plain':
      return plainRefundAnswer(exchange.answer);
    case 'sealed':
      return sealedRefundAnswer(exchange.answer, request);
    default:
      return assertNever(exchange);
  }
}

/**
 * Unsealed: 2C2P could not tell who asked (a signature or envelope it refused), or someone else is
 * talking. A refusal of the envelope is retryable — the refund's idempotencyID makes a repeat safe —
 * and anything else proves nothing.
 */
function plainRefundAnswer(answer: XmlAnswer): RefundOutcome {
  const code = codeOf(answer);
  if (code === '02' || maintenanceClassOf(code) === 'keys') return { kind: 'retryable', code, message: descOf(answer) };
  return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message: descOf(answer) };
}

function sealedRefundAnswer(answer: XmlAnswer, request: RefundRequest): RefundOutcome {
  const code = codeOf(answer);
  const message = descOf(answer);
  if (field(answer.fields, 'invoiceNo') !== request.outTradeNo) {
    return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund answer for another invoice' };
  }
  const maintenanceClass = maintenanceClassOf(code);
  switch (maintenanceClass) {
    case 'success': {
      const record = refundRecord(answer.fields, { refundId: request.refundId, currency: request.currency });
      if (!record) return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund success without a matching refund record' };
      return refundOutcomeOf(record, field(answer.fields, 'refundReferenceNo') ?? null, {
        code: 'MALFORMED_RESPONSE',
        message: 'refund success without a refund',
      });
    }
    case 'pending':
      return { kind: 'pending', gatewayRefundId: field(answer.fields, 'refundReferenceNo') ?? null };
    case 'keys':
      return { kind: 'retryable', code, message };
    case 'not_found':
    case 'refused':
      return { kind: 'failed', code, message };
    case 'unknown':
      return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message };
    default:
      return assertNever(maintenanceClass);
  }
}

export function classifyRefundStatus(exchange: MaintenanceExchange, request: RefundQuery): RefundQueryOutcome {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      return queryFailure(exchange, 'refund status');
    case 'plain':
      return { kind: 'unavailable', code: codeOf(exchange.answer) || 'MALFORMED_RESPONSE', message: descOf(exchange.answer) };
    case 'sealed':
      return refundStatusAnswer(exchange.answer, request);
    default:
      return assertNever(exchange);
  }
}

/**
 * Refund status lists every refund of the invoice: this refund is the record under its idempotencyID,
 * and its absence from a sealed list is 2C2P's word that no such refund was made.
 */
function refundStatusAnswer(answer: XmlAnswer, request: RefundQuery): RefundQueryOutcome {
  const code = codeOf(answer);
  const unavailable = { kind: 'unavailable', code: code || 'MALFORMED_RESPONSE', message: descOf(answer) } as const;
  if (field(answer.fields, 'invoiceNo') !== request.outTradeNo) {
    return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'refund status for another invoice' };
  }
  const maintenanceClass = maintenanceClassOf(code);
  switch (maintenanceClass) {
    case 'success': {
      const items = answer.lists.refundList ?? [];
      const item = items.find((record) => field(record, 'idempotencyID') === request.refundId);
      if (!item) return { kind: 'answered', refund: { kind: 'not_found' } };
      // The charge's currency is not in the query: the answer's own, or 2C2P's two-decimal default.
      const currency = field(item, 'currencyCode') ?? field(answer.fields, 'currencyCode') ?? '';
      const record = refundRecord(item, { refundId: request.refundId, currency });
      if (!record) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'refund status with a malformed refund record' };
      return { kind: 'answered', refund: record };
    }
    case 'not_found':
      // 2C2P positively says the transaction does not exist: no refund of it can.
      return { kind: 'answered', refund: { kind: 'not_found' } };
    case 'pending':
    case 'refused':
    case 'keys':
    case 'unknown':
      return unavailable;
    default:
      return assertNever(maintenanceClass);
  }
}
