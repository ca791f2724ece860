/** The failures demo mode's fault switchboard can arm, named and explained in both languages. */
import type { Lang } from '@/client/i18n';

/** A failure the switchboard can arm, with what it does in both languages (shown beside its button). */
export type Drill =
  | 'dropped_request'
  | 'error_in_processing'
  | 'crash_after_charge'
  | 'lost_response'
  | 'gateway_timeout'
  | 'duplicate_notifications'
  | 'late_buyer';

export const DRILLS: { id: Drill; zh: string; en: string; hintZh: string; hintEn: string }[] = [
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

export function label(item: { zh: string; en: string }, lang: Lang) {
  return lang === 'zh' ? item.zh : item.en;
}
