import { afterEach, describe, expect, it } from 'vitest';
import { PEER_VARIANTS, peerArgs, preparePeers } from '../../../bench/peers.js';

describe('benchmark peers', () => {
  it.each([
    {
      peer: 'vllm-router' as const,
      head: ['--host', '127.0.0.1', '--port', '9001'],
      tail: ['--log-level', 'warning'],
    },
    {
      peer: 'smg' as const,
      head: ['launch', '--host', '127.0.0.1', '--port', '9001'],
      tail: ['--log-level', 'warn'],
    },
  ])('$peer: loopback-only flags from its --help', ({ peer, head, tail }) => {
    const args = peerArgs(peer, 'cache_aware', 9001, 9002, ['http://127.0.0.1:1', 'http://127.0.0.1:2']);
    expect(args.slice(0, head.length)).toEqual(head);
    expect(args.slice(-tail.length)).toEqual(tail);
    const at = (flag: string): string | undefined => args[args.indexOf(flag) + 1];
    expect(args.slice(args.indexOf('--worker-urls') + 1, args.indexOf('--worker-urls') + 3)).toEqual([
      'http://127.0.0.1:1',
      'http://127.0.0.1:2',
    ]);
    expect([at('--policy'), at('--prometheus-host'), at('--prometheus-port')]).toEqual([
      'cache_aware',
      '127.0.0.1',
      '9002',
    ]);
  });

  it('runs both peers with cache_aware and round_robin', () => {
    expect(PEER_VARIANTS.map((v) => v.label).sort()).toEqual([
      'smg cache_aware',
      'smg round_robin',
      'vllm-router cache_aware',
      'vllm-router round_robin',
    ]);
  });

  describe('preparePeers', () => {
    const saved = { ci: process.env.CI, peers: process.env.BENCH_PEERS };
    afterEach(() => {
      if (saved.ci === undefined) delete process.env.CI;
      else process.env.CI = saved.ci;
      if (saved.peers === undefined) delete process.env.BENCH_PEERS;
      else process.env.BENCH_PEERS = saved.peers;
    });

    it.each([
      { env: { CI: 'true' }, note: /skipped in CI/ },
      { env: { BENCH_PEERS: '0' }, note: /BENCH_PEERS=0/ },
    ])('installs nothing and says why with $env', ({ env, note }) => {
      delete process.env.CI;
      Object.assign(process.env, env);
      const lines: string[] = [];
      expect(preparePeers((l) => lines.push(l))).toEqual([]);
      expect(lines.join('\n')).toMatch(note);
    });
  });
});
