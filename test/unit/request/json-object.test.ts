/**
 * a body that opens with a UTF-8 byte-order mark is accepted by the router's own parse
 * (inference-request.ts decodes with TextDecoder, which drops the BOM) and by vLLM (Python's
 * json.loads(bytes) reads it as utf-8-sig), but jsonObject (json-object.ts) decodes with
 * Buffer#toString, which keeps U+FEFF, so JSON.parse throws and both rewrites are silently skipped:
 * the gateway's model rewrite (the request goes to the client's model) and the priority strip (the
 * client keeps its own queue priority).
 */
import { describe, expect, it } from 'vitest';
import { withPriority } from '../../../src/request/worker-priority.js';
import { withModel } from '../../../src/request/model-rewrite.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
const withBom = (text: string) => Buffer.concat([BOM, Buffer.from(text)]);
/** What vLLM parses: Python's json.loads(bytes) drops a leading BOM. */
const sent = (original: Buffer, edited: Buffer | undefined) =>
  JSON.parse(new TextDecoder('utf-8').decode(edited ?? original)) as Record<string, unknown>;

describe('a body with a UTF-8 BOM', () => {
  it('is a valid request to the router itself', () => {
    const b = withBom('{"model":"a","prompt":"hi"}');
    expect(parseInferenceRequest('completions', 'application/json', b).model).toBe('a');
  });

  it('gets the model the gateway asked for', () => {
    const b = withBom('{"model":"a","prompt":"hi"}');
    expect(sent(b, withModel(b, 'b')).model).toBe('b');
  });

  it('loses the client priority when the request has no objective', () => {
    const b = withBom('{"model":"m","prompt":"hi","priority":-100}');
    expect(sent(b, withPriority(b, 0)).priority).toBeUndefined();
  });

  it('gets the objective priority', () => {
    const b = withBom('{"model":"m","prompt":"hi"}');
    expect(sent(b, withPriority(b, -1)).priority).toBe(-1);
  });
});
