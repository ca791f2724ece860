import { Checkout } from './_components/Checkout';

export default function Page() {
  return (
    <main className="shell">
      <header className="masthead">
        <h1>PayOnce 收银台</h1>
        <p className="tagline">无论网络、进程还是网关出了什么问题，同一笔订单只会扣款一次。</p>
      </header>
      <Checkout />
    </main>
  );
}
