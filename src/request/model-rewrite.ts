/**
 * The endpoint picker's model-name rewrite: a gateway that sets `x-gateway-model-name-rewrite` on a
 * request (an HTTPRoute rule's header filter, e.g. 10% of `food-review` to the adapter
 * `food-review-2` for a canary) asks for the request to be served as that model. The body's top-level
 * `model` becomes that name before anything reads it, so routing, the prefill leg and the worker all
 * see the target model, as with the Gateway API Inference Extension's endpoint picker.
 *
 * The body is parsed and written again (only requests that carry the header pay for it). A body that
 * is not a JSON object is left as it is: its own parse reports the error.
 */
import { jsonObject } from './json-object.js';

export { MODEL_REWRITE_HEADER } from '../extproc/headers.js';

/** `body` with its top-level `model` set to `model`; undefined when the body is not a JSON object. */
export function withModel(body: Buffer, model: string): Buffer | undefined {
  const json = jsonObject(body);
  if (json === undefined) return undefined;
  json.model = model;
  return Buffer.from(JSON.stringify(json));
}
