/**
 * endpointSubset on a ProcessingRequest as the codec really decodes it: protobufjs puts `null` (not
 * undefined) on every unset oneof member of google.protobuf.Value, so a single-string subset hint
 * (which lb-metadata.ts documents as accepted) must not be read as a list.
 */
import { describe, expect, it } from 'vitest';
import { codecs } from '../../../src/extproc/codec.js';
import { endpointSubset, servedEndpoint } from '../../../src/extproc/lb-metadata.js';
import type { ProcessingRequest } from '../../../src/extproc/proto.js';

function decoded(value: unknown, ns = 'envoy.lb.subset_hint', key = 'x-gateway-destination-endpoint-subset') {
  const c = codecs().processingRequest;
  const msg = {
    request_headers: { headers: { headers: [] } },
    metadata_context: { filter_metadata: { [ns]: { fields: { [key]: value } } } },
  } as unknown as ProcessingRequest;
  return c.decode(c.encode(msg)).metadata_context;
}

describe('lb-metadata on decoded messages', () => {
  it('reads a single-string subset hint', () => {
    expect(endpointSubset(decoded({ stringValue: '10.0.0.1:8000, 10.0.0.2:8000' }))).toEqual(
      new Set(['10.0.0.1:8000', '10.0.0.2:8000']),
    );
  });

  it('reads a list subset hint', () => {
    const list = { listValue: { values: [{ stringValue: '10.0.0.1:8000' }, { numberValue: 3 }] } };
    expect(endpointSubset(decoded(list))).toEqual(new Set(['10.0.0.1:8000']));
  });

  it('reads the served endpoint', () => {
    const md = decoded({ stringValue: '10.0.0.2:8000' }, 'envoy.lb', 'x-gateway-destination-endpoint-served');
    expect(servedEndpoint(md)).toBe('10.0.0.2:8000');
  });
});
