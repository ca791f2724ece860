'use client';

import { useLang } from '@/client/i18n';
import type { Payer } from '@/client/checkout-state';
import type { BuyerStep, TestBuyer } from '@/server/payments/gateway';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import type { CheckoutView, GatewayInfo } from './use-checkout';

const BUYER_IDS: TestBuyer[] = ['ok', 'insufficient_funds', 'account_restricted'];

/** What each test buyer is at the gateway: a wallet for Alipay and WeChat Pay, a test card elsewhere. */
const TEST_INSTRUMENTS: Partial<Record<GatewayId, Record<TestBuyer, string>>> = {
  stripe: { ok: '4242 4242 4242 4242', insufficient_funds: '4000 0000 0000 9995', account_restricted: '4000 0000 0000 9987' },
  '2c2p': { ok: '4111 1111 1111 1111', insufficient_funds: '4000 0000 0002 4051', account_restricted: '4000 0000 0009 4062' },
};

/** How to pay: the gateway, who pays (a test buyer or the buyer's own step), which step, and 立即支付. */
export function PaySection({ checkout }: { checkout: CheckoutView }) {
  const { t } = useLang();
  const { state, view, offer, frozen, interactive, actions } = checkout;
  const gateway = state.form.gateway;
  return (
    <section className="card" aria-labelledby="pay-heading">
      <h2 id="pay-heading">{t('pay.heading')}</h2>
      <GatewayChoices gateways={checkout.gateways.data} gateway={gateway} frozen={frozen} onChoose={actions.chooseGateway} />
      {offer?.testBuyers !== false && (
        <BuyerChoices
          gateway={gateway}
          payer={view.payer}
          selfPossible={view.steps.length > 0}
          frozen={frozen}
          onChoose={actions.choosePayer}
        />
      )}
      {view.payer === 'self' && view.steps.length > 1 && (
        <StepChoices steps={view.steps} step={view.buyerStep} frozen={frozen} onChoose={actions.chooseStep} />
      )}
      <button className="pay" type="button" onClick={actions.pay} disabled={!interactive || frozen || view.cart.length === 0}>
        {t('pay.button')}
      </button>
    </section>
  );
}

function GatewayChoices(props: {
  gateways: GatewayInfo[] | undefined;
  gateway: GatewayId;
  frozen: boolean;
  onChoose: (id: GatewayId) => void;
}) {
  const { t } = useLang();
  const isAvailable = (id: GatewayId) => props.gateways?.some((g) => g.id === id && g.available) ?? false;
  return (
    <fieldset disabled={props.frozen}>
      <legend>{t('pay.gateway')}</legend>
      <div className="choices">
        {GATEWAY_IDS.map((id) => (
          <label className="choice" key={id}>
            <input
              type="radio"
              name="gateway"
              value={id}
              checked={props.gateway === id}
              disabled={!isAvailable(id)}
              onChange={() => props.onChoose(id)}
            />{' '}
            {t(`gateway.${id}`)}
            {props.gateways && !isAvailable(id) && t('pay.unconfigured')}
          </label>
        ))}
      </div>
    </fieldset>
  );
}

function BuyerChoices(props: {
  gateway: GatewayId;
  payer: Payer;
  selfPossible: boolean;
  frozen: boolean;
  onChoose: (payer: Payer) => void;
}) {
  const { t } = useLang();
  const instruments = TEST_INSTRUMENTS[props.gateway];
  return (
    <fieldset disabled={props.frozen}>
      <legend>{t('pay.buyer')}</legend>
      <div className="choices">
        {BUYER_IDS.map((id) => (
          <label className="choice" key={id}>
            <input type="radio" name="buyer" value={id} checked={props.payer === id} onChange={() => props.onChoose(id)} />{' '}
            {t(`buyer.${id}`)}
            {instruments && <span className="meta"> · {instruments[id]}</span>}
          </label>
        ))}
        <label className="choice">
          <input
            type="radio"
            name="buyer"
            value="self"
            checked={props.payer === 'self'}
            disabled={!props.selfPossible}
            onChange={() => props.onChoose('self')}
          />{' '}
          {t('buyer.self')}
        </label>
      </div>
    </fieldset>
  );
}

function StepChoices(props: {
  steps: readonly BuyerStep[];
  step: BuyerStep | undefined;
  frozen: boolean;
  onChoose: (step: BuyerStep) => void;
}) {
  const { t } = useLang();
  return (
    <fieldset disabled={props.frozen}>
      <legend>{t('pay.step')}</legend>
      <div className="choices">
        {props.steps.map((id) => (
          <label className="choice" key={id}>
            <input type="radio" name="step" value={id} checked={props.step === id} onChange={() => props.onChoose(id)} /> {t(`step.${id}`)}
          </label>
        ))}
      </div>
    </fieldset>
  );
}
