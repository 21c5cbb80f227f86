/**
 * Vision chats: `--sessions` conversations at once, `--turns` turns each in a row; each is about its
 * own screenshot (an inline PNG of `--width` x `--height` pixels, ~110 KB of base64, sent in the first
 * user message and so in every later request), under one short shared system prompt, and its turns
 * are ~30-token questions. A Qwen2-VL-family model spends one prompt token per 28 x 28 block of the
 * image (1280 x 960: 1,564 tokens); the simulators do too (sim/sim-tokenizer.ts), so the image is
 * most of every prompt and what a session's turns share.
 * Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/vision-sessions.bench.ts        2 interleaved runs per variant (~2 min)
 *   --repeats 3 --sessions 32 --turns 6 --width 1280 --height 960
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING, 8 simulated workers, 1024-block
 * prefix caches of 16 tokens): this router in its own process (compiled) behind real Envoy, and the
 * peers (PyPI `vllm-router`, `smg`, bench/peers.ts) as whole proxies in front of fresh simulators,
 * when they can run. Variants: round robin, cache_aware (the default: images weighed as their tokens,
 * request/media-tokens.ts), and cache_aware with the weighing off (`--image-tokens-max 0
 * --media-tokens-unknown 0`: an image is the few characters of its key, as before).
 * Per variant: prefix-cache hit rate (cached / prompt tokens over the simulators' records), output
 * tokens/s over the run's wall time, time to first token p50 / p90, max/mean requests per worker.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { numericFlag } from './numeric-flag.js';
import {
  runSessionBench,
  runSessions,
  SESSION_SIM,
  streamTurn,
  type SessionVariant,
  type Turn,
} from './session-cells.js';
import { mulberry32, wordText } from './workloads.js';
import { preparePeers } from './peers.js';
import { pngDataUrl } from '../test/support/image-data-url.js';

const repeats = numericFlag('repeats', 2);
const sessions = numericFlag('sessions', 32);
const turns = numericFlag('turns', 6);
const width = numericFlag('width', 1280);
const height = numericFlag('height', 960);
const WORKERS = 8;
const OUTPUT_TOKENS = 32;
const MODEL = SESSION_SIM.model as string;
/** Bytes of picture after the header: a screenshot's compressed size. */
const PICTURE_BYTES = 80 * 1024;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'the dialog button window menu error label field icon panel text value chart'.split(' ');
const text = (rng: () => number, chars: number, head: string): string => wordText(rng, chars, head, WORDS);
const SYSTEM = 'You are a careful visual assistant. Answer questions about the screenshot the user shares.';

/** A session's screenshot: a PNG header of width x height, then bytes of its own. */
function screenshot(rng: () => number): string {
  const bytes = Array.from({ length: PICTURE_BYTES }, () => String.fromCharCode(Math.floor(rng() * 256)));
  return pngDataUrl(width, height, bytes.join(''));
}

/** One run of every session against `baseUrl`; each session's turns go one after the other. */
function converse(baseUrl: string, seed: number, n: number, t: number) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s);
    const messages: unknown[] = [{ role: 'system', content: SYSTEM }];
    const image = screenshot(rng);
    const out: Turn[] = [];
    for (let k = 0; k < t; k++) {
      const question = text(rng, 120, `Session ${seed}.${s}, question ${k}:`);
      const image_url = { url: image };
      const content =
        k === 0
          ? [
              { type: 'image_url', image_url },
              { type: 'text', text: question },
            ]
          : question;
      messages.push({ role: 'user', content });
      const body = { model: MODEL, messages, max_tokens: OUTPUT_TOKENS, stream: true };
      const r = await streamTurn(`${baseUrl}/v1/chat/completions`, body, OUTPUT_TOKENS);
      out.push(r.turn);
      if (r.text !== undefined) messages.push({ role: 'assistant', content: r.text });
      else if (k > 0) messages.pop(); // the first message carries the image: keep it
    }
    return out;
  });
}

const peers = preparePeers(log);
const VARIANTS: SessionVariant[] = [
  { label: 'round_robin', router: { policy: 'round_robin' } },
  { label: 'cache_aware', router: { policy: 'cache_aware' } },
  {
    label: 'cache_aware, images unweighed',
    router: { policy: 'cache_aware', imageTokensMax: 0, mediaTokensUnknown: 0 },
  },
  ...peers.map((peer): SessionVariant => ({ label: `${peer} cache_aware`, peer })),
];

await runSessionBench({
  benchmark: 'vision-sessions',
  params: { width, height },
  variants: VARIANTS,
  repeats,
  sessions,
  turns,
  workers: WORKERS,
  sim: SESSION_SIM,
  converse: (url, _v, seed, n, t) => converse(url, seed, n, t),
  log,
});
