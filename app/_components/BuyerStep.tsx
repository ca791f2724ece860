'use client';
/**
 * The buyer's own step at the gateway, as checkout.pay's 202 `awaiting_buyer` describes it: a QR code
 * to scan (WeChat Pay Native, Alipay precreate), a gateway page to go to and come back from (Alipay page
 * pay, 2C2P's hosted payment page), or a card entered into the gateway's own script (Stripe.js confirming
 * the PaymentIntent). The page never learns the outcome from here: it watches the order, which the
 * gateway's notification (or the reconciler's query) settles.
 */
import QRCode from 'qrcode';
import { useEffect, useRef, useState } from 'react';
import { declineText } from '@/client/decline-reasons';
import { useLang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { AwaitingBuyer } from '@/server/checkout/pay';

export function BuyerStep({ awaiting, sandboxScanUrl }: { awaiting: AwaitingBuyer; sandboxScanUrl: string | null }) {
  const action = awaiting.action;
  switch (action.kind) {
    case 'qr':
      return <QrStep awaiting={awaiting} qrCode={action.qrCode} sandboxScanUrl={sandboxScanUrl} />;
    case 'redirect':
      return <RedirectStep awaiting={awaiting} url={action.url} />;
    case 'card':
      return (
        <CardStep
          awaiting={awaiting}
          scriptUrl={action.scriptUrl}
          publishableKey={action.publishableKey}
          clientSecret={action.clientSecret}
        />
      );
    default: {
      const unknown: never = action;
      throw new Error(`unknown buyer step ${JSON.stringify(unknown)}`);
    }
  }
}

function QrStep({ awaiting, qrCode, sandboxScanUrl }: { awaiting: AwaitingBuyer; qrCode: string; sandboxScanUrl: string | null }) {
  const { t } = useLang();
  const [image, setImage] = useState<string | undefined>();
  const gateway = t(`gateway.${awaiting.gateway}`);
  useEffect(() => {
    let live = true;
    // Error correction M and a quiet zone of 2 modules: what payment apps scan reliably off a screen.
    void QRCode.toDataURL(qrCode, { errorCorrectionLevel: 'M', margin: 2, width: 240 }).then((url) => live && setImage(url));
    return () => {
      live = false;
    };
  }, [qrCode]);
  return (
    <div className="buyer-step">
      <p>{t('wait.scan', { gateway, amount: formatMoney(awaiting.amountMinor, awaiting.currency) })}</p>
      {image && <img className="qr" src={image} width={240} height={240} alt={t('wait.qrAlt', { gateway })} />}
      {sandboxScanUrl && (
        // Local runs only: nobody's real phone can pay the sandbox, so its phone opens the code instead.
        <p>
          <a href={`${sandboxScanUrl}?code=${encodeURIComponent(qrCode)}`} target="_blank" rel="noreferrer">
            {t('wait.sandboxPhone')}
          </a>
        </p>
      )}
    </div>
  );
}

function RedirectStep({ awaiting, url }: { awaiting: AwaitingBuyer; url: string }) {
  const { t } = useLang();
  const gateway = t(`gateway.${awaiting.gateway}`);
  return (
    <div className="buyer-step">
      <p>{t('wait.redirectHint', { gateway })}</p>
      <a className="pay pay-link" href={url}>
        {t('wait.redirect', { gateway })}
      </a>
    </div>
  );
}

/** The part of Stripe.js this page uses; the real script (js.stripe.com/v3) has the same calls. */
interface StripeJs {
  elements(): { create(type: 'card'): StripeCardElement };
  confirmCardPayment(
    clientSecret: string,
    data: { payment_method: { card: StripeCardElement } },
  ): Promise<{
    paymentIntent?: { id: string; status: string };
    error?: { type?: string; code?: string; decline_code?: string; message?: string };
  }>;
}
interface StripeCardElement {
  mount(target: HTMLElement | string): void;
  unmount(): void;
}
type StripeFactory = (publishableKey: string) => StripeJs;

/** Loads Stripe.js once per page, from wherever the deployment says (Stripe's CDN or the sandbox). */
function loadStripeJs(scriptUrl: string): Promise<StripeFactory> {
  const holder = window as unknown as { Stripe?: StripeFactory; __stripeJs?: Promise<StripeFactory> };
  if (holder.Stripe) return Promise.resolve(holder.Stripe);
  holder.__stripeJs ??= new Promise<StripeFactory>((resolve, reject) => {
    const script = document.createElement('script');
    script.src = scriptUrl;
    script.async = true;
    script.onload = () => (holder.Stripe ? resolve(holder.Stripe) : reject(new Error('Stripe.js did not define Stripe')));
    script.onerror = () => {
      holder.__stripeJs = undefined;
      reject(new Error(`could not load ${scriptUrl}`));
    };
    document.head.appendChild(script);
  });
  return holder.__stripeJs;
}

type CardState =
  | { kind: 'loading' }
  | { kind: 'ready' }
  | { kind: 'failed_to_load' }
  | { kind: 'submitting' }
  | { kind: 'submitted' }
  | { kind: 'declined'; code?: string; message?: string };

function CardStep({
  awaiting,
  scriptUrl,
  publishableKey,
  clientSecret,
}: {
  awaiting: AwaitingBuyer;
  scriptUrl: string;
  publishableKey: string;
  clientSecret: string;
}) {
  const { t, lang } = useLang();
  const mountPoint = useRef<HTMLDivElement>(null);
  const stripe = useRef<{ js: StripeJs; card: StripeCardElement } | undefined>(undefined);
  const [state, setState] = useState<CardState>({ kind: 'loading' });
  const gateway = t(`gateway.${awaiting.gateway}`);

  useEffect(() => {
    let live = true;
    loadStripeJs(scriptUrl)
      .then((Stripe) => {
        if (!live || !mountPoint.current) return;
        const js = Stripe(publishableKey);
        const card = js.elements().create('card');
        card.mount(mountPoint.current);
        stripe.current = { js, card };
        setState({ kind: 'ready' });
      })
      .catch(() => live && setState({ kind: 'failed_to_load' }));
    return () => {
      live = false;
      stripe.current?.card.unmount();
      stripe.current = undefined;
    };
  }, [scriptUrl, publishableKey]);

  async function confirm() {
    const current = stripe.current;
    if (!current) return;
    setState({ kind: 'submitting' });
    try {
      const result = await current.js.confirmCardPayment(clientSecret, { payment_method: { card: current.card } });
      if (result.error) {
        // A declined card leaves the PaymentIntent payable: the buyer may try another card here.
        setState({ kind: 'declined', code: result.error.decline_code ?? result.error.code, message: result.error.message });
      } else {
        setState({ kind: 'submitted' });
      }
    } catch {
      // Not known whether the confirm reached Stripe: the order's state will tell; the card may be tried again.
      setState({ kind: 'ready' });
    }
  }

  const busy = state.kind === 'submitting' || state.kind === 'submitted';
  return (
    <div className="buyer-step">
      <fieldset disabled={busy}>
        <legend>{t('wait.card')}</legend>
        {state.kind === 'loading' && <p>{t('wait.cardLoading', { gateway })}</p>}
        {state.kind === 'failed_to_load' && <p role="alert">{t('wait.cardLoadFailed')}</p>}
        <div ref={mountPoint} className="card-element" />
      </fieldset>
      {state.kind === 'declined' && (
        <p role="alert" className="card-declined">
          {declineText(lang, awaiting.gateway, state.code, state.message)} {t('wait.cardTryAnother')}
        </p>
      )}
      {state.kind === 'submitted' && <p>{t('wait.cardSubmitted')}</p>}
      {state.kind !== 'loading' && state.kind !== 'failed_to_load' && state.kind !== 'submitted' && (
        <button className="pay" type="button" onClick={() => void confirm()} disabled={busy}>
          {t('wait.cardPay', { amount: formatMoney(awaiting.amountMinor, awaiting.currency) })}
        </button>
      )}
    </div>
  );
}
