/**
 * A model's Hugging Face tokenizer, loaded from a local directory holding `tokenizer.json` and
 * `tokenizer_config.json` (what vLLM loads), with the model's Jinja chat template.
 *
 * Libraries (both zero-dependency, pure JavaScript, maintained by Hugging Face, work offline from
 * local files):
 * - `@huggingface/tokenizers` (tokenizers.js, the tokenizer core of transformers.js): BPE / WordPiece /
 *   Unigram models, normalizers, pre-tokenizers and post-processors from tokenizer.json. Checked
 *   against the Rust `tokenizers` library's ids on the fixture (test/fixtures/tokenizer/expected.json).
 * - `@huggingface/jinja`: the Jinja subset chat templates use, rendered like transformers'
 *   apply_chat_template (messages, add_generation_prompt, tools, bos/eos tokens, raise_exception).
 *   Patched at install (patches/@huggingface+jinja+0.5.11.patch, applied by patch-package in
 *   postinstall): its RuntimeValue base class declared `type` and `value` as class fields, whose
 *   [[Define]] on instances of a dozen subclasses is a megamorphic store costing ~0.9 us per value on
 *   Node 20 (~85% of a render); the patch assigns them in the constructor (~0.1 us). Same output.
 *
 * Tokenizing a rendered chat as vLLM does: render the template, then encode WITHOUT adding special
 * tokens (the template already writes BOS); completions encode with them (vLLM's defaults for
 * `add_special_tokens`).
 *
 * Prefix cache: the text is split at added tokens (`<|eot_id|>`, headers, ...), which HF tokenizers
 * match before the normal pipeline, so each piece between them tokenizes independently; pieces are
 * cached (LRU by total characters, default 16 Mi chars: `--tokenizer-cache-chars`), so a long system
 * prompt or earlier turns shared by many requests are tokenized once. Cached keys are flat copies
 * (routing/flat-string.ts): a cached piece never pins the prompt it was cut from; cached ids are
 * Uint32Arrays (4 bytes per id; a JS array of ids cost ~10 bytes per cached character in all, ~160 MB
 * at the bound, measured with the chaos soak in exact mode, `npm run soak -- --kv-events`).
 *
 * Admission: while the cache has room, every piece enters it. Once it is full, a piece enters (and
 * evicts the least recently used) only the second time it is tokenized within the doorkeeper's window
 * (two generations of DOORKEEPER_ENTRIES piece hashes). Most of a request stream's pieces are seen
 * once (each request's own question); admitted at first sight into a full cache they would evict the
 * shared pieces it exists for. A hash collision only admits a piece early. (Requiring the second
 * sighting always cost a second tokenization of every reused piece: +25-70% tokenizer time per request
 * on the exact-mode micro-benchmark's chat workloads.) Special tokens added by the post-processor
 * (BOS; EOS for add_eos_token tokenizers) are found once around a probe text's ids and added around
 * the text's. Added tokens declared with lstrip/rstrip change
 * the neighbouring whitespace; for such tokenizers the cache falls back to whole-text keys.
 *
 * Lines: a plain completion prompt has no added tokens (a shared document + '\n' + a question is one
 * piece), so pieces are split again at line ends (LINE_BREAK). Byte-level BPE tokenizers (GPT-2,
 * Llama 3, Qwen) pre-tokenize with a regex that always ends a pre-token there, and BPE merges never
 * cross pre-tokens, so the lines tokenize independently and the shared lines come from the cache:
 * only the new lines of a request are tokenized. Not every tokenizer has that property (a SentencePiece normalizer that prepends '▁' to the text, a model with
 * no pre-tokenizer), so it is checked once at load time on probe texts (LINE_PROBES: punctuation,
 * digits, indentation, blank lines, non-ASCII before and after the newline) against the library's
 * whole-text encoding; a tokenizer that fails any probe keeps whole pieces.
 *
 * Pieces missing from the cache are encoded by the byte-level BPE fast path (byte-level-bpe.ts: a
 * per-word cache, ~15x faster than the library on a never-seen prompt) when the tokenizer's shape is
 * covered and the fast path gives the library's ids on probe texts at load time (FAST_PROBES: words,
 * contractions, digits, whitespace runs, non-ASCII, emoji); otherwise by the library.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { Template } from '@huggingface/jinja';
import { flatCopy } from '../routing/flat-string.js';
import { hash32 } from '../util/hash32.js';
import { ByteLevelBpe } from './byte-level-bpe.js';
import { detectContentFormat, type ContentFormat } from './vllm-chat-input.js';
import { ownRendererOf, processorChatTemplate, type OwnRenderer } from './vllm-renderer.js';

export interface ChatRenderOptions {
  readonly addGenerationPrompt: boolean;
  /** The server's own template (vLLM `--chat-template`), over the model's for every request. */
  readonly template?: ChatTemplate;
  readonly continueFinalMessage?: boolean;
  readonly tools?: unknown;
  /** Further template variables (documents, chat_template_kwargs); they may override the special tokens. */
  readonly variables?: Readonly<Record<string, unknown>>;
}

export type ChatRenderResult = { ok: true; text: string } | { ok: false; error: string };

/** A chat template compiled once (`chatTemplate`), with its content format (vLLM's "auto" detection). */
export interface ChatTemplate {
  readonly template: Template;
  readonly contentFormat: ContentFormat;
}

/** Compiles a Jinja chat template; throws on a syntax error. */
export function chatTemplate(text: string): ChatTemplate {
  return { template: new Template(text), contentFormat: detectContentFormat(text) };
}

interface AddedTokenSpec {
  id: number;
  content: string;
  lstrip?: boolean;
  rstrip?: boolean;
}

/**
 * Piece hashes per doorkeeper generation: a piece tokenized again within the last 64-128K pieces
 * (about as many requests' own questions) is admitted. ~2 MB of hashes at most.
 */
const DOORKEEPER_ENTRIES = 65_536;

export interface HfTokenizerOptions {
  /** Characters of cached pieces kept (~4 bytes of heap each). Default 16 Mi. */
  maxCachedChars?: number;
  /** Whether vLLM renders the model's chats with mistral_common (see `mistralCommon`). */
  mistralCommon?: boolean;
  /** What vLLM renders the model's chats with instead of a template (vllm-renderer.ts). */
  ownRenderer?: OwnRenderer;
  /**
   * A multimodal model's processor chat template (vllm-renderer.ts `processorChatTemplate`): vLLM
   * renders a request without tools with it, over the tokenizer's.
   */
  processorTemplate?: string;
}

export class HfTokenizer {
  readonly name: string;
  private readonly tokenizer: Tokenizer;
  private readonly template: Template | undefined;
  /**
   * The `tool_use` template of a tokenizer with named templates: what transformers renders for a
   * request with tools (`get_chat_template`), and vLLM with it.
   */
  private readonly toolUseTemplate: Template | undefined;
  private readonly toolUseFormat: ContentFormat | undefined;
  private readonly config: Record<string, unknown>;
  private readonly splitter: RegExp | undefined;
  private readonly addedIds = new Map<string, number>();
  /** Added token content -> [id] (a run encodePieces appends as is). */
  private readonly addedRuns = new Map<string, readonly number[]>();
  private readonly specialPrefix: number[];
  /** What the post-processor appends (EOS of an add_eos_token tokenizer; usually nothing). */
  private readonly specialSuffix: number[];
  /** Piece text -> its ids, in LRU order; `key` is the stored (flat) copy of the text. */
  private readonly cache = new Map<string, { readonly key: string; readonly ids: Uint32Array }>();
  private cachedChars = 0;
  /** Hashes of pieces tokenized once and not cached (admission: see the header), two generations. */
  private seenYoung = new Set<number>();
  private seenOld = new Set<number>();
  private readonly maxCachedChars: number;
  private readonly vocab: Map<number, string>;
  /** Whether pieces may also be split after newlines (checked on LINE_PROBES at load time). */
  readonly splitsLines: boolean;
  /** The byte-level BPE fast path (byte-level-bpe.ts), when covered and checked on FAST_PROBES. */
  private readonly fast: ByteLevelBpe | undefined;
  /** How the chat template reads a message's content (vLLM's "auto" detection), when it has one. */
  readonly contentFormat: ContentFormat | undefined;
  /**
   * The directory is in Mistral's own format too (`tekken.json` or `tokenizer.model.v*`: mistralFormat):
   * vLLM's default tokenizer mode ("auto") then loads mistral_common's tokenizer and renders chats
   * with it, never with the Jinja template beside it (vllm/renderers/mistral.py), so the router cannot
   * render them (request-tokens.ts falls back).
   */
  readonly mistralCommon: boolean;
  /** vLLM renders the model's chats with harmony or a renderer of its own (request-tokens.ts falls back). */
  readonly ownRenderer: OwnRenderer | undefined;
  /** The processor's template: what vLLM renders a request without tools with (vllm-renderer.ts). */
  private readonly processorTemplate: ChatTemplate | undefined;

  constructor(
    tokenizerJson: Record<string, unknown>,
    config: Record<string, unknown>,
    name = 'tokenizer',
    opts: HfTokenizerOptions = {},
  ) {
    this.name = name;
    this.config = config;
    this.tokenizer = new Tokenizer(tokenizerJson, config);
    this.maxCachedChars = opts.maxCachedChars ?? 16 * 1024 * 1024;
    this.mistralCommon = opts.mistralCommon === true;
    this.ownRenderer = opts.ownRenderer;
    this.processorTemplate =
      opts.processorTemplate === undefined ? undefined : chatTemplate(opts.processorTemplate);
    const template = chatTemplateOf(config);
    this.template = template === undefined ? undefined : new Template(template);
    this.contentFormat = template === undefined ? undefined : detectContentFormat(template);
    const toolUse = namedTemplate(config, 'tool_use');
    this.toolUseTemplate = toolUse === undefined ? undefined : new Template(toolUse);
    this.toolUseFormat = toolUse === undefined ? undefined : detectContentFormat(toolUse);
    const added = (
      Array.isArray(tokenizerJson.added_tokens) ? tokenizerJson.added_tokens : []
    ) as AddedTokenSpec[];
    let stripping = false;
    for (const t of added) {
      if (typeof t.content !== 'string' || typeof t.id !== 'number' || t.content.length === 0) continue;
      this.addedIds.set(t.content, t.id);
      this.addedRuns.set(t.content, [t.id]);
      if (t.lstrip === true || t.rstrip === true) stripping = true;
    }
    if (this.addedIds.size > 0 && !stripping) {
      const alternatives = [...this.addedIds.keys()]
        .sort((a, b) => b.length - a.length)
        .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
      this.splitter = new RegExp(`(${alternatives.join('|')})`);
    }
    [this.specialPrefix, this.specialSuffix] = specialRuns(this.tokenizer);
    this.vocab = vocabOf(tokenizerJson);
    // Pieces hold no added tokens only when the text is split at them (not with lstrip/rstrip ones).
    const fast =
      this.addedIds.size === 0 || this.splitter !== undefined
        ? ByteLevelBpe.from(tokenizerJson, config, this.tokenizer, this.addedIds)
        : undefined;
    this.fast =
      fast !== undefined &&
      FAST_PROBES.every((probe) => {
        const ids: number[] = [];
        fast.encodeInto(probe, ids);
        return sameIds(ids, this.encodeUncached(probe, false));
      })
        ? fast
        : undefined;
    // A stripping added token takes the whitespace before or after it, newlines too ("a\n<tok>" with
    // lstrip is "a", "<tok>"): its text is never cut apart (whole-text keys, see the header).
    this.splitsLines =
      !stripping &&
      LINE_PROBES.every((probe) => {
        const lines = splitLines(probe);
        const joined = lines.flatMap((line) => this.encodeUncached(line, false));
        return sameIds(joined, this.encodeUncached(probe, false));
      });
  }

  /**
   * Loads `<dir>/tokenizer.json` and `<dir>/tokenizer_config.json` (the latter optional), with the
   * chat templates transformers (>= 4.47) reads beside them (templateFiles): they win over the config's.
   * A directory holding Mistral's own tokenizer files is marked `mistralCommon`; its `config.json`
   * and processor files tell what else vLLM renders chats with (vllm-renderer.ts).
   */
  static load(dir: string, opts: HfTokenizerOptions = {}): HfTokenizer {
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as Record<string, unknown>;
    let config: Record<string, unknown> = {};
    try {
      config = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as Record<
        string,
        unknown
      >;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const templates = templateFiles(dir);
    if (templates !== undefined) config = { ...config, chat_template: templates };
    const files = readdirSync(dir);
    return new HfTokenizer(json, config, dir, {
      ...opts,
      mistralCommon: mistralFormat(files),
      ownRenderer: ownRendererOf(files, dir),
      processorTemplate: processorChatTemplate(files, dir),
    });
  }

  /** What the piece cache holds now: pieces and their characters (bounded by `maxCachedChars`). */
  cacheStats(): { pieces: number; chars: number } {
    return { pieces: this.cache.size, chars: this.cachedChars };
  }

  /** Whether this exact piece (a line, a message) is in the piece cache. */
  isCached(piece: string): boolean {
    return this.cache.has(piece);
  }

  /** Whether pieces are encoded by the byte-level BPE fast path (else by the library). */
  get fastPath(): boolean {
    return this.fast !== undefined;
  }

  get hasChatTemplate(): boolean {
    return this.template !== undefined || this.processorTemplate !== undefined;
  }

  /** The content format of the template a request with `tools` renders with (see toolUseTemplate). */
  contentFormatFor(tools: unknown): ContentFormat | undefined {
    if (!hasTools(tools) && this.processorTemplate !== undefined) return this.processorTemplate.contentFormat;
    return this.toolUseFor(tools) !== undefined ? this.toolUseFormat : this.contentFormat;
  }

  private toolUseFor(tools: unknown): Template | undefined {
    return hasTools(tools) ? this.toolUseTemplate : undefined;
  }

  /** How many ids `encode(text, true)` adds before and after the text's (request-tokens.ts truncation). */
  get specialCounts(): readonly [number, number] {
    return [this.specialPrefix.length, this.specialSuffix.length];
  }

  /** Token ids of `text`; `addSpecialTokens` (default true) adds what the post-processor adds (BOS). */
  encode(text: string, addSpecialTokens = true): number[] {
    return joinRuns(this.runsOf(text, addSpecialTokens));
  }

  /**
   * `encode` into one Uint32Array: what the router keys blocks from. A long prompt's ids as a JS array
   * are a large object of their own (8 bytes per id: 16K ids pass V8's 128 KB page limit, and each
   * such array costs a fresh mapped page, as long strings do); a typed array's store is one malloc
   * filled by `set` (an 18K-token prompt: ~70 us instead of ~250 us).
   */
  encodeIds(text: string, addSpecialTokens = true): Uint32Array {
    const parts = this.runsOf(text, addSpecialTokens);
    let n = 0;
    for (const r of parts) n += r.length;
    const out = new Uint32Array(n);
    let k = 0;
    for (const r of parts) {
      out.set(r, k);
      k += r.length;
    }
    return out;
  }

  /** Encoding through the library directly, without the piece cache (reference for tests). */
  encodeUncached(text: string, addSpecialTokens = true): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids.map(Number);
  }

  decode(ids: readonly number[]): string {
    return this.tokenizer.decode([...ids], { skip_special_tokens: false });
  }

  /** The vocabulary string of one id. Throws a RangeError when out of vocabulary. */
  tokenString(id: number): string {
    const s = this.vocab.get(id);
    if (s === undefined) throw new RangeError(`token id ${String(id)} is out of vocabulary`);
    return s;
  }

  /**
   * Renders chat messages with the model's template, or `opts.template` (the server's), with
   * transformers' apply_chat_template variables.
   */
  renderChat(messages: unknown, opts: ChatRenderOptions): ChatRenderResult {
    // vLLM's resolve_chat_template: the server's, the processor's for a request without tools, then
    // the tokenizer's (its tool_use one for a request with tools).
    const template =
      opts.template?.template ??
      (hasTools(opts.tools) ? undefined : this.processorTemplate?.template) ??
      this.toolUseFor(opts.tools) ??
      this.template;
    if (template === undefined) return { ok: false, error: `${this.name} has no chat template` };
    if (!Array.isArray(messages) || messages.length === 0) {
      return { ok: false, error: 'messages must be a non-empty array' };
    }
    if (opts.addGenerationPrompt && opts.continueFinalMessage === true) {
      return {
        ok: false,
        error: 'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      };
    }
    const marked = opts.continueFinalMessage === true ? markFinalMessage(messages) : undefined;
    if (marked !== undefined && !marked.ok) return marked;
    try {
      let text = template.render({
        // transformers always passes these (None when the request has none): `tools is not none`.
        tools: null,
        documents: null,
        bos_token: tokenText(this.config.bos_token),
        eos_token: tokenText(this.config.eos_token),
        unk_token: tokenText(this.config.unk_token),
        pad_token: tokenText(this.config.pad_token),
        ...opts.variables,
        messages: marked !== undefined ? marked.messages : messages,
        add_generation_prompt: opts.addGenerationPrompt,
        ...(opts.tools !== undefined ? { tools: opts.tools } : {}),
      });
      if (marked !== undefined) {
        const open = openFinalMessage(text, marked.finalText);
        if (open === undefined) {
          return {
            ok: false,
            error: 'continue_final_message: the final message does not appear in the render',
          };
        }
        text = open;
      }
      return { ok: true, text };
    } catch (err) {
      return { ok: false, error: `chat template failed: ${(err as Error).message}` };
    }
  }

  /** The id runs of `text` (the special prefix, then its pieces' cached arrays: never mutated). */
  private runsOf(text: string, addSpecialTokens: boolean): Array<ArrayLike<number>> {
    const parts: Array<ArrayLike<number>> = [];
    if (addSpecialTokens && this.specialPrefix.length > 0) parts.push(this.specialPrefix);
    this.encodePieces(text, parts);
    if (addSpecialTokens && this.specialSuffix.length > 0) parts.push(this.specialSuffix);
    return parts;
  }

  /** Appends the id runs of `text`'s pieces (cached arrays: never mutated) to `parts`. */
  private encodePieces(text: string, parts: Array<ArrayLike<number>>): void {
    if (this.splitter === undefined) {
      this.encodeLines(text, parts);
      return;
    }
    for (const part of text.split(this.splitter)) {
      if (part.length === 0) continue;
      const id = this.addedRuns.get(part);
      if (id !== undefined) parts.push(id);
      else this.encodeLines(part, parts);
    }
  }

  private encodeLines(text: string, parts: Array<ArrayLike<number>>): void {
    if (!this.splitsLines || !text.includes('\n')) {
      parts.push(this.piece(text));
      return;
    }
    let start = 0;
    for (const cut of lineCuts(text)) {
      parts.push(this.piece(text.slice(start, cut)));
      start = cut;
    }
    parts.push(this.piece(text.slice(start)));
  }

  private piece(text: string): ArrayLike<number> {
    const hit = this.cache.get(text);
    if (hit !== undefined) {
      // Re-inserted under its own flat key: `text` is usually a slice of this request's prompt.
      this.cache.delete(text);
      this.cache.set(hit.key, hit);
      return hit.ids;
    }
    let ids: number[];
    if (this.fast !== undefined) this.fast.encodeInto(text, (ids = []));
    else ids = this.tokenizer.encode(text, { add_special_tokens: false }).ids.map(Number);
    if (
      text.length <= this.maxCachedChars / 4 &&
      (this.cachedChars + text.length <= this.maxCachedChars || this.seenBefore(text))
    ) {
      const key = flatCopy(text); // a slice would pin the whole prompt it came from
      this.cache.set(key, { key, ids: Uint32Array.from(ids) });
      this.cachedChars += key.length;
      while (this.cachedChars > this.maxCachedChars) {
        const oldest = this.cache.keys().next().value as string;
        this.cache.delete(oldest);
        this.cachedChars -= oldest.length;
      }
    }
    return ids;
  }

  /**
   * The doorkeeper (a full cache admits a piece on its second sighting): whether `text` was tokenized
   * and left out recently; records it when not.
   */
  private seenBefore(text: string): boolean {
    const h = hash32(text);
    if (this.seenYoung.delete(h) || this.seenOld.delete(h)) return true;
    if (this.seenYoung.size >= DOORKEEPER_ENTRIES) {
      this.seenOld = this.seenYoung;
      this.seenYoung = new Set();
    }
    this.seenYoung.add(h);
    return false;
  }
}

/**
 * Where lines may be tokenized apart: after a newline between non-whitespace characters
 * ("word\n|next"), or, when spaces end a line, before them after a letter or digit ("word| \nnext",
 * "word|\r\nnext"), since a regex pre-tokenizer joins such spaces to the newline
 * (GPT-2's `\s+(?!\S)`, Llama 3's `\s*[\r\n]+`). A newline after punctuation is cut only after it:
 * Llama 3 joins "." and "\n". Never before a '/': o200k's and Mistral Tekken's ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
 * runs on over the newline into slashes ("();\n//" is one pre-token). (lineCuts scans the newlines
 * for the same positions.)
 */
export const LINE_BREAK = /(?<=\S\n)(?=[^\s/])|(?<=[\p{L}\p{N}])(?=[^\S\n]+\n\S)/u;
const WHITESPACE = /\s/;
const WORD_CHAR = /[\p{L}\p{N}]/u;

/** Ascending cut positions of LINE_BREAK in `text`, found from its newlines only. */
function* lineCuts(text: string): Generator<number> {
  for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', nl + 1)) {
    const next = text[nl + 1];
    if (next === undefined || WHITESPACE.test(next) || next === '/' || nl === 0) continue;
    const prev = text[nl - 1] as string;
    if (!WHITESPACE.test(prev)) {
      yield nl + 1;
      continue;
    }
    if (prev === '\n') continue;
    let start = nl - 1; // the horizontal whitespace run before the newline
    while (start > 0 && text[start - 1] !== '\n' && WHITESPACE.test(text[start - 1] as string)) start--;
    if (start > 0 && text[start - 1] !== '\n' && WORD_CHAR.test(text[start - 1] as string)) yield start;
  }
}

/** Texts whose lines must tokenize independently for a tokenizer to split at LINE_BREAK. */
const LINE_PROBES: readonly string[] = [
  'You are a helpful assistant.\nAnswer the question below.',
  'Context:\n- item one\n- item two\nQuestion: why?',
  'first paragraph ends here.\n\nsecond paragraph, after a blank line',
  'trailing spaces  \nnext\t\nindent\n  deeper\n\tTabbed',
  'numbers 12345\n67890 and 3.14\n42',
  "quotes 'single'\n\"double\"\n's it\n(paren)\n[bracket]\n{brace}",
  'héllo wörld\nñandú über\n日本語のテキスト\n😀 emoji\nend',
  'a\nb\nc\r\nd\n\n\ne',
  'space before newline \nnext. \nafter punctuation \t\nx2 \n3\r\nwindows\r\n\r\nend',
  "it's\n'quoted'\n--dash\n...\n!?\n#hash \n@at",
];

/** Texts the fast path must encode like the library before it is used (LINE_PROBES too). */
const FAST_PROBES: readonly string[] = [
  ...LINE_PROBES,
  "Don't stop: it's 3.14159, isn't it? They'll've done 1,000,000 things -- \"quoted\" (paren) [x]",
  '   leading spaces, inner   runs \t\t tabs,\u00a0nbsp, trailing   ',
  'Zürich, naïve café, Ærøskøbing, ﬁ ligature, e\u0301 combining, 日本語のテキスト, 한국어, العربية',
  '😀👍🏽 emoji 🙂 mixed 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u200b zero width \ufeff bom',
  '<|not an added token|> </s> <unk> @user #tag $100 %50 ^_^ &amp; *bold* ~tilde~ `code` |pipe| \\',
];

/** `text` cut at lineCuts. */
export function splitLines(text: string): string[] {
  const out: string[] = [];
  let start = 0;
  for (const cut of lineCuts(text)) {
    out.push(text.slice(start, cut));
    start = cut;
  }
  out.push(text.slice(start));
  return out;
}

/** The runs' ids in one new array, sized once (no growth copies, no iterator per run). */
function joinRuns(runs: ReadonlyArray<ArrayLike<number>>): number[] {
  let n = 0;
  for (const r of runs) n += r.length;
  const out = new Array<number>(n);
  let k = 0;
  for (const r of runs) for (let i = 0; i < r.length; i++) out[k++] = r[i] as number;
  return out;
}

/**
 * The special ids the post-processor writes before and after a text's own ids: found around a probe
 * text's ids (encoding '' alone cannot tell a BOS prefix from an EOS suffix). When the probe's ids are
 * not found in one piece, all of ''s specials count as a prefix.
 */
function specialRuns(tokenizer: Tokenizer): [number[], number[]] {
  const probe = 'a';
  const inner: number[] = tokenizer.encode(probe, { add_special_tokens: false }).ids.map(Number);
  const outer: number[] = tokenizer.encode(probe, { add_special_tokens: true }).ids.map(Number);
  for (let at = 0; inner.length > 0 && at + inner.length <= outer.length; at++) {
    if (inner.every((id, i) => outer[at + i] === id)) {
      return [outer.slice(0, at), outer.slice(at + inner.length)];
    }
  }
  return [tokenizer.encode('', { add_special_tokens: true }).ids.map(Number), []];
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function chatTemplateOf(config: Record<string, unknown>): string | undefined {
  const t = config.chat_template;
  if (typeof t === 'string') return t;
  // Some configs list named templates: [{name: 'default', template: '...'}, ...].
  if (Array.isArray(t)) {
    const named = t as Array<{ name?: unknown; template?: unknown }>;
    const pick = named.find((x) => x.name === 'default') ?? named[0];
    if (pick !== undefined && typeof pick.template === 'string') return pick.template;
  }
  return undefined;
}

/** A named template of a config that lists them (`[{name, template}, ...]`). */
function namedTemplate(config: Record<string, unknown>, name: string): string | undefined {
  const t = config.chat_template;
  if (!Array.isArray(t)) return undefined;
  const pick = (t as Array<{ name?: unknown; template?: unknown }>).find((x) => x.name === name);
  return typeof pick?.template === 'string' ? pick.template : undefined;
}

/**
 * The chat templates in files beside tokenizer_config.json, as transformers reads them: the default
 * from `chat_template.jinja`, named ones from `additional_chat_templates/<name>.jinja` (together in
 * the config's list form; the default alone as a string). Undefined when there are none (the config's
 * own template stands).
 */
function templateFiles(dir: string): string | Array<{ name: string; template: string }> | undefined {
  const read = (path: string): string | undefined => {
    try {
      return readFileSync(path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
      throw err;
    }
  };
  const main = read(join(dir, 'chat_template.jinja'));
  let names: string[] = [];
  try {
    names = readdirSync(join(dir, 'additional_chat_templates')).filter((f) => f.endsWith('.jinja'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err;
  }
  if (names.length === 0) return main;
  const named = names.sort().map((f) => ({
    name: f.slice(0, -'.jinja'.length),
    template: readFileSync(join(dir, 'additional_chat_templates', f), 'utf8'),
  }));
  return main === undefined ? named : [{ name: 'default', template: main }, ...named];
}

/**
 * Whether vLLM's default tokenizer mode loads mistral_common for a model directory with these files:
 * Mistral's tokenizer (`tekken.json`, `tokenizer.model.v*`) in a repository of Mistral-format weights
 * (`consolidated*.safetensors`; vllm/tokenizers/registry.py `resolve_tokenizer_args`,
 * `is_mistral_model_repo`). A tokenizer-only copy of the files has no weights: Mistral's tokenizer
 * files alone count (they ship with Mistral-format weights); a directory with other weights only
 * (`model-*.safetensors`, a conversion) does not.
 */
function mistralFormat(files: readonly string[]): boolean {
  if (!files.some((f) => f === 'tekken.json' || f.startsWith('tokenizer.model.v'))) return false;
  const weights = files.filter((f) => f.endsWith('.safetensors'));
  return weights.length === 0 || weights.some((f) => f.startsWith('consolidated'));
}

/** Whether a request has tools (vLLM passes them on, an empty list too; None when absent). */
function hasTools(tools: unknown): boolean {
  return tools !== undefined && tools !== null;
}

function tokenText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && v !== null && typeof (v as { content?: unknown }).content === 'string') {
    return (v as { content: string }).content;
  }
  return '';
}

/** transformers' sentinel for continue_final_message (chat_template_utils.py), verbatim. */
const CONTINUE_TAG = 'CONTINUE_FINAL_MESSAGE_TAG ';

/**
 * continue_final_message as transformers' apply_chat_template does it (vLLM passes the flag on): the
 * sentinel appended to the final message's content (a string) or to its LAST part with a `text`
 * (a list), before rendering. `finalText`: that text without the sentinel.
 */
function markFinalMessage(
  messages: readonly unknown[],
): { ok: true; messages: unknown[]; finalText: string } | { ok: false; error: string } {
  const last = messages[messages.length - 1];
  const content = (last as { content?: unknown } | null)?.content;
  const fail = {
    ok: false,
    error: 'continue_final_message: the final message has no text to continue',
  } as const;
  if (typeof last !== 'object' || last === null || content === null || content === undefined) return fail;
  let marked: unknown;
  let finalText: string;
  if (typeof content === 'string') {
    finalText = content;
    marked = content + CONTINUE_TAG;
  } else if (Array.isArray(content)) {
    let at = content.length - 1;
    while (at >= 0 && !hasText(content[at])) at--;
    if (at < 0) return fail;
    const part = content[at] as { text: unknown };
    if (typeof part.text !== 'string') return fail;
    finalText = part.text;
    marked = content.map((p, i) => (i === at ? { ...part, text: part.text + CONTINUE_TAG } : p));
  } else return fail;
  const out = messages.slice();
  out[out.length - 1] = { ...last, content: marked };
  return { ok: true, messages: out, finalText };
}

function hasText(part: unknown): boolean {
  return typeof part === 'object' && part !== null && 'text' in part;
}

/**
 * The render cut at the sentinel (transformers: kept as is when the template kept the sentinel's
 * trailing space, else right-stripped: the template trimmed the content); undefined when the final
 * text or the sentinel is not in it (transformers raises).
 */
function openFinalMessage(text: string, finalText: string): string | undefined {
  const tag = CONTINUE_TAG.trim();
  if (!text.includes(finalText.trim()) || !text.includes(tag)) return undefined;
  const at = text.lastIndexOf(tag);
  return text.slice(at, at + CONTINUE_TAG.length) === CONTINUE_TAG
    ? text.slice(0, at)
    : text.slice(0, at).trimEnd();
}

function vocabOf(json: Record<string, unknown>): Map<number, string> {
  const out = new Map<number, string>();
  const model = json.model as { vocab?: unknown } | undefined;
  const vocab = model?.vocab;
  if (Array.isArray(vocab)) {
    // Unigram: [[piece, score], ...]
    vocab.forEach((entry, id) => {
      if (Array.isArray(entry) && typeof entry[0] === 'string') out.set(id, entry[0]);
    });
  } else if (typeof vocab === 'object' && vocab !== null) {
    for (const [piece, id] of Object.entries(vocab as Record<string, unknown>)) {
      if (typeof id === 'number') out.set(id, piece);
    }
  }
  for (const t of (Array.isArray(json.added_tokens) ? json.added_tokens : []) as AddedTokenSpec[]) {
    if (typeof t.id === 'number' && typeof t.content === 'string') out.set(t.id, t.content);
  }
  return out;
}
