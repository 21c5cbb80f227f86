/**
 * parseInferenceRequest is the boundary for client bodies: whatever arrives, it returns a parsed
 * request or throws a RouterError (never anything else), and what it returns is well-formed.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  MAX_JSON_DEPTH,
  parseInferenceRequest,
  type InferenceKind,
} from '../../../src/request/inference-request.js';
import { RouterError } from '../../../src/request/router-error.js';

const kindArb = fc.constantFrom<InferenceKind>('completions', 'chat');
const contentTypeArb = fc.option(
  fc.oneof(
    fc.constantFrom(
      'application/json',
      'application/json; charset=utf-8',
      'application/vnd.api+json',
      'text/plain',
    ),
    fc.string({ maxLength: 40 }),
  ),
  { nil: undefined },
);

function check(kind: InferenceKind, contentType: string | undefined, body: Uint8Array): void {
  let result;
  try {
    result = parseInferenceRequest(kind, contentType, Buffer.from(body));
  } catch (err) {
    if (!(err instanceof RouterError))
      throw new Error(`threw a non-RouterError: ${String(err)}`, { cause: err });
    expect(err.status === 400 || err.status === 415).toBe(true);
    expect(JSON.stringify(err.toJSON()).length).toBeLessThan(1000);
    return;
  }
  expect(result.kind).toBe(kind);
  expect(typeof result.model).toBe('string');
  // The body's model, or '' for none (vLLM serves a request without one with its own model); the
  // Messages API requires one.
  const named = (result.json as { model?: unknown }).model;
  expect(result.model).toBe(typeof named === 'string' ? named : '');
  if (kind === 'messages') expect(result.model.length).toBeGreaterThan(0);
  expect(typeof result.stream).toBe('boolean');
  expect(typeof result.text).toBe('string');
  expect(typeof result.json).toBe('object');
}

const json = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));

/** Bodies shaped like requests, with every field drawn from arbitrary JSON. */
const requestLikeArb = fc.record(
  {
    model: fc.oneof(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 })),
    stream: fc.oneof(fc.boolean(), fc.jsonValue({ maxDepth: 1 })),
    prompt: fc.oneof(
      fc.string(),
      fc.array(fc.string(), { maxLength: 4 }),
      fc.array(fc.integer({ min: -2, max: 50_000 }), { maxLength: 6 }),
      fc.array(fc.array(fc.nat(), { maxLength: 3 }), { maxLength: 3 }),
      fc.jsonValue({ maxDepth: 3 }),
    ),
    messages: fc.oneof(
      fc.array(
        fc.record(
          {
            role: fc.oneof(fc.constantFrom('user', 'system', 'assistant'), fc.jsonValue({ maxDepth: 1 })),
            content: fc.oneof(
              fc.string(),
              fc.constant(null),
              fc.array(
                fc.record(
                  {
                    type: fc.oneof(fc.constantFrom('text', 'image_url'), fc.jsonValue({ maxDepth: 1 })),
                    text: fc.jsonValue({ maxDepth: 1 }),
                  },
                  { requiredKeys: [] },
                ),
                { maxLength: 3 },
              ),
              fc.jsonValue({ maxDepth: 2 }),
            ),
          },
          { requiredKeys: [] },
        ),
        { maxLength: 4 },
      ),
      fc.jsonValue({ maxDepth: 3 }),
    ),
  },
  { requiredKeys: [] },
);

describe('parseInferenceRequest properties', () => {
  it('arbitrary bytes: a RouterError or a well-formed request', () => {
    fc.assert(
      fc.property(kindArb, contentTypeArb, fc.uint8Array({ maxLength: 300 }), (kind, ct, body) =>
        check(kind, ct, body),
      ),
      { numRuns: 500 },
    );
  });

  it('arbitrary JSON values', () => {
    fc.assert(
      fc.property(kindArb, fc.jsonValue(), (kind, value) => check(kind, 'application/json', json(value))),
      { numRuns: 500 },
    );
  });

  it('request-shaped objects with arbitrary field values', () => {
    fc.assert(
      fc.property(kindArb, requestLikeArb, (kind, value) => check(kind, 'application/json', json(value))),
      { numRuns: 1000 },
    );
  });

  it('JSON text with arbitrary bytes spliced in (truncation, garbage, bad UTF-8)', () => {
    fc.assert(
      fc.property(
        kindArb,
        requestLikeArb,
        fc.nat(),
        fc.uint8Array({ maxLength: 8 }),
        (kind, value, at, garbage) => {
          const bytes = json(value);
          const cut = at % (bytes.length + 1);
          const spliced = new Uint8Array([...bytes.subarray(0, cut), ...garbage, ...bytes.subarray(cut)]);
          check(kind, 'application/json', spliced);
          check(kind, 'application/json', bytes.subarray(0, cut));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('deep nesting and unbalanced brackets around the depth limit', () => {
    fc.assert(
      fc.property(
        kindArb,
        fc.integer({ min: 0, max: MAX_JSON_DEPTH * 4 }),
        fc.integer({ min: 0, max: MAX_JSON_DEPTH * 4 }),
        fc.constantFrom('[', '{"a":', '[{"b":'),
        fc.constantFrom(']', '}', ''),
        (kind, opens, closes, open, close) => {
          const body = `${close.repeat(closes)}{"model":"m","prompt":${open.repeat(opens)}1`;
          check(kind, 'application/json', new TextEncoder().encode(body));
        },
      ),
      { numRuns: 300 },
    );
  });
});
