/**
 * What an update may change, by status (https://docs.stripe.com/api/payment_intents/update and
 * /api/refunds/update): a PaymentIntent's amount, currency, payment method and capture method only
 * until it is charged (requires_payment_method, requires_confirmation, requires_action); its
 * metadata, description and receipt_email at any time. A refund's metadata only. Metadata updates
 * merge: a key sent empty is removed, `metadata=` (empty) removes them all.
 */
import type { PaymentIntentStatus } from './stripe-objects';

/** The fields of a PaymentIntent that decide what is charged, in the order Stripe names them. */
export const PAYMENT_FIELDS = ['amount', 'currency', 'payment_method', 'capture_method'] as const;
export type PaymentField = (typeof PAYMENT_FIELDS)[number];

/** The statuses in which a PaymentIntent has not yet been charged, so what it charges can change. */
export const UPDATABLE_PAYMENT: ReadonlySet<PaymentIntentStatus> = new Set([
  'requires_payment_method',
  'requires_confirmation',
  'requires_action',
]);

/** The first payment field an update sends that the PaymentIntent's status no longer allows. */
export function refusedField(status: PaymentIntentStatus, sent: ReadonlySet<PaymentField>): PaymentField | undefined {
  if (UPDATABLE_PAYMENT.has(status)) return undefined;
  return PAYMENT_FIELDS.find((field) => sent.has(field));
}

/** Stripe's words for such a refusal (code payment_intent_unexpected_state). [unverified] for fields other than amount. */
export function refusedFieldMessage(field: PaymentField, status: PaymentIntentStatus): string {
  return (
    `This PaymentIntent's ${field} could not be updated because it has a status of ${status}. ` +
    `You may only update the ${field} of a PaymentIntent with one of the following statuses: ${[...UPDATABLE_PAYMENT].join(', ')}.`
  );
}

export interface MetadataPatch {
  /** `metadata=`: every key removed before `set` applies. */
  clear: boolean;
  set: Record<string, string>;
  unset: string[];
}

export function applyMetadata(current: Record<string, string>, patch: MetadataPatch): Record<string, string> {
  const out: Record<string, string> = patch.clear ? {} : { ...current };
  for (const key of patch.unset) delete out[key];
  return { ...out, ...patch.set };
}
