/**
 * Reads a request body for the simulator's small endpoints (tokenize, audio): `done(body)` once it has
 * ended, `body` undefined when it was larger than `maxBytes` (the excess is read and dropped, so the
 * connection stays usable for the 413). An aborted request never calls `done`: the response's 'close'
 * ends it.
 */
import type { IncomingMessage } from 'node:http';

export function readBody(
  req: IncomingMessage,
  maxBytes: number,
  done: (body: Buffer | undefined) => void,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    size += c.length;
    if (size <= maxBytes) chunks.push(c);
  });
  req.on('error', () => undefined); // an abort surfaces as the response's 'close'
  req.on('end', () => done(size > maxBytes ? undefined : Buffer.concat(chunks)));
}
