'use client';

/**
 * The shopper's language: Chinese by default, English on request, remembered in localStorage.
 *
 * Any page can use it: wrap it in <LangProvider messages={…}> with its own catalogue (merged over the
 * shared one below), read `t` from useLang(), and put a <LangSwitch /> where the shopper can reach it.
 * A key missing in English falls back to Chinese, and a key missing everywhere shows itself, so a
 * forgotten string is visible rather than blank.
 */
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { GATEWAY_IDS, GATEWAY_NAMES, type GatewayId } from '@/server/payments/gateway-ids';

export type Lang = 'zh' | 'en';

export const LANGS: readonly Lang[] = ['zh', 'en'];

/** Where the choice survives a reload. */
export const LANG_STORAGE_KEY = 'payonce.lang';

export type Catalogue = Record<Lang, Record<string, string>>;

type Vars = Record<string, string | number>;

export interface LangContextValue {
  lang: Lang;
  setLang: (lang: Lang) => void;
  /** The message for `key` in the current language; `{name}` placeholders filled from `vars`. */
  t: (key: string, vars?: Vars) => string;
}

/**
 * Where the shopper picks a gateway (and on the order it paid), the card numbers beside the choice
 * already say it is a card: the shorter name reads better there than the processor's.
 */
const PICKER_NAMES: Record<Lang, Partial<Record<GatewayId, string>>> = {
  zh: { stripe: '银行卡' },
  en: { stripe: 'Bank card' },
};

/** `gateway.<id>` for every gateway, so adding one to GATEWAY_IDS gives the page its name too. */
function gatewayMessages(lang: Lang): Record<string, string> {
  return Object.fromEntries(GATEWAY_IDS.map((id) => [`gateway.${id}`, PICKER_NAMES[lang][id] ?? GATEWAY_NAMES[id][lang]]));
}

/** What every PayOnce page says: the masthead, the language switch, gateway and status words. */
export const SHARED_MESSAGES: Catalogue = {
  zh: {
    'lang.switch': '语言',
    'brand.title': 'PayOnce 收银台',
    'brand.tagline': '无论网络、进程还是网关出了什么问题，同一笔订单只会扣款一次。',
    ...gatewayMessages('zh'),
    'order.status.awaiting_payment': '待支付',
    'order.status.paying': '支付确认中',
    'order.status.authorized': '已授权，发货时扣款',
    'order.status.paid': '已支付',
    'order.status.failed': '已关闭',
    'order.status.expired': '已过期',
    'order.status.voided': '已取消，授权已释放',
  },
  en: {
    'lang.switch': 'Language',
    'brand.title': 'PayOnce Checkout',
    'brand.tagline': 'Whatever goes wrong with the network, the servers or the gateway, an order is charged once.',
    ...gatewayMessages('en'),
    'order.status.awaiting_payment': 'Awaiting payment',
    'order.status.paying': 'Confirming payment',
    'order.status.authorized': 'Authorised; charged when it ships',
    'order.status.paid': 'Paid',
    'order.status.failed': 'Closed',
    'order.status.expired': 'Expired',
    'order.status.voided': 'Cancelled; hold released',
  },
};

const LangContext = createContext<LangContextValue | undefined>(undefined);

const isLang = (value: unknown): value is Lang => value === 'zh' || value === 'en';

function htmlLang(lang: Lang): string {
  return lang === 'zh' ? 'zh-CN' : 'en';
}

export function LangProvider({ children, messages }: { children: ReactNode; messages?: Catalogue }) {
  // The server renders Chinese; the stored choice is applied once the page runs in the browser.
  const [lang, setLangState] = useState<Lang>('zh');

  useEffect(() => {
    try {
      const stored = window.localStorage.getItem(LANG_STORAGE_KEY);
      if (isLang(stored)) setLangState(stored);
    } catch {
      // Storage can be unavailable (private mode, blocked): stay in Chinese.
    }
  }, []);

  useEffect(() => {
    document.documentElement.lang = htmlLang(lang);
  }, [lang]);

  const setLang = useCallback((next: Lang) => {
    setLangState(next);
    try {
      window.localStorage.setItem(LANG_STORAGE_KEY, next);
    } catch {
      // Not remembered across reloads, but the page still switches.
    }
  }, []);

  const value = useMemo<LangContextValue>(() => {
    const table = { ...SHARED_MESSAGES[lang], ...(messages?.[lang] ?? {}) };
    const fallback = { ...SHARED_MESSAGES.zh, ...(messages?.zh ?? {}) };
    const t = (key: string, vars?: Vars) => {
      const template = table[key] ?? fallback[key] ?? key;
      return vars ? template.replace(/\{(\w+)\}/g, (whole, name: string) => (name in vars ? String(vars[name]) : whole)) : template;
    };
    return { lang, setLang, t };
  }, [lang, messages, setLang]);

  return <LangContext.Provider value={value}>{children}</LangContext.Provider>;
}

export function useLang(): LangContextValue {
  const value = useContext(LangContext);
  if (!value) throw new Error('useLang() needs a <LangProvider> above it');
  return value;
}

/** 中文 / English, as a group of two buttons; the current one is pressed. */
export function LangSwitch() {
  const { lang, setLang, t } = useLang();
  return (
    <div className="lang-switch" role="group" aria-label={t('lang.switch')}>
      {LANGS.map((option) => (
        <button key={option} type="button" lang={htmlLang(option)} aria-pressed={lang === option} onClick={() => setLang(option)}>
          {option === 'zh' ? '中文' : 'English'}
        </button>
      ))}
    </div>
  );
}
