/**
 * The one user-facing error type. Every failure that should reach the client becomes a RouterError
 * with a stable `code`, an HTTP status and an OpenAI-style `type`, and is turned into an
 * ImmediateResponse at one boundary (extproc/session.ts). A subclass of the one error base
 * (errors.ts); the admin API's AdminInputError is a RouterError with its own codes.
 */
import { RouterBaseError } from '../errors.js';

export type RouterErrorCode =
  | 'invalid_json'
  | 'invalid_body'
  | 'invalid_content_type'
  | 'missing_model'
  | 'model_not_found'
  | 'invalid_prompt'
  | 'invalid_messages'
  | 'invalid_input'
  | 'body_too_large'
  | 'no_workers'
  | 'pool_saturated'
  | 'queue_full'
  | 'queue_timeout'
  | 'prefill_failed'
  | 'prefill_timeout'
  | 'client_cancelled'
  | 'unsupported_processing_mode'
  | 'unsupported_upgrade'
  | 'internal_error';

export class RouterError<C extends string = RouterErrorCode> extends RouterBaseError<C> {
  constructor(
    code: C,
    readonly status: number,
    message: string,
    readonly type: string = status >= 500 ? 'server_error' : 'invalid_request_error',
    /** Extra response headers (e.g. `retry-after` on a 429), beside the JSON content type. */
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    super(code, message);
  }

  /** The OpenAI-compatible JSON error body: `{"error": {"message", "type", "code"}}`. */
  toJSON(): { error: { message: string; type: string; code: string } } {
    return { error: { message: this.message, type: this.type, code: this.code } };
  }

  /**
   * The Anthropic Messages API's error body, `{"type": "error", "error": {"type", "message"}}`, its
   * error type named by the status as Anthropic's API names it (the router's `code` kept beside).
   */
  toAnthropicJSON(): { type: 'error'; error: { type: string; message: string; code: string } } {
    return {
      type: 'error',
      error: { type: anthropicErrorType(this.status), message: this.message, code: this.code },
    };
  }
}

const ANTHROPIC_ERROR_TYPES: Readonly<Record<number, string>> = {
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

function anthropicErrorType(status: number): string {
  return ANTHROPIC_ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

export function badRequest(code: RouterErrorCode, message: string): RouterError {
  return new RouterError(code, 400, message);
}
