/**
 * What an endpoint-picker gateway tells the router in the ext_proc messages' `metadata_context` (the
 * namespaces listed in the filter's `metadata_options.forwarding_namespaces`), as the Gateway API
 * Inference Extension's endpoint-picker protocol defines it:
 *
 * - "Endpoint Subset", on the request: `x-gateway-destination-endpoint-subset` (a list of `ip:port`) in
 *   the `envoy.lb.subset_hint` namespace. The router must choose among those endpoints only; none of
 *   them eligible, or an empty list: a 503.
 * - "Destination Endpoint Served", on the response: `x-gateway-destination-endpoint-served` in the
 *   `envoy.lb` namespace, the endpoint that served it (Envoy's override_host policy writes it with
 *   `selected_host_key`). It differs from the router's choice when a fallback endpoint of the list
 *   took over (routing/fallback-endpoints.ts). Absent with an ORIGINAL_DST cluster.
 */
import { LB_METADATA_NAMESPACE } from './headers.js';
import type { DecodedValue, MetadataContext } from './proto.js';

export const SERVED_ENDPOINT_KEY = 'x-gateway-destination-endpoint-served';
export const SUBSET_HINT_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';

/** The served `ip:port`, or undefined when the message carries none. */
export function servedEndpoint(metadata: MetadataContext | null | undefined): string | undefined {
  const value = field(metadata, LB_METADATA_NAMESPACE, SERVED_ENDPOINT_KEY);
  const endpoint = value?.stringValue;
  return typeof endpoint === 'string' && endpoint !== '' ? endpoint.trim() : undefined;
}

/**
 * The endpoints the gateway allows, or undefined when it set no subset. A list is read as the protocol
 * writes it; a single string (`ip:port` or `ip:port,ip:port`) is accepted too. Entries that are not
 * strings are skipped.
 */
export function endpointSubset(
  metadata: MetadataContext | null | undefined,
): ReadonlySet<string> | undefined {
  const value = field(metadata, SUBSET_HINT_NAMESPACE, SUBSET_KEY);
  if (value === undefined) return undefined;
  const out = new Set<string>();
  const add = (s: unknown): void => {
    if (typeof s !== 'string') return;
    for (const part of s.split(',')) if (part.trim() !== '') out.add(part.trim());
  };
  // protobufjs leaves an unset oneof member null (not undefined) on a decoded Value.
  if (value.listValue != null) for (const v of value.listValue.values ?? []) add(v?.stringValue);
  else add(value.stringValue);
  return out;
}

function field(
  metadata: MetadataContext | null | undefined,
  ns: string,
  key: string,
): DecodedValue | undefined {
  return metadata?.filter_metadata?.[ns]?.fields?.[key] ?? undefined;
}
