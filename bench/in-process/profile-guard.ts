/**
 * `tsx bench/in-process/profile-guard.ts [seconds] [concurrency]`: the guard's own cost in this
 * process, for a profile (`node --cpu-prof --import tsx …`). Runs the business transaction unguarded,
 * then under our guard with fresh keys, at the same concurrency, and prints Node CPU µs per call for
 * each: the difference is what the guard adds in JavaScript. DATABASE_URL: a database of your own.
 */
import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import { AMOUNT_MINOR, cleanUpInProcess, ensureInProcessTables } from './business';
import { oursContender, unguardedContender, type Contender } from './contenders';

const seconds = Number(process.argv[2] ?? 5);
const concurrency = Number(process.argv[3] ?? 32);
const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL: a database of your own');

async function drive(contender: Contender): Promise<{ calls: number; cpuUsPerCall: number }> {
  let calls = 0;
  const until = performance.now() + seconds * 1000;
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (performance.now() < until) {
        await contender.call({ key: randomUUID(), worker, input: { tag: 'profile', amountMinor: AMOUNT_MINOR } });
        calls++;
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return { calls, cpuUsPerCall: (used.user + used.system) / calls };
}

await runMigrations(url);
const sql = postgres(url, { max: 10, onnotice: () => {} });
await ensureInProcessTables(sql);
for (const contender of [unguardedContender(sql), oursContender(sql), unguardedContender(sql), oursContender(sql)]) {
  const { calls, cpuUsPerCall } = await drive(contender);
  console.log(
    `${contender.id.padEnd(10)} ${String(calls).padStart(7)} calls  ${(calls / seconds).toFixed(0).padStart(6)}/s  node ${cpuUsPerCall.toFixed(1)} µs/call`,
  );
}
await cleanUpInProcess(sql);
await sql.end({ timeout: 5 });
