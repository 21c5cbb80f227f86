import { describe, expect, it } from 'vitest';
import { RouterBaseError } from '../../../src/errors.js';
import { RouterError } from '../../../src/request/router-error.js';
import { AdminInputError } from '../../../src/admin/admin-server.js';
import { ConfigError } from '../../../src/config.js';
import { PrefillError } from '../../../src/pd/prefill-client.js';
import { HealthCheckTimeoutError } from '../../../src/health/health-checker.js';

describe('one error base with stable codes', () => {
  it.each<[string, RouterBaseError, string, string]>([
    ['a request error', new RouterError('missing_model', 400, 'no model'), 'RouterError', 'missing_model'],
    [
      'an admin refusal',
      new AdminInputError('too big', 'body_too_large'),
      'AdminInputError',
      'body_too_large',
    ],
    ['an admin default', new AdminInputError('bad'), 'AdminInputError', 'invalid_registration'],
    ['a config error', new ConfigError('bad flag'), 'ConfigError', 'invalid_config'],
    ['a prefill status', new PrefillError('status', 'HTTP 503', 503), 'PrefillError', 'prefill_status'],
    ['a prefill timeout', new PrefillError('timeout', 'slow'), 'PrefillError', 'prefill_timeout'],
    [
      'a health check timeout',
      new HealthCheckTimeoutError(500),
      'HealthCheckTimeoutError',
      'health_check_timeout',
    ],
  ])('%s: instanceof the base, named after its class, with its code', (_what, err, name, code) => {
    expect(err).toBeInstanceOf(RouterBaseError);
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe(name);
    expect(err.code).toBe(code);
    expect(String(err)).toContain(name);
  });

  it('admin refusals are RouterErrors with the status their code implies and an OpenAI JSON body', () => {
    const e = new AdminInputError(
      'worker address 10.1.2.3 is outside --discovery-allow',
      'worker_not_allowed',
    );
    expect(e).toBeInstanceOf(RouterError);
    expect(e.status).toBe(403);
    expect(e.toJSON()).toEqual({
      error: {
        message: 'worker address 10.1.2.3 is outside --discovery-allow',
        type: 'invalid_request_error',
        code: 'worker_not_allowed',
      },
    });
  });

  it('a RouterError keeps its status, type and JSON shape', () => {
    const e = new RouterError('no_workers', 503, 'no healthy worker');
    expect(e.toJSON()).toEqual({
      error: { message: 'no healthy worker', type: 'server_error', code: 'no_workers' },
    });
    expect(new PrefillError('status', 'x', 502).status).toBe(502);
    expect(new HealthCheckTimeoutError(250).message).toContain('250 ms');
  });
});
