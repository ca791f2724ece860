import { existsSync } from 'node:fs';
import { defineConfig } from '@playwright/test';

/**
 * Browser tests and failure drills. `npx playwright test` starts the whole stack itself (database,
 * PSP sandbox, app) on ports of its own, so it runs beside a developer's `npm run dev`.
 *
 * The browser: CHROMIUM_PATH if set, else the system Chromium where there is one (Debian's
 * /usr/bin/chromium), else Playwright's own download (`npx playwright install chromium`).
 */
const APP_PORT = Number(process.env.E2E_APP_PORT ?? 3100);
const SANDBOX_PORT = Number(process.env.E2E_SANDBOX_PORT ?? 4110);
process.env.PSP_SANDBOX_URL = `http://127.0.0.1:${SANDBOX_PORT}`;

const systemChromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const executablePath = process.env.CHROMIUM_PATH || systemChromium;

export default defineConfig({
  testDir: 'e2e',
  timeout: 90_000,
  expect: { timeout: 20_000 },
  // One app, one database: the drills count charges, so they must not share orders across workers.
  workers: 1,
  forbidOnly: !!process.env.CI,
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    baseURL: `http://127.0.0.1:${APP_PORT}`,
    locale: 'zh-CN',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    launchOptions: executablePath
      ? {
          executablePath,
          args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
        }
      : {},
  },
  projects: [{ name: 'chromium', use: { browserName: 'chromium' } }],
  webServer: {
    command: `node_modules/.bin/tsx scripts/dev.ts --port ${APP_PORT} --sandbox-port ${SANDBOX_PORT} --database payonce_e2e --dist-dir .next-e2e`,
    url: `http://127.0.0.1:${APP_PORT}/api/health`,
    reuseExistingServer: !process.env.CI,
    timeout: 240_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
