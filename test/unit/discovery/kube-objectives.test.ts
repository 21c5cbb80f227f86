/** Which InferenceObjectives belong to the pool, and their priorities (discovery/kube-objectives.ts). */
import { describe, expect, it } from 'vitest';
import { objectiveOf, type InferenceObjectiveObject } from '../../../src/discovery/kube-objectives.js';

const obj = (name: string | undefined, spec: InferenceObjectiveObject['spec']): InferenceObjectiveObject => ({
  ...(name === undefined ? {} : { metadata: { name } }),
  ...(spec === undefined ? {} : { spec }),
});

describe('objectiveOf', () => {
  it.each<[string, InferenceObjectiveObject, ReturnType<typeof objectiveOf>]>([
    [
      'a negative priority',
      obj('batch', { priority: -1, poolRef: { name: 'vllm' } }),
      { name: 'batch', priority: -1 },
    ],
    ['an unset priority is 0', obj('chat', { poolRef: { name: 'vllm' } }), { name: 'chat', priority: 0 }],
    [
      'a null priority is 0',
      obj('chat', { priority: null, poolRef: { name: 'vllm' } }),
      { name: 'chat', priority: 0 },
    ],
    [
      'the default group and kind, spelt out',
      obj('a', {
        priority: 3,
        poolRef: { name: 'vllm', group: 'inference.networking.k8s.io', kind: 'InferencePool' },
      }),
      { name: 'a', priority: 3 },
    ],
    ['another pool', obj('a', { priority: -1, poolRef: { name: 'other' } }), undefined],
    [
      'another group',
      obj('a', { priority: -1, poolRef: { name: 'vllm', group: 'inference.networking.x-k8s.io' } }),
      undefined,
    ],
    ['another kind', obj('a', { priority: -1, poolRef: { name: 'vllm', kind: 'Service' } }), undefined],
    ['no poolRef', obj('a', { priority: -1 }), undefined],
    ['no spec', obj('a', undefined), undefined],
    ['no name', obj(undefined, { priority: -1, poolRef: { name: 'vllm' } }), undefined],
    ['a fractional priority', obj('a', { priority: -0.5, poolRef: { name: 'vllm' } }), undefined],
    ['a string priority', obj('a', { priority: '-1', poolRef: { name: 'vllm' } }), undefined],
  ])('%s', (_what, o, want) => {
    expect(objectiveOf(o, 'vllm')).toEqual(want);
  });

  it('with a v1alpha2 pool (--inference-pool-group inference.networking.x-k8s.io) takes the poolRefs of that group', () => {
    const alpha = 'inference.networking.x-k8s.io';
    const ref = (group?: string) =>
      obj('a', { priority: -1, poolRef: { name: 'vllm', ...(group !== undefined ? { group } : {}) } });
    expect(objectiveOf(ref(alpha), 'vllm', alpha)).toEqual({ name: 'a', priority: -1 });
    // poolRef.group defaults to inference.networking.k8s.io: the v1 pool of that name, not this one.
    expect(objectiveOf(ref(), 'vllm', alpha)).toBeUndefined();
  });
});
