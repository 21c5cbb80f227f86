import { describe, expect, it } from 'vitest';
import { routedReplies, type BodyMode } from '../../../src/extproc/body-mode-replies.js';
import { codecs } from '../../../src/extproc/codec.js';
import { DESTINATION_HEADER, PREFILLER_HEADER, REQUEST_ID_HEADER } from '../../../src/extproc/headers.js';
import { RoutedReplyCache, routingFor } from '../../../src/extproc/routed-reply-cache.js';

const A = { [DESTINATION_HEADER]: '10.0.0.1:8000' };
const B = { [DESTINATION_HEADER]: '10.0.0.2:8000' };

describe('RoutedReplyCache', () => {
  it.each<[string, BodyMode, 'headers' | 'body']>([
    ['buffered body', 'per_message', 'body'],
    ['routed on headers', 'per_message', 'headers'],
    ['FDS routed on headers', 'full_duplex', 'headers'],
  ])('%s: the same frozen replies per destination, equal to the per-request build', (_, mode, on) => {
    const cache = new RoutedReplyCache();
    const first = cache.get(mode, on, A, undefined);
    expect(first).toBeDefined();
    expect(cache.get(mode, on, { ...A }, undefined)).toBe(first);
    expect(cache.get(mode, on, B, undefined)).not.toBe(first);
    for (const r of first!) expect(Object.isFrozen(r)).toBe(true);
    const built = routedReplies(mode, on, routingFor(A, 'ignored:1'), undefined, undefined);
    // Same bytes on the wire as the reply built per request.
    const encode = codecs().processingResponse.encode;
    expect(first!.map((r) => Buffer.from(encode(r)))).toEqual(built.map((r) => Buffer.from(encode(r))));
  });

  it.each<[string, BodyMode, 'headers' | 'body', Record<string, string>, Buffer | undefined]>([
    ['P/D prefiller header', 'per_message', 'body', { ...A, [PREFILLER_HEADER]: '10.0.0.9:8000' }, undefined],
    ['request id header', 'per_message', 'body', { ...A, [REQUEST_ID_HEADER]: 'r1' }, undefined],
    ['rewritten body', 'per_message', 'body', A, Buffer.from('{}')],
    ['FDS body (the reply carries the body)', 'full_duplex', 'body', A, undefined],
    ['no destination header', 'per_message', 'body', {}, undefined],
  ])('%s: built per request (undefined)', (_, mode, on, set, rewritten) => {
    expect(new RoutedReplyCache().get(mode, on, set, rewritten)).toBeUndefined();
  });

  it('routingFor sets content-length for a rewritten body and keeps untrusted headers it sets', () => {
    const r = routingFor({ ...A, [PREFILLER_HEADER]: 'p:1' }, 'w:1', Buffer.from('12345'));
    expect(r.set).toEqual({ ...A, [PREFILLER_HEADER]: 'p:1', 'content-length': '5' });
    expect(r.remove).toEqual([]);
    expect(routingFor({}, 'w:1').metadata).toEqual({
      fields: { 'envoy.lb': { structValue: { fields: { [DESTINATION_HEADER]: { stringValue: 'w:1' } } } } },
    });
  });
});
