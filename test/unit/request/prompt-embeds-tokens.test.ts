/**
 * The prompt tokens of a `prompt_embeds` tensor, read from real torch.save payloads
 * (test/fixtures/prompt-embeds, written by scripts/gen-prompt-embeds-fixture.py with the tokens
 * vLLM's loader takes from each), and bounded on hostile ones.
 */
import { readFileSync } from 'node:fs';
import { deflateRawSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { promptEmbedsTokens } from '../../../src/request/prompt-embeds-tokens.js';
import { PieceText } from '../../../src/util/piece-text.js';

interface Fixture {
  name: string;
  tokens: number | null;
  base64: string;
}
const FIXTURES = (
  JSON.parse(readFileSync(new URL('../../fixtures/prompt-embeds/tensors.json', import.meta.url), 'utf8')) as {
    tensors: Fixture[];
  }
).tensors;
const byName = (name: string) => FIXTURES.find((f) => f.name === name)!;

/** A zip whose first entry is `name` holding `data` (stored, or deflated). */
function zip(name: string, data: Buffer, method = 0): Buffer {
  const header = Buffer.alloc(30);
  header.writeUInt32LE(0x04034b50, 0);
  header.writeUInt16LE(method, 8);
  header.writeUInt32LE(data.length, 18);
  header.writeUInt32LE(data.length, 22);
  header.writeUInt16LE(Buffer.byteLength(name), 26);
  return Buffer.concat([header, Buffer.from(name), data]);
}

/** The data.pkl of a fixture, from its (uncompressed) first zip entry. */
function dataPkl(f: Fixture): Buffer {
  const raw = Buffer.from(f.base64, 'base64');
  const start = 30 + raw.readUInt16LE(26) + raw.readUInt16LE(28);
  // torch.save writes the entry's sizes in a data descriptor after it (general purpose flag bit 3).
  return raw.subarray(start, raw.indexOf(Buffer.from('PK\x07\x08', 'latin1'), start));
}

describe('prompt_embeds tokens', () => {
  it.each(FIXTURES.map((f) => [f.name, f] as const))(
    'torch.save payload "%s": the tokens vLLM takes from it',
    (_name, f) => {
      expect(promptEmbedsTokens(f.base64)).toBe(f.tokens ?? undefined);
    },
  );

  it('reads a payload parsed into pieces (a long base64 string of a large body)', () => {
    const f = byName('300 tokens, float32');
    const pieces = new PieceText([f.base64.slice(0, 1000), f.base64.slice(1000, 5000), f.base64.slice(5000)]);
    expect(promptEmbedsTokens(pieces)).toBe(300);
  });

  it('decodes only the head of a payload of megabytes', () => {
    const f = byName('7 tokens, float16');
    const huge = f.base64 + 'A'.repeat(8 << 20);
    expect(promptEmbedsTokens(huge)).toBe(7);
  });

  it('the zips built below read as torch.save wrote them (the refusals that follow are for their one change)', () => {
    const pkl = dataPkl(byName('7 tokens, float16'));
    expect(pkl.at(-1)).toBe(0x2e); // the pickle's STOP
    expect(promptEmbedsTokens(zip('archive/data.pkl', pkl).toString('base64'))).toBe(7);
  });

  it.each([
    ['not base64 of a zip', Buffer.from('hello world').toString('base64')],
    ['an empty payload', 'AAAA'],
    [
      'a deflated data.pkl',
      zip('archive/data.pkl', deflateRawSync(dataPkl(byName('7 tokens, float16'))), 8).toString('base64'),
    ],
    [
      'another first entry',
      zip('archive/other.pkl', dataPkl(byName('7 tokens, float16'))).toString('base64'),
    ],
    [
      'a truncated pickle',
      zip('archive/data.pkl', dataPkl(byName('7 tokens, float16')).subarray(0, 60)).toString('base64'),
    ],
    [
      'a name longer than the head',
      (() => {
        const z = zip('archive/data.pkl', Buffer.alloc(10));
        z.writeUInt16LE(0xffff, 26);
        return z.toString('base64');
      })(),
    ],
    [
      'a string length past the end',
      zip('archive/data.pkl', Buffer.from([0x80, 0x02, 0x58, 0xff, 0xff, 0xff, 0x7f])).toString('base64'),
    ],
    ['marks without end', zip('archive/data.pkl', Buffer.alloc(3000, 0x28)).toString('base64')],
    [
      'a memo read never written',
      zip('archive/data.pkl', Buffer.from([0x80, 0x02, 0x68, 0x07, 0x2e])).toString('base64'),
    ],
    [
      'a bare number',
      zip('archive/data.pkl', Buffer.from([0x80, 0x02, 0x4b, 0x07, 0x2e])).toString('base64'),
    ],
  ])('%s: undefined (priced by its key alone)', (_name, b64) => {
    expect(promptEmbedsTokens(b64)).toBeUndefined();
  });

  it('a rebuild call with a size that is no count of tokens is refused', () => {
    // The 7-token payload's pickle with its first dimension (BININT1 7) made LONG1 of -1.
    const pkl = dataPkl(byName('7 tokens, float16'));
    const at = pkl.indexOf(Buffer.from([0x4b, 0x07, 0x4b, 0x10]));
    expect(at).toBeGreaterThan(0);
    const hostile = Buffer.concat([
      pkl.subarray(0, at),
      Buffer.from([0x8a, 0x01, 0xff]),
      pkl.subarray(at + 2),
    ]);
    expect(promptEmbedsTokens(zip('archive/data.pkl', hostile).toString('base64'))).toBeUndefined();
    const fine = Buffer.concat([pkl.subarray(0, at), Buffer.from([0x8a, 0x01, 0x09]), pkl.subarray(at + 2)]);
    expect(promptEmbedsTokens(zip('archive/data.pkl', fine).toString('base64'))).toBe(9);
  });
});
