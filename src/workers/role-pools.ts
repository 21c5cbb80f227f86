/**
 * The router's three role pools (regular, prefill, decode) and the reads across them.
 *
 * Pools follow the registry: the composition root calls `reconcile()` whenever the registry's
 * membership changes (ServiceRegistry.onChange: a registration, a deregistration, a janitor sweep
 * of expired entries), and the request path reconciles the pool it selects from (selector.ts). So
 * `members()` — what the metrics scrape reads — is current without the scrape mutating anything.
 * `workers()` reconciles first, for the explicit reads that must also see an expiry the janitor has
 * not swept yet (admin /workers, health-check rounds, Router.workers()).
 */
import type { CacheReportCounts } from '../routing/cache-report.js';
import type { Policy } from '../routing/policy.js';
import { ROLES, type Role } from './role.js';
import type { Worker } from './worker.js';
import type { WorkerPool } from './worker-pool.js';

export class RolePools {
  readonly byRole: Readonly<Record<Role, WorkerPool>>;

  constructor(create: (role: Role) => WorkerPool) {
    const pools = {} as Record<Role, WorkerPool>;
    for (const role of ROLES) pools[role] = create(role);
    this.byRole = Object.freeze(pools);
  }

  /** Brings every pool in line with the registry. */
  reconcile(): void {
    for (const role of ROLES) this.byRole[role].reconcile();
  }

  /** Current members of every pool, without reconciling (no side effect). */
  members(): Worker[] {
    const out: Worker[] = [];
    for (const role of ROLES) out.push(...this.byRole[role].workers);
    return out;
  }

  /** Reconciles, then lists every member. */
  workers(): Worker[] {
    this.reconcile();
    return this.members();
  }

  /** Per-worker cache tree size (characters) of every pool whose policy keeps one. No side effect. */
  treeSizes(): Array<[Worker, number]> {
    const out: Array<[Worker, number]> = [];
    for (const role of ROLES) {
      const pool = this.byRole[role];
      const sizes = (pool.policy as { treeChars?: () => Map<string, number> }).treeChars?.();
      if (!sizes) continue;
      for (const w of pool.workers) out.push([w, sizes.get(w.id) ?? 0]);
    }
    return out;
  }

  /** The cache reports counted by every pool whose policy checks its picture (routing/cache-report.ts). */
  cacheReports(): Array<[Role, CacheReportCounts]> {
    const out: Array<[Role, CacheReportCounts]> = [];
    for (const role of ROLES) {
      const counts = (this.byRole[role].policy as { cacheReports?: CacheReportCounts }).cacheReports;
      if (counts !== undefined) out.push([role, counts]);
    }
    return out;
  }

  /** Policies that asked for periodic maintenance, with their interval. */
  maintained(): Array<{ role: Role; policy: Policy; intervalMs: number }> {
    const out: Array<{ role: Role; policy: Policy; intervalMs: number }> = [];
    for (const role of ROLES) {
      const policy = this.byRole[role].policy;
      if (policy.maintain && policy.maintenanceIntervalMs !== undefined)
        out.push({ role, policy, intervalMs: policy.maintenanceIntervalMs });
    }
    return out;
  }
}
