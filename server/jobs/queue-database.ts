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
 *
 * Behind a transaction pooler (DATABASE_POOLING=transaction: PgBouncer before 1.21) there are no
 * named statements, and postgres.js then describes a statement with parameters before it binds it
 * (Parse, Describe, Flush: no Sync). Outside a transaction the pooler may hand the server connection
 * to another client between the two, and the description's answer arrives for nobody ("got packet
 * from server when not linked"): the query never completes. So there each statement with parameters
 * runs in a transaction of its own, which keeps one server connection from BEGIN to COMMIT.
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

export function openQueueDatabase(url: string, options: { max: number; pooling: 'session' | 'transaction' }): OpenQueueDatabase {
  const pooled = options.pooling === 'transaction';
  const sql = postgres(url, {
    max: options.max,
    // Named statements, prepared once per connection, unless a transaction pooler cannot keep them.
    prepare: !pooled,
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
        const rows = pooled ? await sql.begin((tx) => tx.unsafe(text, params)) : await sql.unsafe(text, params, { prepare: true });
        return { rows: [...rows] };
      },
    },
    close: () => sql.end({ timeout: 5 }),
  };
}
