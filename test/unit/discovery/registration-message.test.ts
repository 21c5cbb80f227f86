import { describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import {
  decodeHeartbeat,
  parseHostPort,
  type DecodeResult,
  type RejectReason,
} from '../../../src/discovery/registration-message.js';

const P2P_P = { type: 'P', http_address: '10.0.0.1:8100', zmq_address: '10.0.0.1:21001' };
const frame = (value: unknown): Buffer => Buffer.from(encode(value));

describe('decodeHeartbeat: accepted frames', () => {
  it.each([
    {
      name: 'P2P NCCL prefill',
      input: P2P_P,
      expected: { role: 'prefill', httpAddress: '10.0.0.1:8100', zmqAddress: '10.0.0.1:21001', metadata: {} },
    },
    {
      name: 'P2P NCCL decode',
      input: { type: 'D', http_address: '10.0.0.2:8200', zmq_address: '10.0.0.2:22001' },
      expected: { role: 'decode', httpAddress: '10.0.0.2:8200', zmqAddress: '10.0.0.2:22001', metadata: {} },
    },
    {
      name: 'MoRI-IO WRITE with tp/dp sizes and handshake-style zmq address',
      input: {
        type: 'D',
        http_address: '10.0.0.3:8000',
        zmq_address: 'host:10.0.0.3,handshake:6301,notify:61005',
        transfer_mode: 'WRITE',
        tp_size: 8,
        dp_size: 1,
      },
      expected: {
        role: 'decode',
        httpAddress: '10.0.0.3:8000',
        zmqAddress: 'host:10.0.0.3,handshake:6301,notify:61005',
        metadata: { transfer_mode: 'WRITE', tp_size: 8, dp_size: 1 },
      },
    },
    {
      name: 'MoRI-IO lower-case transfer_mode is normalised',
      input: { ...P2P_P, transfer_mode: 'read' },
      expected: { role: 'prefill', metadata: { transfer_mode: 'READ' } },
    },
    {
      name: 'nested extra fields are ignored, scalars kept',
      input: { ...P2P_P, nested: { a: 1 }, list: [1, 2], flag: true, none: null, ratio: 0.5 },
      expected: { role: 'prefill', metadata: { flag: true, none: null, ratio: 0.5 } },
    },
    {
      name: 'bracketed IPv6 http address is canonicalised',
      input: { ...P2P_P, http_address: '[FD00:0:0::1]:8000' },
      expected: { httpAddress: '[fd00::1]:8000', http: { host: 'fd00::1', port: 8000, kind: 'ipv6' } },
    },
    {
      name: 'DNS name is lower-cased',
      input: { ...P2P_P, http_address: 'Prefill-0.VLLM.svc.cluster.local:8000' },
      expected: { httpAddress: 'prefill-0.vllm.svc.cluster.local:8000', http: { kind: 'dns' } },
    },
  ])('$name', ({ input, expected }) => {
    const result = decodeHeartbeat(frame(input), 65536);
    expect(result.ok).toBe(true);
    expect(result).toMatchObject(expected);
  });
});

const valid = encode(P2P_P);

describe('decodeHeartbeat: rejected frames', () => {
  const cases: { name: string; bytes: Uint8Array; reason: RejectReason; max?: number }[] = [
    { name: 'unknown type', bytes: frame({ ...P2P_P, type: 'X' }), reason: 'unknown_type' },
    { name: 'lower-case type', bytes: frame({ ...P2P_P, type: 'p' }), reason: 'unknown_type' },
    { name: 'numeric type', bytes: frame({ ...P2P_P, type: 1 }), reason: 'unknown_type' },
    {
      name: 'missing type',
      bytes: frame({ http_address: 'a:1', zmq_address: 'a:2' }),
      reason: 'missing_field',
    },
    {
      name: 'missing http_address',
      bytes: frame({ type: 'P', zmq_address: 'a:2' }),
      reason: 'missing_field',
    },
    {
      name: 'missing zmq_address',
      bytes: frame({ type: 'D', http_address: 'a:1' }),
      reason: 'missing_field',
    },
    { name: 'empty map', bytes: frame({}), reason: 'missing_field' },
    {
      name: 'http_address not a string',
      bytes: frame({ ...P2P_P, http_address: 8000 }),
      reason: 'bad_address',
    },
    { name: 'no port', bytes: frame({ ...P2P_P, http_address: '10.0.0.1' }), reason: 'bad_address' },
    { name: 'port 0', bytes: frame({ ...P2P_P, http_address: '10.0.0.1:0' }), reason: 'bad_address' },
    { name: 'port 65536', bytes: frame({ ...P2P_P, http_address: '10.0.0.1:65536' }), reason: 'bad_address' },
    {
      name: 'port not decimal',
      bytes: frame({ ...P2P_P, http_address: '10.0.0.1:0x50' }),
      reason: 'bad_address',
    },
    {
      name: 'scheme included',
      bytes: frame({ ...P2P_P, http_address: 'http://10.0.0.1:80' }),
      reason: 'bad_address',
    },
    {
      name: 'unbracketed IPv6',
      bytes: frame({ ...P2P_P, http_address: 'fd00::1:8000' }),
      reason: 'bad_address',
    },
    { name: 'bad IPv6', bytes: frame({ ...P2P_P, http_address: '[fd00::zz]:8000' }), reason: 'bad_address' },
    {
      name: 'IPv4 octet > 255',
      bytes: frame({ ...P2P_P, http_address: '10.0.0.256:80' }),
      reason: 'bad_address',
    },
    {
      name: 'numeric last label',
      bytes: frame({ ...P2P_P, http_address: '10.0.1:80' }),
      reason: 'bad_address',
    },
    { name: 'path injection', bytes: frame({ ...P2P_P, http_address: 'a/b:80' }), reason: 'bad_address' },
    { name: 'user info', bytes: frame({ ...P2P_P, http_address: 'u@host:80' }), reason: 'bad_address' },
    { name: 'empty host', bytes: frame({ ...P2P_P, http_address: ':80' }), reason: 'bad_address' },
    { name: 'bad zmq address', bytes: frame({ ...P2P_P, zmq_address: 'nope' }), reason: 'bad_address' },
    {
      name: 'bad MoRI zmq list',
      bytes: frame({ ...P2P_P, zmq_address: 'host:1.2.3.4,:6301' }),
      reason: 'bad_address',
    },
    {
      name: 'bad transfer_mode',
      bytes: frame({ ...P2P_P, transfer_mode: 'PUSH' }),
      reason: 'bad_transfer_mode',
    },
    {
      name: 'numeric transfer_mode',
      bytes: frame({ ...P2P_P, transfer_mode: 1 }),
      reason: 'bad_transfer_mode',
    },
    { name: 'array', bytes: frame(['P', '10.0.0.1:1', '10.0.0.1:2']), reason: 'not_a_map' },
    { name: 'string', bytes: frame('hello'), reason: 'not_a_map' },
    { name: 'nil', bytes: frame(null), reason: 'not_a_map' },
    { name: 'binary', bytes: frame(new Uint8Array([1, 2])), reason: 'not_a_map' },
    { name: 'empty frame', bytes: new Uint8Array(0), reason: 'not_msgpack' },
    { name: 'truncated', bytes: valid.subarray(0, valid.length - 3), reason: 'not_msgpack' },
    { name: 'trailing bytes', bytes: Buffer.concat([valid, Buffer.from([0xc0])]), reason: 'not_msgpack' },
    { name: 'reserved byte 0xc1', bytes: new Uint8Array([0xc1]), reason: 'not_msgpack' },
    // '{' is positive fixint 123; the rest is trailing garbage.
    { name: 'JSON text', bytes: Buffer.from(JSON.stringify(P2P_P)), reason: 'not_msgpack' },
    {
      name: 'map32 header claiming 4G entries',
      bytes: new Uint8Array([0xdf, 0xff, 0xff, 0xff, 0xff]),
      reason: 'not_msgpack',
    },
    {
      name: 'str32 header claiming 4 GiB',
      bytes: new Uint8Array([0xdb, 0xff, 0xff, 0xff, 0xff]),
      reason: 'not_msgpack',
    },
    {
      name: 'string above decoder limit',
      bytes: frame({ ...P2P_P, pad: 'x'.repeat(600) }),
      reason: 'not_msgpack',
    },
    {
      name: 'over 32 keys',
      bytes: frame(Object.fromEntries([...Array(40).keys()].map((i) => [`k${i}`, i]))),
      reason: 'not_msgpack',
    },
    { name: 'oversized', bytes: frame({ ...P2P_P, pad: 'x'.repeat(200) }), reason: 'oversized', max: 128 },
    { name: '__proto__ key', bytes: frame(JSON.parse('{"__proto__": 1}')), reason: 'not_msgpack' },
  ];
  it.each(cases)('$name -> $reason', ({ bytes, reason, max }) => {
    const result: DecodeResult = decodeHeartbeat(bytes, max ?? 65536);
    expect(result).toEqual({ ok: false, reason });
  });

  it('never throws on random bytes (msgpack garbage)', () => {
    let seed = 42;
    const next = (): number => (seed = (seed * 1103515245 + 12345) & 0x7fffffff);
    for (let i = 0; i < 2000; i++) {
      const bytes = Uint8Array.from({ length: next() % 64 }, () => next() & 0xff);
      const result = decodeHeartbeat(bytes, 65536);
      expect(typeof result.ok).toBe('boolean');
    }
  });
});

describe('parseHostPort', () => {
  it.each([
    {
      input: '127.0.0.1:8000',
      expected: { host: '127.0.0.1', port: 8000, kind: 'ipv4', authority: '127.0.0.1:8000' },
    },
    { input: '[::1]:1', expected: { host: '::1', port: 1, kind: 'ipv6', authority: '[::1]:1' } },
    {
      input: 'localhost:65535',
      expected: { host: 'localhost', port: 65535, kind: 'dns', authority: 'localhost:65535' },
    },
    { input: 'a-b.example.:80', expected: { host: 'a-b.example.', kind: 'dns' } },
    { input: '-bad.example:80', expected: undefined },
    { input: 'bad-.example:80', expected: undefined },
    { input: 'under_score:80', expected: undefined },
    { input: `${'a'.repeat(64)}.example:80`, expected: undefined },
    { input: '[fe80::1%eth0]:80', expected: undefined },
    { input: '[::1]80', expected: undefined },
    { input: '1.2.3.4:', expected: undefined },
    { input: '', expected: undefined },
  ])('$input', ({ input, expected }) => {
    const result = parseHostPort(input);
    if (expected === undefined) expect(result).toBeUndefined();
    else expect(result).toMatchObject(expected);
  });
});
