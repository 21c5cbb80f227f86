import { describe, expect, it } from 'vitest';
import { poolMembers, sameMembers } from '../../../src/discovery/kube-inference-pool.js';
import { kubeRoleRules, poolRole } from '../../../src/discovery/kube-source-config.js';
import { loopbackConfig, parseConfig } from '../../../src/config.js';

const pool = (spec: unknown) => ({ metadata: { name: 'vllm' }, spec }) as Parameters<typeof poolMembers>[0];

describe('poolMembers: what an InferencePool selects', () => {
  it('reads spec.selector.matchLabels and the target port', () => {
    expect(
      poolMembers(
        pool({
          selector: { matchLabels: { app: 'vllm', tier: 'decode' } },
          targetPorts: [{ number: 8000 }],
          endpointPickerRef: { name: 'vllm-extproc-router', port: { number: 9002 } },
        }),
      ),
    ).toEqual({ selector: { app: 'vllm', tier: 'decode' }, ports: [8000] });
  });

  it('reads every target port (GAIE v1.1+: each port is an endpoint of its own)', () => {
    expect(
      poolMembers(
        pool({
          selector: { matchLabels: { app: 'vllm' } },
          targetPorts: [{ number: 8000 }, { number: 8001 }],
        }),
      ),
    ).toEqual({ selector: { app: 'vllm' }, ports: [8000, 8001] });
  });

  it('reads a v1alpha2 pool (inference.networking.x-k8s.io): a plain label map and targetPortNumber', () => {
    const alpha = pool({
      selector: { app: 'vllm', tier: 'decode' },
      targetPortNumber: 8000,
      extensionRef: { name: 'vllm-extproc-router' },
    });
    expect(poolMembers(alpha, 'inference.networking.x-k8s.io')).toEqual({
      selector: { app: 'vllm', tier: 'decode' },
      ports: [8000],
    });
    expect(poolMembers(pool({ selector: {}, targetPortNumber: 8000 }), 'inference.networking.x-k8s.io')).toBe(
      undefined,
    );
    expect(poolMembers(pool({ selector: { app: 'vllm' } }), 'inference.networking.x-k8s.io')).toBeUndefined();
  });

  it.each([
    ['no pool', undefined],
    ['no spec', { metadata: { name: 'vllm' } }],
    [
      'an empty selector (it would select every pod of the namespace)',
      pool({ selector: { matchLabels: {} }, targetPorts: [{ number: 8000 }] }),
    ],
    [
      'a label value that is not a string',
      pool({ selector: { matchLabels: { app: 1 } }, targetPorts: [{ number: 8000 }] }),
    ],
    ['no target port', pool({ selector: { matchLabels: { app: 'vllm' } }, targetPorts: [] })],
    [
      'a second port out of range',
      pool({ selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: 8000 }, { number: 0 }] }),
    ],
    [
      'a port out of range',
      pool({ selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: 70000 }] }),
    ],
    ['a v1alpha2-style map selector', pool({ selector: { app: 'vllm' }, targetPortNumber: 8000 })],
  ])('%s: selects nothing', (_name, obj) => {
    expect(poolMembers(obj as Parameters<typeof poolMembers>[0])).toBeUndefined();
  });

  it('sameMembers compares selection and ports, not key order', () => {
    const a = { selector: { app: 'vllm', tier: 'x' }, ports: [8000] };
    expect(sameMembers(a, { selector: { tier: 'x', app: 'vllm' }, ports: [8000] })).toBe(true);
    expect(sameMembers(a, { selector: { app: 'vllm' }, ports: [8000] })).toBe(false);
    expect(sameMembers(a, { ...a, ports: [8001] })).toBe(false);
    expect(sameMembers(a, { ...a, ports: [8000, 8001] })).toBe(false);
    expect(sameMembers(undefined, undefined)).toBe(true);
    expect(sameMembers(a, undefined)).toBe(false);
  });
});

describe('--inference-pool as the source of the workers', () => {
  it('takes the role it serves when that role has no selector flag', () => {
    const regular = loopbackConfig({ serviceDiscovery: true, inferencePool: 'vllm' });
    expect(poolRole(regular)).toBe('regular');
    expect(kubeRoleRules(regular)).toEqual([]);
    const pd = loopbackConfig({
      serviceDiscovery: true,
      mode: 'pd',
      inferencePool: 'vllm',
      prefillSelector: ['role=prefill'],
    });
    expect(poolRole(pd)).toBe('decode');
    expect(kubeRoleRules(pd).map((r) => r.role)).toEqual(['prefill']);
    // A selector flag wins: the pool is then read for its objectives only.
    expect(poolRole(loopbackConfig({ inferencePool: 'vllm', selector: ['app=vllm'] }))).toBeUndefined();
    expect(poolRole(loopbackConfig({ selector: [] }))).toBeUndefined();
  });

  it('lets --service-discovery go without the selector it replaces, and only that one', () => {
    expect(() => parseConfig(['--service-discovery', '--inference-pool', 'vllm'])).not.toThrow();
    expect(() => parseConfig(['--service-discovery'])).toThrow(/--selector key=value.*or --inference-pool/);
    expect(() => parseConfig(['--service-discovery', '--mode', 'pd', '--inference-pool', 'vllm'])).toThrow(
      /--prefill-selector/,
    );
    expect(() =>
      parseConfig([
        '--service-discovery',
        '--mode',
        'pd',
        '--inference-pool',
        'vllm',
        '--prefill-selector',
        'role=prefill',
      ]),
    ).not.toThrow();
  });
});
