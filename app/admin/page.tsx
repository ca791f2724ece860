import type { Metadata } from 'next';
import { Console } from './_components/Console';

export const metadata: Metadata = {
  title: 'PayOnce 商户后台',
  // The console is for the merchant's own people: nothing in it belongs in a search engine.
  robots: { index: false, follow: false },
};

export default function Page() {
  return <Console />;
}
