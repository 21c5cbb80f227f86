import { describe, expect, it } from 'vitest';
import type { RequestResult, RunResult } from '../../../bench/drivers.js';
import type { PdResult } from '../../../bench/pd-bench.js';
import { pdRequestsPerCell } from '../../../bench/pd-bench.js';
import { summarisePdCell, type PdCellKey } from '../../../bench/pd-cell.js';
import {
  PD_VARIANTS,
  pdRouterArgs,
  pdSimOptions,
  prefillArgs,
  type PdVariant,
} from '../../../bench/pd-fleet.js';
import { pdPeerArgs } from '../../../bench/pd-peer.js';
import { runInfo } from '../../../bench/report-doc.js';
import { renderPd } from '../../../bench/report-pd.js';
import type { Simulator } from '../../../src/sim/simulator.js';
import { parseConfig } from '../../../src/config.js';

const KEY: PdCellKey = {
  variant: 'nixl',
  connector: 'nixl',
  legs: 'sequential',
  frontDoor: 'router',
  concurrency: 4,
};

function result(index: number, r: Partial<RequestResult>): RequestResult {
  return { index, status: 200, startMs: 0, latencyMs: 10, itlMs: [], outputTokens: 0, ...r };
}

describe('P/D benchmark cell summary', () => {
  it.each([
    {
      name: 'all completed',
      results: [
        result(0, { ttftMs: 10, outputTokens: 8 }),
        result(1, { ttftMs: 30, outputTokens: 8 }),
        result(2, { ttftMs: 20, outputTokens: 8 }),
      ],
      wallMs: 2000,
      want: { requests: 3, completed: 3, errors: 0, ttftP50Ms: 20, ttftP90Ms: 30, outputTokPerSec: 12 },
    },
    {
      name: 'a failed request counts as an error and adds no tokens',
      results: [
        result(0, { ttftMs: 10, outputTokens: 8 }),
        result(1, { status: 500, error: 'HTTP 500: KV transfer failed', outputTokens: 0 }),
      ],
      wallMs: 1000,
      want: { requests: 2, completed: 1, errors: 1, ttftP50Ms: 10, outputTokPerSec: 8 },
    },
    {
      name: 'requests never sent (deadline) are absent, not errors',
      results: [result(0, { ttftMs: 5, outputTokens: 4 }), undefined, undefined],
      wallMs: 1000,
      want: { requests: 1, completed: 1, errors: 0, outputTokPerSec: 4 },
    },
  ])('$name', ({ results, wallMs, want }) => {
    const run: RunResult = { results: results as RequestResult[], wallMs, sent: results.length };
    const cell = summarisePdCell(KEY, run, 30);
    expect(cell).toMatchObject({ ...KEY, ...want, frontDoorCpuMsPerRequest: 30 / want.requests });
    if (want.errors > 0) expect(cell.firstError).toContain('KV transfer failed');
    else expect(cell.firstError).toBeUndefined();
  });

  it.each([
    [1, false, 12],
    [16, false, 64],
    [64, false, 256],
    [1, true, 4],
    [4, true, 8],
  ])('requests per cell at concurrency %i (quick %s): %i', (c, quick, want) => {
    expect(pdRequestsPerCell(c, quick)).toBe(want);
  });
});

describe('P/D benchmark fleet and peer', () => {
  const sim = (role: 'prefill' | 'decode', port: number, bootstrapPort?: number): Simulator =>
    ({ role, url: `http://127.0.0.1:${port}`, bootstrapPort }) as unknown as Simulator;
  const sims = [sim('prefill', 1, 11), sim('prefill', 2, 12), sim('decode', 3), sim('decode', 4)];

  const variant = (label: string): PdVariant => PD_VARIANTS.find((v) => v.label === label)!;

  it('2 prefill then 2 decode simulators, one prefill lane each, speaking the connector', () => {
    const opts = pdSimOptions(variant('mooncake'), 1);
    expect([0, 1, 2, 3].map((i) => opts(i).role)).toEqual(['prefill', 'prefill', 'decode', 'decode']);
    expect(opts(0)).toMatchObject({ kvConnector: 'mooncake', timeScale: 1, timing: { prefillLanes: 1 } });
    expect(opts(0).register).toBeUndefined();
  });

  it.each([
    ['mori-io-write', { transfer_mode: 'WRITE' }],
    ['p2p-nccl', undefined],
  ])('%s: the workers register over ZMQ', (label, extra) => {
    const opts = pdSimOptions(variant(label), 1, 'tcp://127.0.0.1:7000');
    expect(opts(3).register).toEqual({
      zmq: 'tcp://127.0.0.1:7000',
      intervalMs: 1000,
      ...(extra ? { extra } : {}),
    });
  });

  it.each([
    ['mooncake', ['http://127.0.0.1:1 11', 'http://127.0.0.1:2 12']],
    ['nixl', ['http://127.0.0.1:1', 'http://127.0.0.1:2']],
  ] as const)('%s: --prefill values', (connector, want) => {
    expect(prefillArgs(sims, connector)).toEqual(want);
  });

  it('router flags: static pools (Mooncake with bootstrap ports), or the discovery socket', () => {
    const at = (args: string[], flag: string, n = 1): string[] =>
      args.slice(args.indexOf(flag) + 1, args.indexOf(flag) + 1 + n);
    const moon = pdRouterArgs(variant('mooncake'), sims);
    expect(at(moon, '--mode')).toEqual(['pd']);
    expect(at(moon, '--kv-connector')).toEqual(['mooncake']);
    expect(at(moon, '--prefill', 2)).toEqual(['http://127.0.0.1:1', '11']);
    expect(moon.filter((a) => a === '--decode')).toHaveLength(2);
    const write = pdRouterArgs(variant('mori-io-write'), sims, 'tcp://127.0.0.1:7000');
    expect(at(write, '--discovery-zmq')).toEqual(['tcp://127.0.0.1:7000']);
    expect(at(write, '--kv-connector')).toEqual(['moriio']);
    expect(write).not.toContain('--prefill');
    expect(write).not.toContain('--decode');
  });

  it("the router flags parse as this router's configuration", () => {
    const parsed = parseConfig(pdRouterArgs(variant('mooncake'), sims), {});
    expect(parsed.help).toBe(false);
    if (parsed.help) return;
    expect(parsed.config).toMatchObject({
      mode: 'pd',
      kvConnector: 'mooncake',
      decode: ['http://127.0.0.1:3', 'http://127.0.0.1:4'],
      prefillPolicy: 'round_robin',
      decodePolicy: 'round_robin',
    });
    expect(parsed.config.prefill).toHaveLength(2);
  });

  it("vllm-router P/D flags from its --help, each prefill's bootstrap port as a second value", () => {
    const args = pdPeerArgs(variant('mooncake'), 9001, 9002, {
      prefill: ['http://127.0.0.1:1 11'],
      decode: ['http://127.0.0.1:3'],
    });
    expect(args.slice(0, 4)).toEqual(['--host', '127.0.0.1', '--port', '9001']);
    const at = (flag: string, n = 1): string[] =>
      args.slice(args.indexOf(flag) + 1, args.indexOf(flag) + 1 + n);
    expect(args).toContain('--vllm-pd-disaggregation');
    expect(at('--kv-connector')).toEqual(['mooncake']);
    expect(at('--prefill', 2)).toEqual(['http://127.0.0.1:1', '11']);
    expect(at('--decode')).toEqual(['http://127.0.0.1:3']);
    expect(at('--prometheus-host')).toEqual(['127.0.0.1']);
  });

  it('vllm-router with discovery: no static worker, no --kv-connector for P2P NCCL', () => {
    const args = pdPeerArgs(variant('p2p-nccl'), 9001, 9002, { discovery: '127.0.0.1:7000' });
    expect(args.slice(args.indexOf('--vllm-discovery-address') + 1)[0]).toBe('127.0.0.1:7000');
    expect(args).not.toContain('--kv-connector');
    expect(args).not.toContain('--prefill');
  });
});

describe('P/D benchmark section', () => {
  it('a table per concurrency, ratios within the run, errors and the added TTFT', () => {
    const cell = (variant: string, frontDoor: 'router' | 'vllm-router', tok: number, ttft: number) => ({
      ...KEY,
      variant,
      frontDoor,
      concurrency: 1,
      requests: 12,
      completed: 12,
      errors: 0,
      ttftP50Ms: ttft,
      ttftP90Ms: ttft,
      outputTokens: 100,
      outputTokPerSec: tok,
      wallMs: 1000,
      frontDoorCpuMsPerRequest: 2,
    });
    const r: PdResult = {
      benchmark: 'pd',
      info: runInfo('npm run bench -- pd', false),
      setup: {
        prefill: 2,
        decode: 2,
        timeScale: 1,
        promptTokens: 512,
        outputTokens: 64,
        concurrencies: [1],
        variants: PD_VARIANTS,
        peers: { 'vllm-router': '0.1.17' },
      },
      cells: [
        cell('nixl', 'router', 100, 50),
        cell('nixl', 'vllm-router', 80, 40),
        cell('mooncake', 'router', 120, 40),
      ],
      addedTtft: {
        requests: 300,
        directTtftMs: { p50: 1, p99: 2 },
        pdViaEnvoyTtftMs: { p50: 4, p99: 8 },
        addedMs: { p50: 3, p99: 6 },
        ratio: { p50: 4 },
      },
    };
    const md = renderPd(r).markdown;
    expect(md).toContain('## P/D per KV connector');
    expect(md).toContain('### Concurrency 1');
    expect(md).toContain(
      '| mooncake | sequential | this router (Envoy + ext_proc) | 40.0 | 40.0 | 120 | 0 / 12 | 2.00 | 0.80x | 1.20x |',
    );
    expect(md).toContain('| 1.25x | 1.25x |');
    expect(md).toContain('Every request of every cell succeeded.');
    expect(md).toContain('added **3 ms p50**');
  });
});
