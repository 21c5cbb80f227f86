/**
 * deploy/kubernetes/router-replicas.yaml (several active-active replicas) must agree with the router's
 * flags, with the RBAC manifest it depends on, and keep the properties the replica design relies on:
 * every replica discovers the workers itself, at least two replicas, a disruption budget, readiness
 * on /readyz (the picture rebuilt), a headless Service so Envoy sees only ready replicas.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { parseConfig, type Config } from '../../../src/config.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const yamlDocs = (rel: string): Yaml[] =>
  parseAllDocuments(readFileSync(path.join(ROOT, rel), 'utf8')).map((d) => d.toJS() as Yaml);

describe('deploy/kubernetes/router-replicas.yaml', () => {
  const docs = yamlDocs('deploy/kubernetes/router-replicas.yaml');
  const of = (kind: string) => docs.find((d) => d.kind === kind)!;
  const deployment = of('Deployment');
  const service = of('Service');
  const pdb = of('PodDisruptionBudget');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0] as Yaml;
  const parsed = parseConfig(container.args as string[], {});
  const cfg = (parsed as { config: Config }).config;

  it('runs at least two replicas, each discovering the workers from the Kubernetes API', () => {
    expect(parsed.help).toBe(false);
    expect(deployment.spec.replicas).toBeGreaterThanOrEqual(2);
    expect(cfg.serviceDiscovery).toBe(true);
    // No ZMQ discovery: heartbeats reach one address, i.e. one replica.
    expect(cfg.discoveryZmq).toBe('');
    const ports = Object.fromEntries((container.ports as Yaml[]).map((p) => [p.name, p.containerPort]));
    expect(ports.grpc).toBe(cfg.grpcPort);
    expect(ports.admin).toBe(cfg.adminPort);
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(cfg.drainTimeoutMs);
  });

  it('without KV events, seeds new prefixes where the other replicas do from the first request', () => {
    // An idle fleet shows no replica the others' load, so the alone margin would apply at a cold start.
    expect(cfg.kvEventSource).toEqual([]);
    expect(cfg.prefixHomeMarginAlone).toBe(cfg.prefixHomeMargin);
  });

  it('uses the ServiceAccount of rbac.yaml, in the namespace it watches', () => {
    const rbac = yamlDocs('deploy/kubernetes/rbac.yaml');
    const sa = rbac.find((d) => d.kind === 'ServiceAccount')!;
    expect(pod.serviceAccountName).toBe(sa.metadata.name);
    expect(pod.automountServiceAccountToken).toBe(true);
    expect(deployment.metadata.namespace).toBe(sa.metadata.namespace);
    expect(cfg.serviceDiscoveryNamespace).toBe(sa.metadata.namespace);
  });

  it('keeps a replica through voluntary disruptions and rollouts', () => {
    expect(pdb.spec.minAvailable).toBeGreaterThanOrEqual(1);
    expect(pdb.spec.selector).toEqual(deployment.spec.selector);
    expect(deployment.spec.strategy).toEqual({
      type: 'RollingUpdate',
      rollingUpdate: { maxUnavailable: 0, maxSurge: 1 },
    });
  });

  it('is ready on /readyz, and Envoy resolves only ready replicas (headless Service)', () => {
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' });
    expect(service.spec.clusterIP).toBe('None');
    expect(service.spec.publishNotReadyAddresses).toBeUndefined();
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
    expect((service.spec.ports as Yaml[]).find((p) => p.name === 'grpc')?.appProtocol).toBe(
      'kubernetes.io/h2c',
    );
  });
});
