'use client';

import { QueryCache, QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { useMemo, useState } from 'react';
import { LangProvider, LangSwitch, useLang } from '@/client/i18n';
import { operatorApi, signedOut, type OperatorApi, type OperatorSession } from '@/client/console/operator-api';
import { CONSOLE_MESSAGES } from './console-messages';
import { SignInForm } from './SignInForm';
import { SESSION_KEY, useOperatorSession, useSignOut } from './use-console';
import { Workspace } from './Workspace';
import '@/app/_components/behind.css';
import '../admin.css';

/**
 * The merchant's console: sign in, then every order, one order's payments, refunds and journal, and
 * — for a refunder or an admin — capture, release and refund; beside the orders, 对账's mismatches,
 * which an admin resolves.
 */
export function Console() {
  const [queryClient] = useState(() => {
    const client: QueryClient = new QueryClient({
      // A read refused with 401 means the session ended (signed out elsewhere, idle, disabled): ask
      // who is signed in again, which brings the sign-in form back.
      queryCache: new QueryCache({
        onError: (error) => {
          if (signedOut(error)) void client.invalidateQueries({ queryKey: SESSION_KEY });
        },
      }),
      defaultOptions: { queries: { retry: false } },
    });
    return client;
  });
  const api = useMemo(() => operatorApi(), []);
  return (
    <LangProvider messages={CONSOLE_MESSAGES}>
      <QueryClientProvider client={queryClient}>
        <ConsoleBody api={api} />
      </QueryClientProvider>
    </LangProvider>
  );
}

function ConsoleBody({ api }: { api: OperatorApi }) {
  const { t } = useLang();
  const session = useOperatorSession(api);
  return (
    <main className="shell console">
      <Masthead api={api} operator={session.data ?? undefined} />
      {session.isPending && <p className="meta">{t('session.loading')}</p>}
      {session.isError && (
        <p role="alert">
          {t('session.failed', { message: session.error.message })}{' '}
          <button type="button" className="secondary" onClick={() => void session.refetch()}>
            {t('session.retry')}
          </button>
        </p>
      )}
      {session.data === null && <SignInForm api={api} />}
      {session.data && <Workspace api={api} session={session.data} />}
    </main>
  );
}

function Masthead({ api, operator }: { api: OperatorApi; operator: OperatorSession | undefined }) {
  const { t } = useLang();
  const signOut = useSignOut(api);
  return (
    <header className="masthead">
      <div className="masthead-row">
        <h1>{t('brand.title')}</h1>
        <div className="operator-bar">
          {operator && (
            <p className="operator" aria-label={t('header.operator')}>
              <span data-testid="operator-name">{operator.username}</span>{' '}
              <span className="badge" data-testid="operator-role">
                {t(`role.${operator.role}`)}
              </span>
              <button type="button" className="secondary" onClick={() => void signOut()}>
                {t('header.signOut')}
              </button>
            </p>
          )}
          <LangSwitch />
        </div>
      </div>
      <p className="tagline">{t('brand.tagline')}</p>
    </header>
  );
}
