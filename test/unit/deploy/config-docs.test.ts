/**
 * docs/configuration.md is generated from the option table (scripts/gen-config-docs.ts) and must not
 * drift from it; `--help` must list every option of the same table.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { OPTIONS, type OptionSpec } from '../../../src/config-schema.js';
import { helpText } from '../../../src/config.js';
import { CONFIG_DOCS_PATH, configDocsMarkdown, renderConfigDocs } from '../../../scripts/gen-config-docs.js';

const options = OPTIONS as readonly OptionSpec[];

describe('docs/configuration.md', () => {
  it('equals the generator output (regenerate: npx tsx scripts/gen-config-docs.ts)', async () => {
    expect(readFileSync(CONFIG_DOCS_PATH, 'utf8')).toBe(await renderConfigDocs());
  });

  it.each(options.map((o) => [o.flag, o] as const))('documents --%s with its key and default', (_f, o) => {
    const md = configDocsMarkdown();
    const row = md.split('\n').find((l) => l.startsWith(`| \`--${o.flag}\` |`));
    expect(row).toBeDefined();
    expect(row).toContain(`\`${o.key}\``);
    if (!Array.isArray(o.default) && o.default !== '') expect(row).toContain(`\`${String(o.default)}\``);
  });

  it('does not call a list comma-separated when its items keep their commas (--kv-event-source W=EP1,EP2)', () => {
    const md = configDocsMarkdown();
    for (const o of options.filter((x) => x.type === 'list')) {
      const row = md.split('\n').find((l) => l.startsWith(`| \`--${o.flag}\` |`)) as string;
      if (o.splitCommas === false) expect(row, o.flag).not.toContain('comma-separated)');
      else expect(row, o.flag).toContain('comma-separated)');
    }
  });

  it('escapes pipes inside cells so every table row keeps five columns', () => {
    const md = configDocsMarkdown([
      { group: 'G', key: 'k', flag: 'k', type: 'string', default: 'a|b', help: 'x | y' },
    ]);
    const row = md.split('\n').find((l) => l.startsWith('| `--k`')) as string;
    expect(row.split(/(?<!\\)\|/).length).toBe(7);
  });
});

describe('--help', () => {
  it.each(options.map((o) => [o.flag, o] as const))('lists --%s', (_f, o) => {
    // A switch on by default shows its --no- form too (`--[no-]flag`).
    const name = o.type === 'bool' && o.default === true ? `\\[no-\\]${o.flag}` : o.flag;
    expect(helpText()).toMatch(new RegExp(`^  --${name}(\\s|$)`, 'm'));
  });
});
