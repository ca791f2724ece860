'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import { useMemo, useState } from 'react';
import { payForCart, type CheckoutStorage, type StoredCheckout } from '../../client/checkout-flow';
import { createCheckoutClient, type CheckoutClient } from '../../client/trpc-client';
import type { GatewayId, TestBuyer } from '../../server/payments/gateway';

/** Where the open order and the open payment attempt (with its key) survive a reload. */
const STORAGE_KEY = 'payonce.checkout.v1';

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

const GATEWAYS: { id: GatewayId; label: string }[] = [
  { id: 'alipay', label: '支付宝' },
  { id: 'wechatpay', label: '微信支付' },
  { id: 'stripe', label: 'Stripe 银行卡' },
  { id: '2c2p', label: '2C2P' },
];

const BUYERS: { id: TestBuyer; label: string }[] = [
  { id: 'ok', label: '余额充足' },
  { id: 'insufficient_funds', label: '余额不足' },
  { id: 'account_restricted', label: '账户受限' },
];

/** What each test buyer is at the gateway: a wallet for Alipay and WeChat Pay, a test card elsewhere. */
const TEST_INSTRUMENTS: Partial<Record<GatewayId, Record<TestBuyer, string>>> = {
  stripe: { ok: '4242 4242 4242 4242', insufficient_funds: '4000 0000 0000 9995', account_restricted: '4000 0000 0000 0002' },
  '2c2p': { ok: '4111 1111 1111 1111', insufficient_funds: '4000 0000 0002 4051', account_restricted: '4000 0000 0009 4062' },
};

export function formatMoney(minor: number, currency: string): string {
  const sign = currency === 'CNY' ? '¥' : `${currency} `;
  return `${sign}${Math.floor(minor / 100)}.${String(minor % 100).padStart(2, '0')}`;
}

type Status =
  | { tone: 'idle' }
  | { tone: 'busy'; title: string; detail?: string }
  | { tone: 'warn'; title: string; detail?: string }
  | { tone: 'ok'; title: string; orderId: string }
  | { tone: 'bad'; title: string; detail: string };

export function Checkout() {
  const [queryClient] = useState(() => new QueryClient());
  const client = useMemo(() => createCheckoutClient({ url: '/api/trpc' }), []);
  return (
    <QueryClientProvider client={queryClient}>
      <CheckoutForm client={client} />
    </QueryClientProvider>
  );
}

function CheckoutForm({ client }: { client: CheckoutClient }) {
  const products = useQuery({ queryKey: ['products'], queryFn: () => client.checkout.products.query() });
  const configured = useQuery({ queryKey: ['gateways'], queryFn: () => client.checkout.gateways.query() });
  const isAvailable = (id: GatewayId) => configured.data?.some((g) => g.id === id && g.available) ?? false;
  const [quantities, setQuantities] = useState<Record<string, number>>({ 'TEA-LONGJING': 1 });
  const [gateway, setGateway] = useState<GatewayId>('alipay');
  const [buyer, setBuyer] = useState<TestBuyer>('ok');
  const [status, setStatus] = useState<Status>({ tone: 'idle' });

  const cart = Object.entries(quantities)
    .filter(([, quantity]) => quantity > 0)
    .map(([sku, quantity]) => ({ sku, quantity }));
  const total = (products.data ?? []).reduce((sum, p) => sum + p.priceMinor * (quantities[p.sku] ?? 0), 0);
  const busy = status.tone === 'busy';

  async function pay() {
    setStatus({ tone: 'busy', title: '处理中' });
    const result = await payForCart({
      client,
      storage: browserStorage,
      cart,
      gateway,
      buyer,
      onProgress: (progress) => {
        if (progress.phase === 'retrying') {
          setStatus({
            tone: 'busy',
            title: `重试中（第 ${progress.retry} 次）`,
            detail: progress.failure.status ? `服务器答复 ${progress.failure.status}` : '网络中断',
          });
        } else {
          setStatus({ tone: 'busy', title: '处理中' });
        }
      },
    });
    switch (result.kind) {
      case 'paid':
        setStatus({ tone: 'ok', title: '支付成功', orderId: result.paid.orderId });
        break;
      case 'declined':
        setStatus({ tone: 'bad', title: '支付失败', detail: `${result.message}（可更换买家后重新支付）` });
        break;
      case 'failed':
        setStatus({ tone: 'bad', title: '支付失败', detail: result.message });
        break;
      case 'gave_up':
        setStatus({ tone: 'warn', title: '支付结果待确认', detail: result.message });
        break;
    }
  }

  return (
    <>
      <section className="card" aria-labelledby="cart-heading">
        <h2 id="cart-heading">购物车</h2>
        {products.isPending && <p>正在加载商品…</p>}
        {products.isError && <p role="alert">商品加载失败：{products.error.message}</p>}
        <ul className="products">
          {(products.data ?? []).map((product) => (
            <li className="product" key={product.sku}>
              <div>
                <div>{product.name}</div>
                <div className="meta">
                  {formatMoney(product.priceMinor, product.currency)} · 库存 {product.stock}
                </div>
              </div>
              <label>
                <span className="visually-hidden">数量</span>{' '}
                <input
                  type="number"
                  min={0}
                  max={99}
                  aria-label={`${product.name} 数量`}
                  value={quantities[product.sku] ?? 0}
                  disabled={busy}
                  onChange={(event) =>
                    setQuantities((current) => ({
                      ...current,
                      [product.sku]: Math.max(0, Math.min(99, Math.trunc(Number(event.target.value) || 0))),
                    }))
                  }
                />
              </label>
            </li>
          ))}
        </ul>
        <p className="total">
          合计 <strong data-testid="total">{formatMoney(total, 'CNY')}</strong>
        </p>
      </section>

      <section className="card" aria-labelledby="pay-heading">
        <h2 id="pay-heading">支付</h2>
        <fieldset disabled={busy}>
          <legend>支付方式</legend>
          <div className="choices">
            {GATEWAYS.map((g) => (
              <label className="choice" key={g.id}>
                <input
                  type="radio"
                  name="gateway"
                  value={g.id}
                  checked={gateway === g.id}
                  disabled={!isAvailable(g.id)}
                  onChange={() => setGateway(g.id)}
                />{' '}
                {g.label}
                {configured.data && !isAvailable(g.id) && '（未配置）'}
              </label>
            ))}
          </div>
        </fieldset>
        <fieldset disabled={busy}>
          <legend>测试买家</legend>
          <div className="choices">
            {BUYERS.map((b) => (
              <label className="choice" key={b.id}>
                <input type="radio" name="buyer" value={b.id} checked={buyer === b.id} onChange={() => setBuyer(b.id)} />{' '}
                {b.label}
                {TEST_INSTRUMENTS[gateway] && <span className="meta"> · {TEST_INSTRUMENTS[gateway][b.id]}</span>}
              </label>
            ))}
          </div>
        </fieldset>
        <button className="pay" type="button" onClick={pay} disabled={busy || cart.length === 0}>
          立即支付
        </button>
        {status.tone !== 'idle' && (
          <div className="status" role="status" data-tone={status.tone === 'busy' ? undefined : status.tone}>
            <strong>{status.title}</strong>
            {'detail' in status && status.detail && <span>{status.detail}</span>}
          </div>
        )}
      </section>

      {status.tone === 'ok' && (
        <OrderResult
          client={client}
          orderId={status.orderId}
          onNewOrder={() => {
            setStatus({ tone: 'idle' });
            void products.refetch();
          }}
        />
      )}
    </>
  );
}

function OrderResult({ client, orderId, onNewOrder }: { client: CheckoutClient; orderId: string; onNewOrder: () => void }) {
  const order = useQuery({ queryKey: ['order', orderId], queryFn: () => client.checkout.order.query({ orderId }) });
  const payment = order.data?.payments.find((p) => p.status === 'succeeded' && p.role === 'payment');
  const charges = order.data?.payments.filter((p) => p.status === 'succeeded') ?? [];
  const refunds = order.data?.refunds ?? [];
  const gatewayLabel = (id: string) => GATEWAYS.find((g) => g.id === id)?.label ?? id;
  return (
    <section className="card" aria-labelledby="result-heading">
      <h2 id="result-heading">订单详情</h2>
      {order.isPending && <p>正在加载订单…</p>}
      {order.data && (
        <dl className="summary">
          <dt>订单号</dt>
          <dd data-testid="out-trade-no">{order.data.outTradeNo}</dd>
          <dt>订单状态</dt>
          <dd data-testid="order-status">{order.data.status === 'paid' ? '已支付' : order.data.status}</dd>
          <dt>金额</dt>
          <dd>{formatMoney(order.data.amountMinor, order.data.currency)}</dd>
          <dt>商品</dt>
          <dd>{order.data.items.map((item) => `${item.name} × ${item.quantity}`).join('，')}</dd>
          {payment && (
            <>
              <dt>支付渠道</dt>
              <dd>{gatewayLabel(payment.gateway)}</dd>
              <dt>网关交易号</dt>
              <dd data-testid="gateway-trade-no">{payment.gatewayTradeNo}</dd>
            </>
          )}
        </dl>
      )}
      {(charges.length > 1 || refunds.length > 0) && (
        <table className="money-log" aria-label="款项记录">
          <caption>款项记录：每一笔扣款与退款</caption>
          <thead>
            <tr>
              <th scope="col">类型</th>
              <th scope="col">渠道</th>
              <th scope="col">金额</th>
              <th scope="col">状态</th>
            </tr>
          </thead>
          <tbody>
            {charges.map((c) => (
              <tr key={`charge-${c.gateway}-${c.gatewayTradeNo}`}>
                <td>扣款</td>
                <td>{gatewayLabel(c.gateway)}</td>
                <td>{formatMoney(c.amountMinor, c.currency)}</td>
                <td>{c.role === 'payment' ? '用于支付本订单' : '多收，自动退回'}</td>
              </tr>
            ))}
            {refunds.map((r) => (
              <tr key={`refund-${r.refundId}`} data-testid="refund-row">
                <td>退款</td>
                <td>{gatewayLabel(r.gateway)}</td>
                <td>{formatMoney(r.amountMinor, r.currency)}</td>
                <td>{r.status === 'succeeded' ? '已退回' : r.status === 'failed' ? '退款失败，客服将联系您' : '退款处理中'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <button className="secondary" type="button" onClick={onNewOrder}>
        再来一单
      </button>
    </section>
  );
}
