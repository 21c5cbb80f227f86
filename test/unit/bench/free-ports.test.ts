import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePorts } from '../../support/free-ports.js';

describe('freePorts', () => {
  it('hands out distinct ports that a child can bind right after', async () => {
    for (let round = 0; round < 20; round++) {
      const ports = await freePorts(3);
      expect(new Set(ports).size).toBe(3);
      const servers = ports.map(() => createServer());
      await Promise.all(
        servers.map(
          (srv, i) =>
            new Promise<void>((resolve, reject) => {
              srv.once('error', reject);
              srv.listen(ports[i], '127.0.0.1', () => resolve());
            }),
        ),
      );
      await Promise.all(servers.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
    }
  });
});
