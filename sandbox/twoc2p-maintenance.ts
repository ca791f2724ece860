/**
 * The sandbox's 2C2P Payment Maintenance API (refund, refund status), on 2C2P's own paths and envelope.
 *
 *   POST /2C2PFrontend/PaymentAction/2.0/action   2C2P's sandbox path (demo2.2c2p.com)
 *   POST /PaymentAction/2.0/action                 its production path (t.2c2p.com, pgwid.2c2p.com)
 *
 * WHAT 2C2P DOCUMENTS (read from its developer site; the sandbox follows it):
 * - developer.2c2p.com/docs/payment-maintenance-refund-guide and …-refund-status-guide: "HTTPS POST /
 *   Server-to-Server", "Payment requests and responses are encrypted using JWE — JWE algorithm =
 *   RSA-OAEP + A256GCM — The signature uses JWS PS256", with "exchange key"; the URLs above; "refunds
 *   can only be requested for settled transactions". The request is the XML
 *     <PaymentProcessRequest><version>3.8</version><merchantID>…</merchantID><invoiceNo>…</invoiceNo>
 *       <actionAmount>25.00</actionAmount><processType>R</processType></PaymentProcessRequest>
 *   (processType RS for the refund status, the same fields). The documented sample token decodes to a
 *   JWS with header {"alg":"PS256","typ":"JWT"} whose payload is the compact JWE string, header
 *   {"alg":"RSA-OAEP","enc":"A256GCM"}, of the XML — encrypt first, then sign.
 * - developer.2c2p.com/docs/reference-jwt-with-key: the merchant encrypts with the 2C2P public key
 *   (downloaded from the merchant portal) and signs with its own private key (whose public key it
 *   uploads, "set as default"); a response is verified with the 2C2P public key and decrypted with the
 *   merchant private key. The sandbox's console (GET /sandbox/credentials) hands out both keys the
 *   merchant needs: its private key and 2C2P's public key.
 * - developer.2c2p.com/docs/refund-request (the older PKCS7 form of the same API): "multiple refund
 *   request, however the total refunded amount cannot exceed the original settled transaction
 *   amount"; processType I inquiry, V void, S settle, R refund, RS "Get Refund Status of an invoice".
 * - developer.2c2p.com/docs/response-code-payment-maintenance-result-code: respCode 00 success, 02
 *   invalid request, 10 missing compulsory values, 11 request validation failed, 12 status not valid
 *   for the action, 13 invalid hash value, 14 invalid merchant ID, 16 transaction doesn't exist, 17
 *   request type invalid, 18 invalid action amount, 40 refund more than transaction amount, 49 already
 *   fully refunded, 50 "Same Idempotent Key exists with different Type", 51 "… with status Pending",
 *   96 unable to decrypt, 97 process not supported, 99 unable to complete.
 *   …-status-code: refund statuses RP refund pending, RF refund confirmed, RFF refund failed, RR
 *   refund rejected.
 * - The request's optional fields as 2C2P's API reference lists them (read through merchants' clients
 *   of it, e.g. a Go client's PaymentProcessRequest): timeStamp, childMerchantID, bankCode,
 *   accountName, accountNumber, subMerchantList, notifyURL, idempotencyID, loyaltyPayments. The
 *   response (PaymentProcessResponse): version, timeStamp, merchantID, processType, invoiceNo,
 *   respCode, respDesc, amount, status, referenceNo, transactionDateTime … and refundReferenceNo.
 *
 * WHAT THE SANDBOX DECIDES WHERE THE DOCUMENTATION IS SILENT [unverified]:
 * - Idempotency: the refund's `idempotencyID` is its key. The same key again answers the first refund
 *   (its reference, amount and status) and refunds nothing more, whatever the amount asked — the
 *   result codes 50/51 show that 2C2P keeps the key with its type and status, not what it answers for
 *   a completed one. The same key on another invoice is 11. Without an idempotencyID every request is
 *   a refund of its own.
 * - Refund status (RS): answers the invoice (amount, status) and every refund of it in
 *   <refundList><refund>…</refund></refundList>, each with idempotencyID, refundReferenceNo, amount,
 *   status and dateTime. 2C2P documents a refund list but not its element names. actionAmount, which
 *   2C2P's RS sample carries, is accepted and not required.
 * - Failures before the merchant is known (not a JWS; a signature no merchant key verifies) cannot be
 *   encrypted to anyone: they are answered as plain XML (respCode 02 or 13), HTTP 200. Everything after
 *   that is signed and encrypted for the merchant, refusals included.
 * - Content-Type text/plain both ways (what merchants' clients send; 2C2P's pages give none).
 * - Amounts are decimals with the currency's exponent ("25.00"); answers add currencyCode.
 * - timeStamp is ddMMyyHHmmss (the format 2C2P's older response pages give) in UTC+8.
 * - Card refunds complete at once (status RF): refunds are for settled transactions and the sandbox
 *   settles at once. notifyURL is accepted and never called (2C2P documents refund callbacks only for
 *   asynchronous alternative payment methods, without their format).
 * - processType I, V and S are 97 "Process is not supported" here: PayOnce inquires through PGW's
 *   paymentInquiry and cancels through cancelTransaction.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import type { SandboxRequest, SandboxResponse } from './gateway-module';
import type { StoredRefund } from './store';
import {
  decryptRsaOaep,
  encryptRsaOaep,
  fieldsOf,
  parseXml,
  readJws,
  signPs256,
  verifyPs256,
  writeXml,
  type XmlFields,
  type XmlValue,
} from './twoc2p-envelope';
import { formatAmount, MAINTENANCE_DESC, transactionDateTime, type MaintenanceCode } from './twoc2p-wire';

/** Both of 2C2P's paths, lower case: 2C2P's routing ignores case (so does the sandbox's, for 2C2P). */
export const MAINTENANCE_PATHS: ReadonlySet<string> = new Set(['/2c2pfrontend/paymentaction/2.0/action', '/paymentaction/2.0/action']);
/** The path the console hands out: 2C2P's sandbox one. */
export const MAINTENANCE_PATH = '/2C2PFrontend/PaymentAction/2.0/action';

export function isMaintenancePath(path: string): boolean {
  return MAINTENANCE_PATHS.has(path.toLowerCase());
}

// ---------------------------------------------------------------------------------------------
// Keys

/** The key columns of psp_sandbox.twoc2p_merchants (added to databases made before them). */
export const MAINTENANCE_SCHEMA_SQL = `
ALTER TABLE psp_sandbox.twoc2p_merchants ADD COLUMN IF NOT EXISTS merchant_private_key text;
ALTER TABLE psp_sandbox.twoc2p_merchants ADD COLUMN IF NOT EXISTS merchant_public_key text;
ALTER TABLE psp_sandbox.twoc2p_merchants ADD COLUMN IF NOT EXISTS twoc2p_private_key text;
ALTER TABLE psp_sandbox.twoc2p_merchants ADD COLUMN IF NOT EXISTS twoc2p_public_key text;
`;

export interface MaintenanceKeyRow {
  merchant_id: string;
  /** Kept because the sandbox doubles as the console that generated the merchant's key pair for it. */
  merchant_private_key: string;
  /** What the merchant "uploaded to the merchant portal": it verifies the merchant's signatures. */
  merchant_public_key: string;
  /** 2C2P's own key pair: it decrypts requests and signs answers; the public half is downloadable. */
  twoc2p_private_key: string;
  twoc2p_public_key: string;
}

export interface MaintenanceMerchant {
  merchantId: string;
  merchantPublicKey: KeyObject;
  twoc2pPrivateKey: KeyObject;
}

export function maintenanceMerchant(row: MaintenanceKeyRow): MaintenanceMerchant {
  return {
    merchantId: row.merchant_id,
    merchantPublicKey: createPublicKey(row.merchant_public_key),
    twoc2pPrivateKey: createPrivateKey(row.twoc2p_private_key),
  };
}

// ---------------------------------------------------------------------------------------------
// What the API asks of the invoices (sandbox/twoc2p.ts answers)

export interface MaintenanceRefundRequest {
  invoiceNo: string;
  actionAmount: string;
  idempotencyId: string | undefined;
}

export type Refusal = { code: MaintenanceCode; detail?: string };

export interface InvoiceRefunds {
  amountMinor: bigint;
  currency: string;
  tranRef: string;
  refunds: StoredRefund[];
}

export interface MaintenanceLedger {
  refund(merchantId: string, request: MaintenanceRefundRequest): Promise<StoredRefund | Refusal>;
  refundsOf(merchantId: string, invoiceNo: string): Promise<InvoiceRefunds | Refusal>;
  exponentOf(currency: string): number;
}

// ---------------------------------------------------------------------------------------------
// Answers

const TEXT = { 'content-type': 'text/plain; charset=utf-8' };

/** ddMMyyHHmmss in UTC+8. */
function timeStamp(now: Date): string {
  const t = transactionDateTime(now); // yyyyMMddHHmmss
  return `${t.slice(6, 8)}${t.slice(4, 6)}${t.slice(2, 4)}${t.slice(8, 14)}`;
}

function describe(code: MaintenanceCode, detail?: string): string {
  return detail ? `${MAINTENANCE_DESC[code]} ${detail}` : MAINTENANCE_DESC[code];
}

/** A refusal before the merchant is known: nobody to encrypt for, so plain XML. */
export function plainAnswer(code: MaintenanceCode, detail?: string): SandboxResponse {
  const body = writeXml('PaymentProcessResponse', [
    ['version', '3.8'],
    ['timeStamp', timeStamp(new Date())],
    ['respCode', code],
    ['respDesc', describe(code, detail)],
  ]);
  return { status: 200, headers: TEXT, body };
}

/** An answer for `merchant`: XML, encrypted to the merchant's key, signed with 2C2P's. */
function sealedAnswer(keys: { merchantPublicKey: KeyObject; twoc2pPrivateKey: KeyObject }, xml: string): SandboxResponse {
  return { status: 200, headers: TEXT, body: signPs256(encryptRsaOaep(xml, keys.merchantPublicKey), keys.twoc2pPrivateKey) };
}

interface Echo {
  version: string;
  merchantId: string;
  processType: string | undefined;
  invoiceNo: string | undefined;
  idempotencyId: string | undefined;
}

function head(echo: Echo, code: MaintenanceCode, detail?: string): [string, XmlValue][] {
  return [
    ['version', echo.version],
    ['timeStamp', timeStamp(new Date())],
    ['merchantID', echo.merchantId],
    ['processType', echo.processType],
    ['invoiceNo', echo.invoiceNo],
    ['idempotencyID', echo.idempotencyId],
    ['respCode', code],
    ['respDesc', describe(code, detail)],
  ];
}

const REFUND_STATUS: Readonly<Record<StoredRefund['status'], string>> = { succeeded: 'RF', pending: 'RP', failed: 'RFF' };

function refundFields(refund: StoredRefund, exponent: number): [string, XmlValue][] {
  return [
    ['amount', formatAmount(refund.amountMinor, exponent)],
    ['currencyCode', refund.currency],
    ['status', REFUND_STATUS[refund.status]],
    ['referenceNo', refund.gatewayTradeNo],
    ['refundReferenceNo', refund.gatewayRefundId],
    ['transactionDateTime', transactionDateTime(refund.createdAt)],
  ];
}

// ---------------------------------------------------------------------------------------------
// Opening a request

type Opened = { merchant: MaintenanceMerchant; fields: Map<string, string>; echo: Echo };

/** The merchant whose registered key verifies the JWS; 2C2P does not say how it picks the key [unverified]. */
function signer(merchants: readonly MaintenanceMerchant[], jws: { input: string; signature: Buffer }): MaintenanceMerchant | undefined {
  return merchants.find((m) => verifyPs256(jws, m.merchantPublicKey));
}

/** Opens the envelope: the answer to send instead when it cannot be opened. */
export function openRequest(merchants: readonly MaintenanceMerchant[], body: string): Opened | { answer: SandboxResponse } {
  const jws = readJws(body.trim());
  if (!jws) return { answer: plainAnswer('02', 'The body is not a JWS (PS256).') };
  const merchant = signer(merchants, jws);
  if (!merchant) return { answer: plainAnswer('13', 'The signature does not verify with any registered merchant key.') };
  const reply = (code: MaintenanceCode, detail: string) => ({
    answer: sealedAnswer(keysOf(merchant), writeXml('PaymentProcessResponse', head(blankEcho(merchant), code, detail))),
  });
  const xml = decryptRsaOaep(jws.payload, merchant.twoc2pPrivateKey);
  if (xml === null) return reply('96', 'The payload is not a JWE (RSA-OAEP, A256GCM) for the 2C2P public key.');
  const root = parseXml(xml);
  if (!root || root.name !== 'PaymentProcessRequest') return reply('02', 'The payload is not a PaymentProcessRequest XML document.');
  const fields = fieldsOf(root);
  const echo: Echo = {
    version: fields.get('version') || '3.8',
    merchantId: merchant.merchantId,
    processType: fields.get('processType') || undefined,
    invoiceNo: fields.get('invoiceNo') || undefined,
    idempotencyId: fields.get('idempotencyID') || undefined,
  };
  return { merchant, fields, echo };
}

function keysOf(merchant: MaintenanceMerchant) {
  return { merchantPublicKey: merchant.merchantPublicKey, twoc2pPrivateKey: merchant.twoc2pPrivateKey };
}

function blankEcho(merchant: MaintenanceMerchant): Echo {
  return { version: '3.8', merchantId: merchant.merchantId, processType: undefined, invoiceNo: undefined, idempotencyId: undefined };
}

/** Which operation a maintenance request is (for the fault switchboard): only a refund moves money. */
export function maintenanceOperation(merchants: readonly MaintenanceMerchant[], body: string): 'refund' | undefined {
  const opened = openRequest(merchants, body);
  return !('answer' in opened) && opened.fields.get('processType') === 'R' ? 'refund' : undefined;
}

// ---------------------------------------------------------------------------------------------
// The API

const REQUIRED = ['version', 'merchantID', 'processType', 'invoiceNo'] as const;
const SUPPORTED = new Set(['R', 'RS']);
const DOCUMENTED_ELSEWHERE = new Set(['I', 'V', 'S']);

function validate(opened: Opened): Refusal | undefined {
  const { fields, merchant } = opened;
  const missing = REQUIRED.filter((name) => !fields.get(name));
  if (fields.get('processType') === 'R' && !fields.get('actionAmount')) missing.push('actionAmount' as never);
  if (missing.length > 0) return { code: '10', detail: `Missing: ${missing.join(', ')}.` };
  if (fields.get('merchantID') !== merchant.merchantId)
    return { code: '14', detail: 'merchantID is not the merchant whose key signed the request.' };
  const processType = fields.get('processType') ?? '';
  if (DOCUMENTED_ELSEWHERE.has(processType)) return { code: '97', detail: `The sandbox does not emulate processType ${processType}.` };
  if (!SUPPORTED.has(processType)) return { code: '17' };
  const invoiceNo = fields.get('invoiceNo') ?? '';
  if (invoiceNo.length > 50) return { code: '15' };
  const idempotencyId = fields.get('idempotencyID');
  if (idempotencyId !== undefined && idempotencyId.length > 100)
    return { code: '11', detail: 'idempotencyID is longer than 100 characters.' };
  const notifyUrl = fields.get('notifyURL');
  if (notifyUrl && !/^https?:\/\/\S+$/.test(notifyUrl)) return { code: '11', detail: 'notifyURL is not an http(s) URL.' };
  return undefined;
}

async function refund(opened: Opened, ledger: MaintenanceLedger): Promise<string> {
  const { fields, echo, merchant } = opened;
  const outcome = await ledger.refund(merchant.merchantId, {
    invoiceNo: fields.get('invoiceNo') ?? '',
    actionAmount: fields.get('actionAmount') ?? '',
    idempotencyId: echo.idempotencyId,
  });
  if ('code' in outcome) return writeXml('PaymentProcessResponse', head(echo, outcome.code, outcome.detail));
  return writeXml('PaymentProcessResponse', [...head(echo, '00'), ...refundFields(outcome, ledger.exponentOf(outcome.currency))]);
}

async function refundStatus(opened: Opened, ledger: MaintenanceLedger): Promise<string> {
  const { fields, echo, merchant } = opened;
  const found = await ledger.refundsOf(merchant.merchantId, fields.get('invoiceNo') ?? '');
  if ('code' in found) return writeXml('PaymentProcessResponse', head(echo, found.code, found.detail));
  const exponent = ledger.exponentOf(found.currency);
  const refunded = found.refunds.filter((r) => r.status !== 'failed').reduce((sum, r) => sum + r.amountMinor, 0n);
  const list = found.refunds.map((r): XmlFields => [
    ['idempotencyID', r.refundId],
    ['refundReferenceNo', r.gatewayRefundId],
    ['amount', formatAmount(r.amountMinor, exponent)],
    ['status', REFUND_STATUS[r.status]],
    ['dateTime', transactionDateTime(r.createdAt)],
  ]);
  return writeXml('PaymentProcessResponse', [
    ...head({ ...echo, idempotencyId: undefined }, '00'),
    ['amount', formatAmount(found.amountMinor, exponent)],
    ['currencyCode', found.currency],
    // The transaction's own status: refunded in full, or still settled ("S") [unverified letters].
    ['status', refunded >= found.amountMinor ? 'RF' : 'S'],
    ['referenceNo', found.tranRef],
    ['refundList', [['refund', { each: list }]]],
  ]);
}

/** POST …/PaymentAction/2.0/action. */
export async function maintenanceApi(
  merchants: readonly MaintenanceMerchant[],
  ledger: MaintenanceLedger,
  request: Pick<SandboxRequest, 'method' | 'body'>,
): Promise<SandboxResponse> {
  if (request.method !== 'POST') return plainAnswer('02', 'Use POST.');
  const opened = openRequest(merchants, request.body);
  if ('answer' in opened) return opened.answer;
  const refusal = validate(opened);
  const xml = refusal
    ? writeXml('PaymentProcessResponse', head(opened.echo, refusal.code, refusal.detail))
    : opened.fields.get('processType') === 'R'
      ? await refund(opened, ledger)
      : await refundStatus(opened, ledger);
  return sealedAnswer(keysOf(opened.merchant), xml);
}

/**
 * The fail_before_charge answer on this API: 99 "Unable to complete the request", sealed for the
 * merchant when the request names one, plain otherwise.
 */
export function maintenanceSystemError(merchants: readonly MaintenanceMerchant[], body: string): SandboxResponse {
  const opened = openRequest(merchants, body);
  if ('answer' in opened) return plainAnswer('99');
  return sealedAnswer(keysOf(opened.merchant), writeXml('PaymentProcessResponse', head(opened.echo, '99')));
}
