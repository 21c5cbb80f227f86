/**
 * Added time-to-first-token of the sequential P/D path over the decode worker directly
 * (bench/pd-added-ttft.ts); also part of `npm run bench -- pd`.
 *
 *   npx tsx bench/pd-ttft.bench.ts [--requests 300] [--quick]
 *
 * Prints one JSON object.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { measureAddedTtft } from './pd-added-ttft.js';

const { values } = parseArgs({
  options: { requests: { type: 'string', default: '300' }, quick: { type: 'boolean' } },
});
const n = values.quick ? 30 : Number(values.requests);

measureAddedTtft(n).then(
  (r) => {
    const out = { bench: 'pd-ttft', date: new Date().toISOString(), cores: os.cpus().length, ...r };
    console.log(JSON.stringify(out, null, 2));
  },
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
