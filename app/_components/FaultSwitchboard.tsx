'use client';

import { useEffect, useState } from 'react';
import { useLang } from '../../client/i18n';
import type { Lang } from '../../client/i18n';
import { GATEWAY_NAMES, isGatewayId } from '../../server/payments/gateway-ids';
import './behind.css';

/** A failure the switchboard can arm, with what it does in both languages (shown beside its button). */
type Drill =
  | 'dropped_request'
  | 'error_in_processing'
  | 'crash_after_charge'
  | 'lost_response'
  | 'gateway_timeout'
  | 'duplicate_notifications'
  | 'late_buyer';

const DRILLS: { id: Drill; zh: string; en: string; hintZh: string; hintEn: string }[] = [
  {
    id: 'dropped_request',
    zh: '请求前丢失',
    en: 'Dropped request',
    hintZh: '请求在受理前失败，页面自动重试',
    hintEn: 'fails before the key is claimed; the page retries',
  },
  {
    id: 'error_in_processing',
    zh: '处理中出错',
    en: 'Error mid-request',
    hintZh: '受理后出错，释放幂等键，重试重新处理',
    hintEn: 'fails after the claim; the key is released',
  },
  {
    id: 'crash_after_charge',
    zh: '扣款后崩溃',
    en: 'Crash after charge',
    hintZh: '网关已扣款、进程被杀，重启后接管并由网关去重',
    hintEn: 'process killed after the charge; the retry takes over',
  },
  {
    id: 'lost_response',
    zh: '响应丢失',
    en: 'Lost response',
    hintZh: '已提交但答复丢失，重试得到重放',
    hintEn: 'committed, answer lost; the retry is a replay',
  },
  {
    id: 'gateway_timeout',
    zh: '网关超时',
    en: 'Gateway timeout',
    hintZh: '网关扣款但超时才答复',
    hintEn: 'the gateway charges but answers too late',
  },
  {
    id: 'duplicate_notifications',
    zh: '重复通知',
    en: 'Duplicate notifications',
    hintZh: '网关把通知多发十次',
    hintEn: 'the gateway sends its notification ten extra times',
  },
  {
    id: 'late_buyer',
    zh: '买家稍后支付',
    en: 'Late buyer',
    hintZh: '对最近的订单：买家现在去付它开过的每一笔交易',
    hintEn: 'on your newest order: the buyer pays every trade it opened, now',
  },
];

function label(item: { zh: string; en: string }, lang: Lang) {
  return lang === 'zh' ? item.zh : item.en;
}

/** How often the board asks whether the armed drill has fired. */
const WATCH_MS = 1500;

type BoardState = { kind: 'idle' } | { kind: 'armed' | 'fired'; drill: Drill; id: string } | { kind: 'message'; text: string };

/**
 * Demo mode's fault switchboard: one button per failure the drills use, armed for this browser's next
 * payment — whichever payment method it uses; nobody else's — and watched until it fires.
 */
export function FaultSwitchboard() {
  const { lang } = useLang();
  const zh = lang === 'zh';
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
    const name = label(
      DRILLS.find((d) => d.id === drill)!,
      lang,
    );
    const response = await fetch('/api/demo/drills', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ drill }),
    });
    const body = (await response.json().catch(() => ({}))) as {
      id?: string;
      error?: string;
      outTradeNo?: string;
      results?: { gateway: string; status: number }[];
    };
    if (!response.ok) {
      setState({ kind: 'message', text: `${name}: ${body.error ?? response.status}` });
      return;
    }
    if (drill === 'late_buyer') {
      const lines = (body.results ?? []).map((r) => {
        const g = isGatewayId(r.gateway) ? label(GATEWAY_NAMES[r.gateway], lang) : r.gateway;
        if (r.status === 200)
          return zh ? `${g}：买家付款成功 → 这笔多付的款将被自动退回` : `${g}: the buyer paid → this extra payment will be refunded`;
        return zh ? `${g}：交易已关闭或已付，没有多扣款` : `${g}: closed or already paid, no extra charge`;
      });
      setState({ kind: 'message', text: `${name} · ${body.outTradeNo}: ${lines.join('；') || (zh ? '此订单没有交易' : 'no trades')}` });
      return;
    }
    setState({ kind: 'armed', drill, id: body.id ?? '' });
  }

  const status = (() => {
    switch (state.kind) {
      case 'idle':
        return undefined;
      case 'message':
        return state.text;
      case 'armed': {
        const name = label(
          DRILLS.find((d) => d.id === state.drill)!,
          lang,
        );
        return zh
          ? `已布置「${name}」：本浏览器下一次点「立即支付」时触发（任何支付方式），不影响其他人。`
          : `Armed “${name}” for this browser’s next payment (any payment method); nobody else is affected.`;
      }
      case 'fired': {
        const name = label(
          DRILLS.find((d) => d.id === state.drill)!,
          lang,
        );
        return zh
          ? `「${name}」已触发：看上面的支付结果，再打开订单详情里的「幕后」。`
          : `“${name}” has fired: see the payment result above, then open “Under the hood” in the order details.`;
      }
    }
  })();

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
