/**
 * Clients name any `model` they like. Each new name gets a prefix tree of its own in cache_aware (up to
 * its bound on model trees), and the request is routed, its prompt recorded under the chosen worker,
 * before the worker answers 404 for a model it does not serve. --max-tree-size bounds what the router
 * keeps per worker: driven over real gRPC as Envoy drives it, the /metrics tree size of every worker
 * is back within it after a maintenance round, whatever the number of models named.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Router } from '../../../src/router.js';
import {
  ExtProcTestClient,
  requestBody,
  requestHeaders,
  responseBody,
  responseHeaders,
} from '../../support/extproc-client.js';
import { expectAllLoadsZero, metricsText, startTestRouter, treeSize } from '../../support/router-fixture.js';

const WORKERS = ['http://127.0.0.1:18101', 'http://127.0.0.1:18102'];
const MAX_TREE = 4_000;

let router: Router;
let client: ExtProcTestClient;

beforeAll(async () => {
  router = await startTestRouter({ workers: WORKERS, policy: 'cache_aware', maxTreeSize: MAX_TREE });
  client = new ExtProcTestClient(router.grpcPort);
});
afterAll(async () => {
  client.close();
  await router.close();
});

describe('invented model names (cache_aware)', () => {
  it("keep each worker's prefix picture within --max-tree-size", async () => {
    for (let i = 0; i < 60; i++) {
      const s = client.open();
      await s.send(requestHeaders('POST', '/v1/completions'));
      const prompt = `${i} ${'lorem ipsum dolor sit amet '.repeat(20)}`;
      await s.send(requestBody({ model: `invented-${i}`, prompt, max_tokens: 1 }));
      await s.send(responseHeaders(404));
      await s.send(responseBody('{"error":{"message":"The model does not exist.","code":404}}', true));
      s.halfClose();
      await s.done;
    }
    const before = await metricsText(router);
    expect(WORKERS.some((url) => treeSize(before, url) > MAX_TREE)).toBe(true);

    router.pools.regular.policy.maintain?.(0); // the --eviction-interval-ms round
    const after = await metricsText(router);
    for (const url of WORKERS) expect(treeSize(after, url)).toBeLessThanOrEqual(MAX_TREE);
    await expectAllLoadsZero(router);
  });
});
