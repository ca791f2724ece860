'use client';

import type { RefObject } from 'react';
import type { Status } from '@/client/checkout-status';
import { useLang } from '@/client/i18n';
import type { CheckoutClient } from '@/client/trpc-client';
import type { AwaitingBuyer } from '@/server/checkout/pay';
import { BuyerStep } from './BuyerStep';
import { OrderDetails } from './OrderDetails';
import { PaymentStatus } from './PaymentStatus';
import type { GatewayInfo } from './use-checkout';

/** 支付结果: the status, then the buyer's own step while the order awaits it, or the paid (or authorised) order. */
export function ResultSection(props: {
  client: CheckoutClient;
  status: Status;
  gateways: GatewayInfo[] | undefined;
  resultRef: RefObject<HTMLElement | null>;
  onSwitchMethod: () => void;
  onNewOrder: () => void;
}) {
  const { t } = useLang();
  const { status } = props;
  return (
    <section className="card result" aria-labelledby="result-heading" ref={props.resultRef} tabIndex={-1} hidden={status.tone === 'idle'}>
      <h2 id="result-heading">{t('result.heading')}</h2>
      <PaymentStatus status={status} />
      {status.tone === 'wait' && (
        <AwaitingStep awaiting={status.awaiting} gateways={props.gateways} onSwitchMethod={props.onSwitchMethod} />
      )}
      {status.tone === 'ok' && (
        <>
          <OrderDetails client={props.client} orderId={status.orderId} token={status.returnToken} />
          <button className="secondary" type="button" onClick={props.onNewOrder}>
            {t('pay.again')}
          </button>
        </>
      )}
    </section>
  );
}

function AwaitingStep(props: { awaiting: AwaitingBuyer; gateways: GatewayInfo[] | undefined; onSwitchMethod: () => void }) {
  const { t } = useLang();
  const sandboxScanUrl = props.gateways?.find((g) => g.id === props.awaiting.gateway)?.sandboxScanUrl ?? null;
  return (
    <>
      <BuyerStep awaiting={props.awaiting} sandboxScanUrl={sandboxScanUrl} />
      <p className="meta" aria-live="polite">
        {t('wait.watching')}
      </p>
      <button className="secondary" type="button" onClick={props.onSwitchMethod}>
        {t('wait.switch')}
      </button>
    </>
  );
}
