'use client';

import { useState } from 'react';
import { useLang } from '../../client/i18n';
import type { Lang } from '../../client/i18n';
import { GATEWAY_IDS, GATEWAY_NAMES, isGatewayId, type GatewayId } from '../../server/payments/gateway-ids';
import './behind.css';

/**
 * Demo mode's fault switchboard: one button per failure the drills use, armed for the next payment.
 * After paying, the order's 幕后 view shows what happened and that one charge was kept.
 */
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

export function FaultSwitchboard() {
  const { lang } = useLang();
  const zh = lang === 'zh';
  const [gateway, setGateway] = useState<GatewayId>('alipay');
  const [message, setMessage] = useState<string | undefined>();

  async function arm(drill: Drill) {
    const name = label(
      DRILLS.find((d) => d.id === drill)!,
      lang,
    );
    const gatewayName = label(GATEWAY_NAMES[gateway], lang);
    const response = await fetch('/api/demo/drills', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(drill === 'late_buyer' ? { drill } : { drill, gateway }),
    });
    const body = (await response.json().catch(() => ({}))) as {
      error?: string;
      outTradeNo?: string;
      results?: { gateway: string; status: number }[];
    };
    if (!response.ok) {
      setMessage(`${name}: ${body.error ?? response.status}`);
      return;
    }
    if (drill === 'late_buyer') {
      const lines = (body.results ?? []).map((r) => {
        const g = isGatewayId(r.gateway) ? label(GATEWAY_NAMES[r.gateway], lang) : r.gateway;
        if (r.status === 200) return zh ? `${g}：买家付款成功 → 这笔将被自动退回` : `${g}: the buyer paid → it will be refunded`;
        return zh ? `${g}：交易已关闭或已付，未扣款` : `${g}: closed or already paid, nothing charged`;
      });
      setMessage(`${name} · ${body.outTradeNo}: ${lines.join('；') || (zh ? '此订单没有交易' : 'no trades')}`);
      return;
    }
    setMessage(zh ? `已布置「${name}」：下一次用${gatewayName}支付时触发` : `Armed “${name}” for the next ${gatewayName} payment`);
  }

  return (
    <section className="card switchboard" aria-labelledby="switchboard-heading">
      <h2 id="switchboard-heading">{zh ? '故障开关（演示模式）' : 'Fault switchboard (demo mode)'}</h2>
      <p className="meta">
        {zh
          ? '选一个故障，再点立即支付；之后在「幕后」查看发生了什么，以及只保留了一笔扣款。'
          : 'Arm a failure, then pay; the order’s under-the-hood view shows what happened and that one charge was kept.'}
      </p>
      <label>
        {zh ? '作用于' : 'For'}{' '}
        <select
          value={gateway}
          onChange={(event) => {
            if (isGatewayId(event.target.value)) setGateway(event.target.value);
          }}
          aria-label={zh ? '故障作用的支付方式' : 'Gateway for the fault'}
        >
          {GATEWAY_IDS.map((id) => (
            <option key={id} value={id}>
              {label(GATEWAY_NAMES[id], lang)}
            </option>
          ))}
        </select>
      </label>
      <div className="drills">
        {DRILLS.map((drill) => (
          <button
            key={drill.id}
            type="button"
            className="secondary"
            title={zh ? drill.hintZh : drill.hintEn}
            onClick={() => void arm(drill.id)}
          >
            {label(drill, lang)}
          </button>
        ))}
      </div>
      {message && (
        <p aria-live="polite" data-testid="switchboard-status">
          {message}
        </p>
      )}
    </section>
  );
}
