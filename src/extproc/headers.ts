/** Header names the router reads or writes. */
export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
export const PREFILLER_HEADER = 'x-prefiller-host-port';
export const REQUEST_ID_HEADER = 'x-request-id';
export const DECISION_HEADER = 'x-vllm-router-decision';
/** The request's objective (the endpoint picker's; routing/objectives.ts). */
export const OBJECTIVE_HEADER = 'x-gateway-inference-objective';
/** The request's flow for fairness among requests of one priority (the endpoint picker's; routing/flow-queue.ts). */
export const FAIRNESS_HEADER = 'x-gateway-inference-fairness-id';
/** The model the gateway asks the request to be served as (the endpoint picker's; request/model-rewrite.ts). */
export const MODEL_REWRITE_HEADER = 'x-gateway-model-name-rewrite';
/** Dynamic metadata namespace read by endpoint-picker gateways (and our Envoy config). */
export const LB_METADATA_NAMESPACE = 'envoy.lb';

/** Client-supplied routing headers that are never trusted: removed before any upstream sees them. */
export const UNTRUSTED_REQUEST_HEADERS: readonly string[] = [DESTINATION_HEADER, PREFILLER_HEADER];
/** vLLM's data-parallel rank selector (prefill legs of Mooncake and MoRI-IO). */
export const DP_RANK_HEADER = 'x-data-parallel-rank';
