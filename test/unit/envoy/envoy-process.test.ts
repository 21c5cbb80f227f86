/** Tests that need Envoy must fail with instructions when it is missing, never skip. */
import { afterEach, describe, expect, it } from 'vitest';
import { ENVOY_MISSING_MESSAGE, findEnvoy, startEnvoy } from '../../../src/envoy/envoy-process.js';
import { PREFIX_KEY_HEADER, renderEnvoyConfig } from '../../../src/envoy/envoy-config.js';
import { parse } from 'yaml';

const saved = process.env.ENVOY_BIN;
afterEach(() => {
  if (saved === undefined) delete process.env.ENVOY_BIN;
  else process.env.ENVOY_BIN = saved;
});

describe('finding Envoy', () => {
  it('honours ENVOY_BIN and fails with install instructions when it does not exist', async () => {
    process.env.ENVOY_BIN = '/nonexistent/envoy';
    expect(() => findEnvoy()).toThrow(ENVOY_MISSING_MESSAGE);
    await expect(startEnvoy()).rejects.toThrow(/scripts\/install-envoy\.sh/);
  });

  it('finds the installed binary otherwise', () => {
    delete process.env.ENVOY_BIN;
    expect(findEnvoy()).toMatch(/envoy$/);
  });
});

describe('rendering envoy/envoy.yaml', () => {
  it('points the ext_proc cluster at the given routers and keeps the destination header', () => {
    const doc = parse(renderEnvoyConfig({ routers: [{ host: '127.0.0.1', port: 1234 }], listenerPort: 0 }));
    const router = doc.static_resources.clusters.find((c: { name: string }) => c.name === 'vllm_router');
    expect(
      router.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value,
    ).toBe(1234);
    const workers = doc.static_resources.clusters.find((c: { name: string }) => c.name === 'vllm_workers');
    expect(workers.original_dst_lb_config.http_header_name).toBe('x-gateway-destination-endpoint');
  });

  it('prefix affinity: a Lua key before ext_proc, hashed after the session key, bounded, never sent to a worker', () => {
    const doc = parse(
      renderEnvoyConfig({
        routers: [
          { host: '127.0.0.1', port: 1 },
          { host: '127.0.0.1', port: 2 },
        ],
        replicaAffinityHeader: 'x-session-id',
        replicaPrefixKey: true,
      }),
    );
    const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    const names = (hcm.http_filters as Array<{ name: string }>).map((f) => f.name);
    expect(names.indexOf('envoy.filters.http.lua')).toBe(names.indexOf('envoy.filters.http.ext_proc') - 1);
    const extProc = hcm.http_filters.find((f: { name: string }) => f.name === 'envoy.filters.http.ext_proc');
    expect(extProc.typed_config.grpc_service.initial_metadata).toEqual([
      { key: 'x-session-id', value: '%REQ(x-session-id)%' },
      { key: PREFIX_KEY_HEADER, value: `%REQ(${PREFIX_KEY_HEADER})%` },
    ]);
    const router = doc.static_resources.clusters.find((c: { name: string }) => c.name === 'vllm_router');
    const protocol =
      router.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    expect(protocol.hash_policy).toEqual([
      { header: { header_name: 'x-session-id' }, terminal: true },
      { header: { header_name: PREFIX_KEY_HEADER } },
    ]);
    expect(router.lb_policy).toBe('MAGLEV');
    expect(router.common_lb_config.consistent_hashing_lb_config.hash_balance_factor).toBeGreaterThan(100);
    expect(hcm.route_config.request_headers_to_remove).toContain(PREFIX_KEY_HEADER);
  });
});
