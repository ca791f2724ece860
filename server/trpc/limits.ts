/**
 * The endpoint's batching bound, in a file of its own (no imports) so the browser's client can share
 * it with the server without pulling any server code into the page's bundle.
 *
 * Ten: the page batches at most a handful of queries at once (catalogue, an order or two); ten leaves
 * room while one GET can no longer fan out into hundreds of database reads.
 */
export const MAX_QUERY_BATCH_SIZE = 10;
