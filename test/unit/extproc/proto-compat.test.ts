/**
 * Our project-authored ext_proc proto must stay wire-compatible with Envoy's upstream definition
 * (the copy shipped by @grpc/grpc-js-xds under deps/): same field numbers and wire types for every
 * field both define. Fields only we define (FULL_DUPLEX_STREAMED additions) must be absent upstream
 * in that older copy, never numbered differently.
 */
import path from 'node:path';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import protobuf from 'protobufjs';
import { protoPath } from '../../../src/extproc/proto.js';

const require = createRequire(import.meta.url);
const xdsRoot = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const includeDirs = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) =>
  path.join(xdsRoot, d),
);

function loadUpstream(): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    for (const dir of includeDirs) {
      const candidate = path.join(dir, target);
      try {
        require('node:fs').accessSync(candidate);
        return candidate;
      } catch {
        /* try next */
      }
    }
    return target;
  };
  root.loadSync('envoy/service/ext_proc/v3/external_processor.proto', { keepCase: true });
  root.resolveAll();
  return root;
}

const WIRE: Record<string, string> = {
  int32: 'varint',
  uint32: 'varint',
  int64: 'varint',
  uint64: 'varint',
  bool: 'varint',
  enum: 'varint',
  string: 'len',
  bytes: 'len',
  message: 'len',
};

function wireType(f: protobuf.Field): string {
  if (f.map) return 'map';
  if (f.resolvedType instanceof protobuf.Enum) return 'varint';
  if (f.resolvedType instanceof protobuf.Type) return 'len';
  return WIRE[f.type] ?? f.type;
}

// Our message name -> upstream fully qualified name.
const PAIRS: Record<string, string> = {
  ProcessingRequest: 'envoy.service.ext_proc.v3.ProcessingRequest',
  ProcessingResponse: 'envoy.service.ext_proc.v3.ProcessingResponse',
  HttpHeaders: 'envoy.service.ext_proc.v3.HttpHeaders',
  HttpBody: 'envoy.service.ext_proc.v3.HttpBody',
  HttpTrailers: 'envoy.service.ext_proc.v3.HttpTrailers',
  HeadersResponse: 'envoy.service.ext_proc.v3.HeadersResponse',
  BodyResponse: 'envoy.service.ext_proc.v3.BodyResponse',
  TrailersResponse: 'envoy.service.ext_proc.v3.TrailersResponse',
  CommonResponse: 'envoy.service.ext_proc.v3.CommonResponse',
  ImmediateResponse: 'envoy.service.ext_proc.v3.ImmediateResponse',
  GrpcStatus: 'envoy.service.ext_proc.v3.GrpcStatus',
  HeaderMutation: 'envoy.service.ext_proc.v3.HeaderMutation',
  BodyMutation: 'envoy.service.ext_proc.v3.BodyMutation',
  HeaderValue: 'envoy.config.core.v3.HeaderValue',
  HeaderMap: 'envoy.config.core.v3.HeaderMap',
  HeaderValueOption: 'envoy.config.core.v3.HeaderValueOption',
  Metadata: 'envoy.config.core.v3.Metadata',
  HttpStatus: 'envoy.type.v3.HttpStatus',
  ProcessingMode: 'envoy.extensions.filters.http.ext_proc.v3.ProcessingMode',
};
// Newer than the grpc-js-xds copy (envoyproxy/envoy main): must not exist there.
const NEWER = new Set(['ProcessingRequest.protocol_config', 'BodyMutation.streamed_response']);

describe('ext_proc proto compatibility', () => {
  const ours = new protobuf.Root().loadSync(protoPath(), { keepCase: true });
  ours.resolveAll();
  const upstream = loadUpstream();

  it.each(Object.entries(PAIRS))('%s matches upstream field numbers and wire types', (name, upstreamName) => {
    const mine = ours.lookupType(`envoy.service.ext_proc.v3.${name}`);
    const theirs = upstream.lookupType(upstreamName);
    for (const f of mine.fieldsArray) {
      const key = `${name}.${f.name}`;
      const u = theirs.fields[f.name];
      if (NEWER.has(key)) {
        expect(u, `${key} is newer than the upstream copy`).toBeUndefined();
        expect(theirs.fieldsById[f.id], `${key}'s number ${f.id} is free upstream`).toBeUndefined();
        continue;
      }
      expect(u, `${key} exists upstream`).toBeDefined();
      expect(f.id, `${key} number`).toBe(u?.id);
      expect(wireType(f), `${key} wire type`).toBe(wireType(u as protobuf.Field));
      expect(f.repeated, `${key} repeated`).toBe(u?.repeated);
    }
  });

  it('declares the Process bidi stream', () => {
    const svc = ours.lookupService('envoy.service.ext_proc.v3.ExternalProcessor');
    const m = svc.methods.Process;
    expect(m?.requestStream && m.responseStream).toBe(true);
  });
});
