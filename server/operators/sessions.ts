/**
 * Operators' sign-in sessions, apart from shoppers' in every way: their own cookie
 * (`__Host-payonce_operator` over https), their own table, server-side state that a sign-out, a
 * disabled account or a new password ends at once.
 *
 *   cookie     a random 256-bit token, httpOnly, SameSite=Strict, Path=/ — only its SHA-256 is stored
 *   lifetime   12 hours from sign-in at most, and 30 minutes without a request
 *   CSRF       SameSite=Strict keeps the cookie off other sites' requests; on top, every state-changing
 *              request must carry the session's CSRF token (derived from the cookie's token, given
 *              to the console by `me`) and come from this origin (Origin / Sec-Fetch-Site)
 *   sign-in    rate-limited per username and per address; a wrong name costs as long as a wrong
 *              password (a decoy hash), and both answer the same
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { operators, operatorSessions, type OperatorRole } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import { cookieValues } from '@/server/http/session';
import { decoyHash, hashPassword, needsRehash, verifyPassword } from './passwords';

export const OPERATOR_COOKIE = 'payonce_operator';
export const SECURE_OPERATOR_COOKIE = `__Host-${OPERATOR_COOKIE}`;
/** A working day: long enough for a shift, short enough that a forgotten session dies the same day. */
export const SESSION_LIFETIME_SECONDS = 12 * 60 * 60;
/** Half an hour without a request: a console left open on an unattended desk stops working. */
export const SESSION_IDLE_SECONDS = 30 * 60;
/** Sign-in tries per window, per username and per address: a person mistyping never meets them. */
const SIGN_IN_LIMIT = { perUsername: 10, perAddress: 50, windowSeconds: 15 * 60 } as const;

/** The operator a session belongs to, as every operator procedure sees them. */
export interface Operator {
  id: string;
  username: string;
  role: OperatorRole;
}

const ROLE_RANK: Record<OperatorRole, number> = { viewer: 0, refunder: 1, admin: 2 };

/** Whether `role` may do what `needed` may. */
export function roleAllows(role: OperatorRole, needed: OperatorRole): boolean {
  return ROLE_RANK[role] >= ROLE_RANK[needed];
}

const sha256 = (value: string) => createHash('sha256').update(value).digest('base64url');

export function operatorCookieName(secure: boolean): string {
  return secure ? SECURE_OPERATOR_COOKIE : OPERATOR_COOKIE;
}

/** The session token in a Cookie header, if any. */
export function operatorToken(cookieHeader: string | null, secure: boolean): string | undefined {
  return cookieValues(cookieHeader, operatorCookieName(secure)).find((value) => /^[A-Za-z0-9_-]{43}$/.test(value));
}

export function operatorCookie(token: string, secure: boolean): string {
  const flags = ['Path=/', 'HttpOnly', 'SameSite=Strict', `Max-Age=${SESSION_LIFETIME_SECONDS}`, ...(secure ? ['Secure'] : [])];
  return `${operatorCookieName(secure)}=${token}; ${flags.join('; ')}`;
}

export function clearedOperatorCookie(secure: boolean): string {
  return `${operatorCookieName(secure)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0${secure ? '; Secure' : ''}`;
}

/** The CSRF token of a session: derived from its cookie's token, so nothing more is stored. */
export function csrfTokenFor(token: string): string {
  return sha256(`csrf\0${token}`);
}

export function csrfMatches(token: string, given: string | null): boolean {
  if (!given) return false;
  const expected = Buffer.from(csrfTokenFor(token));
  const actual = Buffer.from(given);
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}

export type SignIn =
  { kind: 'signed_in'; token: string; operator: Operator } | { kind: 'refused' } | { kind: 'rate_limited'; retryAfterSeconds: number };

/** Checks a username and password; on success a new session, journaled either way. */
export async function signIn(db: Database, input: { username: string; password: string; address?: string | undefined }): Promise<SignIn> {
  const username = input.username.trim().toLowerCase().slice(0, 64);
  const limited = await signInLimited(db, username, input.address);
  if (limited) return { kind: 'rate_limited', retryAfterSeconds: limited };
  const [operator] = await db.select().from(operators).where(eq(operators.username, username));
  // Always one scrypt, whether or not the name exists: the answer's timing tells nothing.
  const matches = await verifyPassword(input.password, operator?.passwordHash ?? (await decoyHash()));
  if (!operator || !matches || operator.disabledAt !== null) {
    await journal(db, {
      orderId: null,
      stream: 'operators',
      kind: 'operator.sign_in_refused',
      data: { username, known: Boolean(operator), ...(input.address ? { address: input.address } : {}) },
    });
    return { kind: 'refused' };
  }
  const token = randomBytes(32).toString('base64url');
  await db.transaction(async (tx) => {
    if (needsRehash(operator.passwordHash)) {
      await tx
        .update(operators)
        .set({ passwordHash: await hashPassword(input.password) })
        .where(eq(operators.id, operator.id));
    }
    await tx.insert(operatorSessions).values({
      tokenHash: sha256(token),
      operatorId: operator.id,
      expiresAt: sql`now() + make_interval(secs => ${SESSION_LIFETIME_SECONDS})`,
    });
    await journal(tx, {
      orderId: null,
      stream: 'operators',
      kind: 'operator.signed_in',
      data: { username, ...(input.address ? { address: input.address } : {}) },
    });
  });
  return { kind: 'signed_in', token, operator: { id: operator.id, username: operator.username, role: operator.role } };
}

/**
 * Counts a sign-in try against its username and its address (PostgreSQL's rate_limits table, shared
 * by every instance); the seconds to wait when either is over its limit.
 */
async function signInLimited(db: Database, username: string, address: string | undefined): Promise<number | undefined> {
  const buckets: { bucket: string; limit: number }[] = [{ bucket: `signin:user:${username}`, limit: SIGN_IN_LIMIT.perUsername }];
  if (address) buckets.push({ bucket: `signin:address:${address}`, limit: SIGN_IN_LIMIT.perAddress });
  const window = SIGN_IN_LIMIT.windowSeconds;
  let wait: number | undefined;
  for (const { bucket, limit } of buckets) {
    const [row] = await db.execute<{ hits: number; retry_after: number }>(sql`
      insert into rate_limits as r (bucket, window_start, window_ends_at, hits)
      values (${bucket}, now(), now() + make_interval(secs => ${window}), 1)
      on conflict (bucket) do update
         set hits = case when r.window_ends_at > now() then r.hits + 1 else 1 end,
             window_start = case when r.window_ends_at > now() then r.window_start else now() end,
             window_ends_at = case when r.window_ends_at > now() then r.window_ends_at else now() + make_interval(secs => ${window}) end
      returning hits, ceil(extract(epoch from window_ends_at - now()))::int as retry_after`);
    if (row && row.hits > limit) wait = Math.max(wait ?? 0, row.retry_after);
  }
  return wait;
}

/**
 * The operator of a live session, refreshing its idle clock; undefined when the token is unknown,
 * ended, past its lifetime or idle too long, or its operator is disabled or changed password since.
 */
export async function sessionOperator(db: Database, token: string): Promise<Operator | undefined> {
  const [live] = await db.execute<{ id: string; username: string; role: OperatorRole }>(sql`
    update operator_sessions s set last_seen_at = now()
      from operators o
     where s.token_hash = ${sha256(token)}
       and o.id = s.operator_id
       and s.ended_at is null
       and s.expires_at > now()
       and s.last_seen_at > now() - make_interval(secs => ${SESSION_IDLE_SECONDS})
       and o.disabled_at is null
       and s.created_at >= o.password_changed_at
    returning o.id, o.username, o.role`);
  return live ? { id: live.id, username: live.username, role: live.role } : undefined;
}

/** Ends the session (sign-out); journaled when it was live. */
export async function signOut(db: Database, token: string): Promise<void> {
  await db.transaction(async (tx) => {
    const [ended] = await tx
      .update(operatorSessions)
      .set({ endedAt: sql`now()` })
      .where(and(eq(operatorSessions.tokenHash, sha256(token)), isNull(operatorSessions.endedAt)))
      .returning({ operatorId: operatorSessions.operatorId });
    if (!ended) return;
    const [who] = await tx.select({ username: operators.username }).from(operators).where(eq(operators.id, ended.operatorId));
    await journal(tx, { orderId: null, stream: 'operators', kind: 'operator.signed_out', data: { username: who?.username ?? null } });
  });
}
