/**
 * Every way a request can end, and what each consumer reads from its one end record: the metrics
 * outcome, the passive-health outcome (and whether that counts against the worker's breaker).
 */
import { describe, expect, it } from 'vitest';
import {
  healthOutcome,
  prefillHealthOutcome,
  requestOutcome,
  type HealthOutcome,
  type Outcome,
  type RequestEnd,
  type RoutingStage,
} from '../../../src/request/request-end.js';
import { isFailureOutcome } from '../../../src/health/worker-health.js';

interface Way {
  way: string;
  end: RequestEnd;
  stage: RoutingStage;
  outcome: Outcome;
  health: HealthOutcome;
  /** Counts against the worker's circuit breaker. */
  failure: boolean;
}

const response = (status: number): RequestEnd => ({ kind: 'response', status });
const before: RequestEnd = { kind: 'cancelled', afterHeaders: false };
const after = (status?: number): RequestEnd => ({ kind: 'cancelled', afterHeaders: true, status });
const rejected = (status: number, code: string): RequestEnd => ({ kind: 'rejected', status, code });

const unwatched = (status: number): RequestEnd => ({ kind: 'unwatched', status });
const released = (status?: number): RequestEnd => ({ kind: 'released', status });

const WAYS: Way[] = [
  // The gateway served the request on a fallback endpoint: the routed worker's part ends (it refused
  // or reset the request); the request itself goes on under the served worker.
  {
    way: "failed over (the routed worker's part)",
    end: { kind: 'failed_over', served: '10.0.0.2:8000' },
    stage: 'routed',
    outcome: 'no_response',
    health: 'server_error',
    failure: true,
  },
  // The router answered for the fleet itself (GET /v1/models): no worker was asked.
  {
    way: 'answered by the router',
    end: { kind: 'answered', status: 200 },
    stage: 'dispatching',
    outcome: 'answered',
    health: 'cancelled',
    failure: false,
  },
  // The router skipped the response body (mode override): the stream ended, complete or cut.
  {
    way: 'unwatched 200 (body skipped, stream ended)',
    end: unwatched(200),
    stage: 'routed',
    outcome: 'unwatched',
    health: 'success',
    failure: false,
  },
  // With response_body_mode NONE in the filter every response is skipped, errors too: the worker's
  // status still says what the client got (the dashboard's error ratio counts it, not as a success).
  {
    way: 'unwatched 503 (response_body_mode NONE in the filter): an upstream error, not a success',
    end: unwatched(503),
    stage: 'routed',
    outcome: 'upstream_5xx',
    health: 'server_error',
    failure: true,
  },
  {
    way: 'unwatched 404 (response_body_mode NONE in the filter): an upstream 4xx',
    end: unwatched(404),
    stage: 'routed',
    outcome: 'upstream_4xx',
    health: 'success',
    failure: false,
  },
  // The router, closing after a drain that timed out, handed the routed stream back to Envoy.
  {
    way: 'released while streaming 200',
    end: released(200),
    stage: 'routed',
    outcome: 'released',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'released before the response headers',
    end: released(),
    stage: 'routed',
    outcome: 'released',
    health: 'cancelled',
    failure: false,
  },
  // The response reached end-of-stream.
  {
    way: 'completed 200',
    end: response(200),
    stage: 'routed',
    outcome: 'ok',
    health: 'success',
    failure: false,
  },
  {
    way: 'completed 204',
    end: response(204),
    stage: 'routed',
    outcome: 'ok',
    health: 'success',
    failure: false,
  },
  {
    way: 'completed 399',
    end: response(399),
    stage: 'routed',
    outcome: 'ok',
    health: 'success',
    failure: false,
  },
  {
    way: 'upstream 400 (bad request: the client)',
    end: response(400),
    stage: 'routed',
    outcome: 'upstream_4xx',
    health: 'success',
    failure: false,
  },
  {
    way: 'upstream 404',
    end: response(404),
    stage: 'routed',
    outcome: 'upstream_4xx',
    health: 'success',
    failure: false,
  },
  {
    way: 'upstream 429',
    end: response(429),
    stage: 'routed',
    outcome: 'upstream_4xx',
    health: 'success',
    failure: false,
  },
  {
    way: 'upstream 500',
    end: response(500),
    stage: 'routed',
    outcome: 'upstream_5xx',
    health: 'server_error',
    failure: true,
  },
  {
    way: "Envoy's 503 local reply (connect failure, reset before headers)",
    end: response(503),
    stage: 'routed',
    outcome: 'upstream_5xx',
    health: 'server_error',
    failure: true,
  },
  {
    way: "Envoy's local reply before routing (its 413)",
    end: response(413),
    stage: 'unrouted',
    outcome: 'abandoned',
    health: 'success',
    failure: false,
  },
  // The router answered itself.
  {
    way: 'bad input (400)',
    end: rejected(400, 'invalid_json'),
    stage: 'unrouted',
    outcome: 'rejected',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'body too large (413)',
    end: rejected(413, 'body_too_large'),
    stage: 'unrouted',
    outcome: 'rejected',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'no workers (503)',
    end: rejected(503, 'no_workers'),
    stage: 'dispatching',
    outcome: 'no_workers',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'sheddable request shed while its workers were saturated (429)',
    end: rejected(429, 'pool_saturated'),
    stage: 'unrouted',
    outcome: 'shed',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'prefill failed (502)',
    end: rejected(502, 'prefill_failed'),
    stage: 'dispatching',
    outcome: 'error',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'concurrent prefill failed before response headers (502)',
    end: rejected(502, 'prefill_failed'),
    stage: 'routed',
    outcome: 'error',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'protocol error / internal (500)',
    end: rejected(500, 'internal_error'),
    stage: 'unrouted',
    outcome: 'error',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'rejected without a known status',
    end: { kind: 'rejected' },
    stage: 'unrouted',
    outcome: 'rejected',
    health: 'cancelled',
    failure: false,
  },
  // The stream ended first.
  {
    way: 'client gone before routing',
    end: before,
    stage: 'unrouted',
    outcome: 'abandoned',
    health: 'no_response',
    failure: false,
  },
  {
    way: 'client gone during the prefill leg',
    end: before,
    stage: 'dispatching',
    outcome: 'no_response',
    health: 'no_response',
    failure: false,
  },
  {
    way: 'routed, no response headers (client gone, message timeout)',
    end: before,
    stage: 'routed',
    outcome: 'no_response',
    health: 'no_response',
    failure: false,
  },
  {
    way: 'client abort mid-body after 200',
    end: after(200),
    stage: 'routed',
    outcome: 'cancelled',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'ended after headers, status unknown',
    end: after(),
    stage: 'routed',
    outcome: 'cancelled',
    health: 'cancelled',
    failure: false,
  },
  {
    way: 'upstream reset mid-body after 502',
    end: after(502),
    stage: 'routed',
    outcome: 'cancelled',
    health: 'server_error',
    failure: true,
  },
  {
    way: "Envoy's local reply before routing, cut mid-body",
    end: after(413),
    stage: 'unrouted',
    outcome: 'cancelled',
    health: 'cancelled',
    failure: false,
  },
];

describe('request end: one record, every projection', () => {
  it.each(WAYS)('$way -> $outcome / $health', ({ end, stage, outcome, health, failure }) => {
    expect(requestOutcome(end, stage)).toBe(outcome);
    expect(healthOutcome(end)).toBe(health);
    expect(isFailureOutcome(healthOutcome(end))).toBe(failure);
  });

  it('every metrics outcome is reachable', () => {
    const all: Outcome[] = [
      'ok',
      'upstream_4xx',
      'upstream_5xx',
      'rejected',
      'shed',
      'no_workers',
      'error',
      'no_response',
      'cancelled',
      'abandoned',
      'unwatched',
      'released',
      'answered',
    ];
    expect(new Set(WAYS.map((w) => w.outcome))).toEqual(new Set(all));
  });
});

describe('prefill leg end -> health', () => {
  it.each<[string, number | undefined, HealthOutcome, boolean]>([
    ['ok', undefined, 'success', false],
    ['aborted', undefined, 'cancelled', false],
    ['status', 503, 'prefill_failed', true],
    ['status', 400, 'success', false],
    ['status', undefined, 'prefill_failed', true],
    ['timeout', undefined, 'prefill_failed', true],
    ['transport', undefined, 'prefill_failed', true],
    ['invalid_response', undefined, 'prefill_failed', true],
  ])('%s (status %s) -> %s (failure: %s)', (kind, status, outcome, failure) => {
    expect(prefillHealthOutcome(kind, status)).toBe(outcome);
    expect(isFailureOutcome(outcome)).toBe(failure);
  });
});
