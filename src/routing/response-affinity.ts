/**
 * Response affinity for vLLM's Responses API: a follow-up goes to the worker that holds the response.
 *
 * vLLM keeps the responses it stored (`store`, default true) in the memory of the process that made
 * them. A request that continues one (`previous_response_id`) builds its prompt from that stored
 * conversation, and `GET /v1/responses/{id}`, `POST /v1/responses/{id}/cancel` and
 * `GET /v1/responses/{id}/input_items` read it: anywhere else they get a 404 "Response with id ... not
 * found". So the router must send them to the worker that answered the first request, and that worker
 * also holds the conversation's KV cache.
 *
 * Without any state of its own (so every router replica, and a restarted router, agrees): the router
 * names the response. vLLM takes a request's `request_id` (one of its documented extra parameters) as
 * the response id; when the client did not set one, the router sets it to
 *
 *   resp_<token><32 hex random>     token: 12 hex of SHA-256 over the chosen worker's URL
 *
 * and reads the token back from any later id. With P2P NCCL and MoRI-IO in P/D mode the response id is
 * the P/D request id instead (pd/kv-transfer.ts idInBody: those connectors read the peers' addresses
 * from it), whose random tail then starts with the decode worker's token (`pdIdTail`):
 *
 *   ___prefill_addr_<addr>___decode_addr_<addr>_<token><20 hex random>
 *
 * The token is opaque (no address is shown to clients),
 * the same on every replica, and a client-chosen `request_id` is left alone (its follow-ups are routed
 * by the policy as any request). The id is spliced into the body's bytes after its opening brace, so
 * the rest of the client's body reaches the worker byte for byte.
 *
 * A holder that is no longer a candidate (gone, unhealthy, serving another model) pins nothing: the
 * policy chooses, and that worker answers as vLLM does for an id it never stored.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Worker } from '../workers/worker.js';

const TOKEN_HEX = 12;
const ID_PATTERN = /^resp_([0-9a-f]{12})[0-9a-f]{32}$/;
const PATH_PREFIX = '/v1/responses/';
const PD_ID_PREFIX = '___prefill_addr_';
/** The end of a P/D request id the router made: `_<token><20 hex>` (read from the end: no backtracking). */
const PD_ID_TAIL = /_([0-9a-f]{12})[0-9a-f]{20}$/;

const tokens = new WeakMap<Worker, string>();

/** The 12-hex token of a worker (per Worker object: its key, URL and rank, does not change). */
export function workerToken(worker: Worker): string {
  let token = tokens.get(worker);
  if (token === undefined) {
    token = createHash('sha256').update(worker.key).digest('hex').slice(0, TOKEN_HEX);
    tokens.set(worker, token);
  }
  return token;
}

/** A fresh response id that names `worker` as its holder. */
export function responseIdFor(worker: Worker): string {
  return `resp_${workerToken(worker)}${randomUUID().replace(/-/g, '')}`;
}

/**
 * The random tail of a P/D request id (pd/kv-transfer.ts pdRequestId) that names `decode` as the holder
 * of the response named after it: 32 hex, as vLLM's proxies write it.
 */
export function pdIdTail(decode: Worker): string {
  return `${workerToken(decode)}${randomUUID().replace(/-/g, '').slice(0, 20)}`;
}

/** The holder token in a response id the router made, undefined for any other id. */
export function holderToken(responseId: string): string | undefined {
  const token = ID_PATTERN.exec(responseId)?.[1];
  if (token !== undefined || !responseId.startsWith(PD_ID_PREFIX)) return token;
  return PD_ID_TAIL.exec(responseId.slice(-34))?.[1];
}

/**
 * The response id a request must follow to its holder: `previous_response_id` of a
 * `POST /v1/responses`, or the `{id}` of `/v1/responses/{id}[/...]`; undefined for anything else.
 */
export function followedResponseId(path: string, previousResponseId: string | undefined): string | undefined {
  if (previousResponseId !== undefined) return previousResponseId;
  if (!path.startsWith(PATH_PREFIX)) return undefined;
  const rest = path.slice(PATH_PREFIX.length);
  const end = rest.search(/[/?]/);
  const id = end === -1 ? rest : rest.slice(0, end);
  return id.length > 0 ? id : undefined;
}

/** The candidate whose token is `token`, if any. */
export function holderAmong(workers: readonly Worker[], token: string): Worker | undefined {
  for (const w of workers) if (workerToken(w) === token) return w;
  return undefined;
}

const OPEN = '{'.charCodeAt(0);
const CLOSE = '}'.charCodeAt(0);

/**
 * `body` (a JSON object without `request_id`) with `"request_id": id` as its first member. Splices
 * bytes: the client's members follow unchanged. Undefined when the body does not start with an
 * object (after whitespace), which a parsed request body always does.
 */
export function withRequestId(body: Buffer, id: string): Buffer | undefined {
  let i = 0;
  while (i < body.length && isSpace(body[i]!)) i++;
  if (body[i] !== OPEN) return undefined;
  let j = i + 1;
  while (j < body.length && isSpace(body[j]!)) j++;
  const member = `"request_id":${JSON.stringify(id)}${body[j] === CLOSE ? '' : ','}`;
  return Buffer.concat([body.subarray(0, i + 1), Buffer.from(member), body.subarray(i + 1)]);
}

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}
