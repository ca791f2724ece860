'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import { useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import {
  cartSignature,
  confirmOrder,
  orderTruth,
  payForCart,
  type CartLine,
  type CheckoutStorage,
  type PayResult,
  type StoredCheckout,
} from '../../client/checkout-flow';
import { LangProvider, LangSwitch, useLang } from '../../client/i18n';
import { DEFAULT_RETRY_POLICY, describeFailure } from '../../client/retry';
import { createCheckoutClient, type CheckoutClient } from '../../client/trpc-client';
import type { BuyerStep as BuyerStepKind, TestBuyer } from '../../server/payments/gateway';
import { BuyerStep } from './BuyerStep';
import { GATEWAY_IDS, type GatewayId } from '../../server/payments/gateway-ids';
import { CHECKOUT_MESSAGES } from './checkout-messages';
import { DuplicatePurchaseDialog } from './DuplicatePurchaseDialog';
import { FirstRunPanel } from './FirstRunPanel';
import { formatMoney } from './money';
import { OrderDetails } from './OrderDetails';
import { PaymentStatus, type Status } from './PaymentStatus';

export { formatMoney };

/** Where the open order and the open payment attempt (its key and request) survive a reload. */
const STORAGE_KEY = 'payonce.checkout.v1';

/** The last paid cart and when, for the duplicate-purchase question. */
const LAST_PAID_KEY = 'payonce.lastPaid.v1';

/** Paying the same cart again within this long of a payment asks first, as large shops do. */
const DUPLICATE_WINDOW_MS = 10 * 60_000;

/** How long the page waits before asking again about a payment whose result is not known yet. */
const FOLLOW_UP_MS = 4000;

/** How often the page asks the order while the buyer takes their own step (scans, enters a card). */
const WATCH_ORDER_MS = 2000;

const browserStorage: CheckoutStorage = {
  load() {
    try {
      return JSON.parse(window.localStorage.getItem(STORAGE_KEY) ?? '{}') as StoredCheckout;
    } catch {
      return {};
    }
  },
  save(state) {
    window.localStorage.setItem(STORAGE_KEY, JSON.stringify(state));
  },
};

interface LastPaid {
  cart: string;
  paidAt: number;
  orderId: string;
}

function loadLastPaid(): LastPaid | undefined {
  try {
    const value = JSON.parse(window.localStorage.getItem(LAST_PAID_KEY) ?? 'null') as LastPaid | null;
    return value && typeof value.cart === 'string' && typeof value.paidAt === 'number' ? value : undefined;
  } catch {
    return undefined;
  }
}

const BUYER_IDS: TestBuyer[] = ['ok', 'insufficient_funds', 'account_restricted'];

/** What each test buyer is at the gateway: a wallet for Alipay and WeChat Pay, a test card elsewhere. */
const TEST_INSTRUMENTS: Partial<Record<GatewayId, Record<TestBuyer, string>>> = {
  stripe: { ok: '4242 4242 4242 4242', insufficient_funds: '4000 0000 0000 9995', account_restricted: '4000 0000 0000 9987' },
  '2c2p': { ok: '4111 1111 1111 1111', insufficient_funds: '4000 0000 0002 4051', account_restricted: '4000 0000 0009 4062' },
};

const DEFAULT_QUANTITIES: Record<string, number> = { 'TEA-LONGJING': 1 };

interface Choice {
  cart: CartLine[];
  gateway: GatewayId;
  /** A sandbox test buyer; undefined: the buyer takes their own step (`buyerStep`). */
  buyer: TestBuyer | undefined;
  buyerStep?: BuyerStepKind;
}

/** Who pays, as the page offers it: a sandbox test buyer, or the buyer's own step at the gateway. */
type Payer = TestBuyer | 'self';

/** The request of a payment attempt left open by a reload or a closed tab, if there is one. */
function openAttempt(stored: StoredCheckout, fallback: Omit<Choice, 'cart'>): Choice | undefined {
  const { attempt, order } = stored;
  if (!attempt || !order || order.orderId !== attempt.orderId) return undefined;
  // Attempts saved before the page kept the cart with the key: the order's cart signature has it.
  const cart = attempt.lines ?? (JSON.parse(order.cart) as [string, number][]).map(([sku, quantity]) => ({ sku, quantity }));
  // An attempt saved with its request is resumed exactly as sent (no test buyer means the buyer's own step).
  if (attempt.gateway) return { cart, gateway: attempt.gateway, buyer: attempt.buyer, buyerStep: attempt.buyerStep };
  return { cart, gateway: fallback.gateway, buyer: fallback.buyer, buyerStep: fallback.buyerStep };
}

/** `children` (demo mode's fault switchboard) render below the form, in the page's language. */
/** Reasons the order itself was refused (nothing created, nothing charged), and how to say them. */
const CART_REFUSALS: Record<string, string> = {
  OUT_OF_STOCK: 'status.outOfStock',
  TOO_MANY_OPEN_ORDERS: 'status.tooManyOpenOrders',
  STOCK_HOLD_LIMIT: 'status.stockHoldLimit',
  ADDRESS_HOLD_LIMIT: 'status.addressHoldLimit',
  RATE_LIMITED: 'status.rateLimited',
};

export function Checkout({ children, demo = false }: { children?: ReactNode; demo?: boolean }) {
  const [queryClient] = useState(() => new QueryClient());
  const client = useMemo(() => createCheckoutClient({ url: '/api/trpc' }), []);
  return (
    <LangProvider messages={CHECKOUT_MESSAGES}>
      <QueryClientProvider client={queryClient}>
        <Masthead />
        <Welcome client={client} demo={demo} />
        <CheckoutForm client={client} />
        {children}
      </QueryClientProvider>
    </LangProvider>
  );
}

function Masthead() {
  const { t } = useLang();
  return (
    <header className="masthead">
      <div className="masthead-row">
        <h1>{t('brand.title')}</h1>
        <LangSwitch />
      </div>
      <p className="tagline">{t('brand.tagline')}</p>
    </header>
  );
}

/** The first-run panel, on a local run only: the gateways answer from the PSP sandbox. */
function Welcome({ client, demo }: { client: CheckoutClient; demo: boolean }) {
  const configured = useQuery({ queryKey: ['gateways'], queryFn: () => client.checkout.gateways.query() });
  const scanUrl = configured.data?.find((g) => g.sandboxScanUrl)?.sandboxScanUrl;
  return <FirstRunPanel sandboxUrl={scanUrl ? new URL(scanUrl).origin : null} demo={demo} />;
}

function CheckoutForm({ client }: { client: CheckoutClient }) {
  const { t, lang } = useLang();
  const products = useQuery({ queryKey: ['products'], queryFn: () => client.checkout.products.query() });
  const configured = useQuery({ queryKey: ['gateways'], queryFn: () => client.checkout.gateways.query() });
  const isAvailable = (id: GatewayId) => configured.data?.some((g) => g.id === id && g.available) ?? false;
  const [quantities, setQuantities] = useState<Record<string, number>>(DEFAULT_QUANTITIES);
  const [gateway, setGateway] = useState<GatewayId>('alipay');
  const [payerChoice, setPayer] = useState<Payer>('ok');
  const [stepChoice, setStep] = useState<BuyerStepKind | undefined>();
  const gatewayInfo = configured.data?.find((g) => g.id === gateway);
  // A real gateway has no test buyers: its buyer always takes their own step.
  const payer: Payer = gatewayInfo && !gatewayInfo.testBuyers ? 'self' : payerChoice;
  const steps = gatewayInfo?.buyerSteps ?? [];
  const buyerStep = stepChoice && steps.includes(stepChoice) ? stepChoice : steps[0];
  const buyer = payer === 'self' ? undefined : payer;
  const [status, setStatus] = useState<Status>({ tone: 'idle' });
  // Rendered on the server, 立即支付 does nothing until React has hydrated the page (a first dev load
  // compiles for seconds): disabled until then, so a click is never silently lost.
  const [interactive, setInteractive] = useState(false);
  useEffect(() => setInteractive(true), []);
  const [duplicate, setDuplicate] = useState<{ minutes: number; choice: Choice } | undefined>();
  // Back from a gateway's page with no attempt saved on this origin: the order, by the return link.
  const [returning, setReturning] = useState<{ orderId: string; token: string } | undefined>();
  const running = useRef(false);
  const resumed = useRef(false);
  const followUp = useRef<number | undefined>(undefined);
  const resultRef = useRef<HTMLElement>(null);

  const cart = Object.entries(quantities)
    .filter(([, quantity]) => quantity > 0)
    .map(([sku, quantity]) => ({ sku, quantity }));
  const total = (products.data ?? []).reduce((sum, p) => sum + p.priceMinor * (quantities[p.sku] ?? 0), 0);
  // Paid: the order is done and its cart is locked until 再来一单. Busy or unconfirmed: a payment
  // is under way, and nothing the shopper changes could apply to it.
  const locked = status.tone === 'ok';
  const frozen = locked || status.tone === 'busy' || status.tone === 'warn' || status.tone === 'wait';

  function show(result: PayResult, choice: Choice) {
    switch (result.kind) {
      case 'awaiting_buyer':
        setGateway(result.awaiting.gateway);
        setStatus({
          tone: 'wait',
          title: 'status.awaitingBuyer',
          lines: [{ key: 'status.awaitingBuyerDetail' }],
          awaiting: result.awaiting,
          tech: { status: 202, key: result.key, gateway: result.awaiting.gateway },
        });
        return;
      case 'paid':
        // The gateway that actually took the money, whatever the radio said before a reload.
        setGateway(result.paid.payment.gateway);
        window.localStorage.setItem(
          LAST_PAID_KEY,
          JSON.stringify({ cart: cartSignature(choice.cart), paidAt: Date.now(), orderId: result.paid.orderId } satisfies LastPaid),
        );
        setStatus({ tone: 'ok', title: 'status.paid', lines: [{ key: 'status.paidDetail' }], orderId: result.paid.orderId });
        return;
      case 'declined': {
        const declined = result.declined;
        const declinedOn = declined.gateway ?? choice.gateway;
        setStatus({
          tone: 'bad',
          title: 'status.failed',
          lines: [
            { decline: { gateway: declinedOn, code: declined.declineCode, message: declined.message } },
            { key: 'status.notCharged' },
            { key: 'status.tryAgain' },
          ],
          tech: {
            status: 402,
            reason: declined.reason,
            message: declined.message,
            key: result.key,
            gateway: declinedOn,
            declineCode: declined.declineCode,
          },
        });
        return;
      }
      case 'failed': {
        const failure = result.failure;
        const tech = { status: failure.status, reason: failure.reason, message: result.message, key: result.key };
        if (result.orderState === 'not_charged') {
          setStatus({ tone: 'bad', title: 'status.failed', lines: [{ key: 'status.mismatchNotCharged' }], tech });
        } else if (result.orderState === 'declined' && result.declined) {
          const declined = result.declined;
          setStatus({
            tone: 'bad',
            title: 'status.failed',
            lines: [
              { decline: { gateway: declined.gateway, code: declined.declineCode, message: declined.message } },
              { key: 'status.notCharged' },
              { key: 'status.tryAgain' },
            ],
            tech: { ...tech, gateway: declined.gateway, declineCode: declined.declineCode },
          });
        } else if (failure.reason !== undefined && failure.reason in CART_REFUSALS) {
          // Refused before any order or charge existed: what to change, in the shopper's words.
          setStatus({ tone: 'bad', title: 'status.failed', lines: [{ key: CART_REFUSALS[failure.reason]! }], tech });
        } else if (result.orderState === 'closed' || failure.reason === 'ORDER_NOT_PAYABLE' || failure.status === 404) {
          // What happened to the money, when the order said: an expired order never took any, or
          // what it took is being given back.
          const money = result.charged === undefined ? [] : [{ key: result.charged ? 'status.closedRefunded' : 'status.closedNotCharged' }];
          setStatus({ tone: 'bad', title: 'status.failed', lines: [{ key: 'status.orderClosed' }, ...money], tech });
        } else {
          setStatus({ tone: 'bad', title: 'status.failed', lines: [{ key: 'status.failedGeneric' }], tech });
        }
        return;
      }
      case 'gave_up':
        setStatus({
          tone: 'warn',
          title: 'status.pending',
          lines: [{ key: 'status.pendingDetail' }],
          tech: { status: result.failure.status, reason: result.failure.reason, message: result.failure.message, key: result.key },
        });
        scheduleFollowUp(choice);
        return;
    }
  }

  async function run(choice: Choice, resuming: boolean) {
    if (running.current) return;
    running.current = true;
    window.clearTimeout(followUp.current);
    const title = resuming ? 'status.resuming' : 'status.processing';
    setStatus({ tone: 'busy', title, lines: [{ key: 'status.keepOpen' }] });
    try {
      const result = await payForCart({
        client,
        storage: browserStorage,
        cart: choice.cart,
        gateway: choice.gateway,
        buyer: choice.buyer,
        buyerStep: choice.buyerStep,
        onProgress: (progress) => {
          if (progress.phase === 'retrying') {
            // 409: the payment is still being processed (another tab, or before a reload); the rest
            // is the network or a server that did not answer. Neither is the shopper's business.
            // 409 ORDER_PAYMENT_IN_PROGRESS is another key on this order: another tab, or another
            // browser of this shopper's, is paying it.
            const key =
              progress.failure.reason === 'ORDER_PAYMENT_IN_PROGRESS'
                ? 'status.retryOtherTab'
                : progress.failure.status === 409
                  ? 'status.retryInProgress'
                  : 'status.retryNetwork';
            setStatus({ tone: 'busy', title, lines: [{ key, vars: { n: progress.retry } }, { key: 'status.keepOpen' }] });
          } else if (progress.phase === 'confirming') {
            setStatus({ tone: 'busy', title: 'status.confirming', lines: [{ key: 'status.keepOpen' }] });
          }
        },
      });
      show(result, choice);
    } finally {
      running.current = false;
    }
  }

  /** An unconfirmed payment: resume its attempt, or ask its order, until the result is known. */
  function scheduleFollowUp(choice: Choice) {
    window.clearTimeout(followUp.current);
    followUp.current = window.setTimeout(async () => {
      const stored = browserStorage.load();
      const open = openAttempt(stored, choice);
      if (open) return void run(open, true);
      if (!stored.order) return;
      const truth = await confirmOrder({ client, orderId: stored.order.orderId, policy: { ...DEFAULT_RETRY_POLICY, maxRetries: 0 } });
      switch (truth.kind) {
        case 'paid':
          browserStorage.save({});
          return show({ kind: 'paid', order: stored.order, paid: truth.paid, confirmedByOrder: true }, choice);
        case 'declined':
          return show({ kind: 'declined', order: stored.order, declined: truth.declined, message: truth.declined.message }, choice);
        case 'not_charged':
        case 'closed': {
          const failure = {
            status: undefined,
            reason: undefined,
            message: truth.kind,
            retryAfterMs: undefined,
            retryable: false,
            details: undefined,
          };
          const charged = truth.kind === 'closed' ? truth.charged : undefined;
          return show({ kind: 'failed', failure, message: truth.kind, orderState: truth.kind, charged }, choice);
        }
        case 'paying':
        case 'unknown':
          return scheduleFollowUp(choice);
      }
    }, FOLLOW_UP_MS);
  }

  // A reload (or a tab opened later) finds the attempt it left open: show what it was, and finish it.
  // A buyer back from a gateway's page (`?returned=…&t=…`) whose attempt is not saved here — another
  // browser, cleared storage — is shown that order by the return link's token instead: never a blank
  // cart that invites a second purchase.
  useEffect(() => {
    if (resumed.current) return;
    resumed.current = true;
    const stored = browserStorage.load();
    const params = new URLSearchParams(window.location.search);
    const returnedId = params.get('returned');
    const token = params.get('t');
    if (returnedId && token && stored.attempt?.orderId !== returnedId) {
      setReturning({ orderId: returnedId, token });
      setStatus({ tone: 'busy', title: 'status.returned', lines: [{ key: 'status.returnedDetail' }] });
      return;
    }
    const open = openAttempt(stored, { gateway, buyer, buyerStep });
    if (!open) return;
    setQuantities(Object.fromEntries(open.cart.map((line) => [line.sku, line.quantity])));
    setGateway(open.gateway);
    setPayer(open.buyer ?? 'self');
    if (open.buyerStep) setStep(open.buyerStep);
    void run(open, true);
    // Once, on load: `run` and the initial choice are read as they are then.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  useEffect(() => () => window.clearTimeout(followUp.current), []);

  // While the buyer takes their own step, the order is what tells: the gateway's notification (or the
  // reconciler's query) settles it, and the page shows it as soon as it has.
  const waitingFor = status.tone === 'wait' ? status.awaiting : undefined;
  useEffect(() => {
    if (!waitingFor) return;
    let live = true;
    const timer = window.setInterval(async () => {
      let truth;
      try {
        truth = orderTruth(await client.checkout.order.query({ orderId: waitingFor.orderId }));
      } catch {
        return; // ask again on the next tick
      }
      if (!live) return;
      const stored = browserStorage.load();
      const order = stored.order ?? {
        orderId: waitingFor.orderId,
        outTradeNo: waitingFor.outTradeNo,
        amountMinor: waitingFor.amountMinor,
        currency: waitingFor.currency,
        status: 'awaiting_payment' as const,
        cart: '',
      };
      const choice = openAttempt(stored, { gateway, buyer, buyerStep }) ?? { cart, gateway, buyer, buyerStep };
      if (truth.kind === 'paid') {
        browserStorage.save({});
        show({ kind: 'paid', order, paid: truth.paid, confirmedByOrder: true }, choice);
      } else if (truth.kind === 'closed') {
        browserStorage.save({});
        const failure = {
          status: undefined,
          reason: 'ORDER_NOT_PAYABLE',
          message: truth.status,
          retryAfterMs: undefined,
          retryable: false,
          details: undefined,
        };
        show({ kind: 'failed', failure, message: truth.status, orderState: 'closed', charged: truth.charged }, choice);
      }
    }, WATCH_ORDER_MS);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
    // The watch follows the awaited order only; the choice it passes to show() is read as it is then.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [waitingFor?.orderId, client]);

  useEffect(() => {
    if (!returning) return;
    let live = true;
    let timer: number | undefined;
    const check = async () => {
      let view;
      try {
        view = await client.checkout.returnedOrder.query(returning);
      } catch (error) {
        if (!live) return;
        if (describeFailure(error).status === 404) {
          setStatus({ tone: 'bad', title: 'status.failed', lines: [{ key: 'status.returnedUnknown' }] });
          return;
        }
        timer = window.setTimeout(check, WATCH_ORDER_MS); // the network: ask again
        return;
      }
      if (!live) return;
      setQuantities(Object.fromEntries(view.items.map((item) => [item.sku, item.quantity])));
      const truth = orderTruth(view);
      if (truth.kind === 'paid') {
        setGateway(truth.paid.payment.gateway);
        setStatus({
          tone: 'ok',
          title: 'status.paid',
          lines: [{ key: 'status.paidDetail' }],
          orderId: view.orderId,
          returnToken: returning.token,
        });
      } else if (truth.kind === 'closed') {
        setStatus({
          tone: 'bad',
          title: 'status.failed',
          lines: [{ key: 'status.orderClosed' }, { key: truth.charged ? 'status.closedRefunded' : 'status.closedNotCharged' }],
        });
      } else {
        timer = window.setTimeout(check, WATCH_ORDER_MS);
      }
    };
    void check();
    return () => {
      live = false;
      window.clearTimeout(timer);
    };
  }, [returning, client]);

  /** The buyer gives up this step (wrong app, no card at hand): the order stays open for another way. */
  function switchMethod() {
    const stored = browserStorage.load();
    browserStorage.save({ ...stored, attempt: undefined });
    setStatus({ tone: 'idle' });
  }

  // The result is what the shopper waits for: on a phone it is below the fold, so bring it into view
  // and give it focus (screen readers read it from there).
  useEffect(() => {
    const section = resultRef.current;
    if (!section) return;
    if (status.tone === 'busy') section.scrollIntoView({ block: 'nearest' });
    // The buyer's own step (a QR code, a card form, the link to a hosted page) is what they act on
    // next: it starts below the fold on most screens.
    if (status.tone === 'ok' || status.tone === 'bad' || status.tone === 'warn' || status.tone === 'wait') {
      section.scrollIntoView({ block: 'start' });
      section.focus({ preventScroll: true });
    }
  }, [status]);

  function onPay() {
    const choice: Choice = { cart, gateway, buyer, ...(buyer ? {} : { buyerStep }) };
    const signature = cartSignature(cart);
    const last = loadLastPaid();
    const ago = last && last.cart === signature ? Date.now() - last.paidAt : undefined;
    // An order already open for this cart (say, declined a moment ago) was confirmed when it began.
    const alreadyOpen = browserStorage.load().order?.cart === signature;
    if (ago !== undefined && ago >= 0 && ago < DUPLICATE_WINDOW_MS && !alreadyOpen) {
      // Whole minutes, rounded down: "1 分钟前" for ten seconds would not be true.
      setDuplicate({ minutes: Math.floor(ago / 60_000), choice });
      return;
    }
    void run(choice, false);
  }

  function newOrder() {
    window.clearTimeout(followUp.current);
    setReturning(undefined);
    // The return link has done its work: a reload now is a fresh checkout, not that order again.
    if (window.location.search) window.history.replaceState(null, '', '/');
    setStatus({ tone: 'idle' });
    void products.refetch();
  }

  return (
    <>
      <section className="card" aria-labelledby="cart-heading">
        <h2 id="cart-heading">{t('cart.heading')}</h2>
        {products.isPending && <p>{t('cart.loading')}</p>}
        {products.isError && <p role="alert">{t('cart.loadFailed')}</p>}
        <ul className="products">
          {(products.data ?? []).map((product) => {
            const name = lang === 'en' ? (product.nameEn ?? product.name) : product.name;
            return (
              <li className="product" key={product.sku}>
                <div>
                  <div>{name}</div>
                  <div className="meta">
                    {formatMoney(product.priceMinor, product.currency)} · {t('cart.stock', { stock: product.stock })}
                  </div>
                </div>
                <label>
                  <span className="visually-hidden">{t('cart.quantityHidden')}</span>{' '}
                  <input
                    type="number"
                    min={0}
                    max={99}
                    aria-label={t('cart.quantity', { name })}
                    value={quantities[product.sku] ?? 0}
                    disabled={frozen}
                    onChange={(event) =>
                      setQuantities((current) => ({
                        ...current,
                        [product.sku]: Math.max(0, Math.min(99, Math.trunc(Number(event.target.value) || 0))),
                      }))
                    }
                  />
                </label>
              </li>
            );
          })}
        </ul>
        <p className="total">
          {t('cart.total')} <strong data-testid="total">{formatMoney(total, 'CNY')}</strong>
        </p>
      </section>

      <section className="card" aria-labelledby="pay-heading">
        <h2 id="pay-heading">{t('pay.heading')}</h2>
        <fieldset disabled={frozen}>
          <legend>{t('pay.gateway')}</legend>
          <div className="choices">
            {GATEWAY_IDS.map((id) => (
              <label className="choice" key={id}>
                <input
                  type="radio"
                  name="gateway"
                  value={id}
                  checked={gateway === id}
                  disabled={!isAvailable(id)}
                  onChange={() => setGateway(id)}
                />{' '}
                {t(`gateway.${id}`)}
                {configured.data && !isAvailable(id) && t('pay.unconfigured')}
              </label>
            ))}
          </div>
        </fieldset>
        {gatewayInfo?.testBuyers !== false && (
          <fieldset disabled={frozen}>
            <legend>{t('pay.buyer')}</legend>
            <div className="choices">
              {BUYER_IDS.map((id) => (
                <label className="choice" key={id}>
                  <input type="radio" name="buyer" value={id} checked={payer === id} onChange={() => setPayer(id)} /> {t(`buyer.${id}`)}
                  {TEST_INSTRUMENTS[gateway] && <span className="meta"> · {TEST_INSTRUMENTS[gateway][id]}</span>}
                </label>
              ))}
              <label className="choice">
                <input
                  type="radio"
                  name="buyer"
                  value="self"
                  checked={payer === 'self'}
                  disabled={steps.length === 0}
                  onChange={() => setPayer('self')}
                />{' '}
                {t('buyer.self')}
              </label>
            </div>
          </fieldset>
        )}
        {payer === 'self' && steps.length > 1 && (
          <fieldset disabled={frozen}>
            <legend>{t('pay.step')}</legend>
            <div className="choices">
              {steps.map((id) => (
                <label className="choice" key={id}>
                  <input type="radio" name="step" value={id} checked={buyerStep === id} onChange={() => setStep(id)} /> {t(`step.${id}`)}
                </label>
              ))}
            </div>
          </fieldset>
        )}
        <button className="pay" type="button" onClick={onPay} disabled={!interactive || frozen || cart.length === 0}>
          {t('pay.button')}
        </button>
      </section>

      <section className="card result" aria-labelledby="result-heading" ref={resultRef} tabIndex={-1} hidden={status.tone === 'idle'}>
        <h2 id="result-heading">{t('result.heading')}</h2>
        <PaymentStatus status={status} />
        {status.tone === 'wait' && (
          <>
            <BuyerStep
              awaiting={status.awaiting}
              sandboxScanUrl={configured.data?.find((g) => g.id === status.awaiting.gateway)?.sandboxScanUrl ?? null}
            />
            <p className="meta" aria-live="polite">
              {t('wait.watching')}
            </p>
            <button className="secondary" type="button" onClick={switchMethod}>
              {t('wait.switch')}
            </button>
          </>
        )}
        {status.tone === 'ok' && (
          <>
            <OrderDetails client={client} orderId={status.orderId} token={status.returnToken} />
            <button className="secondary" type="button" onClick={newOrder}>
              {t('pay.again')}
            </button>
          </>
        )}
      </section>

      {duplicate && (
        <DuplicatePurchaseDialog
          minutes={duplicate.minutes}
          onContinue={() => {
            const { choice } = duplicate;
            setDuplicate(undefined);
            void run(choice, false);
          }}
          onCancel={() => setDuplicate(undefined)}
        />
      )}
    </>
  );
}
