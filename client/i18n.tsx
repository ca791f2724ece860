'use client';
// Placeholder until the page's language module lands.
import { createContext, useContext, useEffect, useState, type ReactNode } from 'react';
export type Lang = 'zh' | 'en';
const Ctx = createContext<{ lang: Lang; setLang: (l: Lang) => void }>({ lang: 'zh', setLang: () => {} });
export function LangProvider({ children }: { children: ReactNode }) {
  const [lang, setLang] = useState<Lang>('zh');
  useEffect(() => {
    if (localStorage.getItem('payonce.lang') === 'en') setLang('en');
  }, []);
  return <Ctx.Provider value={{ lang, setLang: (l) => { localStorage.setItem('payonce.lang', l); setLang(l); } }}>{children}</Ctx.Provider>;
}
export function useLang() {
  return useContext(Ctx);
}
export function LangSwitch() {
  const { lang, setLang } = useLang();
  return <button type="button" onClick={() => setLang(lang === 'zh' ? 'en' : 'zh')}>{lang === 'zh' ? 'English' : '中文'}</button>;
}
