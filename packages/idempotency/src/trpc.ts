/**
 * The tRPC adapter of the idempotency core: the only tRPC-aware glue, and it knows nothing of the
 * checkout. A procedure's context carries what the guard needs (`ctx.idempotency`: the store, the
 * caller's scope, the raw Idempotency-Key, a response holder), and the resolver is wrapped:
 *
 *   createOrder: procedure.input(orderInput).mutation(
 *     idempotentOnePhase(({ ctx, input }) => async (tx) => respond(201, await insertOrder(tx, input))),
 *   )
 *   pay: procedure.input(payInput).mutation(
 *     idempotent(async ({ ctx, input, key }) => {
 *       … key.atomicPhase(async (tx) => { …; return respond(201, body) }) …
 *       return phase.response; // the value that is stored, and replayed to every retry
 *     }),
 *   )
 *
 * One call to executeIdempotent per request. The resolver returns the stored response; a replay
 * returns the stored one without running the resolver; a stored error status (a 402 decline) is
 * thrown as a TRPCError whose cause (StoredErrorResponse) carries the stored body, identical on every
 * replay. Only public tRPC API is used: the wrapper is an ordinary resolver.
 */
import { TRPCError } from '@trpc/server';
import {
  executeIdempotent,
  IdempotencyError,
  KeyReusedError,
  RequestInProgressError,
  refusalHeaders,
  refusalOf,
  type IdempotencyOptions,
  type IdempotencyStore,
  type IdempotentHandler,
  type IdempotentResult,
  type OnePhaseHandler,
  type OwnedKey,
  type Responded,
  type StoredResponse,
} from './index.js';

/**
 * Status and headers a procedure wants on its HTTP response. A mutable holder, because tRPC copies
 * `ctx` at every `next({ ctx })`: a status set on a copy would be lost, a field of this object is not.
 * The HTTP handler's `responseMeta` reads it.
 */
export interface ResponseMetaHolder {
  status?: number;
  headers: Record<string, string>;
}

/** What the guard did with one request, for logs, metrics and audit trails. */
export type RequestOutcome = 'claimed' | 'taken_over' | 'replayed' | 'in_progress' | 'mismatch' | 'released' | 'refused' | 'unguarded';

export interface GuardedRequest {
  path: string;
  input: unknown;
  /** The raw Idempotency-Key header, as received. */
  key: string | null;
}

/** Optional observation points; none of them may change the answer. */
export interface IdempotencyHooks {
  /** Before the claim. */
  beforeClaim?(request: GuardedRequest): Promise<void>;
  /** After the claim, before the resolver runs. */
  afterClaim?(request: GuardedRequest): Promise<void>;
  /** The answer is committed (or found), and has not left yet. */
  afterCommit?(request: GuardedRequest, result: IdempotentResult): Promise<void>;
  /** Once per request: what the guard did and the status that goes back. Failures are only logged. */
  onOutcome?(request: GuardedRequest, outcome: RequestOutcome, status: number, body: unknown): Promise<void>;
}

export interface IdempotencyContext<Tx> {
  store: IdempotencyStore<Tx>;
  options?: IdempotencyOptions;
  /** Who may see a stored answer: one customer's keys never meet another's (e.g. `customer:{id}`). */
  scope: string;
  /** The Idempotency-Key header (null when absent: the guard answers 400). */
  key: string | null;
  response: ResponseMetaHolder;
  hooks?: IdempotencyHooks;
}

/**
 * A stored error response (e.g. the 402 of a decline) travelling as the cause of a TRPCError, so the
 * error formatter can put its reason and details into the body, identically the first time and on
 * every replay.
 */
export class StoredErrorResponse extends Error {
  constructor(
    readonly status: number,
    readonly body: { reason?: string; message?: string } & Record<string, unknown>,
  ) {
    super(body.message ?? `Request failed with status ${status}`);
    this.name = 'StoredErrorResponse';
  }
}

type TRPCErrorCode = ConstructorParameters<typeof TRPCError>[0]['code'];

const CODE_BY_STATUS: Record<number, TRPCErrorCode> = {
  400: 'BAD_REQUEST',
  401: 'UNAUTHORIZED',
  402: 'PAYMENT_REQUIRED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  413: 'PAYLOAD_TOO_LARGE',
  422: 'UNPROCESSABLE_CONTENT',
  429: 'TOO_MANY_REQUESTS',
  502: 'BAD_GATEWAY',
  503: 'SERVICE_UNAVAILABLE',
  504: 'GATEWAY_TIMEOUT',
};

/** The tRPC error code whose HTTP status is `status` (tRPC derives the status from the code). */
export function trpcCodeFor(status: number): TRPCErrorCode {
  return CODE_BY_STATUS[status] ?? (status >= 500 ? 'INTERNAL_SERVER_ERROR' : 'BAD_REQUEST');
}

/** The transaction handle a context's store gives its phases. */
type TransactionOf<TCtx> = TCtx extends { idempotency: IdempotencyContext<infer Tx> } ? Tx : never;

type SuccessStatus = 200 | 201 | 202 | 203 | 204;

/** The body a resolver's response carries when it succeeds: what the client receives as data. */
export type SuccessBody<R> =
  R extends StoredResponse<infer B, infer S> ? (number extends S ? B : S extends SuccessStatus ? B : never) : never;

/**
 * Wraps a mutation whose work is one database transaction (a one-phase mutation): `build` may validate
 * and refuse, but must not touch anything (it runs before the key is looked up), and returns the
 * transaction's work, which responds. The key's read and write ride with its BEGIN and COMMIT.
 */
export function idempotentOnePhase<TCtx extends { idempotency: IdempotencyContext<TransactionOf<TCtx>> }, TInput, R extends StoredResponse>(
  build: (opts: { ctx: TCtx; input: TInput }) => (tx: TransactionOf<TCtx>) => Promise<Responded<R>>,
): (opts: { ctx: TCtx; input: TInput; path: string }) => Promise<SuccessBody<R>> {
  return ({ ctx, input, path }) => {
    const onePhase: OnePhaseHandler<TransactionOf<TCtx>>['onePhase'] = build({ ctx, input });
    return guarded<TransactionOf<TCtx>, R>(ctx.idempotency, input, path, { onePhase });
  };
}

/**
 * Wraps a mutation in several phases (a gateway call between transactions): `build` may validate and
 * refuse, but must not touch anything (it runs before the key is claimed), and returns the handler
 * that runs with the key it owns and returns the response its last phase committed.
 */
export function idempotentPhases<TCtx extends { idempotency: IdempotencyContext<TransactionOf<TCtx>> }, TInput, R extends StoredResponse>(
  build: (opts: { ctx: TCtx; input: TInput }) => (key: OwnedKey<TransactionOf<TCtx>>) => Promise<R>,
): (opts: { ctx: TCtx; input: TInput; path: string }) => Promise<SuccessBody<R>> {
  return ({ ctx, input, path }) => guarded<TransactionOf<TCtx>, R>(ctx.idempotency, input, path, build({ ctx, input }));
}

/**
 * `idempotentPhases` for a resolver with nothing to check first: it gets the key it owns
 * (`key.atomicPhase` for work that must commit with its recovery point or answer) and returns the
 * response to store: the one its last phase committed, or one to be stored now.
 */
export function idempotent<TCtx extends { idempotency: IdempotencyContext<TransactionOf<TCtx>> }, TInput, R extends StoredResponse>(
  resolver: (opts: { ctx: TCtx; input: TInput; key: OwnedKey<TransactionOf<TCtx>> }) => Promise<R>,
): (opts: { ctx: TCtx; input: TInput; path: string }) => Promise<SuccessBody<R>> {
  return idempotentPhases(
    ({ ctx, input }) =>
      (key) =>
        resolver({ ctx, input, key }),
  );
}

async function guarded<Tx, R extends StoredResponse>(
  guard: IdempotencyContext<Tx>,
  input: unknown,
  path: string,
  handler: IdempotentHandler<Tx>,
): Promise<SuccessBody<R>> {
  const request: GuardedRequest = { path, input, key: guard.key };
  const hooks = guard.hooks ?? {};
  await hooks.beforeClaim?.(request);
  let acquisition: OwnedKey<Tx>['acquisition'] | undefined;
  const watched: IdempotentHandler<Tx> =
    typeof handler === 'function'
      ? (key) => {
          acquisition = key.acquisition;
          return handler(key);
        }
      : handler;
  const afterClaim = async () => {
    acquisition ??= 'new'; // owned from here on: a failure now gives the key up ('released')
    await hooks.afterClaim?.(request);
  };
  let result: IdempotentResult;
  try {
    result = await executeIdempotent<Tx>(
      guard.store,
      { scope: guard.scope, key: guard.key, path, input, afterClaim },
      watched,
      guard.options,
    );
  } catch (error) {
    // 409 in progress, 422 mismatch, 400 bad key, or the resolver failed and the key was released.
    await report(hooks, request, outcomeOfError(error, acquisition), statusOf(error), undefined);
    if (error instanceof IdempotencyError) {
      // As the status the guard means (400, 409, 422), not a 500.
      Object.assign(guard.response.headers, refusalHeaders(error));
      throw new TRPCError({ code: trpcCodeFor(error.httpStatus), message: error.message, cause: error });
    }
    throw error;
  }
  const unguarded = guard.key == null && guard.options?.missingKey === 'run_unguarded';
  const outcome: RequestOutcome = result.replayed
    ? 'replayed'
    : unguarded
      ? 'unguarded'
      : acquisition === 'new' || acquisition === undefined
        ? 'claimed'
        : 'taken_over';
  await report(hooks, request, outcome, result.status, result.body);
  await hooks.afterCommit?.(request, result);

  guard.response.status = result.status;
  if (result.replayed) guard.response.headers['Idempotency-Replayed'] = 'true';
  if (result.status >= 400) {
    throw new TRPCError({
      code: trpcCodeFor(result.status),
      cause: new StoredErrorResponse(result.status, (result.body ?? {}) as Record<string, unknown>),
    });
  }
  // The stored body: the resolver's own answer, or the same answer replayed.
  return result.body as SuccessBody<R>;
}

function outcomeOfError(error: unknown, acquisition: string | undefined): RequestOutcome {
  if (error instanceof RequestInProgressError) return 'in_progress';
  if (error instanceof KeyReusedError) return 'mismatch';
  // Thrown before the key was claimed (a missing or malformed key): nothing was claimed or released.
  return acquisition === undefined ? 'refused' : 'released';
}

function statusOf(error: unknown): number {
  const refused = refusalOf(error);
  if (refused) return refused.httpStatus;
  if (error instanceof TRPCError) return error.code === 'INTERNAL_SERVER_ERROR' ? 500 : 400;
  return 500;
}

async function report(
  hooks: IdempotencyHooks,
  request: GuardedRequest,
  outcome: RequestOutcome,
  status: number,
  body: unknown,
): Promise<void> {
  try {
    await hooks.onOutcome?.(request, outcome, status, body);
  } catch (error) {
    // The answer stands; only its record is missing.
    console.error('[idempotency] the outcome hook failed', error);
  }
}
