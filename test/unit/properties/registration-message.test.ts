/**
 * decodeHeartbeat faces the discovery socket: for any bytes it returns a result (never throws), and
 * an accepted heartbeat is well-formed enough to become a worker URL.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { encode } from '@msgpack/msgpack';
import { decodeHeartbeat, type DecodeResult } from '../../../src/discovery/registration-message.js';

function checkResult(r: DecodeResult): void {
  if (!r.ok) {
    expect([
      'oversized',
      'not_msgpack',
      'not_a_map',
      'unknown_type',
      'missing_field',
      'bad_address',
      'bad_transfer_mode',
    ]).toContain(r.reason);
    return;
  }
  expect(['prefill', 'decode']).toContain(r.role);
  expect(Number.isInteger(r.http.port)).toBe(true);
  expect(r.http.port).toBeGreaterThanOrEqual(1);
  expect(r.http.port).toBeLessThanOrEqual(65535);
  expect(r.httpAddress).toBe(r.http.authority);
  // The router turns it into `http://<httpAddress>`: that must be a URL naming the same host and port.
  const url = new URL(`http://${r.httpAddress}`);
  expect(url.host === r.httpAddress || url.host === `${r.httpAddress.replace(/:80$/, '')}`).toBe(true);
  expect(typeof r.zmqAddress).toBe('string');
  for (const v of Object.values(r.metadata)) {
    expect(v === null || ['string', 'number', 'boolean'].includes(typeof v)).toBe(true);
  }
}

function decodeChecked(bytes: Uint8Array): void {
  let r: DecodeResult;
  try {
    r = decodeHeartbeat(bytes);
  } catch (err) {
    throw new Error(`decodeHeartbeat threw: ${String(err)}`, { cause: err });
  }
  checkResult(r);
}

const portArb = fc.oneof(fc.integer({ min: 0, max: 70_000 }), fc.constantFrom(1, 80, 8000, 65535));
const hostArb = fc.oneof(
  fc.ipV4(),
  fc.ipV4Extended(),
  fc.ipV6().map((h) => `[${h}]`),
  fc.ipV6(),
  fc.domain(),
  fc.mixedCase(fc.domain()),
  fc.stringMatching(/^[a-z0-9.-]{1,20}$/),
  fc.stringMatching(/^[a-z]{1,5}\.0[xX][0-9a-fA-F]{0,4}$/),
  fc.string({ maxLength: 20 }),
);
const addressArb = fc.oneof(
  fc.tuple(hostArb, portArb).map(([h, p]) => `${h}:${p}`),
  fc.tuple(hostArb, fc.string({ maxLength: 6 })).map(([h, p]) => `${h}:${p}`),
  fc.string({ maxLength: 30 }),
);
const moriZmqArb = fc
  .array(fc.tuple(fc.stringMatching(/^[a-z_]{1,8}$/), fc.stringMatching(/^[A-Za-z0-9.:-]{1,12}$/)), {
    minLength: 1,
    maxLength: 4,
  })
  .map((pairs) => pairs.map(([k, v]) => `${k}:${v}`).join(','));
const scalarArb = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
);

const heartbeatArb = fc.record(
  {
    type: fc.oneof(fc.constantFrom('P', 'D', 'p', 'X', ''), scalarArb),
    http_address: fc.oneof(addressArb, scalarArb),
    zmq_address: fc.oneof(addressArb, moriZmqArb, scalarArb),
    transfer_mode: fc.oneof(fc.constantFrom('READ', 'write', 'Read', 'push'), scalarArb),
    tp_size: scalarArb,
    nested: fc.jsonValue({ maxDepth: 2 }),
  },
  { requiredKeys: [] },
);

/** Mostly-valid heartbeats whose only free field is the http address: explores address validation. */
const addressFocusedArb = fc.record({
  type: fc.constantFrom('P', 'D'),
  http_address: addressArb,
  zmq_address: fc.constantFrom('10.0.0.1:21001', 'host:10.0.0.3,handshake:6301'),
});

describe('decodeHeartbeat properties', () => {
  it('arbitrary bytes never throw', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => decodeChecked(bytes)),
      { numRuns: 2000 },
    );
  });

  it('arbitrary msgpack values never throw', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 3 }), (value) => decodeChecked(encode(value))),
      { numRuns: 500 },
    );
  });

  it('heartbeat-shaped maps: accepted ones have a valid role, port and URL', () => {
    fc.assert(
      fc.property(heartbeatArb, (value) => decodeChecked(encode(value))),
      { numRuns: 3000 },
    );
  });

  it('accepted http addresses always make a valid URL of the same host and port', () => {
    fc.assert(
      fc.property(addressFocusedArb, (value) => decodeChecked(encode(value))),
      { numRuns: 3000 },
    );
  });

  it('truncated or corrupted valid frames never throw', () => {
    fc.assert(
      fc.property(heartbeatArb, fc.nat(), fc.nat({ max: 255 }), (value, at, byte) => {
        const frame = encode(value);
        const i = at % (frame.length + 1);
        decodeChecked(frame.subarray(0, i));
        if (i < frame.length) {
          const corrupted = frame.slice();
          corrupted[i] = byte;
          decodeChecked(corrupted);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('oversized frames are rejected before decoding', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 11, maxLength: 64 }), (bytes) => {
        expect(decodeHeartbeat(bytes, 10)).toEqual({ ok: false, reason: 'oversized' });
      }),
    );
  });
});

describe('decodeHeartbeat: counterexamples found by the properties (regressions)', () => {
  it.each([
    { http: '0x0:1', ok: false }, // URL reads it as 0.0.0.0
    { http: '1.0x1:8000', ok: false }, // URL reads it as 1.0.0.1
    { http: 'a.0x1:8000', ok: false }, // invalid URL
    { http: 'a.0x:8000', ok: false },
    { http: 'A.0X1F:8000', ok: false },
    { http: 'a.0x1.:8000', ok: false },
    { http: 'a.0x1g:8000', ok: true }, // not a number: a DNS label
    { http: '0x1.a:8000', ok: true },
  ])('$http accepted: $ok', ({ http, ok }) => {
    const r = decodeHeartbeat(encode({ type: 'P', http_address: http, zmq_address: '10.0.0.1:21001' }));
    expect(r.ok).toBe(ok);
    if (!r.ok) expect(r.reason).toBe('bad_address');
    checkResult(r);
  });
});
