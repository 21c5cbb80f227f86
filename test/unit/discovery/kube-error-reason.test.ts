import { describe, expect, it } from 'vitest';
import { ApiException } from '@kubernetes/client-node';
import { kubeErrorReason } from '../../../src/discovery/kube-error-reason.js';

describe('kubeErrorReason: the label of vllm_router_kube_watch_errors_total', () => {
  it.each([
    [401, 'unauthorized'],
    [403, 'forbidden'],
    [404, 'not_found'],
    [410, 'gone'],
    [429, 'too_many_requests'],
    [422, 'client_error'],
    [503, 'server_error'],
  ])("a LIST answered %i (the client's ApiException) is %s", (code, reason) => {
    expect(kubeErrorReason(new ApiException(code, 'failed', {}, {}))).toBe(reason);
  });

  it('a WATCH ended by a status (statusCode) and a connection error (no status)', () => {
    expect(kubeErrorReason(Object.assign(new Error('Forbidden'), { statusCode: 403 }))).toBe('forbidden');
    expect(kubeErrorReason(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBe(
      'unreachable',
    );
  });
});
