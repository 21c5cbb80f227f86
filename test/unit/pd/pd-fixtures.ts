import type { RouteRequest } from '../../../src/extproc/dispatch.js';

/** A small non-streamed completion, parsed, as the P/D dispatcher gets it. */
export const COMPLETION_REQ: RouteRequest = {
  method: 'POST',
  path: '/v1/completions',
  headers: {},
  inference: {
    kind: 'completions',
    model: 'm',
    stream: false,
    text: 'hello',
    json: { model: 'm', prompt: 'hello', max_tokens: 4 },
    promptBody: { model: 'm', prompt: 'hello', max_tokens: 4 },
    namesFreeResponse: false,
  },
};
