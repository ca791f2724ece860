/**
 * `npm run operator -- <command>`: the merchant's people, managed from the command line (never from
 * the web console, so that a stolen session cannot make itself an admin). Each change is journaled
 * on the `operators` stream with the OS user who ran it.
 *
 *   add <username> --role viewer|refunder|admin   the password is asked for (or read from stdin)
 *   passwd <username>                             a new password; every session of theirs ends
 *   role <username> <role>
 *   disable <username> | enable <username>        disabled: signed out everywhere, let in nowhere
 *   list
 *
 * The database is the app's: DATABASE_URL if set, else the embedded PostgreSQL (database `payonce`,
 * or --database NAME). Exit 0 done, 1 refused (the reason printed), 2 could not run.
 */
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { openDatabase } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { addOperator, listOperators, OperatorError, setDisabled, setPassword, setRole } from '@/server/operators/accounts';
import { resolveDatabase } from './stack';

const USAGE =
  'usage: npm run operator -- add <username> --role viewer|refunder|admin | passwd <username> | role <username> <role> | disable <username> | enable <username> | list';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { role: { type: 'string' }, database: { type: 'string' } },
});
const [command, username, extra] = positionals;

/** The password: typed twice without echo at a terminal, else the first line of stdin (for scripts). */
async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) {
    const lines = createInterface({ input: process.stdin });
    for await (const line of lines) return line;
    throw new OperatorError('no password on stdin');
  }
  const ask = (prompt: string) =>
    new Promise<string>((resolve) => {
      const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
      const muted = rl as unknown as { _writeToOutput: (text: string) => void };
      rl.question(prompt, (answer) => {
        rl.close();
        process.stdout.write('\n');
        resolve(answer);
      });
      muted._writeToOutput = () => {};
      process.stdout.write(prompt);
    });
  const first = await ask('password: ');
  if ((await ask('again: ')) !== first) throw new OperatorError('the two passwords differ');
  return first;
}

const by = `cli:${userInfo().username}`;
let exitCode = 2;
const database = await resolveDatabase(values.database ?? 'payonce', () => {}, values.database !== undefined);
const handle = openDatabase(database.url, { max: 2 });
try {
  await runMigrations(database.url);
  const need = (value: string | undefined, what: string) => {
    if (!value) throw new OperatorError(`${what} missing — ${USAGE}`);
    return value;
  };
  switch (command) {
    case 'add': {
      const added = await addOperator(
        handle.db,
        { username: need(username, 'username'), role: need(values.role, '--role'), password: await readPassword() },
        by,
      );
      console.log(`added ${added.username} (${added.role})`);
      break;
    }
    case 'passwd':
      console.log(
        `new password for ${(await setPassword(handle.db, need(username, 'username'), await readPassword(), by)).username}; their sessions have ended`,
      );
      break;
    case 'role':
      console.log(`${(await setRole(handle.db, need(username, 'username'), need(extra, 'role'), by)).username} is now ${extra}`);
      break;
    case 'disable':
    case 'enable':
      await setDisabled(handle.db, need(username, 'username'), command === 'disable', by);
      console.log(`${username} ${command}d`);
      break;
    case 'list':
      for (const o of await listOperators(handle.db)) {
        console.log(
          `${o.username.padEnd(24)} ${o.role.padEnd(9)} ${o.disabled ? 'disabled' : 'active  '} since ${o.createdAt.toISOString()}`,
        );
      }
      break;
    default:
      throw new OperatorError(USAGE);
  }
  exitCode = 0;
} catch (error) {
  if (error instanceof OperatorError) {
    console.error(error.message);
    exitCode = 1;
  } else {
    console.error(`operator could not run: ${error instanceof Error ? error.message : String(error)}`);
  }
} finally {
  await handle.sql.end({ timeout: 5 });
  await database.embedded?.stop();
}
process.exit(exitCode);
