/**
 * The request objective's priority, passed on to the worker (`--forward-priority`): vLLM started with
 * `--scheduling-policy priority` orders its waiting queue by the request body's `priority`, LOWER values
 * first, where an InferenceObjective's priority is HIGHER for more important traffic. So the body
 * carries the objective's priority negated: an interactive objective (priority 1) becomes `priority: -1`
 * and goes ahead of the default (0), a batch objective (-1) becomes `priority: 1` and waits behind it.
 * The router then decides, not the client: a request with no objective (or priority 0) leaves with no
 * `priority` at all, whatever the client wrote (a client must not jump the queue by itself).
 *
 * Only inference requests whose body changes pay for a parse and a write: a body that must end up
 * without a priority and does not mention one is returned unchanged without being parsed.
 */
import { jsonObject } from './json-object.js';

/** vLLM's `priority` for an objective's priority (0 stays 0). */
export function vllmPriority(objectivePriority: number): number {
  return objectivePriority === 0 ? 0 : -objectivePriority;
}

const PRIORITY_KEY = Buffer.from('"priority"');

/**
 * `body` with its top-level `priority` set to `priority` (removed when 0); undefined when nothing
 * changes or the body is not a JSON object (its own parse reports that).
 */
export function withPriority(body: Buffer, priority: number): Buffer | undefined {
  if (priority === 0 && body.indexOf(PRIORITY_KEY) === -1) return undefined;
  const obj = jsonObject(body);
  if (obj === undefined) return undefined;
  if (priority === 0) {
    if (!('priority' in obj)) return undefined;
    delete obj.priority;
  } else {
    if (obj.priority === priority) return undefined;
    obj.priority = priority;
  }
  return Buffer.from(JSON.stringify(obj));
}
