import { describe, expect, it } from 'vitest';
import { adapterState, type AdapterFacts } from '../../../src/routing/lora-affinity.js';
import { DEFAULT_METRIC_NAMES, parseLoadFigures } from '../../../src/load/metrics-parse.js';

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
      facts: { lora: lora(2, ['sql']), baseModels: [base] },
      want: 'active',
    },
    {
      name: 'waiting there while a slot is free: about to run',
      model: 'sql',
      facts: { lora: lora(2, ['chat'], ['sql']), baseModels: [base] },
      want: 'active',
    },
    {
      name: 'waiting there for a slot other adapters hold: full, not active',
      model: 'sql',
      facts: { lora: lora(1, ['chat'], ['sql']), baseModels: [base] },
      want: 'full',
    },
    {
      name: 'in flight from this router since the sample',
      model: 'sql',
      facts: { lora: lora(1, ['chat']), baseModels: [base], inFlight: new Map([['sql', 1]]) },
      want: 'active',
    },
    {
      name: 'a free slot',
      model: 'sql',
      facts: { lora: lora(2, ['chat']), baseModels: [base] },
      want: 'free_slot',
    },
    {
      name: 'no adapter at all yet',
      model: 'sql',
      facts: { lora: lora(1, []), baseModels: [base] },
      want: 'free_slot',
    },
    {
      name: 'every slot taken by others (running and waiting count)',
      model: 'sql',
      facts: { lora: lora(2, ['chat'], ['code']), baseModels: [base] },
      want: 'full',
    },
    {
      name: "this router's in-flight adapters take slots too (not its base-model requests)",
      model: 'sql',
      facts: {
        lora: lora(2, ['chat']),
        baseModels: [base],
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
      facts: { lora: lora(1, ['chat']), baseModels: [base] },
      want: undefined,
    },
    { name: 'LoRA off (no sample)', model: 'sql', facts: { baseModels: [base] }, want: undefined },
    {
      name: 'no max_lora label',
      model: 'sql',
      facts: { lora: lora(undefined, ['chat']), baseModels: [base] },
      want: undefined,
    },
    { name: 'max_lora 0', model: 'sql', facts: { lora: lora(0, []), baseModels: [base] }, want: undefined },
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
      name: "a second served name of the base model (from the worker's /v1/models list)",
      model: 'llama-chat',
      facts: { lora: lora(1, ['chat']), baseModels: [base, 'llama-chat'] },
      want: undefined,
    },
    {
      name: "this router's requests for a second base name take no adapter slot",
      model: 'sql',
      facts: {
        lora: lora(1, []),
        baseModels: [base, 'llama-chat'],
        inFlight: new Map([['llama-chat', 3]]),
      },
      want: 'free_slot',
    },
    {
      name: 'no model in the request',
      model: '',
      facts: { lora: lora(1, []), baseModels: [base] },
      want: undefined,
    },
  ])('$name', ({ model, facts, want }) => {
    expect(adapterState(model, facts)).toBe(want);
  });
});

describe('adapterState of the data-parallel ranks of one vLLM server (its one unlabelled LoRA gauge)', () => {
  // `vllm serve --enable-lora --max-loras 1 --data-parallel-size 2`: engine 1 runs adapter sql and
  // stepped last; engine 0 is idle. vLLM's lora_requests_info has no engine label (loggers.py).
  const page = [
    'vllm:num_requests_running{engine="0",model_name="llama"} 0.0',
    'vllm:num_requests_running{engine="1",model_name="llama"} 4.0',
    'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 1.7e9',
    'vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",waiting_lora_adapters=""} 1.7000001e9',
    '',
  ].join('\n');
  const engines = parseLoadFigures(page, DEFAULT_METRIC_NAMES, { perEngine: true }).engines!;
  const state = (rank: string, inFlight: Map<string, number> = new Map()) =>
    adapterState('sql', { lora: engines.get(rank)!.lora!, baseModels: [base], inFlight });

  it('an idle rank is not taken for running the adapter another rank runs (it would load it)', () => {
    expect(state('0')).toBe('free_slot');
  });

  it("the rank this router sent the adapter's requests to is where it is active", () => {
    expect(state('1', new Map([['sql', 2]]))).toBe('active');
    expect(state('0', new Map([['chat', 1]]))).toBe('full');
  });
});
