/**
 * CPU time the hypervisor took from this VM (`steal` in /proc/stat), to tell a cell measured on a
 * quiet host from one measured while a neighbour ran: on the 2-core benchmark VM, steal is 0 in most
 * 5-second windows and 10-45% in a few minutes of some runs, and the cells measured in those minutes
 * are the outliers (a round-robin cell 1.59x its twin run).
 */
import { readFileSync } from 'node:fs';

export interface CpuTicks {
  readonly steal: number;
  readonly total: number;
  /** idle + iowait: time no process of this VM ran. */
  readonly idle: number;
}

/** The aggregate `cpu` line of a /proc/stat text; undefined if it has none. */
export function parseCpuTicks(stat: string): CpuTicks | undefined {
  const line = stat.split('\n').find((l) => l.startsWith('cpu '));
  if (line === undefined) return undefined;
  // user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user).
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  if (f.length < 8 || f.some((v) => !Number.isFinite(v))) return undefined;
  return { steal: f[7]!, total: f.reduce((a, b) => a + b, 0), idle: f[3]! + f[4]! };
}

/** This host's ticks now; undefined where /proc/stat cannot be read (not Linux). */
export function cpuTicks(): CpuTicks | undefined {
  try {
    return parseCpuTicks(readFileSync('/proc/stat', 'utf8'));
  } catch {
    return undefined;
  }
}

/** Share of the CPU time between two readings that was stolen, 0-1; undefined without both. */
export function stealFraction(before: CpuTicks | undefined, after: CpuTicks | undefined): number | undefined {
  if (before === undefined || after === undefined) return undefined;
  const total = after.total - before.total;
  return total > 0 ? (after.steal - before.steal) / total : undefined;
}

/** /proc/stat counts in USER_HZ, 100 per second on Linux. */
const MS_PER_TICK = 10;

/**
 * CPU time every process of this VM used between two readings, ms summed over cores (user, nice,
 * system, irq, softirq: the total without idle, iowait and steal); undefined without both.
 */
export function hostBusyMs(before: CpuTicks | undefined, after: CpuTicks | undefined): number | undefined {
  if (before === undefined || after === undefined) return undefined;
  const busy = (t: CpuTicks): number => t.total - t.idle - t.steal;
  return (busy(after) - busy(before)) * MS_PER_TICK;
}
