/**
 * The model of a multipart/form-data body (request/multipart-field.ts, inference-request.ts bodyModel),
 * and the gateway's rewrite of it (model-rewrite.ts withModel).
 */
import { describe, expect, it } from 'vitest';
import { formBoundary, formField } from '../../../src/request/multipart-field.js';
import { bodyModel } from '../../../src/request/inference-request.js';
import { withModel } from '../../../src/request/model-rewrite.js';

/** A form as clients write it (CRLF line breaks, RFC 7578). */
function form(
  boundary: string,
  parts: { name: string; value: string | Buffer; filename?: string }[],
  preamble = '',
): Buffer {
  const chunks: Buffer[] = [Buffer.from(preamble)];
  for (const p of parts) {
    const disposition = `form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}`;
    const type = p.filename !== undefined ? 'Content-Type: audio/wav\r\n' : '';
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`));
    chunks.push(Buffer.isBuffer(p.value) ? p.value : Buffer.from(p.value), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(chunks);
}

// Audio bytes that contain line breaks, dashes and a look-alike of the field.
const AUDIO = Buffer.concat([
  Buffer.from([0x52, 0x49, 0x46, 0x46, 0x0d, 0x0a, 0x2d, 0x2d, 0x00, 0xff]),
  Buffer.from('\r\nContent-Disposition: form-data; name="model"\r\n\r\nwrong\r\n'),
]);

describe('formBoundary', () => {
  it('reads the boundary of multipart/form-data, quoted or not, any case', () => {
    expect(formBoundary('multipart/form-data; boundary=abc123')).toBe('abc123');
    expect(formBoundary('Multipart/Form-Data; charset=utf-8; BOUNDARY="a b:c"')).toBe('a b:c');
    expect(formBoundary('application/json')).toBeUndefined();
    expect(formBoundary('multipart/form-data')).toBeUndefined();
    expect(formBoundary(`multipart/form-data; boundary=${'x'.repeat(71)}`)).toBeUndefined();
    expect(formBoundary(undefined)).toBeUndefined();
  });
});

describe('formField', () => {
  it('finds the field before or after the file, skipping the file bytes', () => {
    const before = form('B', [
      { name: 'model', value: 'whisper-large-v3' },
      { name: 'file', value: AUDIO, filename: 'a.wav' },
    ]);
    expect(formField(before, 'B', 'model')).toBe('whisper-large-v3');
    const after = form('----WebKitFormBoundary7MA4YWxk', [
      { name: 'file', value: AUDIO, filename: 'a.wav' },
      { name: 'language', value: 'en' },
      { name: 'model', value: 'whisper' },
    ]);
    expect(formField(after, '----WebKitFormBoundary7MA4YWxk', 'model')).toBe('whisper');
    expect(formField(after, '----WebKitFormBoundary7MA4YWxk', 'language')).toBe('en');
  });

  it('reads a preamble, header names in any case, and UTF-8 values', () => {
    const body = Buffer.from(
      'ignored preamble\r\n--b\r\ncontent-disposition: FORM-DATA; name=model\r\n\r\nmodèle\r\n--b--\r\n',
    );
    expect(formField(body, 'b', 'model')).toBe('modèle');
    const leadingBreak = Buffer.from(
      '\r\n--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--b--',
    );
    expect(formField(leadingBreak, 'b', 'model')).toBe('m');
  });

  it('reads nothing from a file part of that name, a missing field, or a malformed body', () => {
    expect(
      formField(form('B', [{ name: 'model', value: 'x', filename: 'm.txt' }]), 'B', 'model'),
    ).toBeUndefined();
    expect(
      formField(form('B', [{ name: 'file', value: AUDIO, filename: 'a.wav' }]), 'B', 'model'),
    ).toBeUndefined();
    expect(
      formField(Buffer.from('--B\r\nContent-Disposition: form-data; name="model"\r\n'), 'B', 'model'),
    ).toBeUndefined();
    expect(
      formField(
        Buffer.from('--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nno end'),
        'B',
        'model',
      ),
    ).toBeUndefined();
    expect(formField(Buffer.from('no delimiter at all'), 'B', 'model')).toBeUndefined();
    expect(formField(form('B', [{ name: 'model', value: 'm'.repeat(2000) }]), 'B', 'model')).toBeUndefined();
    expect(formField(form('B', [{ name: 'model', value: 'x' }]), 'other', 'model')).toBeUndefined();
  });
});

describe('a form naming a field twice', () => {
  // vLLM's audio endpoints read their form with FastAPI, which takes a field from Starlette's FormData
  // with `.get`: the last duplicate wins. The router routes, and rewrites, by that one.
  const twice = form('B', [
    { name: 'model', value: 'whisper-small' },
    { name: 'file', value: AUDIO, filename: 'a.wav' },
    { name: 'model', value: 'whisper-large-v3' },
  ]);

  it('is routed by the model vLLM serves it with: the last one', () => {
    expect(formField(twice, 'B', 'model')).toBe('whisper-large-v3');
    expect(bodyModel('multipart/form-data; boundary=B', twice)).toBe('whisper-large-v3');
  });

  it("has the gateway's rewrite set on the part vLLM reads", () => {
    const out = withModel(twice, 'whisper-canary', 'multipart/form-data; boundary=B')!;
    expect(formField(out, 'B', 'model')).toBe('whisper-canary');
    expect(
      out.equals(
        form('B', [
          { name: 'model', value: 'whisper-small' },
          { name: 'file', value: AUDIO, filename: 'a.wav' },
          { name: 'model', value: 'whisper-canary' },
        ]),
      ),
    ).toBe(true);
  });
});

describe('bodyModel of a form', () => {
  it("is the form's model field; empty or absent is none", () => {
    const type = 'multipart/form-data; boundary=B';
    expect(
      bodyModel(
        type,
        form('B', [
          { name: 'file', value: AUDIO, filename: 'a.wav' },
          { name: 'model', value: 'w' },
        ]),
      ),
    ).toBe('w');
    expect(bodyModel(type, form('B', [{ name: 'model', value: '' }]))).toBeUndefined();
    expect(bodyModel(type, form('B', [{ name: 'file', value: AUDIO, filename: 'a.wav' }]))).toBeUndefined();
    // a JSON body is still read as JSON
    expect(bodyModel('application/json', Buffer.from('{"model":"e"}'))).toBe('e');
  });
});

describe("withModel on an audio upload's form (the gateway's model-name rewrite)", () => {
  const TYPE = 'multipart/form-data; boundary=xyz';
  const fields = (body: Buffer) => ({
    model: formField(body, 'xyz', 'model'),
    language: formField(body, 'xyz', 'language'),
  });

  it("sets the form's model, before or after the file, and keeps every byte of the file", () => {
    for (const parts of [
      [
        { name: 'model', value: 'whisper' },
        { name: 'file', value: AUDIO, filename: 'a.wav' },
        { name: 'language', value: 'en' },
      ],
      [
        { name: 'file', value: AUDIO, filename: 'a.wav' },
        { name: 'language', value: 'en' },
        { name: 'model', value: 'whisper' },
      ],
    ]) {
      const out = withModel(form('xyz', parts), 'whisper-canary', TYPE)!;
      expect(fields(out)).toEqual({ model: 'whisper-canary', language: 'en' });
      expect(out.indexOf(AUDIO)).toBeGreaterThan(0);
      const renamed = parts.map((p) => (p.name === 'model' ? { ...p, value: 'whisper-canary' } : p));
      expect(out.equals(form('xyz', renamed))).toBe(true);
    }
  });

  it('adds the model to a form that names none, as a first part', () => {
    const out = withModel(form('xyz', [{ name: 'file', value: AUDIO, filename: 'a.wav' }]), 'w2', TYPE)!;
    expect(fields(out).model).toBe('w2');
    expect(
      out.equals(
        form('xyz', [
          { name: 'model', value: 'w2' },
          { name: 'file', value: AUDIO, filename: 'a.wav' },
        ]),
      ),
    ).toBe(true);
  });

  it('leaves a malformed form, or a model part that is a file, as it is', () => {
    const open = Buffer.from('--xyz\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper');
    expect(withModel(open, 'w2', TYPE)).toBeUndefined();
    const file = form('xyz', [{ name: 'model', value: AUDIO, filename: 'm.bin' }]);
    expect(withModel(file, 'w2', TYPE)).toBeUndefined();
  });
});
