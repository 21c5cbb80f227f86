import { describe, expect, it } from 'vitest';
import { adapterState, type AdapterFacts } from '../../../src/routing/lora-affinity.js';

const base = 'llama';
const lora = (maxLora: number | undefined, running: string[], waiting: string[] = []) => ({
  ...(maxLora === undefined ? {} : { maxLora }),
  running,
  waiting,
});

describe('adapterState', () => {
  it.each<{ name: string; model: string; facts: AdapterFacts; want: ReturnType<typeof adapterState> }>([
    {
      name: 'running there',
      model: 'sql',
      facts: { lora: lora(2, ['sql']), baseModel: base },
      want: 'active',
    },
    {
      name: 'waiting there while a slot is free: about to run',
      model: 'sql',
      facts: { lora: lora(2, ['chat'], ['sql']), baseModel: base },
      want: 'active',
    },
    {
      name: 'waiting there for a slot other adapters hold: full, not active',
      model: 'sql',
      facts: { lora: lora(1, ['chat'], ['sql']), baseModel: base },
      want: 'full',
    },
    {
      name: 'in flight from this router since the sample',
      model: 'sql',
      facts: { lora: lora(1, ['chat']), baseModel: base, inFlight: new Map([['sql', 1]]) },
      want: 'active',
    },
    {
      name: 'a free slot',
      model: 'sql',
      facts: { lora: lora(2, ['chat']), baseModel: base },
      want: 'free_slot',
    },
    {
      name: 'no adapter at all yet',
      model: 'sql',
      facts: { lora: lora(1, []), baseModel: base },
      want: 'free_slot',
    },
    {
      name: 'every slot taken by others (running and waiting count)',
      model: 'sql',
      facts: { lora: lora(2, ['chat'], ['code']), baseModel: base },
      want: 'full',
    },
    {
      name: "this router's in-flight adapters take slots too (not its base-model requests)",
      model: 'sql',
      facts: {
        lora: lora(2, ['chat']),
        baseModel: base,
        inFlight: new Map([
          ['code', 2],
          [base, 5],
        ]),
      },
      want: 'full',
    },
    {
      name: 'a request for the base model has no adapter',
      model: base,
      facts: { lora: lora(1, ['chat']), baseModel: base },
      want: undefined,
    },
    { name: 'LoRA off (no sample)', model: 'sql', facts: { baseModel: base }, want: undefined },
    {
      name: 'no max_lora label',
      model: 'sql',
      facts: { lora: lora(undefined, ['chat']), baseModel: base },
      want: undefined,
    },
    { name: 'max_lora 0', model: 'sql', facts: { lora: lora(0, []), baseModel: base }, want: undefined },
    {
      name: 'base model unknown: an unlisted name may be an alias of the base',
      model: 'sql',
      facts: { lora: lora(1, ['chat']) },
      want: undefined,
    },
    {
      name: 'base model unknown, adapter listed',
      model: 'chat',
      facts: { lora: lora(1, ['chat']) },
      want: 'active',
    },
    {
      name: 'no model in the request',
      model: '',
      facts: { lora: lora(1, []), baseModel: base },
      want: undefined,
    },
  ])('$name', ({ model, facts, want }) => {
    expect(adapterState(model, facts)).toBe(want);
  });
});
