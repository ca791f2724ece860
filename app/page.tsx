import { Checkout } from './_components/Checkout';
import { FaultSwitchboard } from './_components/FaultSwitchboard';
import { demoMode } from '../server/demo';

// Rendered per request: whether the fault switchboard shows is the running server's setting
// (PAYONCE_DEMO), not the build machine's.
export const dynamic = 'force-dynamic';

export default function Page() {
  return (
    <main className="shell">
      <header className="masthead">
        <h1>PayOnce 收银台</h1>
        <p className="tagline">无论网络、进程还是网关出了什么问题，同一笔订单只会扣款一次。</p>
      </header>
      <Checkout />
      {demoMode() && <FaultSwitchboard />}
    </main>
  );
}
