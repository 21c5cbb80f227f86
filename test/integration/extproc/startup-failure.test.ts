/** A router that cannot start (its admin port is taken) releases what it had already started. */
import net from 'node:net';
import { expect, it } from 'vitest';
import { startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';

const listeners = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPServerWrap').length;

it('fails to start with a clear error and closes the servers it had already started', async () => {
  const blocker = net.createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', () => r()));
  const port = (blocker.address() as net.AddressInfo).port;
  try {
    const before = listeners();
    await expect(startTestRouter({ adminPort: port, grpcPort: 0 })).rejects.toThrow(/EADDRINUSE/);
    // The gRPC server was listening before the admin port failed: it must be gone again.
    await waitFor(() => listeners() === before);
    expect(listeners()).toBe(before);
  } finally {
    await new Promise<void>((r) => blocker.close(() => r()));
  }
});
