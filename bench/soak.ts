/**
 * `npm run soak -- [--duration-s 120] [--mode regular|pd|both] [--concurrency 32] [--seed 7] [--kv-events]
 *   [--replicas N [--fail-open]] [--fallback]`
 *
 * Each mode runs for --duration-s (so `both`, the default, takes about twice that).
 *
 * The chaos soak of issue 7 (test/support/soak-run.ts explains the load, the faults and the
 * invariants): real Envoy, the router in-process, 8 simulated workers, for each mode in turn.
 * Prints progress lines on stderr and one JSON summary per mode on stdout; exits 1 when an invariant
 * is violated (final loads not 0, unclear errors, unexplained resets, accounting mismatch, or the heap
 * / RSS growing faster than --max-heap-slope / --max-rss-slope bytes/s after warm-up, default 256 KiB/s
 * and 512 KiB/s). `--kv-events`: the workers publish KV events and the router routes on them (exact
 * mode); the run also fails when the router's index of a worker does not converge to its cache.
 * `--replicas N` (N >= 2): N router replicas as child processes behind Envoy (health
 * checks, session affinity), and a replica chaos that crashes (SIGKILL) or drains (SIGTERM) one every
 * 4 s and starts it again; `--fail-open` renders Envoy with `failure_mode_allow` and its fallback.
 * `--fallback`: regular mode with fallback endpoints (Envoy's override_host policy, one retry, the
 * router's `--fallback-endpoints 1`); the summary counts the failovers.
 */
import { parseArgs } from 'node:util';
import { runSoak, soakViolations } from '../test/support/soak-run.js';

const { values } = parseArgs({
  options: {
    'duration-s': { type: 'string', default: '120' },
    mode: { type: 'string', default: 'both' },
    concurrency: { type: 'string', default: '32' },
    seed: { type: 'string', default: '7' },
    'max-heap-slope': { type: 'string', default: String(256 * 1024) },
    'max-rss-slope': { type: 'string', default: String(512 * 1024) },
    'kv-events': { type: 'boolean', default: false },
    replicas: { type: 'string', default: '1' },
    'fail-open': { type: 'boolean', default: false },
    fallback: { type: 'boolean', default: false },
  },
});
const replicas = Number(values.replicas);
const durationS = Number(values['duration-s']);
const modes = values.mode === 'both' ? (['regular', 'pd'] as const) : [values.mode as 'regular' | 'pd'];
const badFallback = values.fallback && modes.some((m) => m !== 'regular');
if (!(durationS > 0) || !(replicas >= 1) || modes.some((m) => m !== 'regular' && m !== 'pd') || badFallback) {
  process.stderr.write(
    'usage: npm run soak -- [--duration-s N] [--mode regular|pd|both] [--kv-events] [--replicas N [--fail-open]] [--fallback (with --mode regular)]\n',
  );
  process.exit(2);
}

let crashes = 0;
process.on('uncaughtException', (err) => {
  crashes++;
  process.stderr.write(`uncaught exception: ${err.stack ?? String(err)}\n`);
});
process.on('unhandledRejection', (err) => {
  crashes++;
  process.stderr.write(`unhandled rejection: ${String(err)}\n`);
});

let failed = false;
for (const mode of modes) {
  process.stderr.write(`soak ${mode}: ${durationS} s\n`);
  const summary = await runSoak({
    mode,
    durationS,
    concurrency: Number(values.concurrency),
    seed: Number(values.seed),
    kvEvents: values['kv-events'],
    replicas,
    failOpen: values['fail-open'],
    fallback: values.fallback,
    log: (line) => process.stderr.write(`  ${mode} ${line}\n`),
  });
  const violations = soakViolations(summary, {
    heap: Number(values['max-heap-slope']),
    rss: Number(values['max-rss-slope']),
  });
  if (crashes > 0) violations.push(`${crashes} uncaught errors in the process`);
  process.stdout.write(`${JSON.stringify({ ...summary, crashes, violations }, null, 2)}\n`);
  if (violations.length > 0) failed = true;
}
process.exit(failed ? 1 : 0);
