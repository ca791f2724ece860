'use client';

import type { KeyboardEvent } from 'react';
import { useLang } from '@/client/i18n';
import type { OperatorApi, OperatorSession } from '@/client/console/operator-api';
import { openCount } from '@/client/console/reconciliation';
import { OrderBrowser } from './OrderBrowser';
import { ReconciliationView } from './Reconciliation';
import { MISMATCH_LIST_LIMIT, useMismatches, useWorkspace, type ConsoleView } from './use-console';

const VIEWS: ConsoleView[] = ['orders', 'reconciliation'];

/** The signed-in console: 订单 | 对账 as tabs, the open view below them. */
export function Workspace({ api, session }: { api: OperatorApi; session: OperatorSession }) {
  const { t } = useLang();
  const workspace = useWorkspace();
  // The 对账 tab counts what is left to resolve, whichever view is open: work waiting shows from anywhere.
  const open = useMismatches(api, false);
  const count = open.data ? openCount(open.data, MISMATCH_LIST_LIMIT) : undefined;
  // The tabs pattern: arrow keys move between the tabs, Tab moves into the open view.
  const onKeyDown = (event: KeyboardEvent) => {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    const step = event.key === 'ArrowRight' ? 1 : -1;
    const next = VIEWS[(VIEWS.indexOf(workspace.view) + step + VIEWS.length) % VIEWS.length] ?? 'orders';
    workspace.setView(next);
    document.getElementById(`view-tab-${next}`)?.focus();
  };
  return (
    <>
      <div className="view-tabs" role="tablist" aria-label={t('view.tabs')} onKeyDown={onKeyDown}>
        {VIEWS.map((view) => (
          <button
            key={view}
            id={`view-tab-${view}`}
            type="button"
            role="tab"
            aria-selected={workspace.view === view}
            aria-controls={workspace.view === view ? `view-panel-${view}` : undefined}
            tabIndex={workspace.view === view ? 0 : -1}
            onClick={() => workspace.setView(view)}
          >
            {t(`view.${view}`)}
            {view === 'reconciliation' && count && (
              <span className="tab-count" title={t('view.openCount', { count })}>
                {count}
              </span>
            )}
          </button>
        ))}
      </div>
      <div id={`view-panel-${workspace.view}`} role="tabpanel" aria-labelledby={`view-tab-${workspace.view}`}>
        {workspace.view === 'orders' ? (
          <OrderBrowser
            api={api}
            session={session}
            filter={workspace.filter}
            onFilter={workspace.setFilter}
            selected={workspace.selected}
            onSelect={workspace.setSelected}
            keys={workspace.keys}
          />
        ) : (
          <ReconciliationView api={api} session={session} onOpenOrder={workspace.openOrder} />
        )}
      </div>
    </>
  );
}
