/**
 * The user docs (README.md, docs/*.md but the benchmark log, deploy/) name only what the code has:
 * every `vllm_router_*` metric is registered, every label value they quote is one the code writes,
 * every admin error code they give with a status is answered with that status, every admin endpoint
 * of the README's table is served, and every `--flag` is a router option (or named as another
 * program's). And they name what today's admin API answers that a client must handle.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { OPTIONS, type OptionSpec } from '../../../src/config-schema.js';
import { ADMIN_ALLOWED_METHODS, ADMIN_ERROR_STATUS } from '../../../src/admin/admin-server.js';
import { registeredMetricNames } from '../../support/router-metric-names.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (rel: string): string => readFileSync(path.join(ROOT, rel), 'utf8');

/** The user docs: README, the guides (docs/benchmarks.md is a dated log, not a reference), deploy/. */
const DOCS = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md') && f !== 'benchmarks.md')
    .map((f) => `docs/${f}`),
  'deploy/grafana/dashboards/vllm-extproc-router.json',
  ...readdirSync(path.join(ROOT, 'deploy/kubernetes')).map((f) => `deploy/kubernetes/${f}`),
];
const docs = DOCS.map((file) => ({ file, text: read(file) }));

/** Every source file's text without its comments (a label value must be written, not described). */
function sourceLiterals(): Set<string> {
  const literals = new Set<string>();
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts')) {
        const code = readFileSync(p, 'utf8')
          .replace(/\/\*[\s\S]*?\*\//g, '')
          .replace(/^\s*\/\/.*$/gm, '');
        for (const m of code.matchAll(/'([^'\n]*)'|"([^"\n]*)"/g)) literals.add((m[1] ?? m[2]) as string);
      }
    }
  };
  walk(path.join(ROOT, 'src'));
  return literals;
}

/**
 * Flags of other programs the docs quote (vLLM, SGLang, node, the benchmarks, the simulator, the
 * demo), with their owner: a router flag the docs name must be in the option table.
 */
const OTHER_PROGRAMS_FLAGS: Readonly<Record<string, string>> = {
  'api-key': 'vllm serve',
  'api-server-count': 'vllm serve',
  'data-parallel-hybrid-lb': 'vllm serve',
  'data-parallel-size': 'vllm serve',
  'data-parallel-size-local': 'vllm serve',
  'data-parallel-start-rank': 'vllm serve',
  'enable-auto-tool-choice': 'vllm serve',
  'enable-lora': 'vllm serve',
  'enable-prompt-tokens-details': 'vllm serve',
  'enable-sleep-mode': 'vllm serve',
  'kv-events-config': 'vllm serve',
  'kv-transfer-config': 'vllm serve',
  'lora-modules': 'vllm serve',
  'max-loras': 'vllm serve',
  'max-model-len': 'vllm serve',
  'max-num-batched-tokens': 'vllm serve',
  'scheduling-policy': 'vllm serve',
  'served-model-name': 'vllm serve',
  'tool-call-parser': 'vllm serve',
  'tokenizer-mode': 'vllm serve',
  'dp-size': 'sglang',
  'enable-metrics': 'sglang',
  'enable-priority-scheduling': 'sglang',
  'pool-group': 'the endpoint picker (GAIE epp)',
  'initial-old-space-size': 'node',
  'min-semi-space-size': 'node',
  'build': 'docker compose',
  'entrypoint': 'docker run',
  'set': 'istioctl',
  'spider': 'wget',
  'config': 'the router (YAML file, not an option)',
  'help': 'the router',
  'keep': 'npm run demo',
  'pd': 'npm run demo',
  'kv-events': 'npm run sim / npm run soak',
  'kv-events-replay': 'npm run sim',
  'port': 'npm run sim',
  'role': 'the simulator',
  'fail-open': 'npm run soak',
  'replicas': 'npm run soak / bench',
  'repeats': 'bench/routing-ab.ts',
  'scenarios': 'bench',
  'slow': 'bench/routing-ab.ts',
  'turns': 'bench',
  'n': 'bench/parallel-sampling.bench.ts',
  'update-ms': 'bench/rl-weight-update.bench.ts',
  'workloads': 'bench/routing-ab.ts',
  'prior-': 'the --prior-* options, as a family',
}; // prettier-ignore

describe('the user docs against the code', () => {
  it('name only vllm_router_* metrics the router registers', async () => {
    const known = await registeredMetricNames();
    const unknown = docs.flatMap(({ file, text }) =>
      [...text.matchAll(/vllm_router_[a-z0-9_]*[a-z0-9]/g)]
        .map((m) => m[0])
        // `vllm_router_kv_events_{received,applied,dropped}_total`: a family.
        .filter((n) => !known.has(n) && !text.includes(`${n}_{`))
        .map((n) => `${file}: ${n}`),
    );
    expect([...new Set(unknown)]).toEqual([]);
  });

  it('quote only label values the code writes (metric{label="value"})', () => {
    const literals = sourceLiterals();
    const unknown = docs.flatMap(({ file, text }) =>
      [...text.matchAll(/vllm_router_[a-z0-9_]+\{([^}]*)\}/g)].flatMap((m) =>
        [...(m[1] as string).matchAll(/[a-z_]+=\\?"([^"\\]*)\\?"/g)]
          .map((v) => v[1] as string)
          .filter((v) => !literals.has(v))
          .map((v) => `${file}: ${m[0]}: ${v}`),
      ),
    );
    expect(unknown).toEqual([]);
  });

  it('give each admin error code with the status the admin API answers it with', () => {
    const routerCodes = read('src/request/router-error.ts');
    const wrong = docs.flatMap(({ file, text }) =>
      [...text.matchAll(/\b([45]\d\d) `([a-z_]+)`/g)].flatMap((m) => {
        const [status, code] = [Number(m[1]), m[2] as string];
        const admin = (ADMIN_ERROR_STATUS as Record<string, number>)[code];
        if (admin !== undefined) return admin === status ? [] : [`${file}: ${m[0]} (answered ${admin})`];
        return routerCodes.includes(`| '${code}'`) ? [] : [`${file}: ${m[0]} (no such code)`];
      }),
    );
    expect(wrong).toEqual([]);
  });

  it("list in the README's admin table only endpoints the admin API serves, with their methods", () => {
    const rows = read('README.md')
      .split('\n')
      .filter((l) => /^\| `(GET|POST|DELETE|HEAD) \//.test(l))
      .map((l) => l.split('|')[1] as string);
    expect(rows.length).toBeGreaterThan(3);
    const unserved: string[] = [];
    for (const cell of rows) {
      for (const m of cell.matchAll(/`(?:(GET|POST|DELETE|HEAD) )?(\/[a-z_/]+)/g)) {
        // `/uncordon` after `POST /workers/cordon?url=`: the same prefix.
        const p = m[2]!.startsWith('/workers') || m[1] ? m[2]! : `/workers${m[2]}`;
        const method = m[1] ?? 'POST';
        const allowed = ADMIN_ALLOWED_METHODS[p]?.split(', ') ?? [];
        if (!allowed.includes(method)) unserved.push(`${method} ${p}`);
      }
    }
    expect(unserved).toEqual([]);
  });

  it('name every admin answer a client must handle: HEAD, Allow, registration_conflict', () => {
    const readme = read('README.md');
    const table = readme.slice(readme.indexOf('| admin endpoint'), readme.indexOf('## Architecture'));
    // The read endpoints answer HEAD (probes: curl -I, wget --spider); a 405 names them in Allow.
    for (const p of Object.keys(ADMIN_ALLOWED_METHODS).filter((k) =>
      ADMIN_ALLOWED_METHODS[k]!.includes('HEAD'),
    ))
      expect(ADMIN_ALLOWED_METHODS[p]).toContain('GET');
    expect(table).toMatch(/HEAD/);
    expect(table).toMatch(/`Allow`/);
    // A registration overtaken while it resolved: the code and the counter it is counted under.
    expect(table).toContain(`${ADMIN_ERROR_STATUS.registration_conflict} \`registration_conflict\``);
    expect(table).toContain('vllm_router_discovery_rejected_total{reason="superseded"}');
  });

  it('name only --flags the router has, or that another program named here has', () => {
    const options = OPTIONS as readonly OptionSpec[];
    const known = new Set(options.flatMap((o) => [o.flag, `no-${o.flag}`]));
    const unknown = docs
      .filter(({ file }) => file.endsWith('.md'))
      .flatMap(({ file, text }) =>
        [...text.matchAll(/(?<![\w-])--([a-z][a-z0-9-]*)/g)]
          .map((m) => m[1] as string)
          .filter((f) => !known.has(f) && !Object.hasOwn(OTHER_PROGRAMS_FLAGS, f))
          .map((f) => `${file}: --${f}`),
      );
    expect([...new Set(unknown)]).toEqual([]);
  });

  it('point "below" and "above" at sections that are there', () => {
    const wrong = docs
      .filter(({ file }) => file.endsWith('.md'))
      .flatMap(({ file, text }) => {
        const lines = text.split('\n');
        return lines.flatMap((line, at) =>
          [...line.matchAll(/"([A-Z][^"]{3,80})"\)? (below|above)/g)].flatMap((m) => {
            const title = m[1] as string;
            const heading = lines.findIndex((l) => l.startsWith(`## ${title}`) || l.startsWith(`**${title}`));
            if (heading < 0) return [`${file}:${at + 1}: no section "${title}"`];
            const where = heading > at ? 'below' : 'above';
            return where === m[2] ? [] : [`${file}:${at + 1}: "${title}" is ${where}, not ${m[2]}`];
          }),
        );
      });
    expect(wrong).toEqual([]);
  });
});
