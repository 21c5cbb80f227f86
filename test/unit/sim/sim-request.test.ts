import { describe, expect, it } from 'vitest';
import { parseGenerationRequest, tokenIdsText } from '../../../src/sim/sim-request.js';

describe('parseGenerationRequest', () => {
  it.each([
    { name: 'string prompt', body: { prompt: 'hello' }, prompts: ['hello'] },
    { name: 'array of strings', body: { prompt: ['a', 'b'] }, prompts: ['a', 'b'] },
    { name: 'token ids', body: { prompt: [1, 2, 3] }, prompts: [tokenIdsText([1, 2, 3], 4)] },
    {
      name: 'token id arrays',
      body: { prompt: [[1], [2, 3]] },
      prompts: [tokenIdsText([1], 4), tokenIdsText([2, 3], 4)],
    },
  ])('completion: $name', ({ body, prompts }) => {
    const r = parseGenerationRequest('completion', body, 16, 4);
    expect(r).toMatchObject({
      ok: true,
      request: { kind: 'completion', prompts, maxTokens: 16, stream: false },
    });
  });

  it('renders chat messages through a template, text parts concatenated', () => {
    const r = parseGenerationRequest(
      'chat',
      {
        messages: [
          { role: 'system', content: 'be brief' },
          {
            role: 'user',
            content: [{ type: 'text', text: 'hi ' }, { type: 'image_url' }, { type: 'text', text: 'x' }],
          },
          { role: 'assistant', content: null },
        ],
      },
      16,
      4,
    );
    expect(r).toMatchObject({
      ok: true,
      request: { prompts: ['<|system|>\nbe brief\n<|user|>\nhi <image_url>x\n<|assistant|>\n\n'] },
    });
  });

  it.each([
    { kind: 'completion' as const, body: { prompt: 'x', max_tokens: 7 }, max: 7 },
    { kind: 'completion' as const, body: { prompt: 'x', max_tokens: null }, max: 16 },
    { kind: 'chat' as const, body: { messages: [{ role: 'u', content: 'x' }], max_tokens: 3 }, max: 3 },
    {
      kind: 'chat' as const,
      body: { messages: [{ role: 'u', content: 'x' }], max_tokens: 3, max_completion_tokens: 9 },
      max: 9,
    },
  ])('output length $max', ({ kind, body, max }) => {
    const r = parseGenerationRequest(kind, body, 16, 4);
    expect(r.ok && r.request.maxTokens).toBe(max);
  });

  it.each([
    { stream: true, options: { include_usage: true }, includeUsage: true },
    { stream: true, options: undefined, includeUsage: false },
    { stream: false, options: { include_usage: true }, includeUsage: false },
  ])('stream=$stream include_usage -> $includeUsage', ({ stream, options, includeUsage }) => {
    const r = parseGenerationRequest('completion', { prompt: 'x', stream, stream_options: options }, 16, 4);
    expect(r).toMatchObject({ ok: true, request: { stream, includeUsage } });
  });

  it('passes kv_transfer_params through', () => {
    const kv = { do_remote_prefill: true };
    const r = parseGenerationRequest('completion', { prompt: 'x', kv_transfer_params: kv }, 16, 4);
    expect(r.ok && r.request.kvTransferParams).toEqual(kv);
  });

  it.each([
    { kind: 'completion' as const, body: [] },
    { kind: 'completion' as const, body: { prompt: 5 } },
    { kind: 'completion' as const, body: { prompt: [] } },
    { kind: 'completion' as const, body: { prompt: [1, 'a'] } },
    { kind: 'completion' as const, body: { prompt: 'x', max_tokens: 0 } },
    { kind: 'completion' as const, body: { prompt: 'x', max_tokens: 1.5 } },
    { kind: 'completion' as const, body: { prompt: 'x', kv_transfer_params: 'no' } },
    { kind: 'chat' as const, body: { messages: [] } },
    { kind: 'chat' as const, body: { messages: [{ content: 'x' }] } },
    { kind: 'chat' as const, body: { messages: [{ role: 'u', content: 5 }] } },
  ])('rejects $kind %o', ({ kind, body }) => {
    expect(parseGenerationRequest(kind, body, 16, 4).ok).toBe(false);
  });
});

describe('tokenIdsText', () => {
  it.each([
    { ids: [], chars: 4, length: 0 },
    { ids: [1, 70000, 5], chars: 4, length: 12 },
    { ids: [1, 2], chars: 1, length: 2 },
  ])('renders $ids.length ids as $length chars', ({ ids, chars, length }) => {
    expect(tokenIdsText(ids, chars)).toHaveLength(length);
  });

  it('keeps distinct ids distinct', () => {
    expect(tokenIdsText([1, 65537], 4)).not.toBe(tokenIdsText([65537, 1], 4));
  });
});
