/**
 * vLLM's `POST /v1/embeddings`, as far as routing needs it: a JSON body with the `model` and an
 * `input` (a string, a list of strings, a list of token ids, or a list of such lists), answered with
 * one embedding per input and the prompt tokens in `usage`. The simulator computes nothing: each
 * vector is a few numbers derived from a hash of its input, the same for the same input.
 *
 * As vLLM's pooling requests do, the body may carry a `priority` (vLLM's scheduling; refused with its
 * 400 unless the simulator runs `--scheduling-policy priority`), and a model it does not serve gets
 * vLLM's 404 when the simulator is strict about models.
 */
import { hash32 } from '../util/hash32.js';
import { errorBody } from './openai-format.js';

export const EMBEDDINGS_PATH = '/v1/embeddings';

export interface EmbeddingsAnswer {
  readonly status: number;
  readonly body: string;
  /** Prompt tokens over every input (0 for a refused request). */
  readonly promptTokens: number;
}

export interface EmbeddingsOptions {
  readonly defaultModel: string;
  /** Undefined: every model is served. */
  readonly serves: ((model: string) => boolean) | undefined;
  /** The body's priority, or vLLM's error for it (simulator.ts requestPriority). */
  readonly priority: (body: Record<string, unknown>) => number | { error: string };
  /** Tokens of one text input. */
  readonly tokensOf: (text: string) => number;
}

const DIMENSIONS = 8;

export function answerEmbeddings(raw: Buffer, opts: EmbeddingsOptions): EmbeddingsAnswer {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return refused(400, 'invalid JSON body');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return refused(400, 'request body must be a JSON object');
  }
  const b = body as Record<string, unknown>;
  const inputs = inputsOf(b.input);
  if (inputs === undefined) {
    return refused(400, '"input" must be a string, a list of strings, or token ids (or lists of them)');
  }
  const model = typeof b.model === 'string' && b.model !== '' ? b.model : opts.defaultModel;
  if (opts.serves !== undefined && !opts.serves(model)) {
    return refused(404, `The model \`${model}\` does not exist.`);
  }
  const priority = opts.priority(b);
  if (typeof priority !== 'number') return refused(400, priority.error);
  let promptTokens = 0;
  const data = inputs.map((input, index) => {
    const text = typeof input === 'string' ? input : input.join(' ');
    promptTokens += typeof input === 'string' ? opts.tokensOf(input) : input.length;
    return { index, object: 'embedding', embedding: vectorOf(text) };
  });
  const answer = {
    id: `embd-${hash32(`${model}\n${data.length}\n${promptTokens}`).toString(16)}`,
    object: 'list',
    created: Math.floor(Date.now() / 1000),
    model,
    data,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0 },
  };
  return { status: 200, body: JSON.stringify(answer), promptTokens };
}

function refused(status: number, message: string): EmbeddingsAnswer {
  return { status, body: errorBody(status, message), promptTokens: 0 };
}

type Input = string | readonly number[];

function inputsOf(input: unknown): Input[] | undefined {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input) || input.length === 0) return undefined;
  if (input.every((x) => typeof x === 'string')) return input as string[];
  if (input.every(isTokenId)) return [input as number[]];
  if (input.every((x) => Array.isArray(x) && x.length > 0 && x.every(isTokenId))) return input as number[][];
  return undefined;
}

function isTokenId(x: unknown): boolean {
  return typeof x === 'number' && Number.isInteger(x) && x >= 0;
}

/** A unit vector of DIMENSIONS numbers from hashes of the text. */
function vectorOf(text: string): number[] {
  const v = Array.from({ length: DIMENSIONS }, (_, i) => (hash32(`${i}:${text}`) / 0xffffffff) * 2 - 1);
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => Math.round((x / norm) * 1e6) / 1e6);
}
