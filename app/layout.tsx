import type { Metadata } from 'next';
import type { ReactNode } from 'react';
import './globals.css';

// Every page is rendered per request: its Content-Security-Policy nonce (proxy.ts) is new each time,
// and a page prerendered at build time would carry scripts without it.
export const dynamic = 'force-dynamic';

export const metadata: Metadata = {
  title: 'PayOnce · 收银台',
  description: '一次点击，只扣一次款。',
};

export default function RootLayout({ children }: { children: ReactNode }) {
  return (
    <html lang="zh-CN">
      <body>{children}</body>
    </html>
  );
}
