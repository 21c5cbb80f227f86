/**
 * A request body as a JSON object, for the rewrites that change a top-level field before anything else
 * reads the body (model-rewrite.ts, worker-priority.ts). The parse is bounded in depth like the
 * request's own (inference-request.ts); a body that is not a JSON object reads as undefined and is
 * left to that parse, which reports its error.
 */
import { exceedsDepth } from './json-depth.js';
import { MAX_JSON_DEPTH } from './inference-request.js';

/**
 * Decoded as the request's own parse decodes it (inference-request.ts) and as vLLM's json.loads(bytes)
 * does: a leading byte-order mark dropped, a body that is not UTF-8 refused (Buffer#toString would
 * keep the BOM, so JSON.parse throws and the rewrite is skipped on a body everything else accepts).
 */
const utf8 = new TextDecoder('utf-8', { fatal: true });

export function jsonObject(body: Buffer): Record<string, unknown> | undefined {
  let json: unknown;
  try {
    const text = utf8.decode(body);
    if (exceedsDepth(text, MAX_JSON_DEPTH)) return undefined;
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof json === 'object' && json !== null && !Array.isArray(json)
    ? (json as Record<string, unknown>)
    : undefined;
}

/**
 * Whether `body` opens a JSON object (after white space) nested deeper than the parse's bound
 * (MAX_JSON_DEPTH): an object jsonObject would not read, though it may well be valid.
 */
export function objectTooDeep(body: Buffer): boolean {
  try {
    const text = utf8.decode(body);
    return text.trimStart().startsWith('{') && exceedsDepth(text, MAX_JSON_DEPTH);
  } catch {
    return false;
  }
}
