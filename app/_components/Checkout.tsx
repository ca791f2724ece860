'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import { useMemo, useState, type ReactNode } from 'react';
import { LangProvider, LangSwitch, useLang } from '@/client/i18n';
import { createCheckoutClient, type CheckoutClient } from '@/client/trpc-client';
import { CartSection } from './CartSection';
import { CHECKOUT_MESSAGES } from './checkout-messages';
import { DuplicatePurchaseDialog } from './DuplicatePurchaseDialog';
import { FirstRunPanel } from './FirstRunPanel';
import { PaySection } from './PaySection';
import { ResultSection } from './ResultSection';
import { useCheckout } from './use-checkout';

/** `children` (demo mode's fault switchboard) render below the form, in the page's language. */
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

/** The cart, the way to pay and the result: what useCheckout says, and the shopper's clicks back to it. */
function CheckoutForm({ client }: { client: CheckoutClient }) {
  const checkout = useCheckout(client);
  const { state, actions } = checkout;
  return (
    <>
      <CartSection
        products={checkout.products}
        quantities={state.form.quantities}
        frozen={checkout.frozen}
        onQuantity={actions.setQuantity}
      />
      <PaySection checkout={checkout} />
      <ResultSection
        client={client}
        status={state.status}
        gateways={checkout.gateways.data}
        resultRef={checkout.resultRef}
        onSwitchMethod={actions.switchMethod}
        onNewOrder={actions.newOrder}
      />
      {state.duplicate && (
        <DuplicatePurchaseDialog
          minutes={state.duplicate.minutes}
          onContinue={actions.continueDuplicate}
          onCancel={actions.cancelDuplicate}
        />
      )}
    </>
  );
}
