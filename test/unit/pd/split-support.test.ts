import { describe, expect, it } from 'vitest';
import { unsplittable } from '../../../src/pd/split-support.js';

describe('unsplittable: what vLLM cannot serve as a prefill leg and a decode leg', () => {
  it.each([
    ['completions', { prompt: 'p' }, undefined],
    ['completions', { prompt: 'p', logprobs: 2 }, undefined], // generated tokens only: the decode leg has them
    ['completions', { prompt: 'p', echo: true }, undefined], // echo without logprobs: no prompt logprobs
    ['completions', { prompt: 'p', echo: true, logprobs: 0 }, 'prompt_logprobs'],
    ['completions', { prompt: 'p', prompt_logprobs: 0 }, 'prompt_logprobs'],
    ['completions', { prompt: 'p', prompt_logprobs: null }, undefined],
    ['completions', { prompt: 'p', use_beam_search: true, n: 1 }, 'beam_search'],
    ['chat', { messages: [], logprobs: true, top_logprobs: 3 }, undefined],
    ['chat', { messages: [], echo: true }, 'prompt_logprobs'], // vLLM: prompt_logprobs = top_logprobs (0)
    ['chat', { messages: [], echo: true, top_logprobs: null }, undefined],
    ['chat', { messages: [], prompt_logprobs: 5 }, 'prompt_logprobs'],
    ['chat', { messages: [], use_beam_search: true }, 'beam_search'],
    // As vLLM's pydantic models read them (lax mode): "true" is true, "false" false.
    ['completions', { prompt: 'p', use_beam_search: 'true' }, 'beam_search'],
    ['chat', { messages: [], use_beam_search: 'yes' }, 'beam_search'],
    ['completions', { prompt: 'p', echo: 'true', logprobs: 1 }, 'prompt_logprobs'],
    ['chat', { messages: [], echo: 'on' }, 'prompt_logprobs'],
    ['chat', { messages: [], echo: 'false' }, undefined],
    ['completions', { prompt: 'p', use_beam_search: 'false' }, undefined],
    ['responses', { input: 'x', prompt_logprobs: 1, use_beam_search: true }, undefined],
    ['messages', { messages: [], echo: true }, undefined],
  ] as const)('%s %j -> %s', (kind, body, expected) => {
    expect(unsplittable(kind, body)).toBe(expected);
  });
});
