'use client';

import { useState, type FormEvent } from 'react';
import { useLang } from '@/client/i18n';
import type { OperatorApi } from '@/client/console/operator-api';
import { useSignIn, type SignInMessage } from './use-console';

/** Username and password; a refusal says the same for a wrong name and a wrong password, as the server does. */
export function SignInForm({ api }: { api: OperatorApi }) {
  const { t } = useLang();
  const { busy, message, signIn } = useSignIn(api);
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (!busy) void signIn(username, password);
  };
  return (
    <section className="card sign-in" aria-labelledby="sign-in-heading">
      <h2 id="sign-in-heading">{t('signIn.heading')}</h2>
      <form onSubmit={submit}>
        <label className="field">
          <span>{t('signIn.username')}</span>
          <input name="username" autoComplete="username" required value={username} onChange={(e) => setUsername(e.target.value)} />
        </label>
        <label className="field">
          <span>{t('signIn.password')}</span>
          <input
            name="password"
            type="password"
            autoComplete="current-password"
            required
            value={password}
            onChange={(e) => setPassword(e.target.value)}
          />
        </label>
        <button type="submit" className="primary" disabled={busy}>
          {busy ? t('signIn.busy') : t('signIn.submit')}
        </button>
        {message && (
          <p role="alert" className="status" data-tone="bad" data-testid="sign-in-refusal">
            {signInWords(message, t)}
          </p>
        )}
      </form>
      <p className="meta">{t('signIn.hint')}</p>
    </section>
  );
}

function signInWords(message: SignInMessage, t: ReturnType<typeof useLang>['t']): string {
  switch (message.kind) {
    case 'refused':
      return t('signIn.refused');
    case 'rate_limited':
      return t('signIn.rateLimited', { minutes: message.minutes });
    case 'lost':
      return t('signIn.lost');
    case 'failed':
      return t('signIn.failed', { status: message.status, message: message.message });
    default: {
      const unknown: never = message;
      return String(unknown);
    }
  }
}
