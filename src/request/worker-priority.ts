/**
 * The request objective's priority, passed on to the worker (`--forward-priority`): vLLM started with
 * `--scheduling-policy priority` orders its waiting queue by the request body's `priority`, LOWER values
 * first, where an InferenceObjective's priority is HIGHER for more important traffic. So the body
 * carries the objective's priority negated: an interactive objective (priority 1) becomes `priority: -1`
 * and goes ahead of the default (0), a batch objective (-1) becomes `priority: 1` and waits behind it.
 * The router then decides, not the client: a request with no objective (or priority 0) leaves with no
 * `priority` at all, whatever the client wrote (a client must not jump the queue by itself).
 *
 * Which requests: the inference requests (completions, chat, responses) and vLLM's pooling requests
 * (`/v1/embeddings`, `/pooling`, `/classify`, `/score`, `/rerank`, and their versioned paths), whose
 * bodies take the same `priority` (`PRIORITY_PATHS`).
 *
 * Only requests whose body changes pay for a parse and a write: a body that must end up without a
 * priority and does not mention one is returned unchanged without being parsed.
 */
import { MAX_JSON_DEPTH } from './inference-request.js';
import { jsonObject, objectTooDeep } from './json-object.js';
import { RouterError } from './router-error.js';

/** vLLM's pooling endpoints: their requests take a `priority` as the inference requests' do. */
const PRIORITY_PATHS: ReadonlySet<string> = new Set([
  '/v1/embeddings',
  '/pooling',
  '/classify',
  '/score',
  '/v1/score',
  '/rerank',
  '/v1/rerank',
  '/v2/rerank',
]);

/** Whether a request that is not an inference request takes a body `priority` (a pooling request). */
export function takesPriority(method: string, path: string): boolean {
  if (method !== 'POST') return false;
  const q = path.indexOf('?');
  return PRIORITY_PATHS.has(q === -1 ? path : path.slice(0, q));
}

/** vLLM's `priority` for an objective's priority (0 stays 0). */
export function vllmPriority(objectivePriority: number): number {
  return objectivePriority === 0 ? 0 : -objectivePriority;
}

const PRIORITY_KEY = Buffer.from('"priority"');
const UNICODE_ESCAPE = Buffer.from('\\u00');

/**
 * Whether `body` may have a member named `priority`: it holds `"priority"`, or a `\u00XX` escape of
 * one of its letters (`"priorit\u0079"` is the same key to vLLM's parser). Conservative: a false
 * positive only costs a parse.
 */
function mayNamePriority(body: Buffer): boolean {
  if (body.indexOf(PRIORITY_KEY) !== -1) return true;
  for (let i = body.indexOf(UNICODE_ESCAPE); i !== -1; i = body.indexOf(UNICODE_ESCAPE, i + 1)) {
    const hi = body[i + 4];
    const lo = (body[i + 5] ?? 0) | 0x20; // lower-case hex letter
    // p r t y (0x70 0x72 0x74 0x79), i o (0x69 0x6f)
    if (hi === 0x37 && (lo === 0x30 || lo === 0x32 || lo === 0x34 || lo === 0x39)) return true;
    if (hi === 0x36 && (lo === 0x39 || lo === 0x66)) return true;
  }
  return false;
}

/**
 * `body` with its top-level `priority` set to `priority` (removed when 0); undefined when nothing
 * changes or the body is not a JSON object (its own parse reports that). Throws a 400 RouterError for
 * a body that may name a priority but cannot be read within the parse's bounds (nested deeper than
 * MAX_JSON_DEPTH): a pooling request's body is not parsed otherwise, and vLLM's parser nests far
 * deeper, so it would reach the worker with the client's own priority.
 */
export function withPriority(body: Buffer, priority: number): Buffer | undefined {
  if (priority === 0 && !mayNamePriority(body)) return undefined;
  const obj = jsonObject(body);
  if (obj === undefined) {
    if (objectTooDeep(body)) {
      throw new RouterError(
        'invalid_body',
        400,
        `request body nested deeper than ${MAX_JSON_DEPTH} levels: its "priority" cannot be checked`,
      );
    }
    return undefined;
  }
  if (priority === 0) {
    if (!('priority' in obj)) return undefined;
    delete obj.priority;
  } else {
    if (obj.priority === priority) return undefined;
    obj.priority = priority;
  }
  return Buffer.from(JSON.stringify(obj));
}
