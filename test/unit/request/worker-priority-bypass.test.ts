/**
 * Ways a client could keep its own queue priority where the router must decide it
 * (request/worker-priority.ts): a key written with JSON escapes (the same key to vLLM's parser and to
 * JSON.parse), and a body nested deeper than the router's parse reads (a pooling request is not
 * parsed otherwise; vLLM's parser nests far deeper).
 */
import { describe, expect, it } from 'vitest';
import { RouterError } from '../../../src/request/router-error.js';
import { withPriority } from '../../../src/request/worker-priority.js';

const sent = (original: Buffer, edited: Buffer | undefined) =>
  JSON.parse(String(edited ?? original)) as Record<string, unknown>;

describe('withPriority(body, 0): escaped key', () => {
  it.each([
    '{"model":"m","prompt":"hi","priorit\\u0079":-100}',
    '{"model":"m","prompt":"hi","\\u0070riority":-100}',
    '{"model":"m","prompt":"hi","pr\\u0069\\u006Frity":-100}',
  ])('%s reaches vLLM without its priority', (text) => {
    const b = Buffer.from(text);
    expect(sent(b, withPriority(b, 0)).priority).toBeUndefined();
  });

  it('still skips the parse for a body that cannot name a priority (escapes of other letters)', () => {
    expect(withPriority(Buffer.from('{"model":"m","prompt":"caf\\u00e9 \\n \\u0041"}'), 0)).toBeUndefined();
  });
});

describe('withPriority on a body nested deeper than 64 levels', () => {
  const deep = '['.repeat(80) + ']'.repeat(80);
  it.each([0, -1])('priority %d: a JSON 400, never the client priority passed on', (priority) => {
    const b = Buffer.from(`{"model":"m","input":"hi","priority":-100,"x":${deep}}`);
    let err: unknown;
    try {
      withPriority(b, priority);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).status).toBe(400);
  });
  it('a deep body that names no priority and needs none is left alone, unparsed', () => {
    expect(withPriority(Buffer.from(`{"model":"m","x":${deep}}`), 0)).toBeUndefined();
  });
});
