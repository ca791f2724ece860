/**
 * Process entry of the PSP sandbox (`npm run sandbox`).
 *
 * Env:
 *   DATABASE_URL        required; the sandbox keeps its state in its own schema `psp_sandbox`
 *   PSP_SANDBOX_PORT    default 4010
 *   PSP_SANDBOX_HOST    default 127.0.0.1
 *   SANDBOX_TIME_SCALE  default 1; multiplies notification retry intervals (0.001: 4 min → 240 ms)
 */
import { startSandbox } from './server';

function fail(message: string): never {
  console.error(`psp-sandbox: ${message}`);
  process.exit(1);
}

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  fail('DATABASE_URL is not set. Point it at a PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/payonce');
}

const portText = process.env.PSP_SANDBOX_PORT ?? '4010';
const port = Number(portText);
if (!/^\d+$/.test(portText) || port > 65535) fail(`PSP_SANDBOX_PORT must be a port number, got "${portText}"`);

const timeScaleText = process.env.SANDBOX_TIME_SCALE ?? '1';
const timeScale = Number(timeScaleText);
if (!Number.isFinite(timeScale) || timeScale <= 0) {
  fail(`SANDBOX_TIME_SCALE must be a positive number, got "${timeScaleText}"`);
}

const host = process.env.PSP_SANDBOX_HOST || '127.0.0.1';

try {
  const sandbox = await startSandbox({ port, host, databaseUrl, timeScale });
  console.log(`PSP sandbox listening on ${sandbox.url}`);

  let shuttingDown = false;
  const shutdown = (signal: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    console.log(`psp-sandbox: ${signal} received, shutting down`);
    sandbox.close().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error('psp-sandbox: shutdown failed:', err);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
} catch (err) {
  fail(`could not start: ${err instanceof Error ? err.message : String(err)}`);
}
