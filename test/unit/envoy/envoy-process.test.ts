/** Tests that need Envoy must fail with instructions when it is missing, never skip. */
import { afterEach, describe, expect, it } from 'vitest';
import { ENVOY_MISSING_MESSAGE, findEnvoy, startEnvoy } from '../../../src/envoy/envoy-process.js';
import { renderEnvoyConfig } from '../../../src/envoy/envoy-config.js';
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

  it('renders plain Envoy defaults for the ext_proc stream end on request (no graceful close, no rotation)', () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const cluster = (doc: any) =>
      doc.static_resources.clusters.find((c: { name: string }) => c.name === 'vllm_router')
        .typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    const recommended = parse(renderEnvoyConfig({}));
    expect(recommended.layered_runtime).toBeDefined();
    expect(cluster(recommended).common_http_protocol_options.max_requests_per_connection).toBe(500);
    const plain = parse(renderEnvoyConfig({ envoyDefaults: true }));
    expect(plain.layered_runtime).toBeUndefined();
    expect(cluster(plain).common_http_protocol_options).toBeUndefined();
    expect(cluster(plain).explicit_http_config.http2_protocol_options).toBeDefined();
  });
});
