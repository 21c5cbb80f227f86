/**
 * Request objectives: the Gateway API Inference Extension's InferenceObjective, as the endpoint picker
 * reads it. A client (or the gateway, from its auth policy) names an objective in the request header
 * `x-gateway-inference-objective`; the objective carries an integer priority. A request whose
 * objective has a NEGATIVE priority is sheddable: while every worker it could go to is saturated
 * (load/saturation.ts), the router answers it with a JSON 429 instead of adding it to a queue
 * (routing/admission.ts). Priority 0 and above is never shed. An absent header, or a name the table
 * does not know, has priority 0: the endpoint picker's default objective.
 *
 * The table comes from `--objective NAME=PRIORITY` (repeatable; `objective:` in the YAML file) and,
 * with `--inference-pool`, from the pool's InferenceObjective resources in Kubernetes
 * (discovery/kube-objectives.ts), which win over a flag of the same name.
 * Pure: no timers, metrics or logging.
 */

export { OBJECTIVE_HEADER } from '../extproc/headers.js';

/** The priority of an absent or unknown objective. */
export const DEFAULT_PRIORITY = 0;

export class ObjectiveTable {
  private readonly configured: ReadonlyMap<string, number>;
  private live: ReadonlyMap<string, number> = new Map();

  /**
   * `configured`: the `--objective` flags. `watched`: objectives also come from Kubernetes
   * (discovery/kube-objectives.ts, `setWatched`), so the set may change at any time.
   */
  constructor(
    configured: ReadonlyMap<string, number> = new Map(),
    readonly watched = false,
  ) {
    this.configured = new Map(configured);
  }

  /** The watched objectives, the whole set (replacing the last one); they win over configured ones. */
  setWatched(objectives: ReadonlyMap<string, number>): void {
    this.live = new Map(objectives);
  }

  /** True when some objective is sheddable (a negative priority): only then is saturation checked. */
  get sheds(): boolean {
    for (const [name, p] of this.configured) if ((this.live.get(name) ?? p) < 0) return true;
    for (const p of this.live.values()) if (p < 0) return true;
    return false;
  }

  /** Every known objective and its priority (configured, overridden by watched ones). */
  entries(): Map<string, number> {
    const out = new Map(this.configured);
    for (const [name, p] of this.live) out.set(name, p);
    return out;
  }

  /** The priority of objective `name` (DEFAULT_PRIORITY when absent or unknown). */
  priority(name: string | undefined): number {
    if (name === undefined) return DEFAULT_PRIORITY;
    return this.live.get(name) ?? this.configured.get(name) ?? DEFAULT_PRIORITY;
  }
}

/** Parses `NAME=PRIORITY` specs (an integer priority; a name given once); throws a RangeError naming a bad one. */
export function parseObjectiveSpecs(specs: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const spec of specs) {
    const eq = spec.lastIndexOf('=');
    const name = eq > 0 ? spec.slice(0, eq).trim() : '';
    const raw = eq > 0 ? spec.slice(eq + 1).trim() : '';
    if (name === '' || !/^[+-]?\d{1,9}$/.test(raw)) {
      throw new RangeError(`--objective: expected NAME=PRIORITY (an integer), got "${spec}"`);
    }
    if (out.has(name)) throw new RangeError(`--objective: objective "${name}" given twice`);
    out.set(name, Number(raw));
  }
  return out;
}
