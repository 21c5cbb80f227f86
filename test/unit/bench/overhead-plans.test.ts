import { describe, expect, it } from 'vitest';
import {
  cpuPlans,
  isOverheadScenario,
  OVERHEAD_SCENARIOS,
  profileLoads,
  saturationBudget,
  selectPlans,
  type OverheadPlan,
  type OverheadResult,
  type OverheadRun,
  type RouterProfile,
} from '../../../bench/overhead-bench.js';
import { renderOverhead } from '../../../bench/report-sections.js';

/** An overhead result on a 2-core host with `p` filled in. */
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

describe('overhead benchmark: the concurrency-64 CPU budget', () => {
  const arm = (reqPerSec: number) => ({
    errors: 0,
    reqPerSec,
    tokPerSec: 0,
    latencyP50Ms: 0,
    ttftP50Ms: 0,
    ttftMeanMs: 0,
  });
  // Figures of the shape measured on the 2-core host: both arms keep the host busy.
  const run: OverheadRun = {
    scenario: 'small',
    concurrency: 64,
    requests: 3000,
    arms: { direct: arm(4000), envoy: arm(3200), router: arm(2000) },
    addedByEnvoyP50Ms: 5,
    addedByEnvoyP99Ms: 20,
    addedByRouterP50Ms: 11.5,
    addedByRouterP99Ms: 40,
    addedByRouterMeanMs: 12,
    throughputRatioRouterOverEnvoy: 0.625,
    routerCpuMs: 480,
    routerCpuPerRequestUs: 160,
    envoyCpuMs: 900,
    envoyCpuPerRequestUs: 300,
    envoyPlainCpuPerRequestUs: 190,
    tokenEvents: 3000,
    host: { cpuPerRequestUs: { envoy: 610, router: 980 }, busyFraction: { envoy: 0.97, router: 0.98 } },
  };

  it('prices the target in host CPU per request at the busy share arm c reached', () => {
    const b = saturationBudget(run, 2)!;
    // 1 / (1 / 3200 + 3 ms / 64) requests/s; 0.98 x 2 cores x (1 / 3200 + 3 ms / 64) s - 610 us.
    expect(b.neededReqPerSec).toBe(2782.6);
    expect(b.allowedUs).toBe(94.4);
    expect(b.hostAddedUs).toBe(370);
    expect(b.envoyAddedUs).toBe(110);
    expect(b.routerUs).toBe(160);
    // Little's law on the throughputs: 64 / 2000 - 64 / 3200 s.
    expect(b.littleMs).toBe(12);
  });

  it('arm b leaving the host idle leaves arm c more; a busier arm c may spend more', () => {
    const base = saturationBudget(run, 2)!.allowedUs;
    const idleB = { ...run, host: { ...run.host!, cpuPerRequestUs: { envoy: 400, router: 980 } } };
    expect(saturationBudget(idleB, 2)!.allowedUs).toBeCloseTo(base + 210, 0);
    const lessBusyC = { ...run, host: { ...run.host!, busyFraction: { envoy: 0.97, router: 0.8 } } };
    expect(saturationBudget(lessBusyC, 2)!.allowedUs).toBeLessThan(base);
  });

  it('needs both arms measured on the host', () => {
    expect(saturationBudget({ ...run, host: undefined }, 2)).toBeUndefined();
    expect(saturationBudget({ ...run, envoyPlainCpuPerRequestUs: undefined }, 2)).toBeUndefined();
  });

  it('the report states the budget and the measured shares, and the plain Envoy CPU in the runs table', () => {
    const md = renderOverhead(result({ runs: [run] })).markdown;
    expect(md).toContain('2 cores 97% busy and arm c 98%');
    expect(md).toContain('allows 94 us more host CPU per request than arm b');
    expect(md).toContain("Envoy's own ext_proc work 110 us");
    expect(md).toContain('| 160 / 300 (190) |');
  });
});
