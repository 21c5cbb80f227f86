/**
 * The Node.js (V8) flags the router is launched with: the package's `bin` shebang, `npm start`, the
 * container's ENTRYPOINT and the benchmarks all start `node` with ROUTER_NODE_FLAGS
 * (test/unit/runtime/node-flags.test.ts keeps them in agreement).
 *
 * Why: after an idle spell V8 sizes the heap for an idle process. It shrinks the young generation
 * (down to 1 MB semi-spaces) and, once its memory reducer has run a full GC, sets the old generation's
 * next GC just above what is live. A router that then receives large bodies (a 220 KB prompt
 * allocates ~0.3 MB of strings to parse and route) scavenges every few requests, promotes what is in
 * flight at each scavenge, and runs a mark-compact every ~250 ms until the limits grow back
 * (`--trace-gc`: ten in four seconds, 10-35 ms each plus their incremental steps).
 * - `--min-semi-space-size=16`: the young generation stays at 2 x 16 MB (V8's default maximum for a
 *   64-bit process) for the process's whole life;
 * - `--initial-old-space-size=128`: no full GC is scheduled for an old generation below 128 MB (the
 *   router's own is ~45-60 MB: trees, code, metrics).
 * Measured (issue 15: 220 KB prompts at concurrency 16 through Envoy, router CPU per request from
 * /proc, four rounds of 400 each after 30 s of idle; docs/benchmarks.md, Analysis, 2026-12-02 14:09;
 * `npx tsx bench/idle-gc.bench.ts` measures it with and without the flags):
 * no flags 1,100-3,400 us (garbage collection up to 37% of the router's busy time), semi-space alone
 * 1,100-2,875, old space alone 1,350-1,800, both 950-1,350; ~1,000-1,100 us warm without idle. Small
 * requests unchanged (247 vs 257 us). The cost is memory the heap may hold before collecting: up to
 * ~48 MB of young generation and an old generation allowed to reach 128 MB before its first full GC.
 * The shebang needs an `env` that takes `-S` (coreutils 8.30+, BSD and macOS).
 */

export const ROUTER_NODE_FLAGS: readonly string[] = [
  '--min-semi-space-size=16',
  '--initial-old-space-size=128',
];

/** The flags of ROUTER_NODE_FLAGS whose name `execArgv` does not set (any value counts as set). */
export function missingNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  const given = new Set(execArgv.map((a) => a.split('=')[0]!.replaceAll('_', '-')));
  return ROUTER_NODE_FLAGS.filter((f) => !given.has(f.split('=')[0]!));
}

/**
 * A note for the log when this process was started without some of ROUTER_NODE_FLAGS (e.g. a
 * hand-written `node dist/src/cli.js`); undefined when none is missing.
 */
export function nodeFlagsNote(execArgv: readonly string[] = process.execArgv): string | undefined {
  const missing = missingNodeFlags(execArgv);
  if (missing.length === 0) return undefined;
  return (
    `node was started without ${missing.join(' ')}: after idle spells, large request bodies cost up to ` +
    `2x the CPU in garbage collection; start the router as \`node ${ROUTER_NODE_FLAGS.join(' ')} ` +
    `dist/src/cli.js\` (npm start, the bin script and the container image do)`
  );
}
