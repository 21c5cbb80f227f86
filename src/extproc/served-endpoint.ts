/**
 * Which endpoint served a response, as the gateway reports it (the endpoint-picker protocol's
 * "Destination Endpoint Served"): `x-gateway-destination-endpoint-served` in the `envoy.lb` namespace
 * of the ext_proc message's `metadata_context`. Envoy puts it there with the override_host policy's
 * `selected_host_key` and the ext_proc filter's `metadata_options.forwarding_namespaces` (see
 * docs/deploy-envoy.md, "Fallback endpoints"). Absent with an ORIGINAL_DST cluster: the endpoint is
 * then the one the router named.
 */
import { LB_METADATA_NAMESPACE } from './headers.js';
import type { MetadataContext } from './proto.js';

export const SERVED_ENDPOINT_KEY = 'x-gateway-destination-endpoint-served';

/** The served `ip:port`, or undefined when the message carries none. */
export function servedEndpoint(metadata: MetadataContext | null | undefined): string | undefined {
  const value = metadata?.filter_metadata?.[LB_METADATA_NAMESPACE]?.fields?.[SERVED_ENDPOINT_KEY];
  const endpoint = value?.stringValue;
  return typeof endpoint === 'string' && endpoint !== '' ? endpoint.trim() : undefined;
}
