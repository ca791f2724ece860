/**
 * The job queue's connection to PostgreSQL: a small postgres.js pool of its own, handed to pg-boss as
 * its `db`, in place of the node-postgres pool pg-boss would open itself.
 *
 * Why not pg-boss's own pool: node-postgres takes one host. A highly available PostgreSQL is reached
 * through a multi-host URL (`postgres://user@db1:5432,db2:5432/payonce?target_session_attrs=primary`,
 * docs/scaling.md): after a failover the app's pool reconnects to whichever host is now the primary,
 * and the jobs must follow it the same way — a refund worker left writing to a demoted standby would
 * fail every run until the process restarts. One driver, one URL, one behaviour for both pools.
 *
 * pg-boss calls `executeSql(text, values)` and reads `rows`: its schema migrations are multi-statement
 * texts without parameters, with their own BEGIN and COMMIT (sent with the simple protocol on a
 * reserved connection), its job statements single statements with positional parameters.
 */
import postgres from 'postgres';

/** What pg-boss asks of a `db` (its types.d.ts `Db`). */
export interface QueueDatabase {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

export interface OpenQueueDatabase {
  db: QueueDatabase;
  close(): Promise<void>;
}

export function openQueueDatabase(url: string, options: { max: number }): OpenQueueDatabase {
  const sql = postgres(url, {
    max: options.max,
    // Unnamed statements, as node-postgres sends them: a queue's few statements a second gain nothing
    // from named ones, and a transaction pooler (PgBouncer before 1.21) cannot keep them.
    prepare: false,
    onnotice: () => {},
    connection: { application_name: 'payonce-jobs' },
  });
  return {
    db: {
      async executeSql(text, values) {
        if (!values?.length) {
          // Possibly several statements with their own BEGIN … COMMIT (pg-boss's schema migrations):
          // postgres.js runs an explicit BEGIN only on a connection reserved for it.
          const reserved = await sql.reserve();
          try {
            return { rows: [...(await reserved.unsafe(text))] };
          } finally {
            reserved.release();
          }
        }
        // node-postgres sends undefined as NULL; postgres.js refuses it.
        const params = values.map((value) => (value === undefined ? null : value)) as postgres.ParameterOrJSON<never>[];
        return { rows: [...(await sql.unsafe(text, params))] };
      },
    },
    close: () => sql.end({ timeout: 5 }),
  };
}
