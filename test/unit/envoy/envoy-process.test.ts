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
});
