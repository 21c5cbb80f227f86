import { describe, expect, it } from 'vitest';
import {
  commonResponse,
  dynamicMetadata,
  errorReply,
  headerMutation,
  jsonImmediate,
  streamedBody,
} from '../../../src/extproc/mutations.js';
import { RouterError } from '../../../src/request/router-error.js';

describe('mutation builders', () => {
  it('sets headers as raw_value and overwrites (append false)', () => {
    const m = headerMutation({ 'x-gateway-destination-endpoint': '10.0.0.1:8000' }, [
      'x-prefiller-host-port',
    ]);
    expect(m?.set_headers?.[0]).toEqual({
      header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from('10.0.0.1:8000') },
      append: { value: false },
    });
    expect(m?.remove_headers).toEqual(['x-prefiller-host-port']);
  });

  it('returns no mutation when there is nothing to change', () => {
    expect(headerMutation()).toBeUndefined();
    expect(commonResponse()).toEqual({});
  });

  it('only clears the route cache together with a header mutation', () => {
    expect(commonResponse({ clearRouteCache: true })).toEqual({});
    expect(commonResponse({ set: { a: 'b' }, clearRouteCache: true }).clear_route_cache).toBe(true);
  });

  it('builds a JSON immediate response from a RouterError', () => {
    const r = errorReply(
      new RouterError('no_workers', 503, 'No workers available: 0 regular', 'service_unavailable'),
    );
    expect(r.immediate_response?.status.code).toBe(503);
    expect(JSON.parse((r.immediate_response?.body as Buffer).toString())).toEqual({
      error: { message: 'No workers available: 0 regular', type: 'service_unavailable', code: 'no_workers' },
    });
    expect(r.immediate_response?.headers?.set_headers?.[0]?.header.key).toBe('content-type');
    expect(jsonImmediate(400, {}, 'x').immediate_response?.details).toBe('vllm_router_x');
  });

  it('builds FULL_DUPLEX_STREAMED body chunks and envoy.lb metadata', () => {
    expect(streamedBody(Buffer.from('a'), true)).toEqual({
      streamed_response: { body: Buffer.from('a'), end_of_stream: true },
    });
    expect(dynamicMetadata('envoy.lb', { 'x-gateway-destination-endpoint': '1.2.3.4:5' })).toEqual({
      fields: {
        'envoy.lb': {
          structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: '1.2.3.4:5' } } },
        },
      },
    });
  });
});
