/**
 * One production build shared by the stacks of one run (the browser tests' checkout and drills
 * stacks: STACK_BUILD_ONCE=<run id>). The first stack to take the build folder's lock builds and
 * stamps the build with the run's id; any other stack of the run waits for the lock, finds the
 * stamp, and starts on that build. A lock left by a process that died is taken over.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const STAMP = '.payonce-build-run';

function lockHolder(lock: string): number | undefined {
  try {
    return Number(readFileSync(path.join(lock, 'pid'), 'utf8')) || undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function takeLock(lock: string, log: (line: string) => void): Promise<void> {
  const deadline = Date.now() + 15 * 60_000;
  for (let waited = false; ; waited = true) {
    try {
      mkdirSync(lock);
      writeFileSync(path.join(lock, 'pid'), String(process.pid));
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = lockHolder(lock);
    if (holder !== undefined && !alive(holder)) {
      log(`[build] ${lock} was left by process ${holder}, which is gone: taking it over`);
      rmSync(lock, { recursive: true, force: true });
      continue;
    }
    if (!waited) log(`[build] another stack of this run is building (${lock}): waiting for it`);
    if (Date.now() > deadline) throw new Error(`${lock} held for 15 minutes by process ${holder ?? '?'}`);
    await sleep(500);
  }
}

/** Runs `build` unless a stack of run `runId` already built `distDir`; serialised by a lock beside it. */
export async function buildOnce(distDir: string, runId: string, build: () => Promise<void>, log: (line: string) => void): Promise<void> {
  const lock = `${path.resolve(distDir)}.build-lock`;
  await takeLock(lock, log);
  try {
    const stamp = (() => {
      try {
        return readFileSync(path.join(distDir, STAMP), 'utf8');
      } catch {
        return undefined;
      }
    })();
    if (stamp === runId) {
      log(`[build] ${distDir} was built for this run already: starting on it`);
      return;
    }
    await build();
    writeFileSync(path.join(distDir, STAMP), runId);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}
