/**
 * The merchant's fee contract with a gateway: read from one line of configuration, and what it comes
 * to on a payment and on each refund of it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseFeeContract, type FeeContract } from '@/server/config/fee-contract';
import { contractFee, expectedFee } from '@/server/reconciliation/fees';
import type { BookEntry } from '@/server/reconciliation/match';

const contract = (text: string): FeeContract => {
  const parsed = parseFeeContract(text);
  assert.equal(typeof parsed, 'object', `parses ${text}: ${String(parsed)}`);
  return parsed as FeeContract;
};

describe('parseFeeContract', () => {
  it('reads each term, with the defaults for those left out', () => {
    assert.deepEqual(contract('rate=0.6%;refund=pro_rata'), { ratePpm: 6000, fixedMinor: 0, vatPpm: 0, whtPpm: 0, onRefund: 'pro_rata' });
    assert.deepEqual(contract(' rate=3.4% ; fixed=235 '), { ratePpm: 34_000, fixedMinor: 235, vatPpm: 0, whtPpm: 0, onRefund: 'kept' });
    assert.deepEqual(contract('rate=3%;vat=7%;wht=3%;refund=kept'), {
      ratePpm: 30_000,
      fixedMinor: 0,
      vatPpm: 70_000,
      whtPpm: 30_000,
      onRefund: 'kept',
    });
    assert.equal(contract('rate=0.0125%').ratePpm, 125);
  });

  it('names what is wrong with a line it refuses', () => {
    assert.equal(parseFeeContract('refund=kept'), 'rate=…% is required');
    assert.equal(parseFeeContract('rate=0.6'), 'rate: a percentage such as 0.6%, got 0.6');
    assert.equal(parseFeeContract('rate=101%'), 'rate: a percentage such as 0.6%, got 101%');
    assert.equal(parseFeeContract('rate=0.6%;rate=0.5%'), 'rate is given twice');
    assert.equal(parseFeeContract('rate=0.6%;fixed=-1'), 'fixed: a whole number of minor units, got -1');
    assert.equal(parseFeeContract('rate=0.6%;refund=sometimes'), 'refund: pro_rata or kept, got sometimes');
    assert.equal(parseFeeContract('rate=0.6%;tip=1%'), 'unknown term tip (rate, fixed, vat, wht, refund)');
    assert.equal(parseFeeContract('0.6%'), '"0.6%" is not key=value');
  });
});

describe('contractFee and expectedFee', () => {
  it('rounds the rate half up to the minor unit and adds the fixed part', () => {
    assert.equal(contractFee(contract('rate=0.6%'), 6800), 41); // 40.8
    assert.equal(contractFee(contract('rate=0.6%'), 7500), 45); // 45.0
    assert.equal(contractFee(contract('rate=0.6%'), 2500), 15); // 15.0
    assert.equal(contractFee(contract('rate=0.6%'), 2575), 15); // 15.45
    assert.equal(contractFee(contract('rate=0.6%'), 2585), 16); // 15.51
    assert.equal(contractFee(contract('rate=3.4%;fixed=235'), 10_000), 575);
  });

  it('adds VAT on the fee and credits withholding back, as 2C2P’s files show (MDR 48.00 → VAT 3.36, WHT 1.44)', () => {
    assert.equal(contractFee(contract('rate=3%;vat=7%;wht=3%'), 160_000), 4800 + 336 - 144);
  });

  it('gives a refund its share of the fee back under pro_rata, exactly the fee once all is refunded; nothing under kept', () => {
    const proRata = contract('rate=0.6%;refund=pro_rata');
    const payment: BookEntry = {
      kind: 'payment',
      orderId: 'o',
      outTradeNo: 'PO1',
      gatewayTradeNo: 'T1',
      amountMinor: 6800,
      currency: 'CNY',
    };
    const refund = (amountMinor: number, refundedBeforeMinor: number): BookEntry => ({
      ...payment,
      kind: 'refund',
      refundId: `R${refundedBeforeMinor}`,
      amountMinor,
      chargeAmountMinor: 6800,
      refundedBeforeMinor,
    });
    const parts = [refund(1000, 0), refund(3333, 1000), refund(2467, 4333)].map((r) => expectedFee(proRata, r));
    assert.equal(expectedFee(proRata, payment), 41);
    assert.deepEqual(parts, [-6, -20, -15]);
    assert.equal(-parts.reduce((a, b) => a + b, 0), 41, 'the parts give back exactly the payment’s fee');
    assert.equal(expectedFee(contract('rate=3.4%;refund=kept'), refund(1000, 0)), 0);
  });
});
