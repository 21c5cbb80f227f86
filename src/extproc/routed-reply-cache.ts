/**
 * The routing replies of plain requests, built and encoded once per destination.
 *
 * A request routed to one worker, with no body rewrite and no header besides the destination and a
 * data-parallel rank (every regular, non-P/D request), gets the same reply as every other request to that worker: the
 * destination header set, the untrusted routing headers removed, the envoy.lb metadata naming the
 * worker. Building that message and encoding it costs ~10% of the router's CPU for a small request
 * (issue 15), so such replies are kept here frozen: the gRPC server encodes a frozen message once
 * (grpc-server.ts) and writes the same bytes for every later request to that worker.
 *
 * Anything else (P/D: prefiller and request-id headers; a rewritten body; FULL_DUPLEX_STREAMED, whose
 * body reply carries the body) is built per request by the caller. The cache holds at most
 * MAX_ENTRIES (destination, rank, body mode, routed-on) combinations; it is emptied when full (a fleet
 * larger than that rebuilds some replies, nothing else changes).
 */
import { routedReplies, type BodyMode, type Routing } from './body-mode-replies.js';
import {
  DESTINATION_HEADER,
  DP_RANK_HEADER,
  LB_METADATA_NAMESPACE,
  UNTRUSTED_REQUEST_HEADERS,
} from './headers.js';
import { constantReply, dynamicMetadata, type HeaderSet } from './mutations.js';
import type { ProcessingResponse } from './proto.js';

const MAX_ENTRIES = 4096;

/** The routing a dispatch asks for: its headers (content-length when it rewrote the body), metadata. */
export function routingFor(setHeaders: HeaderSet, endpoint: string, rewritten?: Buffer): Routing {
  const set: Record<string, string> = { ...setHeaders };
  if (rewritten) set['content-length'] = String(rewritten.length);
  const metadata = dynamicMetadata(LB_METADATA_NAMESPACE, {
    [DESTINATION_HEADER]: setHeaders[DESTINATION_HEADER] ?? endpoint,
  });
  return { set, remove: UNTRUSTED_REQUEST_HEADERS.filter((h) => !(h in set)), metadata };
}

export class RoutedReplyCache {
  private readonly replies = new Map<string, readonly ProcessingResponse[]>();

  /** The frozen replies for a plain routing, or undefined when this routing is built per request. */
  get(
    mode: BodyMode,
    routedOn: 'headers' | 'body',
    setHeaders: HeaderSet,
    rewritten: Buffer | undefined,
  ): readonly ProcessingResponse[] | undefined {
    if (rewritten !== undefined || (mode === 'full_duplex' && routedOn === 'body')) return undefined;
    // A plain routing: the destination, and a data-parallel rank (routing/route-headers.ts).
    let destination: string | undefined;
    let rank: string | undefined;
    for (const key in setHeaders) {
      if (key === DESTINATION_HEADER && destination === undefined) destination = setHeaders[key];
      else if (key === DP_RANK_HEADER && rank === undefined) rank = setHeaders[key];
      else return undefined;
    }
    if (destination === undefined) return undefined;
    const key = `${mode}\n${routedOn}\n${destination}\n${rank ?? ''}`;
    let replies = this.replies.get(key);
    if (!replies) {
      if (this.replies.size >= MAX_ENTRIES) this.replies.clear();
      const routing = routingFor(setHeaders, destination);
      replies = Object.freeze(
        routedReplies(mode, routedOn, routing, undefined, undefined).map(constantReply),
      );
      this.replies.set(key, replies);
    }
    return replies;
  }
}

/** One cache per process: replies depend only on the key, never on the session. */
export const routedReplyCache = new RoutedReplyCache();
