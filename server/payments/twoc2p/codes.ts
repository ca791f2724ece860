/**
 * What 2C2P's result codes mean for money: PGW's four-digit respCodes and the Payment Maintenance
 * API's two-digit ones, each sorted into the few classes the adapter decides on, and the two fields
 * every answer carries them in.
 */
import { stringField } from '@/server/payments/transport';
import type { Claims } from './jwt';

/** A query that could not be answered, and why. */
export type Unavailable = { kind: 'unavailable'; code: string; message: string };

/**
 * Every respCode, sorted by what it means for money. 2C2P's list: 0000 success, 0001 pending, 0003
 * cancelled, 1000–1005 "continue on another page", 2000 Do Payment completed (inquire), 2001 in
 * progress, 2002 not found, 4xxx card host declines, 6xxx/9xxx refusals of the request itself.
 *   refused — refused before processing for a reason of configuration: fixable, retryable.
 *   invalid — refused before processing because of its content: retrying cannot help.
 */
export type RespClass =
  | 'success'
  | 'completed'
  | 'pending'
  | 'redirect'
  | 'not_found'
  | 'cancelled'
  | 'declined'
  | 'existing_invoice'
  | 'refused'
  | 'invalid'
  | 'unknown';

const RESP_CLASS: Readonly<Record<string, RespClass>> = {
  '0000': 'success',
  '2000': 'completed',
  '0001': 'pending',
  '2001': 'pending',
  '2002': 'not_found',
  '0003': 'cancelled',
  '9015': 'existing_invoice',
  '9007': 'refused', // invalid merchant
  '9040': 'refused', // invalid payment token
  '9042': 'refused', // hash value mismatch (wrong secret)
  '6103': 'refused', // invalid JWT
  '9004': 'invalid', // value not valid
  '9005': 'invalid', // mandatory field missing
  '9006': 'invalid', // field too long
  '9009': 'invalid', // amount invalid
  '9010': 'invalid', // currency invalid
};

export function respClassOf(respCode: string): RespClass {
  const known = Object.hasOwn(RESP_CLASS, respCode) ? RESP_CLASS[respCode] : undefined;
  if (known) return known;
  if (/^1\d{3}$/.test(respCode)) return 'redirect';
  if (/^4\d{3}$/.test(respCode)) return 'declined';
  // Includes 0999/99xx system errors: they do not prove that nothing was processed.
  return 'unknown';
}

/**
 * The Payment Maintenance API's result codes (two digits; 2C2P's "Payment Maintenance Result Codes"),
 * sorted by what they mean for a refund.
 *   refused — refused for good for this refund: nothing was refunded and the same request cannot succeed.
 *   keys — the envelope was refused (signature, decryption, merchant): nothing was processed, and the
 *          same request succeeds once the keys are set right.
 *   unknown — anything else, 99 "unable to complete" and 95 "timed out" included: it may have been processed.
 */
export type MaintenanceClass = 'success' | 'pending' | 'not_found' | 'refused' | 'keys' | 'unknown';

const MAINTENANCE_CLASS: Readonly<Record<string, MaintenanceClass>> = {
  '00': 'success',
  '03': 'keys', // invalid merchant ID
  '13': 'keys', // invalid hash value (the signature)
  '96': 'keys', // unable to decrypt
  '97': 'refused', // process is not supported
  '42': 'pending', // refund pending
  '51': 'pending', // same idempotent key exists with status pending
  '15': 'not_found', // invalid invoice number
  '16': 'not_found', // requested transaction doesn't exist
  '02': 'refused', // invalid request
  '10': 'refused', // missing compulsory values
  '11': 'refused', // request validation failed
  '12': 'refused', // transaction status is not valid to perform your action (not paid, voided …)
  '14': 'keys', // invalid merchant ID
  '17': 'refused', // request type is invalid
  '18': 'refused', // invalid action amount
  '30': 'refused', // unable to refund more than transaction amount
  '40': 'refused', // refund amount is more than transaction amount
  '41': 'refused', // refund not allowed
  '43': 'refused', // partial refund not allowed
  '44': 'refused', // refund rejected
  '45': 'refused', // refund failed
  '46': 'refused', // insufficient funds to perform refund
  '49': 'refused', // transaction is already fully refunded
  '50': 'refused', // same idempotent key exists with different type
  '54': 'refused', // refund exceeded allowable timeframe
};

export function maintenanceClassOf(respCode: string): MaintenanceClass {
  return (Object.hasOwn(MAINTENANCE_CLASS, respCode) ? MAINTENANCE_CLASS[respCode] : undefined) ?? 'unknown';
}

export function respCodeOf(claims: Claims): string {
  return stringField(claims, 'respCode') ?? '';
}

export function respDescOf(claims: Claims): string {
  return stringField(claims, 'respDesc') ?? (respCodeOf(claims) || 'no respCode');
}

/** An answer that tells nothing about the trade, under its own code. */
export function unavailableOf(claims: Claims): Unavailable {
  return { kind: 'unavailable', code: respCodeOf(claims) || 'MALFORMED_RESPONSE', message: respDescOf(claims) };
}
