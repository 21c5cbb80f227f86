/**
 * KubeListWatch's loop against a fake API server on port 0 (fake timers where a backoff is measured):
 * close() during a LIST, a LIST that never answers, a WATCH that is refused while the LIST works, and
 * a WATCH that ends in an ERROR event other than 410.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
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

/** Resolves after `n` turns of the event loop (no wall-clock time involved). */
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

// KubeListWatch.close() while a LIST is in flight. A fake API server on port 0 accepts the LIST
// and never answers (an apiserver or network that hangs). close() must stop the loop and release the
// request, not wait for an answer that may never come (router shutdown closes steps one after the other).
describe('close() during a hanging LIST', () => {
  it('resolves and aborts the request', async () => {
    let gotList!: (req: IncomingMessage) => void;
    const listed = new Promise<IncomingMessage>((r) => (gotList = r));
    server = createServer((req) => {
      gotList(req); // never answered
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const { port } = server.address() as AddressInfo;
    const watcher = new KubePodWatcher({
      kubeConfig: kubeConfigFor(port),
      namespace: 'llm',
      labelSelector: 'app=vllm',
      handler: { synced: () => undefined, event: () => undefined },
    });
    watcher.start();
    const req = await listed;
    const socketClosed = new Promise<void>((r) => req.socket.once('close', () => r()));
    // Before the fix close() waited for the LIST's answer: this never resolved (the test timed out).
    await watcher.close();
    await socketClosed; // the request was aborted, its socket released
  });
});

// a LIST that never answers (the apiserver's host died after taking the request: no RST, and the
// client's per-request agent has no TCP keepalive) must not freeze discovery for good. A fake API server
// on port 0 answers the first LIST and WATCH, ends the watch (as at its timeoutSeconds), then never
// answers the relist. A fake clock then runs for an hour: the loop must give up on that LIST and list
// again; otherwise no pod change is ever seen again (the dead-pod-routed-for-hours failure the module
// exists to prevent).
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

// a watch that cannot start while the LIST works (RBAC grants `list` but not `watch` on pods,
// an admission webhook or proxy refusing long requests) must back off like any other failure
// ("250 ms doubling to 5 s"). A fake API server on port 0: LIST answers, WATCH is 403 Forbidden. Under a
// fake clock, the delays the loop reports must grow; if the backoff is reset by every successful LIST,
// the router relists the whole collection 4 times a second, forever.
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

// a watch that starts and at once sends an ERROR event other than 410 Gone (e.g. the apiserver's
// "Too large resource version" 504 when its watch cache lags the list, in an HA control plane) must not
// relist in a tight loop. A fake API server on port 0: LIST answers, every WATCH is a 200 whose first
// line is ERROR 504. With the clock frozen (fake timers, never advanced), the number of LISTs must stay
// bounded: any retry should wait for a backoff timer.
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
