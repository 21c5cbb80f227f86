import { describe, expect, it } from 'vitest';
import {
  cpuPlans,
  isOverheadScenario,
  OVERHEAD_SCENARIOS,
  profileLoads,
  selectPlans,
  type OverheadPlan,
  type OverheadResult,
  type RouterProfile,
} from '../../../bench/overhead-bench.js';
import { renderOverhead } from '../../../bench/report-sections.js';

describe('overhead benchmark: scenario filter', () => {
  it.each([
    ['small', true],
    ['stream64', true],
    ['stream256', true],
    ['long-prompt', true],
    ['long_prompt', false],
    ['', false],
    ['stream', false],
  ])('isOverheadScenario(%j) is %s', (name, ok) => {
    expect(isOverheadScenario(name)).toBe(ok);
  });

  const all: OverheadPlan[] = [
    { scenario: 'small', concurrency: 16, count: 3000 },
    { scenario: 'long-prompt', concurrency: 16, count: 400 },
    { scenario: 'small', concurrency: 64, count: 3000 },
    { scenario: 'long-prompt', concurrency: 150, count: 300 },
  ];

  it.each([
    ['no filter keeps every plan', undefined, [0, 1, 2, 3]],
    ['one scenario keeps its plans in order', ['long-prompt'], [1, 3]],
    ['several scenarios', ['small', 'long-prompt'], [0, 1, 2, 3]],
    ['a scenario without plans leaves none', ['stream256'], []],
  ] as const)('%s', (_, scenarios, kept) => {
    expect(selectPlans(all, scenarios)).toEqual(kept.map((i) => all[i]));
  });

  it('the CPU plans cover every scenario of the CPU comparison', () => {
    expect(selectPlans(cpuPlans(false), ['long-prompt'])).toEqual([
      { scenario: 'long-prompt', concurrency: 16, count: 400 },
    ]);
    expect(OVERHEAD_SCENARIOS).toEqual(['small', 'stream64', 'stream256', 'long-prompt']);
  });
});

describe('overhead benchmark: profile passes', () => {
  it.each([false, true])(
    'quick=%s: the long-prompt pass profiles 220 KB prompts only, after a warm-up of them',
    (quick) => {
      const { hotPath, longPrompt } = profileLoads(quick);
      expect(hotPath.load.map((s) => s.scenario)).toEqual(['small', 'stream256']);
      expect(longPrompt.load.map((s) => s.scenario)).toEqual(['long-prompt']);
      expect(longPrompt.load[0]!.concurrency).toBe(16);
      const warm = longPrompt.warmup.find((s) => s.scenario === 'long-prompt');
      expect(warm?.count).toBeGreaterThan(0);
      // The full pass profiles steady state: it first sends as many 220 KB prompts as it profiles.
      if (!quick) expect(warm!.count).toBeGreaterThanOrEqual(longPrompt.load[0]!.count);
      // The warm-up uses other prompts than the profiled load.
      expect(warm?.seed).not.toBe(longPrompt.load[0]!.seed);
    },
  );

  const profile = (load: string, fn: string): RouterProfile => ({
    load,
    samples: 100,
    topFunctions: [{ name: fn, percent: 12.5 }],
    byModule: [{ name: 'src/request/inference-request.js', percent: 20 }],
  });
  const result = (p: Partial<OverheadResult>): OverheadResult => ({
    benchmark: 'overhead',
    info: {
      command: 'npm run bench -- overhead',
      cores: 2,
      cpu: 'test',
      node: 'v20',
      date: '2026-12-01T00:00:00.000Z',
      quick: false,
      loadAvgAtStart: 1,
    },
    setup: {},
    runs: [],
    targets: [],
    ...p,
  });

  it('renders one section per profile pass that ran', () => {
    const both = renderOverhead(
      result({
        profile: profile('3000 small requests at concurrency 64', 'respond'),
        longPromptProfile: profile('400 220 KB prompts at concurrency 16', 'parseInferenceRequest'),
      }),
    ).markdown;
    expect(both).toContain('### Router CPU profile (hot path)');
    expect(both).toContain('### Router CPU profile (220 KB prompts)');
    expect(both).toContain('400 220 KB prompts at concurrency 16; 100 busy samples');
    expect(both.indexOf('`respond`')).toBeLessThan(both.indexOf('`parseInferenceRequest`'));
    const hotOnly = renderOverhead(result({ profile: profile('small', 'respond') })).markdown;
    expect(hotOnly).toContain('### Router CPU profile (hot path)');
    expect(hotOnly).not.toContain('220 KB prompts)');
  });
});
