'use client';

import { useEffect, useState } from 'react';
import { useLang } from '@/client/i18n';
import type { Lang } from '@/client/i18n';
import { GATEWAY_NAMES, isGatewayId } from '@/server/payments/gateway-ids';
import { DRILLS, label, type Drill } from './fault-drills';
import './behind.css';

/** How often the board asks whether the armed drill has fired. */
const WATCH_MS = 1500;

type BoardState = { kind: 'idle' } | { kind: 'armed' | 'fired'; drill: Drill; id: string } | { kind: 'message'; text: string };

/** What POST /api/demo/drills answers. */
interface ArmAnswer {
  id?: string;
  error?: string;
  outTradeNo?: string;
  results?: { gateway: string; status: number }[];
}

const drillName = (drill: Drill, lang: Lang) =>
  label(
    DRILLS.find((d) => d.id === drill)!,
    lang,
  );

/**
 * Demo mode's fault switchboard: one button per failure the drills use, armed for this browser's next
 * payment — whichever payment method it uses; nobody else's — and watched until it fires.
 */
export function FaultSwitchboard() {
  const { lang } = useLang();
  const zh = lang === 'zh';
  const { state, arm } = useSwitchboard(lang);
  const status = boardText(state, lang);
  return (
    <section className="card switchboard" aria-labelledby="switchboard-heading">
      <h2 id="switchboard-heading">{zh ? '故障开关（演示模式）' : 'Fault switchboard (demo mode)'}</h2>
      <p className="meta">
        {zh
          ? '选一个故障，再点立即支付：它只作用于本浏览器的下一次支付。之后在「幕后」查看发生了什么，以及只保留了一笔扣款。'
          : 'Arm a failure, then pay: it applies to this browser’s next payment only. The order’s under-the-hood view then shows what happened and that one charge was kept.'}
      </p>
      <ul className="drills">
        {DRILLS.map((drill) => (
          <li key={drill.id}>
            <button type="button" className="secondary" aria-describedby={`drill-hint-${drill.id}`} onClick={() => void arm(drill.id)}>
              {label(drill, lang)}
            </button>{' '}
            <span className="meta" id={`drill-hint-${drill.id}`}>
              {zh ? drill.hintZh : drill.hintEn}
            </span>
          </li>
        ))}
      </ul>
      {status && (
        <p aria-live="polite" data-testid="switchboard-status" data-state={state.kind}>
          {status}
        </p>
      )}
    </section>
  );
}

/** The board's state: a drill armed, watched until it fires; or what arming it answered. */
function useSwitchboard(lang: Lang) {
  const [state, setState] = useState<BoardState>({ kind: 'idle' });
  const watching = state.kind === 'armed' ? state.id : undefined;

  // Armed → fired: the fault leaves the list of this session's armed faults when it fires (or when
  // the process it was armed in died of it: a crash drill).
  useEffect(() => {
    if (!watching) return;
    const timer = window.setInterval(async () => {
      try {
        const response = await fetch('/api/demo/drills');
        if (!response.ok) return;
        const { armed } = (await response.json()) as { armed: { id: string }[] };
        if (!armed.some((fault) => fault.id === watching)) {
          setState((current) => (current.kind === 'armed' && current.id === watching ? { ...current, kind: 'fired' } : current));
        }
      } catch {
        // the app is restarting (a crash drill): ask again
      }
    }, WATCH_MS);
    return () => window.clearInterval(timer);
  }, [watching]);

  async function arm(drill: Drill) {
    const response = await fetch('/api/demo/drills', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ drill }),
    });
    const body = (await response.json().catch(() => ({}))) as ArmAnswer;
    if (!response.ok) setState({ kind: 'message', text: `${drillName(drill, lang)}: ${body.error ?? response.status}` });
    else if (drill === 'late_buyer') setState({ kind: 'message', text: lateBuyerText(body, lang) });
    else setState({ kind: 'armed', drill, id: body.id ?? '' });
  }

  return { state, arm };
}

/** What the late buyer did on each trade of the newest order. */
function lateBuyerText(body: ArmAnswer, lang: Lang) {
  const zh = lang === 'zh';
  const lines = (body.results ?? []).map((r) => {
    const g = isGatewayId(r.gateway) ? label(GATEWAY_NAMES[r.gateway], lang) : r.gateway;
    if (r.status === 200)
      return zh ? `${g}：买家付款成功 → 这笔多付的款将被自动退回` : `${g}: the buyer paid → this extra payment will be refunded`;
    return zh ? `${g}：交易已关闭或已付，没有多扣款` : `${g}: closed or already paid, no extra charge`;
  });
  return `${drillName('late_buyer', lang)} · ${body.outTradeNo}: ${lines.join('；') || (zh ? '此订单没有交易' : 'no trades')}`;
}

function boardText(state: BoardState, lang: Lang): string | undefined {
  const zh = lang === 'zh';
  switch (state.kind) {
    case 'idle':
      return undefined;
    case 'message':
      return state.text;
    case 'armed': {
      const name = drillName(state.drill, lang);
      return zh
        ? `已布置「${name}」：本浏览器下一次点「立即支付」时触发（任何支付方式），不影响其他人。`
        : `Armed “${name}” for this browser’s next payment (any payment method); nobody else is affected.`;
    }
    case 'fired': {
      const name = drillName(state.drill, lang);
      return zh
        ? `「${name}」已触发：看上面的支付结果，再打开订单详情里的「幕后」。`
        : `“${name}” has fired: see the payment result above, then open “Under the hood” in the order details.`;
    }
  }
}
