/**
 * Every refusal of the admin API answers a JSON error with its own stable code and status
 * (ADMIN_ERROR_STATUS), on a real router over real HTTP.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Config } from '../../../src/config.js';
import type { Router } from '../../../src/router.js';
import { ADMIN_ERROR_STATUS } from '../../../src/admin/admin-server.js';
import { startTestRouter } from '../../support/router-fixture.js';

const routers: Router[] = [];
afterEach(async () => {
  for (const r of routers.splice(0)) await r.close();
});

async function router(overrides: Partial<Config> = {}): Promise<Router> {
  const r = await startTestRouter(overrides);
  routers.push(r);
  return r;
}

interface Case {
  what: string;
  config?: Partial<Config>;
  /** Runs against the router before the request (e.g. a ZMQ-style registration). */
  before?: (r: Router) => void;
  method: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
  code: keyof typeof ADMIN_ERROR_STATUS;
}

const json = (x: unknown): string => JSON.stringify(x);

const CASES: Case[] = [
  {
    what: 'a body that is not JSON',
    method: 'POST',
    path: '/workers',
    body: '{nope',
    code: 'invalid_registration',
  },
  {
    what: 'a url with a path',
    method: 'POST',
    path: '/workers',
    body: json({ role: 'regular', url: 'http://127.0.0.1:9000/v1' }),
    code: 'invalid_registration',
  },
  {
    what: 'a DELETE without url',
    method: 'DELETE',
    path: '/workers?role=regular',
    code: 'invalid_registration',
  },
  {
    what: 'a body over 64 KiB',
    method: 'POST',
    path: '/workers',
    body: json({ role: 'regular', url: 'http://127.0.0.1:9000', pad: 'x'.repeat(70_000) }),
    code: 'body_too_large',
  },
  {
    what: 'a worker address outside --discovery-allow',
    config: { discoveryAllow: ['127.0.0.0/8'] },
    method: 'POST',
    path: '/workers',
    body: json({ role: 'regular', url: 'http://10.1.2.3:9000' }),
    code: 'worker_not_allowed',
  },
  {
    what: 'a peer outside --discovery-allow',
    config: { discoveryAllow: ['10.0.0.0/8'] },
    method: 'POST',
    path: '/workers',
    body: json({ role: 'regular', url: 'http://10.1.2.3:9000' }),
    code: 'forbidden',
  },
  {
    what: 'a write without the bearer token',
    config: { adminToken: 'secret' },
    method: 'POST',
    path: '/workers',
    body: json({ role: 'regular', url: 'http://127.0.0.1:9000' }),
    code: 'unauthorized',
  },
  {
    what: 'a heartbeat that drops the MoRI-IO transfer_mode of the live registration',
    config: { mode: 'pd' },
    before: (r) => {
      r.registry.register({
        role: 'decode',
        url: 'http://127.0.0.1:9300',
        endpoint: '127.0.0.1:9300',
        metadata: { transfer_mode: 'WRITE' },
      });
    },
    method: 'POST',
    path: '/workers',
    body: json({ role: 'decode', url: 'http://127.0.0.1:9300' }),
    code: 'registration_conflict',
  },
  {
    what: 'a worker operation without ?url=',
    method: 'POST',
    path: '/workers/cordon',
    code: 'invalid_request',
  },
  {
    what: 'a sleep of a worker that cannot be reached',
    before: (r) =>
      r.registry.register({ role: 'regular', url: 'http://127.0.0.1:9', endpoint: '127.0.0.1:9' }),
    method: 'POST',
    path: '/workers/sleep?url=http://127.0.0.1:9',
    code: 'worker_error',
  },
  { what: 'an unknown route', method: 'GET', path: '/nope', code: 'not_found' },
  { what: 'a wrong method', method: 'PUT', path: '/workers', body: '{}', code: 'method_not_allowed' },
];

describe('admin API error codes', () => {
  it.each(CASES.map((c) => [c.what, c] as const))('%s', async (_what, c) => {
    const r = await router(c.config);
    c.before?.(r);
    const res = await fetch(`http://127.0.0.1:${r.adminPort}${c.path}`, {
      method: c.method,
      headers: { 'content-type': 'application/json', ...c.headers },
      ...(c.body !== undefined ? { body: c.body } : {}),
    });
    expect(res.status).toBe(ADMIN_ERROR_STATUS[c.code]);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as { error: { code: string; message: string; type: string } };
    // OpenAI's types: the worker's failure (502) is a server error, the rest are the caller's.
    const type = ADMIN_ERROR_STATUS[c.code] >= 500 ? 'server_error' : 'invalid_request_error';
    expect(body.error).toMatchObject({ code: c.code, type });
    expect(body.error.message.length).toBeGreaterThan(0);
  });

  it('the 403 and 413 codes are distinct from invalid_registration', () => {
    expect(ADMIN_ERROR_STATUS.worker_not_allowed).toBe(403);
    expect(ADMIN_ERROR_STATUS.forbidden).toBe(403);
    expect(ADMIN_ERROR_STATUS.body_too_large).toBe(413);
  });
});
