/**
 * The CRDs scripts/install-crds.sh fetches (the projects' own published files), installed into a test
 * kube-apiserver (kube-cluster.ts) and waited for until the apiserver serves their kinds.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubeCluster } from './kube-cluster.js';
import { runSetupScript } from './setup-script.js';
import { waitFor } from './wait-for.js';

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  [key: string]: unknown;
}

/** The CRD directory scripts/install-crds.sh fills (a no-op when it is already there). */
export const crdDir = (): string =>
  runSetupScript('install-crds.sh', 'the CRDs of deploy/kubernetes/', 'needs go and the Go module proxy');

/** The objects of a multi-document YAML text. */
export function documents(text: string): KubeObject[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as KubeObject | null)
    .filter((o): o is KubeObject => o !== null && typeof o === 'object' && typeof o.kind === 'string');
}

/** The CRDs of the files in crdDir() whose names `pick` accepts (all by default). */
export function publishedCrds(pick: (file: string) => boolean = () => true): KubeObject[] {
  const dir = crdDir();
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml') && pick(f))
    .flatMap((f) => documents(readFileSync(join(dir, f), 'utf8')))
    .filter((o) => o.kind === 'CustomResourceDefinition');
}

/**
 * Creates the CRDs, then waits until each is Established and listed by its group's discovery document
 * (which a controller updates a moment later).
 */
export async function installCrds(cluster: KubeCluster, crds: readonly KubeObject[]): Promise<void> {
  for (const crd of crds) {
    const res = await cluster.api('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
    if (res.status !== 201)
      throw new Error(`CRD ${crd.metadata.name}: ${res.status} ${JSON.stringify(res.body)}`);
  }
  for (const crd of crds) {
    const spec = crd.spec as {
      group: string;
      names: { kind: string };
      versions: Array<{ name: string; served: boolean }>;
    };
    for (const v of spec.versions.filter((x) => x.served)) {
      await waitFor(
        async () => {
          const res = await cluster.api('GET', `/apis/${spec.group}/${v.name}`);
          const list = (res.body as { resources?: Array<{ kind: string }> }).resources ?? [];
          return res.status === 200 && list.some((r) => r.kind === spec.names.kind);
        },
        {
          timeoutMs: 60_000,
          intervalMs: 100,
          message: `${spec.names.kind} ${spec.group}/${v.name} discoverable`,
        },
      );
    }
    await waitFor(
      async () => {
        const res = await cluster.api(
          'GET',
          `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`,
        );
        const conditions = (res.body as { status?: { conditions?: Array<{ type: string; status: string }> } })
          .status?.conditions;
        return conditions?.some((c) => c.type === 'Established' && c.status === 'True') === true;
      },
      { timeoutMs: 60_000, intervalMs: 100, message: `CRD ${crd.metadata.name} established` },
    );
  }
}
