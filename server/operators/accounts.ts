/**
 * Operator accounts: added, given a role, a new password, disabled or enabled again — by
 * `npm run operator` (scripts/operator.ts), never by a web form that a stolen session could use to
 * make itself an admin. Every change is journaled on the `operators` stream, with who made it.
 */
import { asc, eq, sql } from 'drizzle-orm';
import type { Database, Executor } from '@/db/client';
import { operators, OPERATOR_ROLES, type OperatorRole } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import { hashPassword, passwordProblem } from './passwords';

/** A refused change: the operator's reason, in words a person at a terminal can act on. */
export class OperatorError extends Error {
  override name = 'OperatorError';
}

const USERNAME = /^[a-z0-9._-]{3,64}$/;

/** The username as stored: lower case; refused when it is not 3–64 of [a-z0-9._-]. */
export function normalizeUsername(raw: string): string {
  const username = raw.trim().toLowerCase();
  if (!USERNAME.test(username)) throw new OperatorError(`username: 3–64 of a–z, 0–9, ".", "_", "-" (got ${JSON.stringify(raw)})`);
  return username;
}

export function parseRole(raw: string): OperatorRole {
  if ((OPERATOR_ROLES as readonly string[]).includes(raw)) return raw as OperatorRole;
  throw new OperatorError(`role: one of ${OPERATOR_ROLES.join(', ')} (got ${JSON.stringify(raw)})`);
}

function checkPassword(password: string): void {
  const problem = passwordProblem(password);
  if (problem) throw new OperatorError(`password: ${problem}`);
}

/** Who made a change: an operator's username, or `cli:<os user>` for the command line. */
export type Actor = string;

export interface OperatorView {
  username: string;
  role: OperatorRole;
  disabled: boolean;
  createdAt: Date;
  passwordChangedAt: Date;
}

export async function addOperator(
  db: Database,
  input: { username: string; role: string; password: string },
  by: Actor,
): Promise<OperatorView> {
  const username = normalizeUsername(input.username);
  const role = parseRole(input.role);
  checkPassword(input.password);
  const passwordHash = await hashPassword(input.password);
  return db.transaction(async (tx) => {
    const [added] = await tx.insert(operators).values({ username, role, passwordHash }).onConflictDoNothing().returning();
    if (!added) throw new OperatorError(`an operator named ${username} exists already`);
    await journal(tx, { orderId: null, stream: 'operators', kind: 'operator.added', data: { username, role, by } });
    return view(added);
  });
}

export async function setRole(db: Database, rawUsername: string, rawRole: string, by: Actor): Promise<OperatorView> {
  const username = normalizeUsername(rawUsername);
  const role = parseRole(rawRole);
  return change(db, username, { role }, { kind: 'operator.role_changed', data: { username, role, by } });
}

/** A new password ends every session of the operator (sessions older than the change are refused). */
export async function setPassword(db: Database, rawUsername: string, password: string, by: Actor): Promise<OperatorView> {
  const username = normalizeUsername(rawUsername);
  checkPassword(password);
  const passwordHash = await hashPassword(password);
  return change(
    db,
    username,
    { passwordHash, passwordChangedAt: sql`now()` },
    { kind: 'operator.password_changed', data: { username, by } },
  );
}

/** Disabled: signed out everywhere and let in nowhere, kept for the journal that names them. */
export async function setDisabled(db: Database, rawUsername: string, disabled: boolean, by: Actor): Promise<OperatorView> {
  const username = normalizeUsername(rawUsername);
  return change(
    db,
    username,
    { disabledAt: disabled ? sql`now()` : null },
    { kind: disabled ? 'operator.disabled' : 'operator.enabled', data: { username, by } },
  );
}

async function change(
  db: Database,
  username: string,
  set: Partial<Record<keyof typeof operators.$inferInsert, unknown>>,
  event: {
    kind: 'operator.role_changed' | 'operator.password_changed' | 'operator.disabled' | 'operator.enabled';
    data: Record<string, unknown>;
  },
): Promise<OperatorView> {
  return db.transaction(async (tx) => {
    const [changed] = await tx
      .update(operators)
      .set(set as typeof operators.$inferInsert)
      .where(eq(operators.username, username))
      .returning();
    if (!changed) throw new OperatorError(`no operator named ${username}`);
    await journal(tx, { orderId: null, stream: 'operators', ...event });
    return view(changed);
  });
}

export async function listOperators(db: Executor): Promise<OperatorView[]> {
  return (await db.select().from(operators).orderBy(asc(operators.username))).map(view);
}

function view(row: typeof operators.$inferSelect): OperatorView {
  return {
    username: row.username,
    role: row.role,
    disabled: row.disabledAt !== null,
    createdAt: row.createdAt,
    passwordChangedAt: row.passwordChangedAt,
  };
}
