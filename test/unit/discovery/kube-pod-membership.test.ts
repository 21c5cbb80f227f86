/**
 * Membership rules of Kubernetes discovery, table-driven over a pod object in the API's JSON shape
 * (fixtures/vllm-prefill-pod.json: a Deployment's vLLM prefill pod, Running, Ready, with a readiness gate),
 * each row changing what a kubelet, a controller or a user changes.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  formatLabelSelector,
  matchesSelector,
  parseLabelSelector,
  podKey,
  podMembership,
  type PodObject,
  type RoleRule,
} from '../../../src/discovery/kube-pod-membership.js';

const recorded = JSON.parse(
  readFileSync(new URL('./fixtures/vllm-prefill-pod.json', import.meta.url), 'utf8'),
) as PodObject;

function pod(change: (p: PodObject & Required<Pick<PodObject, 'metadata' | 'status'>>) => void): PodObject {
  const copy = structuredClone(recorded) as PodObject & Required<Pick<PodObject, 'metadata' | 'status'>>;
  change(copy);
  return copy;
}

function setCondition(p: PodObject, type: string, status: string | undefined): void {
  const rest = (p.status?.conditions ?? []).filter((c) => c.type !== type);
  p.status!.conditions = status === undefined ? rest : [...rest, { type, status }];
}

const PREFILL: RoleRule = {
  role: 'prefill',
  selector: { app: 'vllm', 'vllm.ai/role': 'prefill' },
  port: 8000,
};

describe('podMembership', () => {
  it('a Running, Ready pod matching the selector is a worker at http://podIP:port with its UID', () => {
    expect(podMembership(recorded, PREFILL)).toEqual({
      member: true,
      worker: {
        role: 'prefill',
        url: 'http://10.244.3.25:8000',
        endpoint: '10.244.3.25:8000',
        uid: '3f6d2a1e-8b7c-4d5e-9f0a-1b2c3d4e5f60',
        restarts: 0,
        metadata: { bootstrap_port: 8998 },
      },
    });
  });

  const cases: Array<[string, PodObject, RoleRule, string]> = [
    ['label value differs', pod((p) => (p.metadata.labels!['vllm.ai/role'] = 'decode')), PREFILL, 'selector'],
    ['label removed', pod((p) => delete p.metadata.labels!.app), PREFILL, 'selector'],
    ['no labels at all', pod((p) => delete p.metadata.labels), PREFILL, 'selector'],
    [
      'graceful deletion started (still Running and Ready)',
      pod((p) => (p.metadata.deletionTimestamp = '2026-11-30T10:00:00Z')),
      PREFILL,
      'terminating',
    ],
    ['Pending (image pull, scheduling)', pod((p) => (p.status.phase = 'Pending')), PREFILL, 'not_running'],
    ['Succeeded', pod((p) => (p.status.phase = 'Succeeded')), PREFILL, 'not_running'],
    ['Failed', pod((p) => (p.status.phase = 'Failed')), PREFILL, 'not_running'],
    ['no status at all', pod((p) => delete (p as PodObject).status), PREFILL, 'not_running'],
    ['Running without a pod IP', pod((p) => delete p.status.podIP), PREFILL, 'no_ip'],
    ['Running with an empty pod IP', pod((p) => (p.status.podIP = '')), PREFILL, 'no_ip'],
    [
      'Ready=False (readiness probe failing)',
      pod((p) => setCondition(p, 'Ready', 'False')),
      PREFILL,
      'not_ready',
    ],
    ['Ready=Unknown (node lost)', pod((p) => setCondition(p, 'Ready', 'Unknown')), PREFILL, 'not_ready'],
    ['no Ready condition yet', pod((p) => setCondition(p, 'Ready', undefined)), PREFILL, 'not_ready'],
    [
      // The kubelet turns Ready False while a readiness gate is False even if every container is ready.
      'readiness gate unmet: Ready False, ContainersReady True',
      pod((p) => {
        setCondition(p, 'example.com/kv-connector-ready', 'False');
        setCondition(p, 'Ready', 'False');
      }),
      PREFILL,
      'not_ready',
    ],
    [
      'bootstrap port annotation not a number',
      pod((p) => (p.metadata.annotations!['vllm.ai/bootstrap-port'] = 'eight')),
      PREFILL,
      'bad_annotation',
    ],
    [
      'bootstrap port annotation out of range',
      pod((p) => (p.metadata.annotations!['vllm.ai/bootstrap-port'] = '70000')),
      PREFILL,
      'bad_annotation',
    ],
    [
      'metrics port annotation 0',
      pod((p) => (p.metadata.annotations!['vllm.ai/metrics-port'] = '0')),
      PREFILL,
      'bad_annotation',
    ],
    [
      'data-parallel size annotation 0',
      pod((p) => (p.metadata.annotations!['vllm.ai/data-parallel-size'] = '0')),
      PREFILL,
      'bad_annotation',
    ],
    [
      'data-parallel size annotation not a number',
      pod((p) => (p.metadata.annotations!['vllm.ai/data-parallel-size'] = 'eight')),
      PREFILL,
      'bad_annotation',
    ],
    ['no UID', pod((p) => delete p.metadata.uid), PREFILL, 'no_uid'],
  ];
  it.each(cases)('not a worker: %s', (_name, p, rule, reason) => {
    const result = podMembership(p, rule);
    expect(result.member).toBe(false);
    expect(result).toMatchObject({ reason });
  });

  it('the first failing rule is the reason (selector before readiness, terminating before phase)', () => {
    const p = pod((q) => {
      q.metadata.labels = {};
      q.metadata.deletionTimestamp = '2026-11-30T10:00:00Z';
      q.status.phase = 'Failed';
    });
    expect(podMembership(p, PREFILL)).toMatchObject({ reason: 'selector' });
    expect(podMembership(p, { ...PREFILL, selector: {} })).toMatchObject({ reason: 'terminating' });
  });

  it('an empty selector matches every pod', () => {
    expect(podMembership(recorded, { ...PREFILL, selector: {} }).member).toBe(true);
  });

  it('port annotations and flag fallbacks become metadata; annotations win over flags', () => {
    const annotated = pod((p) => {
      p.metadata.annotations = {
        'vllm.ai/bootstrap-port': ' 8998 ',
        'vllm.ai/metrics-port': '9100',
        'vllm.ai/kv-events-port': '5557',
      };
    });
    expect(podMembership(annotated, { ...PREFILL, metricsPort: 8000, kvEventsPort: 5556 })).toMatchObject({
      worker: { metadata: { bootstrap_port: 8998, metrics_port: 9100, kv_events_port: 5557 } },
    });
    const bare = pod((p) => delete p.metadata.annotations);
    expect(podMembership(bare, { ...PREFILL, metricsPort: 8000, kvEventsPort: 5556 })).toMatchObject({
      worker: { metadata: { metrics_port: 8000, kv_events_port: 5556 } },
    });
    expect(podMembership(bare, PREFILL)).toMatchObject({ worker: { metadata: {} } });
  });

  it("a pod's data-parallel size annotation becomes metadata (its ranks are scheduled one by one)", () => {
    const dp = pod((p) => (p.metadata.annotations = { 'vllm.ai/data-parallel-size': ' 8 ' }));
    expect(podMembership(dp, PREFILL)).toMatchObject({ worker: { metadata: { data_parallel_size: 8 } } });
  });

  it('IPv6 pod IPs are bracketed in the url and the endpoint', () => {
    const v6 = pod((p) => (p.status.podIP = 'fd00:10:244::19'));
    expect(podMembership(v6, { ...PREFILL, port: 8100 })).toMatchObject({
      worker: { url: 'http://[fd00:10:244::19]:8100', endpoint: '[fd00:10:244::19]:8100' },
    });
  });

  it('podKey is namespace/name', () => {
    expect(podKey(recorded)).toBe('llm/vllm-prefill-7d9c6b5f4-x2k8p');
  });
});

describe('label selectors', () => {
  const parses: Array<[string[], Record<string, string>]> = [
    [[], {}],
    [['app=vllm'], { app: 'vllm' }],
    [['app=vllm', 'vllm.ai/role=prefill'], { app: 'vllm', 'vllm.ai/role': 'prefill' }],
    [['app=vllm,tier=gpu'], { app: 'vllm', tier: 'gpu' }],
    [['app==vllm'], { app: 'vllm' }],
    [[' app = vllm '], { app: 'vllm' }],
    [['app='], { app: '' }],
  ];
  it.each(parses)('parses %j', (items, expected) => {
    expect(parseLabelSelector(items)).toEqual(expected);
  });

  const rejects: Array<[string[], RegExp]> = [
    [['app'], /key=value/],
    [['app!=vllm'], /key=value/],
    [['app in (a,b)'], /key=value/],
    [['app=a', 'app=b'], /two values/],
  ];
  it.each(rejects)('rejects %j', (items, message) => {
    expect(() => parseLabelSelector(items)).toThrow(message);
  });

  it('formats as the API labelSelector parameter, keys sorted', () => {
    expect(formatLabelSelector({ 'vllm.ai/role': 'prefill', app: 'vllm' })).toBe(
      'app=vllm,vllm.ai/role=prefill',
    );
    expect(formatLabelSelector({})).toBe('');
  });

  it('matches labels containing every pair', () => {
    expect(matchesSelector({ a: '1', b: '2' }, { a: '1' })).toBe(true);
    expect(matchesSelector({ a: '1' }, { a: '1', b: '2' })).toBe(false);
    expect(matchesSelector(undefined, {})).toBe(true);
  });
});
