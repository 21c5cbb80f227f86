/**
 * Protobuf codecs for the two services the router serves, from protobufjs reflection (protobufjs
 * generates a specialised encode/decode function per message type at load time; it is the codec
 * under @grpc/proto-loader, used here without proto-loader's object conversion on every message).
 *
 * Decoded messages have the shapes declared in proto.ts (snake_case field names as in the .proto,
 * bytes as Buffer views into the received frame, no copy). Unset fields read as protobufjs defaults:
 * `null` for messages, `false`/`''`/`0`, an empty Array (not a Buffer) for bytes. Encoding takes
 * plain objects of the same shapes (google.protobuf.Struct uses protobufjs's camelCase field names,
 * e.g. stringValue).
 */
import protobuf from 'protobufjs';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { protoPath } from './proto.js';
import type { ProcessingRequest, ProcessingResponse } from './proto.js';

export interface MessageCodec<In, Out> {
  decode(bytes: Uint8Array): In;
  encode(msg: Out): Uint8Array;
}

function codec<In, Out>(root: protobuf.Root, name: string): MessageCodec<In, Out> {
  const type = root.lookupType(name);
  return {
    decode: (bytes) => type.decode(bytes) as unknown as In,
    encode: (msg) => type.encode(msg as unknown as Record<string, unknown>).finish(),
  };
}

function load(file: string): protobuf.Root {
  return new protobuf.Root().loadSync(file, { keepCase: true });
}

export interface Codecs {
  readonly processingRequest: MessageCodec<ProcessingRequest, ProcessingRequest>;
  readonly processingResponse: MessageCodec<ProcessingResponse, ProcessingResponse>;
  readonly healthCheckRequest: MessageCodec<{ service: string }, { service: string }>;
  readonly healthCheckResponse: MessageCodec<{ status: number }, { status: number }>;
}

let cached: Codecs | undefined;

/** The codecs (cached: loading parses the .proto files, ~20 ms). */
export function codecs(): Codecs {
  if (!cached) {
    const extProc = load(protoPath());
    const health = load(healthProtoPath);
    cached = {
      processingRequest: codec(extProc, 'envoy.service.ext_proc.v3.ProcessingRequest'),
      processingResponse: codec(extProc, 'envoy.service.ext_proc.v3.ProcessingResponse'),
      healthCheckRequest: codec(health, 'grpc.health.v1.HealthCheckRequest'),
      healthCheckResponse: codec(health, 'grpc.health.v1.HealthCheckResponse'),
    };
  }
  return cached;
}
