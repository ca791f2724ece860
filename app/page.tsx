import { Checkout } from './_components/Checkout';
import { FaultSwitchboard } from './_components/FaultSwitchboard';
import { demoMode } from '@/server/demo/mode';

// Rendered per request: whether the fault switchboard shows is the running server's setting
// (PAYONCE_DEMO), not the build machine's.
export const dynamic = 'force-dynamic';

export default function Page() {
  return (
    <main className="shell">
      <Checkout demo={demoMode()}>{demoMode() && <FaultSwitchboard />}</Checkout>
    </main>
  );
}
