import { afterEach, describe, expect, it } from 'vitest';
import { Router } from 'zeromq';
import { decode } from '@msgpack/msgpack';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { registrationMessage, ZmqRegistrar } from '../../../src/sim/zmq-registrar.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function router(): Promise<{ socket: Router; endpoint: string }> {
  const socket = new Router({ linger: 0, receiveTimeout: 10_000 });
  await socket.bind('tcp://127.0.0.1:*');
  cleanups.push(() => socket.close());
  return { socket, endpoint: socket.lastEndpoint! };
}

async function receive(socket: Router): Promise<{ identity: string; message: Record<string, unknown> }> {
  const [identity, payload] = await socket.receive();
  return { identity: identity!.toString(), message: decode(payload!) as Record<string, unknown> };
}

async function sim(opts: Parameters<typeof startSimulator>[0]): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, ...opts });
  cleanups.push(() => s.close());
  return s;
}

describe('ZMQ registration', () => {
  it('a decode simulator registers like vLLM P2P NCCL: msgpack {type, http_address, zmq_address}', async () => {
    const { socket, endpoint } = await router();
    // A long interval: the message we receive can only be the immediate first heartbeat.
    const s = await sim({ role: 'decode', register: { zmq: endpoint, intervalMs: 600_000 } });
    const { identity, message } = await receive(socket);
    const zmqAddress = `127.0.0.1:${(s.port + 10_000) % 65_536}`;
    expect(s.zmqAddress).toBe(zmqAddress);
    expect(identity).toBe(zmqAddress);
    expect(message).toEqual({ type: 'D', http_address: s.hostPort, zmq_address: zmqAddress });
  });

  it('a prefill simulator sends type P with extra fields merged, and keeps heartbeating', async () => {
    const { socket, endpoint } = await router();
    const s = await sim({
      role: 'prefill',
      register: {
        zmq: endpoint,
        intervalMs: 20,
        zmqAddress: 'host:1.2.3.4,handshake:6301',
        extra: { transfer_mode: 'READ' },
      },
    });
    for (let i = 0; i < 3; i++) {
      const { identity, message } = await receive(socket);
      expect(identity).toBe('host:1.2.3.4,handshake:6301');
      expect(message).toEqual({
        type: 'P',
        http_address: s.hostPort,
        zmq_address: 'host:1.2.3.4,handshake:6301',
        transfer_mode: 'READ',
      });
    }
    s.stopRegistering();
    s.startRegistering();
    expect((await receive(socket)).message.type).toBe('P');
  });

  it('a regular simulator does not register', async () => {
    const { endpoint } = await router();
    const s = await sim({ role: 'regular', register: { zmq: endpoint } });
    expect(s.zmqAddress).toBeUndefined();
  });

  it('the registrar survives an absent router and closes idempotently', async () => {
    const r = new ZmqRegistrar({
      endpoint: 'tcp://127.0.0.1:1',
      type: 'D',
      httpAddress: '127.0.0.1:8000',
      zmqAddress: '127.0.0.1:18000',
      intervalMs: 10,
    });
    r.start();
    r.start();
    expect(r.running).toBe(true);
    r.close();
    r.close();
    expect(r.running).toBe(false);
  });

  it('registrationMessage lets extra override standard fields (for negative tests)', () => {
    expect(
      registrationMessage({
        endpoint: 'x',
        type: 'P',
        httpAddress: 'h:1',
        zmqAddress: 'z:2',
        extra: { type: 'X' },
      }),
    ).toEqual({ type: 'X', http_address: 'h:1', zmq_address: 'z:2' });
  });
});
