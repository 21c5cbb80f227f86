/**
 * Every manifest under deploy/kubernetes/, handed to a REAL kube-apiserver (test/support/kube-cluster.ts)
 * that knows the custom kinds they use: the CRDs the projects themselves publish (Gateway API, the
 * Inference Extension, Envoy Gateway, Istio, Prometheus Operator; scripts/install-crds.sh fetches them).
 * Each document is created as a server-side dry run with strict field validation, so the apiserver applies
 * its whole check to it (the CRD's OpenAPI schema, its CEL rules, unknown or duplicate fields, the
 * built-in kinds' own validation) and stores nothing. A misspelt field, a wrong type or a rule a policy
 * breaks fails here, not on a user's cluster. New files under deploy/kubernetes/ are covered by name.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startKubeCluster, type KubeCluster } from '../../support/kube-cluster.js';
import { documents, installCrds, publishedCrds, type KubeObject } from '../../support/kube-crds.js';

const REPO = resolve(import.meta.dirname, '../../..');
const MANIFESTS = join(REPO, 'deploy/kubernetes');

type Obj = KubeObject;

let cluster: KubeCluster;
/** apiVersion + kind -> the resource's collection path (without a namespace) and whether it is namespaced. */
const resources = new Map<string, { plural: string; namespaced: boolean }>();

async function resourceOf(o: Obj): Promise<{ plural: string; namespaced: boolean }> {
  const key = `${o.apiVersion}/${o.kind}`;
  const known = resources.get(key);
  if (known) return known;
  const path = o.apiVersion.includes('/') ? `/apis/${o.apiVersion}` : `/api/${o.apiVersion}`;
  const res = await cluster.api('GET', path);
  if (res.status !== 200) throw new Error(`${key}: GET ${path} answered ${res.status} (CRD not installed?)`);
  const list = (res.body as { resources: Array<{ name: string; kind: string; namespaced: boolean }> })
    .resources;
  for (const r of list) {
    if (!r.name.includes('/'))
      resources.set(`${o.apiVersion}/${r.kind}`, { plural: r.name, namespaced: r.namespaced });
  }
  const found = resources.get(key);
  if (!found) throw new Error(`${key}: the apiserver serves no such kind`);
  return found;
}

/** Creates `o` as a dry run with strict field validation: the apiserver's whole check, nothing stored. */
async function dryRunCreate(o: Obj): Promise<{ status: number; message: string }> {
  const r = await resourceOf(o);
  const base = o.apiVersion.includes('/') ? `/apis/${o.apiVersion}` : `/api/${o.apiVersion}`;
  const ns = r.namespaced ? `/namespaces/${o.metadata.namespace ?? 'default'}` : '';
  const res = await cluster.api('POST', `${base}${ns}/${r.plural}?dryRun=All&fieldValidation=Strict`, o);
  const message = (res.body as { message?: string } | undefined)?.message ?? '';
  return { status: res.status, message };
}

beforeAll(async () => {
  const crds = publishedCrds();
  cluster = await startKubeCluster();
  await installCrds(cluster, crds);
  // The manifests' namespaces, for real: a dry run into a namespace that does not exist is refused.
  for (const name of ['llm', 'istio-system']) {
    const ns = await cluster.api('POST', '/api/v1/namespaces', {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name },
    });
    expect(ns.status).toBe(201);
  }
}, 240_000);

afterAll(async () => {
  await cluster?.close();
}, 60_000);

const files = readdirSync(MANIFESTS).filter((f) => f.endsWith('.yaml'));

describe('deploy/kubernetes manifests against the real apiserver and the published CRDs', () => {
  it('covers every manifest file', () => {
    expect(files.length).toBeGreaterThanOrEqual(8);
  });

  it.each(files)('%s: every document is accepted (dry run, strict field validation)', async (file) => {
    const objs = documents(readFileSync(join(MANIFESTS, file), 'utf8'));
    expect(objs.length).toBeGreaterThan(0);
    const refused: string[] = [];
    for (const o of objs) {
      const { status, message } = await dryRunCreate(o);
      if (status !== 201 && status !== 200)
        refused.push(`${o.kind} ${o.metadata.name}: ${status} ${message}`);
    }
    expect(refused).toEqual([]);
  });

  it("the Kubernetes objects of the guides' YAML examples (docs/*.md) are accepted too", async () => {
    const docs = join(REPO, 'docs');
    const objs = readdirSync(docs)
      .filter((f) => f.endsWith('.md'))
      .flatMap((f) => [...readFileSync(join(docs, f), 'utf8').matchAll(/```yaml\n([\s\S]*?)```/g)])
      .flatMap((m) => documents(m[1] as string))
      .filter((o) => typeof o.apiVersion === 'string');
    expect(objs.map((o) => o.kind)).toEqual(
      expect.arrayContaining(['InferencePool', 'EnvoyExtensionPolicy']),
    );
    const refused: string[] = [];
    for (const o of objs) {
      const { status, message } = await dryRunCreate(o);
      if (status !== 201 && status !== 200)
        refused.push(`${o.kind} ${o.metadata.name}: ${status} ${message}`);
    }
    expect(refused).toEqual([]);
  });

  it('refuses what the schemas forbid, so an accepted manifest means something', async () => {
    const byKind = new Map(
      files.flatMap((f) => documents(readFileSync(join(MANIFESTS, f), 'utf8'))).map((o) => [o.kind, o]),
    );
    const copy = (kind: string): Obj & { spec: Record<string, unknown> } => {
      const o = byKind.get(kind);
      if (!o) throw new Error(`no ${kind} under deploy/kubernetes`);
      return structuredClone(o) as Obj & { spec: Record<string, unknown> };
    };

    // An unknown field in an Envoy Gateway policy (strict validation names it).
    const policy = copy('EnvoyExtensionPolicy');
    (policy.spec.extProc as Array<Record<string, unknown>>)[0]!.failureModeAllow = true;
    const unknown = await dryRunCreate(policy);
    expect(unknown.status).toBe(400);
    expect(unknown.message).toContain('failureModeAllow');

    // A value of the wrong type in an Istio DestinationRule.
    const rule = copy('DestinationRule');
    rule.spec.trafficPolicy = { outlierDetection: { consecutiveLocalOriginFailures: 'two' } };
    const wrongType = await dryRunCreate(rule);
    expect(wrongType.status).toBe(422);
    expect(wrongType.message).toContain('consecutiveLocalOriginFailures');

    // A built-in kind's own validation (a Deployment whose selector does not match its pods).
    const deployment = copy('Deployment');
    deployment.spec.selector = { matchLabels: { app: 'something-else' } };
    const mismatch = await dryRunCreate(deployment);
    expect(mismatch.status).toBe(422);
    expect(mismatch.message).toContain('selector');
  });
});
