/**
 * Loads the ext_proc service definition (protos/vllm_extproc_router/ext_proc.proto) and declares the
 * TypeScript shapes of the messages as @grpc/proto-loader decodes them (keepCase, oneofs, bytes as
 * Buffer, enums as numbers).
 */
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

function protoPath(): string {
  // Works from src/ (tsx) and dist/src/ (compiled): walk up to the package root holding protos/.
  const here = path.dirname(fileURLToPath(import.meta.url));
  const fromSrc = path.resolve(here, '../../protos/vllm_extproc_router/ext_proc.proto');
  const fromDist = path.resolve(here, '../../../protos/vllm_extproc_router/ext_proc.proto');
  return here.includes(`${path.sep}dist${path.sep}`) ? fromDist : fromSrc;
}

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: Number,
  defaults: false,
  oneofs: true,
};

export interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}
export interface HeaderMap {
  headers?: HeaderValue[];
}
export interface HttpHeaders {
  headers?: HeaderMap;
  end_of_stream?: boolean;
}
export interface HttpBody {
  body?: Buffer;
  end_of_stream?: boolean;
}
export interface HttpTrailers {
  trailers?: HeaderMap;
}
export interface ProtocolConfiguration {
  request_body_mode?: number;
  response_body_mode?: number;
  send_body_without_waiting_for_header_response?: boolean;
}
export type RequestKind =
  | 'request_headers'
  | 'response_headers'
  | 'request_body'
  | 'response_body'
  | 'request_trailers'
  | 'response_trailers';

/** google.protobuf.Struct as protobufjs decodes it (its bundled well-known types: camelCase fields). */
export interface DecodedStruct {
  fields?: Record<string, DecodedValue | undefined>;
}
/** google.protobuf.Value as protobufjs decodes it (only the kinds the router reads). */
export interface DecodedValue {
  stringValue?: string;
  structValue?: DecodedStruct;
  listValue?: { values?: Array<DecodedValue | undefined> } | null;
}
/** envoy.config.core.v3.Metadata: the namespaces the filter's `forwarding_namespaces` lists. */
export interface MetadataContext {
  filter_metadata?: Record<string, DecodedStruct | undefined>;
}

export interface ProcessingRequest {
  request?: RequestKind;
  request_headers?: HttpHeaders;
  response_headers?: HttpHeaders;
  request_body?: HttpBody;
  response_body?: HttpBody;
  request_trailers?: HttpTrailers;
  response_trailers?: HttpTrailers;
  metadata_context?: MetadataContext | null;
  observability_mode?: boolean;
  protocol_config?: ProtocolConfiguration;
}

export interface HeaderValueOption {
  header: { key: string; raw_value: Buffer };
  append?: { value: boolean };
}
export interface HeaderMutation {
  set_headers?: HeaderValueOption[];
  remove_headers?: string[];
}
export interface BodyMutation {
  body?: Buffer;
  clear_body?: boolean;
  streamed_response?: { body: Buffer; end_of_stream: boolean };
}
export interface CommonResponse {
  status?: number;
  header_mutation?: HeaderMutation;
  body_mutation?: BodyMutation;
  clear_route_cache?: boolean;
}
export interface ImmediateResponse {
  status: { code: number };
  headers?: HeaderMutation;
  body?: Buffer;
  details?: string;
}
/** google.protobuf.Struct as proto-loader encodes it from plain objects. */
export interface StructValue {
  fields: Record<string, { stringValue?: string; structValue?: StructValue }>;
}
export interface ProcessingResponse {
  request_headers?: { response?: CommonResponse };
  response_headers?: { response?: CommonResponse };
  request_body?: { response?: CommonResponse };
  response_body?: { response?: CommonResponse };
  request_trailers?: { header_mutation?: HeaderMutation };
  response_trailers?: { header_mutation?: HeaderMutation };
  immediate_response?: ImmediateResponse;
  dynamic_metadata?: StructValue;
  /** Honoured by Envoy only with the filter's `allow_mode_override` (response-body-mode.ts). */
  mode_override?: ProcessingMode;
}

/** envoy.extensions.filters.http.ext_proc.v3.ProcessingMode (header modes: HeaderSendMode). */
export interface ProcessingMode {
  request_header_mode?: number;
  response_header_mode?: number;
  request_body_mode?: number;
  response_body_mode?: number;
  request_trailer_mode?: number;
  response_trailer_mode?: number;
}

/** HeaderSendMode values (header and trailer modes). */
export const HeaderSendMode = { DEFAULT: 0, SEND: 1, SKIP: 2 } as const;

/** BodySendMode values. */
export const BodySendMode = {
  NONE: 0,
  STREAMED: 1,
  BUFFERED: 2,
  BUFFERED_PARTIAL: 3,
  FULL_DUPLEX_STREAMED: 4,
  GRPC: 5,
} as const;

export const SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

let cached: grpc.GrpcObject | undefined;

/** The loaded package definition (cached: loading parses the .proto file). */
export function loadExtProcPackage(): grpc.GrpcObject {
  if (!cached) {
    const def = protoLoader.loadSync(protoPath(), LOADER_OPTIONS);
    cached = grpc.loadPackageDefinition(def);
  }
  return cached;
}

type ServiceCtor = grpc.ServiceClientConstructor;

export function extProcService(): ServiceCtor {
  const pkg = loadExtProcPackage() as unknown as {
    envoy: { service: { ext_proc: { v3: { ExternalProcessor: ServiceCtor } } } };
  };
  return pkg.envoy.service.ext_proc.v3.ExternalProcessor;
}

export { protoPath };
