/**
 * The simulator's in-memory store of completed Responses (vLLM's `response_store` + `msg_store`):
 * what `previous_response_id`, `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel` read.
 *
 * One store per simulator process, as in vLLM: a follow-up sent to another worker (or to a restarted
 * one) does not find its previous response, which is why a router must send it to the same worker.
 * Bounded: beyond `capacity` entries (default 10,000) the oldest stored response is dropped, so a long
 * benchmark cannot grow memory without bound (vLLM keeps them all). Storing an id again replaces the
 * entry and makes it the newest.
 *
 * Pure data structure: no timers, no I/O.
 */
import type { PreviousTurn } from './responses-request.js';

/** A completed response: its conversation and output (what a follow-up continues) and its JSON. */
export interface StoredResponse extends PreviousTurn {
  /** The completed response object, serialised (what GET answers). */
  readonly json: string;
}

export const DEFAULT_RESPONSE_STORE_CAPACITY = 10_000;

export class ResponseStore {
  /** Insertion order is age order: the first key is the oldest. */
  private readonly entries = new Map<string, StoredResponse>();

  constructor(readonly capacity = DEFAULT_RESPONSE_STORE_CAPACITY) {
    if (!Number.isInteger(capacity) || capacity < 0) {
      throw new RangeError('response store capacity must be an integer >= 0');
    }
  }

  get size(): number {
    return this.entries.size;
  }

  get(id: string): StoredResponse | undefined {
    return this.entries.get(id);
  }

  has(id: string): boolean {
    return this.entries.has(id);
  }

  put(id: string, entry: StoredResponse): void {
    if (this.capacity === 0) return;
    this.entries.delete(id);
    this.entries.set(id, entry);
    if (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
  }
}
