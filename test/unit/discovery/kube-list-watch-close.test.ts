/**
 * KubeListWatch.close() while a LIST is in flight. A fake API server on port 0 accepts the LIST
 * and never answers (an apiserver or network that hangs). close() must stop the loop and release the
 * request, not wait for an answer that may never come (router shutdown closes steps one after the other).
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'vitest';
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

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

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
