/**
 * A request target the WHATWG URL parser refuses (`//[`, `http://[`) makes AdminServer.route's
 * `new URL(req.url, 'http://admin')` throw a TypeError, which is not an AdminInputError: the client
 * gets a 500 internal_error (and an error log) for its own malformed request instead of a 400.
 */
import net from 'node:net';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { AdminServer, type AdminBackend } from '../../../src/admin/admin-server.js';

const backend: AdminBackend = {
  metrics: async () => '',
  metricsContentType: 'text/plain',
  readiness: () => ({ ready: true, detail: {} }),
  workers: () => [],
  register: async () => ({ generation: 1, event: 'registered' }),
  deregister: () => false,
  peerAllowed: () => true,
};

let server: AdminServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

function raw(port: number, target: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1', () =>
      c.write(`GET ${target} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n`),
    );
    let data = '';
    c.on('data', (d) => (data += d));
    c.on('error', reject);
    c.on('end', () => {
      const [head = '', body = ''] = data.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), body });
    });
  });
}

describe('admin server: a malformed request target', () => {
  it.each(['//[', 'http://['])('%s is a 4xx JSON error, not a 500', async (target) => {
    server = new AdminServer(backend, {
      host: '127.0.0.1',
      port: 0,
      token: '',
      logger: pino({ level: 'silent' }),
    });
    const port = await server.start();
    const { status, body } = await raw(port, target);
    expect(JSON.parse(body)).toHaveProperty('error');
    expect(status).toBeGreaterThanOrEqual(400);
    expect(status).toBeLessThan(500);
  });
});

describe('admin server: a path with a doubled slash', () => {
  it('//workers is a 404 naming the path sent, not "/" (the WHATWG parser read "workers" as a host)', async () => {
    server = new AdminServer(backend, {
      host: '127.0.0.1',
      port: 0,
      token: '',
      logger: pino({ level: 'silent' }),
    });
    const port = await server.start();
    const { status, body } = await raw(port, '//workers');
    expect(status).toBe(404);
    expect((JSON.parse(body) as { error: { message: string } }).error.message).toBe(
      'no admin route //workers',
    );
    expect((await raw(port, '/workers')).status).toBe(200);
  });
});
