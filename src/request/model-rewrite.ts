/**
 * The endpoint picker's model-name rewrite: a gateway that sets `x-gateway-model-name-rewrite` on a
 * request (an HTTPRoute rule's header filter, e.g. 10% of `food-review` to the adapter
 * `food-review-2` for a canary) asks for the request to be served as that model. The body's top-level
 * `model` becomes that name before anything reads it, so routing, the prefill leg and the worker all
 * see the target model, as with the Gateway API Inference Extension's endpoint picker.
 *
 * The body is parsed and written again (only requests that carry the header pay for it). A body that
 * is not a JSON object is left as it is: its own parse reports the error. A `multipart/form-data` body
 * (vLLM's audio uploads, `/v1/audio/transcriptions` and `/translations`) gets its `model` form field
 * rewritten in place, the file's bytes untouched (multipart-field.ts); a malformed form is left as it is.
 */
import { jsonObject } from './json-object.js';
import { formBoundary, withFormField } from './multipart-field.js';

export { MODEL_REWRITE_HEADER } from '../extproc/headers.js';

/**
 * `body` with its top-level `model` (a form's `model` field, when `contentType` is a form's) set to
 * `model`; undefined when the body is not a JSON object (not a well-formed form).
 */
export function withModel(body: Buffer, model: string, contentType?: string): Buffer | undefined {
  const boundary = formBoundary(contentType);
  if (boundary !== undefined) return withFormField(body, boundary, 'model', model);
  const json = jsonObject(body);
  if (json === undefined) return undefined;
  json.model = model;
  return Buffer.from(JSON.stringify(json));
}
