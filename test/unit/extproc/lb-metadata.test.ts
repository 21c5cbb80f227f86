/**
 * The endpoint-picker protocol's metadata from the gateway (extproc/lb-metadata.ts), in the shapes
 * protobufjs decodes google.protobuf.Struct into.
 */
import { describe, expect, it } from 'vitest';
import { endpointSubset, servedEndpoint } from '../../../src/extproc/lb-metadata.js';
import type { DecodedValue, MetadataContext } from '../../../src/extproc/proto.js';

const md = (ns: string, key: string, value: DecodedValue): MetadataContext => ({
  filter_metadata: { [ns]: { fields: { [key]: value } } },
});
const list = (...values: Array<DecodedValue | undefined>): DecodedValue => ({ listValue: { values } });

describe('servedEndpoint', () => {
  it('reads envoy.lb x-gateway-destination-endpoint-served', () => {
    const m = md('envoy.lb', 'x-gateway-destination-endpoint-served', { stringValue: ' 10.0.0.2:8000 ' });
    expect(servedEndpoint(m)).toBe('10.0.0.2:8000');
  });

  it('is undefined without it, empty, in another namespace, or not a string', () => {
    expect(servedEndpoint(undefined)).toBeUndefined();
    expect(servedEndpoint(null)).toBeUndefined();
    expect(servedEndpoint({})).toBeUndefined();
    expect(servedEndpoint(md('envoy.lb', 'x-gateway-destination-endpoint-served', { stringValue: '' }))).toBe(
      undefined,
    );
    expect(servedEndpoint(md('other', 'x-gateway-destination-endpoint-served', { stringValue: 'a:1' }))).toBe(
      undefined,
    );
    expect(servedEndpoint(md('envoy.lb', 'x-gateway-destination-endpoint-served', list()))).toBeUndefined();
  });
});

describe('endpointSubset', () => {
  const ns = 'envoy.lb.subset_hint';
  const key = 'x-gateway-destination-endpoint-subset';

  it('reads the list the protocol writes', () => {
    const m = md(ns, key, list({ stringValue: '10.0.0.1:8000' }, { stringValue: '10.0.0.2:8000' }));
    expect(endpointSubset(m)).toEqual(new Set(['10.0.0.1:8000', '10.0.0.2:8000']));
  });

  it('accepts one string, comma-separated too; skips entries that are not strings', () => {
    expect(endpointSubset(md(ns, key, { stringValue: '10.0.0.1:8000, 10.0.0.2:8000' }))).toEqual(
      new Set(['10.0.0.1:8000', '10.0.0.2:8000']),
    );
    const mixed = list({ stringValue: '10.0.0.1:8000' }, { structValue: {} }, undefined, {
      stringValue: ' ',
    });
    expect(endpointSubset(md(ns, key, mixed))).toEqual(new Set(['10.0.0.1:8000']));
  });

  it('an empty list is an empty subset (nothing allowed); no key is no subset (anything allowed)', () => {
    expect(endpointSubset(md(ns, key, list()))).toEqual(new Set());
    expect(endpointSubset(md(ns, 'other', list({ stringValue: 'a:1' })))).toBeUndefined();
    expect(endpointSubset(undefined)).toBeUndefined();
  });
});
