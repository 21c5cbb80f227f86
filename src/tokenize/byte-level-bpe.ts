/**
 * A fast path for byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, the test fixture): the same ids as
 * `@huggingface/tokenizers` for a text without added tokens, computed per pre-token with a word cache.
 *
 * How the library encodes such a text: pre-tokenize (a regex splits it into words: " the", "123",
 * "\n\n", ...), map each word's UTF-8 bytes to printable characters (GPT-2's bytes_to_unicode), run
 * BPE merges on each mapped word, then look the pieces up. Merges never cross words, so a word's ids
 * depend on the word alone, and real text repeats a small set of words. Profiling showed the
 * per-word byte mapping (a TextEncoder call, an Array.from and a join per word) and the id look-ups
 * as two thirds of the library's encode time, so here each RAW word (before byte mapping) maps
 * straight to its ids in a cache: a hit costs one Map look-up; a miss maps the bytes with a
 * precomputed table and runs the library's own BPE model on the word, exactly as the library does.
 *
 * Pre-tokens are produced exactly as the library produces them, minus the byte mapping: a lone
 * `ByteLevel` pre-tokenizer matches GPT-2's regex (the library's literal, copied below); a `Sequence`
 * runs the library's own pre-tokenizers for every step before its final `ByteLevel`, then that
 * step's regex when it has `use_regex`. Shapes this does not cover (a normalizer, `add_prefix_space`,
 * other pre-tokenizers, a non-BPE model, `fuse_unk`, `byte_fallback`, subword prefixes / suffixes,
 * BPE dropout) get no fast path (`ByteLevelBpe.from` returns undefined) and the library is used.
 * HfTokenizer also checks the fast path against the library on probe texts at load time.
 *
 * Word cache: two generations of at most WORD_CACHE_ENTRIES words each (a hit in the old generation
 * moves to the new one; a full new generation replaces the old one), words of at most
 * MAX_CACHED_WORD characters (a long word, e.g. a space-free CJK paragraph, is encoded directly), so
 * memory stays bounded (~2 x 32 Ki short words and their ids, a few MB); words are stored as flat
 * copies (routing/flat-string.ts), never as slices that would pin the prompt they came from.
 */
import type { Tokenizer } from '@huggingface/tokenizers';
import { flatCopy } from '../routing/flat-string.js';

/** What is used of a library pre-tokenizer step (PreTokenizer, not exported by the package's types). */
interface PreTokenizer {
  pre_tokenize(text: string | string[]): string[];
}

/** GPT-2's pre-tokenizer regex, as `@huggingface/tokenizers` writes it for `ByteLevel` with `use_regex`. */
const GPT2_PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const WORD_CACHE_ENTRIES = 32_768;
const MAX_CACHED_WORD = 64;
/** Pre-tokenizer steps that split text without changing it (run through the library before ByteLevel). */
const SPLITTING_STEPS = new Set(['Split', 'Digits', 'Punctuation', 'WhitespaceSplit']);

/** GPT-2's bytes_to_unicode: byte b -> the printable character BPE vocabularies spell it with. */
const BYTE_CHARS: readonly string[] = (() => {
  const out = new Array<string>(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    out[b] = String.fromCharCode(printable ? b : next++);
  }
  return out;
})();
const utf8 = new TextEncoder();

interface ByteLevelConfig {
  type?: unknown;
  add_prefix_space?: unknown;
  use_regex?: unknown;
  pretokenizers?: unknown;
}

interface BpeModelView {
  encode(tokens: string[]): string[];
  tokens_to_ids: Map<string, number>;
  unk_token_id?: number;
  fuse_unk?: boolean;
}

/** The word list of a text, the library's pre-tokenization without the byte mapping. */
type RawPreTokenizer = (text: string) => readonly string[];

export class ByteLevelBpe {
  private young = new Map<string, readonly number[]>();
  private old = new Map<string, readonly number[]>();

  private constructor(
    private readonly words: RawPreTokenizer,
    private readonly model: BpeModelView,
    private readonly addedIds: ReadonlyMap<string, number>,
  ) {}

  /**
   * The fast path for `tokenizer` (built from `json`), or undefined when its shape is not covered
   * (see the header). `addedIds`: added token contents -> ids (looked up first, as the library does).
   */
  static from(
    json: Record<string, unknown>,
    config: Record<string, unknown>,
    tokenizer: Tokenizer,
    addedIds: ReadonlyMap<string, number>,
  ): ByteLevelBpe | undefined {
    if (json.normalizer !== null && json.normalizer !== undefined) return undefined;
    if (config.remove_space === true || config.do_lowercase_and_remove_accent === true) return undefined;
    const model = json.model as Record<string, unknown> | undefined;
    if (
      model?.type !== 'BPE' ||
      (model.dropout !== null && model.dropout !== undefined) ||
      model.fuse_unk === true ||
      model.byte_fallback === true ||
      (model.continuing_subword_prefix !== null && model.continuing_subword_prefix !== undefined) ||
      (model.end_of_word_suffix !== null && model.end_of_word_suffix !== undefined)
    ) {
      return undefined;
    }
    const view = tokenizer.model as unknown as BpeModelView | null;
    if (view === null || typeof view.encode !== 'function' || !(view.tokens_to_ids instanceof Map)) {
      return undefined;
    }
    const words = rawPreTokenizer(
      json.pre_tokenizer as ByteLevelConfig | null | undefined,
      tokenizer.pre_tokenizer as unknown as PreTokenizer | null,
    );
    return words === undefined ? undefined : new ByteLevelBpe(words, view, addedIds);
  }

  /** Appends the ids of `text` (no added tokens in it, no special tokens added) to `out`. */
  encodeInto(text: string, out: number[]): void {
    for (const word of this.words(text)) {
      const ids = word.length <= MAX_CACHED_WORD ? this.cached(word) : this.encodeWord(word);
      for (let i = 0; i < ids.length; i++) out.push(ids[i] as number);
    }
  }

  private cached(word: string): readonly number[] {
    let ids = this.young.get(word);
    if (ids !== undefined) return ids;
    ids = this.old.get(word) ?? this.encodeWord(word);
    if (this.young.size >= WORD_CACHE_ENTRIES) {
      this.old = this.young;
      this.young = new Map();
    }
    this.young.set(flatCopy(word), ids); // a slice would pin the whole text it came from
    return ids;
  }

  private encodeWord(word: string): readonly number[] {
    let mapped = '';
    for (const byte of utf8.encode(word)) mapped += BYTE_CHARS[byte] as string;
    const pieces = this.model.encode([mapped]);
    const ids = new Array<number>(pieces.length);
    for (let i = 0; i < pieces.length; i++) {
      const p = pieces[i] as string;
      ids[i] = Number(this.addedIds.get(p) ?? this.model.tokens_to_ids.get(p) ?? this.model.unk_token_id);
    }
    return ids;
  }
}

/**
 * Raw words for a ByteLevel pre-tokenizer config (see the header), or undefined when not covered.
 * `built`: the library's pre-tokenizer for that config (a Sequence's steps before ByteLevel run as is).
 */
function rawPreTokenizer(
  pt: ByteLevelConfig | null | undefined,
  built: PreTokenizer | null,
): RawPreTokenizer | undefined {
  if (pt === null || pt === undefined) return undefined;
  const isByteLevel = (c: ByteLevelConfig): boolean => c.type === 'ByteLevel' && c.add_prefix_space !== true;
  const regexWords = (text: string): readonly string[] => text.match(GPT2_PATTERN) ?? [];
  if (pt.type === 'ByteLevel') return isByteLevel(pt) && pt.use_regex !== false ? regexWords : undefined;
  if (pt.type !== 'Sequence' || !Array.isArray(pt.pretokenizers)) return undefined;
  const steps = pt.pretokenizers as ByteLevelConfig[];
  const last = steps[steps.length - 1];
  if (last === undefined || !isByteLevel(last)) return undefined;
  const before = steps.slice(0, -1);
  if (!before.every((s) => typeof s.type === 'string' && SPLITTING_STEPS.has(s.type))) return undefined;
  const builtSteps = (built as { tokenizers?: unknown } | null)?.tokenizers;
  if (!Array.isArray(builtSteps) || builtSteps.length !== steps.length) return undefined;
  const splitters = (builtSteps as Array<PreTokenizer | null>).slice(0, -1);
  const split = (text: string): string[] =>
    splitters.reduce<string[]>((words, s) => (s === null ? words : s.pre_tokenize(words)), [text]);
  const regex = last.use_regex !== false;
  if (splitters.length === 0) return regex ? regexWords : (text) => [text];
  if (!regex) return split;
  return (text) => split(text).flatMap(regexWords);
}
