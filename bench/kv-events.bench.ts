/**
 * KV-event processing benchmark. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/kv-events.bench.ts           full run (~10 s)
 *   npx tsx bench/kv-events.bench.ts --quick   seconds-long smoke run
 *
 * 1. Throughput, one core: vLLM-shaped frames (tagged maps, uint64 hashes, block size 16; each batch
 *    = one engine step: BlockStored events of 1-32 consecutive blocks chained to the previous batch's
 *    blocks, plus BlockRemoved of old blocks, as under eviction pressure) are encoded up front, then
 *    decoded (kv-event-decoder.ts) and applied to the index (kv-block-index.ts) in a loop: block
 *    events/s = (stored + removed blocks) / seconds. Target >= 200,000. Decode and apply are also timed
 *    apart.
 * 2. Index memory: heap bytes per indexed block = (heapUsed after filling one worker with N blocks -
 *    before) / N, with gc.
 * 3. Lookup: cachedTokens of a 4,096-token prompt (256 blocks) over 8 workers, median microseconds.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare ratios within one run.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { Encoder } from '@msgpack/msgpack';
import { decodeFrame } from '../src/kv-events/kv-event-decoder.js';
import { KvBlockIndex } from '../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../src/kv-events/block-keys.js';
import { seededRandom } from '../src/util/seeded-random.js';

const quick = process.argv.includes('--quick');
const BS = 16;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

function getGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}
const gc = getGc();
const fullGc = (): void => {
  for (let i = 0; i < 4; i++) gc();
};

const encoder = new Encoder({ useBigInt64: true });
const rng = seededRandom(7);

/** Pre-encoded frames: `batches` engine steps; returns frames and the block events they carry. */
function makeFrames(batches: number): { frames: Buffer[][]; blockEvents: number } {
  const frames: Buffer[][] = [];
  let blockEvents = 0;
  let next = 1n;
  const live: bigint[] = [];
  let parent: bigint | undefined;
  for (let b = 0; b < batches; b++) {
    const events: unknown[] = [];
    const n = 1 + Math.floor(rng() * 32);
    const hashes: bigint[] = [];
    for (let i = 0; i < n; i++) hashes.push(0x8000000000000000n + next++);
    const tokens = Array.from({ length: n * BS }, () => Math.floor(rng() * 128_000));
    events.push({
      type: 'BlockStored',
      block_hashes: hashes,
      parent_block_hash: rng() < 0.2 ? null : (parent ?? null),
      token_ids: tokens,
      block_size: BS,
      lora_id: null,
      medium: 'GPU',
      lora_name: null,
    });
    parent = hashes[hashes.length - 1];
    live.push(...hashes);
    blockEvents += n;
    if (live.length > 20_000) {
      const gone = live.splice(0, n);
      events.push({ type: 'BlockRemoved', block_hashes: gone, medium: 'GPU' });
      blockEvents += gone.length;
    }
    const seq = Buffer.alloc(8);
    seq.writeBigUInt64BE(BigInt(b));
    frames.push([
      Buffer.alloc(0),
      seq,
      Buffer.from(encoder.encode({ ts: b / 100, events, data_parallel_rank: 0 })),
    ]);
  }
  return { frames, blockEvents };
}

function throughput(): Record<string, number> {
  const { frames, blockEvents } = makeFrames(quick ? 2_000 : 20_000);
  const rounds = quick ? 1 : 3;
  let best = { total: Infinity, decode: Infinity };
  for (let r = 0; r < rounds; r++) {
    const index = new KvBlockIndex();
    const t0 = process.hrtime.bigint();
    const decoded = frames.map((f) => decodeFrame(f));
    const t1 = process.hrtime.bigint();
    for (const d of decoded) if (d.ok) index.apply('w', d.batch.events);
    const t2 = process.hrtime.bigint();
    const total = Number(t2 - t0) / 1e9;
    if (total < best.total) best = { total, decode: Number(t1 - t0) / 1e9 };
  }
  const out = {
    frames: frames.length,
    blockEvents,
    blockEventsPerSec: Math.round(blockEvents / best.total),
    decodeOnlyPerSec: Math.round(blockEvents / best.decode),
    applyOnlyPerSec: Math.round(blockEvents / (best.total - best.decode)),
  };
  log(
    `kv events: ${out.blockEventsPerSec} block events/s (decode ${out.decodeOnlyPerSec}/s, apply ${out.applyOnlyPerSec}/s)`,
  );
  return out;
}

function memory(): Record<string, number> {
  const n = quick ? 20_000 : 200_000;
  const index = new KvBlockIndex({ maxBlocksPerWorker: n });
  fullGc();
  const before = process.memoryUsage().heapUsed;
  let parent: number | undefined;
  for (let i = 0; i < n; i += 16) {
    const hashes = Array.from({ length: 16 }, (_, k) => 2n ** 60n + BigInt(i + k));
    const tokens = Array.from({ length: 16 * BS }, (_, k) => (i * BS + k) % 4_000_000);
    index.apply('w', [
      {
        type: 'stored',
        hashes,
        parent,
        tokens,
        blockSize: BS,
        medium: 'GPU',
        loraName: undefined,
        extraKeys: undefined,
      },
    ]);
    parent = undefined;
  }
  fullGc();
  const bytes = process.memoryUsage().heapUsed - before;
  const out = { blocks: index.size('w'), heapBytesPerBlock: Math.round(bytes / index.size('w')) };
  log(`kv index: ${out.heapBytesPerBlock} heap bytes per block (${out.blocks} blocks)`);
  return out;
}

function lookup(): Record<string, number> {
  const index = new KvBlockIndex();
  const tokens = Array.from({ length: 4096 }, (_, i) => (i * 31) % 50_000);
  const workers = Array.from({ length: 8 }, (_, w) => `w${w}`);
  workers.forEach((w, i) => {
    const blocks = 32 * (i + 1);
    index.apply(w, [
      {
        type: 'stored',
        hashes: Array.from({ length: blocks }, (_, k) => k + 1),
        parent: undefined,
        tokens: tokens.slice(0, blocks * BS),
        blockSize: BS,
        medium: 'GPU',
        loraName: undefined,
        extraKeys: undefined,
      },
    ]);
  });
  const samples: number[] = [];
  for (let i = 0; i < (quick ? 200 : 2000); i++) {
    const t0 = process.hrtime.bigint();
    const keys = promptKeys(tokens, BS, keySeed(undefined));
    index.cachedTokens(keys, BS, workers);
    samples.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  samples.sort((a, b) => a - b);
  const out = { promptTokens: 4096, workers: 8, medianUs: Number(samples[samples.length >> 1]!.toFixed(1)) };
  log(`kv lookup: ${out.medianUs} us median (keys + lookup, 4096 tokens, 8 workers)`);
  return out;
}

process.stdout.write(
  `${JSON.stringify({ benchmark: 'kv-events', quick, throughput: throughput(), memory: memory(), lookup: lookup() }, null, 2)}\n`,
);
