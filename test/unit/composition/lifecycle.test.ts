import { describe, expect, it } from 'vitest';
import { DrainFlag, Lifecycle, type LifecycleStep } from '../../../src/composition/lifecycle.js';

/** Steps that record every call into one shared log. */
function recorder(names: string[], opts: { failStart?: string; failClose?: string; settled?: boolean } = {}) {
  const log: string[] = [];
  const steps: LifecycleStep[] = names.map((name) => ({
    name,
    start: () => {
      log.push(`start ${name}`);
      if (opts.failStart === name) throw new Error(`${name} cannot bind`);
    },
    stopIntake: () => {
      log.push(`stop ${name}`);
    },
    settle: async (timeoutMs) => {
      log.push(`settle ${name} ${timeoutMs}`);
      return opts.settled ?? true;
    },
    close: ({ drained }) => {
      log.push(`close ${name}${drained ? ' drained' : ''}`);
      if (opts.failClose === name) throw new Error(`${name} close failed`);
    },
  }));
  const sleeps: number[] = [];
  const closeErrors: string[] = [];
  const lifecycle = new Lifecycle(steps, {
    drainTimeoutMs: 30_000,
    drainGraceMs: 5_000,
    sleep: async (ms) => {
      sleeps.push(ms);
      log.push(`grace ${ms}`);
    },
    onCloseError: (step) => closeErrors.push(step),
  });
  return { log, sleeps, closeErrors, lifecycle };
}

describe('Lifecycle', () => {
  it('starts in list order and closes in reverse order', async () => {
    const { log, lifecycle } = recorder(['a', 'b', 'c']);
    await lifecycle.start();
    expect(log).toEqual(['start a', 'start b', 'start c']);
    log.length = 0;
    await lifecycle.close();
    expect(log).toEqual(['stop a', 'stop b', 'stop c', 'close c', 'close b', 'close a']);
    expect(lifecycle.draining).toBe(true);
  });

  it('close is idempotent: concurrent and repeated calls share one shutdown', async () => {
    const { log, lifecycle } = recorder(['a', 'b']);
    await lifecycle.start();
    log.length = 0;
    const first = lifecycle.close();
    expect(lifecycle.close()).toBe(first);
    await first;
    await lifecycle.close();
    expect(log.filter((l) => l.startsWith('close'))).toEqual(['close b', 'close a']);
  });

  it('a failed start closes only the steps already started, newest first, and rethrows', async () => {
    const { log, lifecycle } = recorder(['a', 'b', 'c', 'd'], { failStart: 'c' });
    await expect(lifecycle.start()).rejects.toThrow('c cannot bind');
    expect(log).toEqual(['start a', 'start b', 'start c', 'stop a', 'stop b', 'close b', 'close a']);
  });

  it('an error while closing one step is reported and the others still close', async () => {
    const { log, closeErrors, lifecycle } = recorder(['a', 'b', 'c'], { failClose: 'b' });
    await lifecycle.start();
    await lifecycle.close();
    expect(log.filter((l) => l.startsWith('close'))).toEqual(['close c', 'close b', 'close a']);
    expect(closeErrors).toEqual(['b']);
  });

  it('drain: flag on, intake stopped in order, the grace setting, then settle with the timeout setting', async () => {
    const flag = new DrainFlag();
    const { log, sleeps, lifecycle } = recorder(['a', 'b']);
    const withFlag = new Lifecycle(lifecycle.steps, {
      drainTimeoutMs: 12_000,
      drainGraceMs: 3_000,
      flag,
      sleep: async (ms) => {
        sleeps.push(ms);
        log.push(`grace ${ms}`);
      },
    });
    await withFlag.start();
    log.length = 0;
    expect(flag.draining).toBe(false);
    expect(await withFlag.drain()).toBe(true);
    expect(flag.draining).toBe(true);
    expect(log).toEqual(['stop a', 'stop b', 'grace 3000', 'settle a 12000', 'settle b 12000']);
    expect(sleeps).toEqual([3000]);
  });

  it('drain arguments override the settings; a zero grace does not wait; intake stops once', async () => {
    const { log, sleeps, lifecycle } = recorder(['a']);
    await lifecycle.start();
    log.length = 0;
    expect(await lifecycle.drain(0, 0)).toBe(true);
    expect(await lifecycle.drain(10_000)).toBe(true);
    expect(log).toEqual(['stop a', 'settle a 0', 'grace 5000', 'settle a 10000']);
    expect(sleeps).toEqual([5000]);
  });

  it('drain reports false when a step did not settle in time', async () => {
    const { lifecycle } = recorder(['a', 'b'], { settled: false });
    await lifecycle.start();
    expect(await lifecycle.drain(1, 0)).toBe(false);
  });

  it('close after a drain tells every step it was drained, and does not stop the intake twice', async () => {
    const { log, lifecycle } = recorder(['a', 'b']);
    await lifecycle.start();
    await lifecycle.drain(0, 0);
    log.length = 0;
    await lifecycle.close();
    expect(log).toEqual(['close b drained', 'close a drained']);
  });

  it('start twice is an error', async () => {
    const { lifecycle } = recorder(['a']);
    await lifecycle.start();
    await expect(lifecycle.start()).rejects.toThrow(/already started/);
    await lifecycle.close();
  });

  it('a step started while close() ran is closed too', async () => {
    let release: () => void = () => undefined;
    const log: string[] = [];
    const lifecycle = new Lifecycle(
      [
        { name: 'fast', close: () => void log.push('close fast') },
        {
          name: 'slow',
          start: () => new Promise<void>((resolve) => (release = resolve)),
          close: () => void log.push('close slow'),
        },
      ],
      { drainTimeoutMs: 0, drainGraceMs: 0 },
    );
    const starting = lifecycle.start();
    await Promise.resolve();
    const closing = lifecycle.close();
    release();
    await expect(starting).rejects.toThrow(/closed while slow was starting/);
    await closing;
    expect(log.sort()).toEqual(['close fast', 'close slow']);
  });
});
