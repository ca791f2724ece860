/**
 * The words of the 幕后 view in both languages: its labels, and the names of what its journal records
 * (the idempotency guard's verdicts, gateway operations and outcomes, injected faults).
 */
import type { Lang } from '@/client/i18n';

export const TEXT = {
  zh: {
    title: '幕后',
    back: '返回收银台',
    allOrders: '订单列表',
    loading: '正在读取事件日志…',
    notFound: '没有这个订单（只能查看自己的订单）。',
    status: '订单状态',
    amount: '金额',
    ledger: '网关账本',
    ledgerUnavailable: '无法读取网关账本',
    kept: '实收',
    chainOk: '哈希链完整',
    chainBroken: (seq: number) => `哈希链在第 ${seq} 条断裂：日志被改动过`,
    time: '时间（北京时间）',
    event: '事件',
    details: '详情',
    hash: '哈希',
    caption: '每个请求、每次网关调用与答复、每条通知、关单、退款与邮件，按发生顺序',
    charges: (n: number) => `${n} 笔扣款`,
    refunded: (n: number) => `${n} 笔已退款`,
    live: '实时更新中',
  },
  en: {
    title: 'Under the hood',
    back: 'Back to checkout',
    allOrders: 'Orders',
    loading: 'Reading the event log…',
    notFound: 'No such order (you can only see your own orders).',
    status: 'Order status',
    amount: 'Amount',
    ledger: 'Gateway ledger',
    ledgerUnavailable: 'Gateway ledger unavailable',
    kept: 'kept',
    chainOk: 'Hash chain intact',
    chainBroken: (seq: number) => `Hash chain broken at #${seq}: the log was altered`,
    time: 'Time (Beijing)',
    event: 'Event',
    details: 'Details',
    hash: 'Hash',
    caption: 'Every request, gateway call and answer, notification, close, refund and email, in order',
    charges: (n: number) => (n === 1 ? '1 charge' : `${n} charges`),
    refunded: (n: number) => `${n} refunded`,
    live: 'live',
  },
} as const;

export const ORDER_STATUS: Record<Lang, Record<string, string>> = {
  zh: {
    awaiting_payment: '待支付',
    paying: '支付中',
    authorized: '已授权（款项冻结）',
    paid: '已支付',
    expired: '已过期',
    voided: '已取消（授权已释放）',
  },
  en: {
    awaiting_payment: 'awaiting payment',
    paying: 'paying',
    authorized: 'authorised (money held)',
    paid: 'paid',
    expired: 'expired',
    voided: 'voided (hold released)',
  },
};

export const GUARD: Record<Lang, Record<string, string>> = {
  zh: {
    claimed: '首次受理',
    taken_over: '接管中断的请求',
    replayed: '重放已存答复',
    in_progress: '同键请求处理中',
    mismatch: '同键不同请求',
    released: '失败，释放键以便重试',
  },
  en: {
    claimed: 'claimed',
    taken_over: 'taken over',
    replayed: 'replayed',
    in_progress: 'in progress',
    mismatch: 'key reused',
    released: 'released for retry',
  },
};

export const OPERATION: Record<Lang, Record<string, string>> = {
  zh: {
    charge: '扣款',
    query: '查询交易',
    close: '关闭交易',
    refund: '退款',
    refund_query: '查询退款',
    capture: '请款',
    release: '释放授权',
  },
  en: {
    charge: 'charge',
    query: 'query',
    close: 'close trade',
    refund: 'refund',
    refund_query: 'refund query',
    capture: 'capture',
    release: 'release hold',
  },
};

export const OUTCOME: Record<Lang, Record<string, string>> = {
  zh: {
    succeeded: '成功',
    authorized: '已授权（款项冻结）',
    captured: '已请款',
    released: '授权已释放',
    refused: '拒绝请款',
    declined: '拒绝',
    retryable: '暂不可用（可重试）',
    indeterminate: '结果未知',
    closed: '已关闭',
    already_paid: '已被支付',
    payment_reversed: '撤销了刚完成的付款',
    answered: '已答复',
    unavailable: '暂不可用',
    pending: '处理中',
    failed: '失败',
    error: '出错',
  },
  en: {
    succeeded: 'succeeded',
    authorized: 'authorised (money held)',
    captured: 'captured',
    released: 'hold released',
    refused: 'capture refused',
    declined: 'declined',
    retryable: 'unavailable (retryable)',
    indeterminate: 'outcome unknown',
    closed: 'closed',
    already_paid: 'already paid',
    payment_reversed: 'payment reversed',
    answered: 'answered',
    unavailable: 'unavailable',
    pending: 'pending',
    failed: 'failed',
    error: 'error',
  },
};

/** What each injected fault did, as the switchboard names it. */
export const FAULT: Record<Lang, Record<string, string>> = {
  zh: {
    'before_claim:throw': '注入故障：请求在受理前丢失（503，页面会重试）',
    'after_claim:throw': '注入故障：受理后处理出错（503，释放幂等键）',
    'after_gateway_call:crash': '注入故障：网关已答复，进程被杀（SIGKILL），尚未记录任何结果',
    'after_commit:throw': '注入故障：已提交，答复丢失（503，重试将得到重放）',
    delay: '注入故障：请求在此被拖慢',
    timeout_after_charge: '注入故障：网关将扣款但超时才答复',
    duplicate_notifications: '注入故障：网关将把本订单的通知多发十次',
    lose_notifications: '注入故障：网关的通知将丢失',
    drop_after_charge: '注入故障：网关扣款后断开连接',
    fail_before_charge: '注入故障：网关在扣款前返回系统错误',
  },
  en: {
    'before_claim:throw': 'Fault injected: the request is dropped before the claim (503; the page retries)',
    'after_claim:throw': 'Fault injected: processing fails after the claim (503; the key is released)',
    'after_gateway_call:crash': 'Fault injected: the gateway answered, the process is killed (SIGKILL) before recording anything',
    'after_commit:throw': 'Fault injected: committed, the answer is lost (503; the retry is a replay)',
    delay: 'Fault injected: the request is held here',
    timeout_after_charge: 'Fault injected: the gateway will charge but answer too late',
    duplicate_notifications: 'Fault injected: the gateway will send this order’s notification ten extra times',
    lose_notifications: 'Fault injected: the gateway’s notifications will be lost',
    drop_after_charge: 'Fault injected: the gateway hangs up after charging',
    fail_before_charge: 'Fault injected: the gateway answers a system error before charging',
  },
};

export const VIA: Record<Lang, Record<string, string>> = {
  zh: { response: '网关同步答复', notification: '网关通知', reconciliation: '对账查询', close: '关单时发现已付' },
  en: { response: 'gateway answer', notification: 'notification', reconciliation: 'reconciliation', close: 'found paid on close' },
};

export const LEGEND: Record<Lang, { heading: string; items: [string, string][] }> = {
  zh: {
    heading: '怎么读这一页',
    items: [
      ['首次受理', '这个幂等键第一次出现：请求被处理，答复与业务数据在同一事务中保存。'],
      ['重放已存答复', '同一个键再次到来（重试、刷新）：不再处理，原样返回第一次的答复。'],
      ['同键请求处理中', '同一个键的第一次请求还没结束：返回 409，稍后重试。'],
      ['接管中断的请求', '处理该键的进程死了，租约过期：一次重试从恢复点接着做，用同一个 out_trade_no 询问网关。'],
      ['同键不同请求', '同一个键带着不同的内容：拒绝（422），什么都不改。'],
      ['失败，释放键以便重试', '暂时的故障（网络、网关 5xx）：键被释放，重试会重新处理——网关按 out_trade_no 去重，不会多扣。'],
      ['哈希链', '每一行都带着上一行的哈希：改动或删除任何一行，链就会断，npm run audit 会指出是哪一行。'],
      ['网关账本', '沙箱里网关自己的记录：成功扣款的笔数，以及保留的金额（扣款减退款），应等于订单金额。'],
      ['注入故障', '演示模式的故障开关或演练故意制造的故障，标出它发生的位置。'],
    ],
  },
  en: {
    heading: 'How to read this page',
    items: [
      ['claimed', 'The key’s first request: processed, and its answer stored in the same transaction as the business data.'],
      ['replayed', 'The same key again (a retry, a reload): not processed again; the first answer is returned as it was.'],
      ['in progress', 'The key’s first request has not finished: 409, retry later.'],
      [
        'taken over',
        'The process handling the key died and its lease ran out: one retry resumes at the recovery point and asks the gateway with the same out_trade_no.',
      ],
      ['key reused', 'The same key with a different request: refused (422), nothing changed.'],
      [
        'released for retry',
        'A transient failure (network, gateway 5xx): the key is freed and a retry runs again — the gateway deduplicates on out_trade_no, so nothing is charged twice.',
      ],
      [
        'hash chain',
        'Each row carries the hash of the one before: editing or deleting any row breaks the chain, and npm run audit names the row.',
      ],
      [
        'gateway ledger',
        'The gateway’s own record in the sandbox: how many charges succeeded, and the money kept (charges − refunds), which must equal the order’s amount.',
      ],
      ['fault injected', 'A failure made on purpose by demo mode’s switchboard or a drill, shown where it happened.'],
    ],
  },
};
