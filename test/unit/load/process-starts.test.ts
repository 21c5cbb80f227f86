import { describe, expect, it } from 'vitest';
import { ProcessStarts } from '../../../src/load/process-starts.js';

describe('ProcessStarts', () => {
  it('a later start time at a URL is a restart; the first one, an equal one or none is not', () => {
    const starts = new ProcessStarts();
    expect(starts.observe('http://a', 100)).toBe(false); // baseline
    expect(starts.observe('http://a', 100)).toBe(false);
    expect(starts.observe('http://a', undefined)).toBe(false);
    expect(starts.observe('http://a', 160.5)).toBe(true);
    expect(starts.observe('http://a', 160.5)).toBe(false);
    expect(starts.observe('http://b', 50)).toBe(false);
  });

  it('a URL fronting two processes (a Service of two pods) reads as one restart at most, not one per scrape', () => {
    const starts = new ProcessStarts();
    const seen = [100, 200, 100, 200, 100, 200].map((s) => starts.observe('http://svc', s));
    expect(seen).toEqual([false, true, false, false, false, false]);
  });

  it('forgets URLs that are no longer scraped: a worker back there starts a new baseline', () => {
    const starts = new ProcessStarts();
    starts.observe('http://a', 100);
    starts.observe('http://b', 100);
    starts.retain(new Set(['http://b']));
    expect(starts.size).toBe(1);
    expect(starts.observe('http://a', 300)).toBe(false);
  });
});
