/** The objective's priority as the body's vLLM `priority` (request/worker-priority.ts). */
import { describe, expect, it } from 'vitest';
import { takesPriority, vllmPriority, withPriority } from '../../../src/request/worker-priority.js';

const body = (o: unknown) => Buffer.from(JSON.stringify(o));
const parsed = (b: Buffer | undefined) => (b === undefined ? undefined : JSON.parse(String(b)));

describe('vllmPriority', () => {
  it('negates: a more important objective runs earlier in vLLM (lower value)', () => {
    expect([vllmPriority(2), vllmPriority(-1), vllmPriority(0)]).toEqual([-2, 1, 0]);
    expect(Object.is(vllmPriority(0), 0)).toBe(true); // never -0
  });
});

describe('withPriority', () => {
  it('sets the top-level priority and keeps everything else', () => {
    const b = body({ model: 'm', messages: [{ role: 'user', content: 'priority' }], n: 1 });
    expect(parsed(withPriority(b, 3))).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'priority' }],
      n: 1,
      priority: 3,
    });
  });

  it('replaces a different priority; leaves an equal one unchanged (no write)', () => {
    expect(parsed(withPriority(body({ model: 'm', priority: 9 }), -1))).toEqual({ model: 'm', priority: -1 });
    expect(withPriority(body({ model: 'm', priority: -1 }), -1)).toBeUndefined();
  });

  it('removes the priority for 0, and does nothing when there is none', () => {
    expect(parsed(withPriority(body({ model: 'm', priority: 'high' }), 0))).toEqual({ model: 'm' });
    expect(withPriority(body({ model: 'm', prompt: 'x' }), 0)).toBeUndefined();
    // "priority" only inside the prompt: parsed, nothing to remove
    expect(withPriority(body({ model: 'm', prompt: '"priority"' }), 0)).toBeUndefined();
  });

  it('leaves a body that is not a JSON object to its own parse', () => {
    expect(withPriority(Buffer.from('{"model":'), 1)).toBeUndefined();
    expect(withPriority(Buffer.from('[1]'), 1)).toBeUndefined();
    expect(withPriority(Buffer.from('['.repeat(100) + ']'.repeat(100)), 1)).toBeUndefined();
  });
});

describe('takesPriority: the pooling requests that take a body priority', () => {
  it.each([
    ['POST', '/v1/embeddings', true],
    ['POST', '/v1/embeddings?x=1', true],
    ['POST', '/pooling', true],
    ['POST', '/classify', true],
    ['POST', '/score', true],
    ['POST', '/v1/score', true],
    ['POST', '/rerank', true],
    ['POST', '/v1/rerank', true],
    ['POST', '/v2/rerank', true],
    ['GET', '/v1/embeddings', false],
    ['POST', '/tokenize', false],
    ['POST', '/v1/audio/transcriptions', false],
    ['POST', '/v1/embeddings/x', false],
  ])('%s %s: %s', (method, path, want) => {
    expect(takesPriority(method, path)).toBe(want);
  });
});
