/**
 * a watch that cannot start while the LIST works (RBAC grants `list` but not `watch` on pods,
 * an admission webhook or proxy refusing long requests) must back off like any other failure
 * ("250 ms doubling to 5 s"). A fake API server on port 0: LIST answers, WATCH is 403 Forbidden. Under a
 * fake clock, the delays the loop reports must grow; if the backoff is reset by every successful LIST,
 * the router relists the whole collection 4 times a second, forever.
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

describe('LIST works, WATCH is forbidden', () => {
  it('the retry delay grows instead of relisting every 250 ms', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    server = createServer((req, res) => {
      const url = new URL(req.url!, 'http://x');
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(403, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            reason: 'Forbidden',
            code: 403,
          }),
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: [] }),
      );
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const { port } = server.address() as AddressInfo;
    const delays: number[] = [];
    let failedOnce!: () => void;
    let failed = new Promise<void>((r) => (failedOnce = r));
    watcher = new KubePodWatcher({
      kubeConfig: kubeConfigFor(port),
      namespace: 'llm',
      labelSelector: 'app=vllm',
      handler: {
        synced: () => undefined,
        event: () => undefined,
        failed: (_err, phase, retryInMs) => {
          if (phase === 'watch') delays.push(retryInMs);
          failedOnce();
        },
      },
    });
    watcher.start();
    for (let i = 0; i < 5; i++) {
      await failed;
      failed = new Promise<void>((r) => (failedOnce = r));
      vi.advanceTimersByTime(10_000); // past any backoff: the next list + watch
      await turns(5);
    }
    expect(delays.length).toBeGreaterThanOrEqual(5);
    // 250 ms doubling (+-20%): the 4th and 5th failures wait at least 1.6 s and 3.2 s.
    expect(delays[3]).toBeGreaterThanOrEqual(1600);
    expect(delays[4]).toBeGreaterThanOrEqual(3200);
  });
});
