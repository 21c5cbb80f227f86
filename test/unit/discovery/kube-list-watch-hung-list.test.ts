/**
 * a LIST that never answers (the apiserver's host died after taking the request: no RST, and the
 * client's per-request agent has no TCP keepalive) must not freeze discovery for good. A fake API server
 * on port 0 answers the first LIST and WATCH, ends the watch (as at its timeoutSeconds), then never
 * answers the relist. A fake clock then runs for an hour: the loop must give up on that LIST and list
 * again; otherwise no pod change is ever seen again (the dead-pod-routed-for-hours failure the module
 * exists to prevent).
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
  server?.closeAllConnections();
  await watcher?.close();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = watcher = undefined;
});

describe('a LIST that never answers', () => {
  it('is given up and retried (fake clock, one hour)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    let lists = 0;
    let secondList!: () => void;
    const second = new Promise<void>((r) => (secondList = r));
    server = createServer((req, res) => {
      const url = new URL(req.url!, 'http://x');
      if (url.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        // A bookmark, then the server ends the watch (its timeoutSeconds): a relist follows.
        const bookmark = { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: '2' } };
        res.end(JSON.stringify({ type: 'BOOKMARK', object: bookmark }) + '\n');
        return;
      }
      lists++;
      if (lists >= 2) {
        secondList();
        return; // never answered
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items: [] }),
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
    await second;
    expect(lists).toBe(2);
    // Until the hung LIST is given up and a third one sent (before the fix: never, the test timed out).
    while (lists < 3) {
      vi.advanceTimersByTime(6 * 60_000);
      await turns(30);
    }
    expect(lists).toBe(3);
  });
});
