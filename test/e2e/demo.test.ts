/**
 * The README's first command, `npm run demo` (scripts/demo.ts): Envoy, the router and simulated vLLM
 * workers on loopback, 48 requests and a 4-turn Responses API conversation through Envoy, a summary,
 * and exit 0 only when every request got a 200 and every worker's load is back to 0. Run as a user runs it, as a child process, regular and
 * prefill/decode (`-- --pd`: workers that register over ZMQ). Envoy missing: the demo fails with its
 * install hint, and so does this test.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A demo (tsx compile, Envoy start, 48 requests) gets this long on a loaded CI machine. */
const DEMO_LIMIT_MS = 150_000;

function runDemo(args: string[]): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, so a hung demo can be killed together with its Envoy.
    detached: true,
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  // A demo that hangs is killed, Envoy and all, rather than left behind the test run.
  const guard = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), DEMO_LIMIT_MS);
  return new Promise((resolve) =>
    child.once('exit', (code) => {
      clearTimeout(guard);
      resolve({ code, output });
    }),
  );
}

describe('npm run demo', () => {
  for (const args of [[], ['--pd']]) {
    it(
      `${args.length ? args.join(' ') : 'regular'}: every request answered 200, every load back to 0, exit 0`,
      async () => {
        const { code, output } = await runDemo(args);
        expect(code, output).toBe(0);
        expect(output).toMatch(/HTTP status: 200 x48\n/);
        // Every turn of the chained Responses API conversation reached the worker holding the last one.
        expect(output).toMatch(
          /Responses API: 4 turns chained by previous_response_id, HTTP 200 200 200 200, served by one worker/,
        );
        // The coding session stayed on the worker holding its conversation (in P/D: the prefill worker).
        expect(output).toMatch(
          /Anthropic Messages API: a 4-turn coding session, HTTP 200 200 200 200, its conversation cached on one (prefill )?worker/,
        );
        expect(output).toContain('All loads back to 0: yes');
      },
      DEMO_LIMIT_MS + 10_000,
    );
  }
});
