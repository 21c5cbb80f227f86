/**
 * The one error base. Every error the router raises on purpose is a RouterBaseError with a stable
 * string `code` (as undici's `UND_ERR_*`): callers, logs, tests and HTTP clients match on `code` (or
 * `instanceof`), never on the message. `name` is the concrete class name.
 *
 * Code namespaces, one per subclass:
 *   RouterError (request/router-error.ts)   user-facing, with an HTTP status and an OpenAI error
 *       type, sent as an ImmediateResponse: invalid_json, invalid_body, invalid_content_type,
 *       missing_model, invalid_prompt, invalid_messages, invalid_input, body_too_large, no_workers,
 *       pool_saturated (429, a sheddable request: routing/admission.ts), queue_full (429) and
 *       queue_timeout (429 or 503: routing/flow-control.ts), prefill_failed, prefill_timeout, client_cancelled,
 *       unsupported_processing_mode (500: extproc/processing-modes.ts), unsupported_upgrade (501:
 *       request/protocol-upgrade.ts), internal_error
 *   AdminInputError (admin/admin-server.ts) a RouterError of the admin API (ADMIN_ERROR_STATUS):
 *       invalid_registration 400, dns_failed 400, unauthorized 401, forbidden 403 (the peer),
 *       worker_not_allowed 403 (the claimed worker address), not_found 404,
 *       method_not_allowed 405, registration_conflict 409, body_too_large 413
 *   ConfigError (config.ts)                 invalid_config (startup fails, exit 2)
 *   PrefillError (pd/prefill-client.ts)     prefill_status, prefill_timeout, prefill_transport,
 *       prefill_invalid_response, prefill_aborted (mapped to a RouterError by the P/D dispatcher)
 *   HealthCheckTimeoutError (health/health-checker.ts)   health_check_timeout
 */
export class RouterBaseError<C extends string = string> extends Error {
  constructor(
    readonly code: C,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}
