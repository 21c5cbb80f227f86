/**
 * Protocol upgrades (WebSocket: vLLM's `/v1/realtime`) are not routed. The router picks a worker for
 * a request from its body, and an upgraded stream has none to read: with the filter's BUFFERED request
 * body Envoy would wait for a body that comes only after the `101 Switching Protocols`, so an Envoy
 * that accepts upgrades (`upgrade_configs`) held the handshake until its idle timeout, and the
 * reference listener (no `upgrade_configs`) answered an empty 403. The session answers such a request
 * at its headers with a JSON 501 that says so.
 */
import { RouterError } from './router-error.js';

/** The protocol a request asks to upgrade to (`upgrade`, or HTTP/2's extended CONNECT `:protocol`). */
export function upgradeRequested(headers: Readonly<Record<string, string>>): string | undefined {
  return headers['upgrade'] || headers[':protocol'] || undefined;
}

export function upgradeRefused(protocol: string, path: string): RouterError {
  return new RouterError(
    'unsupported_upgrade',
    501,
    `Protocol upgrades (${protocol} on ${path}) are not routed by vllm-extproc-router: use the HTTP ` +
      'APIs (a WebSocket API such as /v1/realtime needs a route to the workers without the router)',
  );
}
