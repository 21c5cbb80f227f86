/**
 * The deployment guides stay usable: every relative link resolves, every YAML example parses, and each
 * guide names the settings a user must align with the router when dropping it into an existing mesh
 * (the header and metadata names come from the code, not from a copy).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { DESTINATION_HEADER, LB_METADATA_NAMESPACE } from '../../../src/extproc/headers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const GUIDES = ['deploy-envoy.md', 'deploy-envoy-gateway.md', 'deploy-istio.md', 'deploy-kubernetes.md'];
const read = (name: string) => readFileSync(path.join(ROOT, 'docs', name), 'utf8');

/** Settings each guide must name, beyond the links. */
const MUST_NAME: Record<string, readonly string[]> = {
  'deploy-envoy.md': [
    DESTINATION_HEADER,
    LB_METADATA_NAMESPACE,
    'failure_mode_allow',
    'message_timeout',
    '--prefill-timeout-ms',
    'per_connection_buffer_limit_bytes',
    '--max-body-bytes',
    'timeout: 0s',
    'stream_idle_timeout',
    'circuit_breakers',
    'http2_protocol_options',
    'ORIGINAL_DST',
    'receiving_namespaces',
    'grpc_health_check',
    '--grpc-port',
  ],
  'deploy-envoy-gateway.md': [
    'EnvoyExtensionPolicy',
    'EnvoyPatchPolicy',
    'InferencePool',
    'failOpen: false',
    'messageTimeout',
    'writableNamespaces',
    'FullDuplexStreamed',
    DESTINATION_HEADER,
    'enableEnvoyPatchPolicy',
  ],
  'deploy-istio.md': [
    'EnvoyFilter',
    'InferencePool',
    'cluster_name',
    'message_timeout',
    'mTLS',
    DESTINATION_HEADER,
  ],
  'deploy-kubernetes.md': [
    '/healthz',
    '/readyz',
    'startupProbe',
    'PodMonitor',
    '--discovery-zmq',
    'proxy_port',
  ],
};

describe.each(GUIDES)('docs/%s', (name) => {
  const text = read(name);

  it('links only to files that exist', () => {
    const targets = [...text.matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)]
      .map((m) => m[1] as string)
      .filter((t) => !/^[a-z]+:/.test(t));
    for (const t of targets) expect(existsSync(path.resolve(ROOT, 'docs', t)), t).toBe(true);
  });

  it('has YAML examples that parse', () => {
    for (const block of text.matchAll(/```yaml\n([\s\S]*?)```/g)) {
      for (const doc of parseAllDocuments(block[1] as string)) expect(doc.errors).toEqual([]);
    }
  });

  it('names the settings to align with the router', () => {
    for (const term of MUST_NAME[name] ?? []) expect(text, term).toContain(term);
  });
});
