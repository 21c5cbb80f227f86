/**
 * a worker that joins gets the remembered adapters one after another (LoraFanout.replay), from
 * a copy of the list taken when the replay starts. An adapter unloaded through the router while that
 * replay runs (the joining worker answers the unload 404, "already gone") is still loaded on the
 * joining worker afterwards: the fleet serves an adapter the client unloaded, on that worker alone.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LoraFanout } from '../../../src/routing/lora-fanout.js';
import { Worker } from '../../../src/workers/worker.js';

interface FakeVllm {
  url: string;
  adapters: Set<string>;
  /** Resolves when a load of `name` arrives; that load is held until `release()`. */
  hold(name: string): { arrived: Promise<void>; release(): void };
  close(): Promise<void>;
}

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

const bodyOf = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve) => {
    let s = '';
    req.on('data', (c: Buffer) => (s += c.toString()));
    req.on('end', () => resolve(s));
  });

async function fakeVllm(): Promise<FakeVllm> {
  const adapters = new Set<string>();
  const holds = new Map<string, { arrived: () => void; gate: Promise<void> }>();
  const server: Server = createServer((req, res) => {
    void bodyOf(req).then(async (text) => {
      const name = (JSON.parse(text) as { lora_name: string }).lora_name;
      if (req.url === '/v1/load_lora_adapter') {
        const h = holds.get(name);
        if (h !== undefined) {
          holds.delete(name);
          h.arrived();
          await h.gate;
        }
        adapters.add(name);
        res.writeHead(200).end(`Success: LoRA adapter '${name}' added successfully.`);
      } else if (adapters.delete(name)) {
        res.writeHead(200).end(`Success: LoRA adapter '${name}' removed successfully.`);
      } else {
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message: `The lora adapter '${name}' cannot be found.` } }));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const fake: FakeVllm = {
    url,
    adapters,
    hold(name) {
      let arrived!: () => void;
      let release!: () => void;
      const a = new Promise<void>((r) => (arrived = r));
      const gate = new Promise<void>((r) => (release = r));
      holds.set(name, { arrived, gate });
      return { arrived: a, release };
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
  open.push(fake);
  return fake;
}

const worker = (url: string): Worker =>
  new Worker({ role: 'regular', url, endpoint: new URL(url).host, generation: 1 });
const body = (o: object): Buffer => Buffer.from(JSON.stringify(o));

describe('LoRA replay to a joining worker', () => {
  it('does not load an adapter on the joining worker that was unloaded while its replay ran', async () => {
    const [a, b] = [await fakeVllm(), await fakeVllm()];
    const members = [worker(a.url)];
    const replays: string[] = [];
    let replayEnded!: () => void;
    const replayDone = new Promise<void>((r) => (replayEnded = r));
    const f = new LoraFanout({
      members: () => members,
      timeoutMs: 5_000,
      onReplayed: (_url, name) => replays.push(name),
      onAnswered: (urls) => {
        if (urls.length === 1 && urls[0] === b.url) replayEnded();
      },
    });
    open.push(f);
    f.sync();
    for (const name of ['sql', 'chat']) {
      const r = await f.answer(
        'POST',
        '/v1/load_lora_adapter',
        {},
        body({ lora_name: name, lora_path: `/a/${name}` }),
      )!;
      expect(r.status).toBe(200);
    }
    // b joins; its replay of 'sql' is held by the worker while the client unloads 'chat'.
    const held = b.hold('sql');
    members.push(worker(b.url));
    f.sync();
    await held.arrived;
    const un = await f.answer('POST', '/v1/unload_lora_adapter', {}, body({ lora_name: 'chat' }))!;
    expect(un.status).toBe(200);
    expect(f.rememberedAdapters).toEqual(['sql']);
    expect([...a.adapters]).toEqual(['sql']);
    held.release();
    // The replay ends by asking for b's model list alone (onAnswered([b])).
    await replayDone;
    expect(replays).toEqual(['sql']);
    expect([...b.adapters]).toEqual(['sql']);
  });
});
