/**
 * A request body as a JSON object, for the rewrites that change a top-level field before anything else
 * reads the body (model-rewrite.ts, worker-priority.ts). The parse is bounded in depth like the
 * request's own (inference-request.ts); a body that is not a JSON object reads as undefined and is
 * left to that parse, which reports its error.
 */
import { exceedsDepth } from './json-depth.js';
import { MAX_JSON_DEPTH } from './inference-request.js';

export function jsonObject(body: Buffer): Record<string, unknown> | undefined {
  let json: unknown;
  try {
    const text = body.toString('utf8');
    if (exceedsDepth(text, MAX_JSON_DEPTH)) return undefined;
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof json === 'object' && json !== null && !Array.isArray(json)
    ? (json as Record<string, unknown>)
    : undefined;
}
