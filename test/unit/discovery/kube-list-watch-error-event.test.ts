/**
 * a watch that starts and at once sends an ERROR event other than 410 Gone (e.g. the apiserver's
 * "Too large resource version" 504 when its watch cache lags the list, in an HA control plane) must not
 * relist in a tight loop. A fake API server on port 0: LIST answers, every WATCH is a 200 whose first
 * line is ERROR 504. With the clock frozen (fake timers, never advanced), the number of LISTs must stay
 * bounded: any retry should wait for a backoff timer.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { KubePodWatcher } from '../../../src/discovery/kube-pod-watcher.js';

function kubeConfigFor(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}

async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
}

let server: Server | undefined;
let watcher: KubePodWatcher | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await watcher?.close();
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = watcher = undefined;
});

describe('WATCH answers ERROR 504 at once', () => {
  it('does not relist in a tight loop', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    let lists = 0;
    let tenth!: () => void;
    const many = new Promise<void>((r) => (tenth = r));
    server = createServer((req, res) => {
      const url = new URL(req.url!, 'http://x');
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const status = {
          kind: 'Status',
          apiVersion: 'v1',
          status: 'Failure',
          message: 'Timeout: Too large resource version: 12, current: 11',
          reason: 'Timeout',
          code: 504,
        };
        res.end(JSON.stringify({ type: 'ERROR', object: status }) + '\n');
        return;
      }
      lists++;
      if (lists === 10) tenth();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '12' }, items: [] }),
      );
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const { port } = server.address() as AddressInfo;
    watcher = new KubePodWatcher({
      kubeConfig: kubeConfigFor(port),
      namespace: 'llm',
      labelSelector: 'app=vllm',
      handler: { synced: () => undefined, event: () => undefined },
    });
    watcher.start();
    // Frozen clock: only loop iterations that need no timer can happen.
    const outcome = await Promise.race([many.then(() => 'tight loop'), turns(400).then(() => 'bounded')]);
    expect(outcome).toBe('bounded');
    expect(lists).toBeLessThanOrEqual(3);
  });
});
