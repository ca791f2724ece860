'use client';

import { useLang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { Product } from './use-checkout';

interface Products {
  data?: Product[];
  isPending: boolean;
  isError: boolean;
}

/** The products with a quantity box each, and the cart's total. */
export function CartSection({
  products,
  quantities,
  frozen,
  onQuantity,
}: {
  products: Products;
  quantities: Record<string, number>;
  frozen: boolean;
  onQuantity: (sku: string, value: string) => void;
}) {
  const { t } = useLang();
  const list = products.data ?? [];
  const total = list.reduce((sum, p) => sum + p.priceMinor * (quantities[p.sku] ?? 0), 0);
  return (
    <section className="card" aria-labelledby="cart-heading">
      <h2 id="cart-heading">{t('cart.heading')}</h2>
      {products.isPending && <p>{t('cart.loading')}</p>}
      {products.isError && <p role="alert">{t('cart.loadFailed')}</p>}
      <ul className="products">
        {list.map((product) => (
          <ProductRow key={product.sku} product={product} quantity={quantities[product.sku] ?? 0} frozen={frozen} onQuantity={onQuantity} />
        ))}
      </ul>
      <p className="total">
        {t('cart.total')} <strong data-testid="total">{formatMoney(total, 'CNY')}</strong>
      </p>
    </section>
  );
}

function ProductRow({
  product,
  quantity,
  frozen,
  onQuantity,
}: {
  product: Product;
  quantity: number;
  frozen: boolean;
  onQuantity: (sku: string, value: string) => void;
}) {
  const { t, lang } = useLang();
  const name = lang === 'en' ? (product.nameEn ?? product.name) : product.name;
  // Sold out: nothing to add. A line already in the cart can still be taken out.
  const soldOut = product.stock <= 0;
  return (
    <li className="product">
      <div>
        <div>{name}</div>
        <div className="meta">
          {formatMoney(product.priceMinor, product.currency)} · {soldOut ? t('cart.soldOut') : t('cart.stock', { stock: product.stock })}
        </div>
      </div>
      <label>
        <span className="visually-hidden">{t('cart.quantityHidden')}</span>{' '}
        <input
          type="number"
          min={0}
          max={99}
          aria-label={t('cart.quantity', { name })}
          value={quantity}
          disabled={frozen || (soldOut && quantity === 0)}
          onChange={(event) => onQuantity(product.sku, event.target.value)}
        />
      </label>
    </li>
  );
}
