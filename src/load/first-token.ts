/**
 * Which response chunk carries a stream's first token, for the learners that time it
 * (timing-dispatcher.ts: the TTFT sample, the end of the request's prefill-backlog entry).
 *
 * For most streams the first non-empty chunk does. Not for vLLM's Responses API: its stream opens with
 * `response.created` and `response.in_progress`, yielded as soon as the request is accepted, before the
 * engine's first output (vllm/entrypoints/openai/serving_responses.py `responses_stream_generator`);
 * they echo the request's `instructions` and `tools`, so they may span several chunks. The first token
 * is the first event after them (`response.output_item.added`, a reasoning or text delta, ...; an
 * `error` or `response.completed` ends the wait too).
 *
 * Events are read line by line across chunks (`event: <type>` lines; an event line cut by a chunk
 * boundary is carried over). Pure: no I/O, timers or logging.
 */
import type { InferenceKind } from '../request/inference-request.js';

/** The events vLLM's Responses stream sends before the engine's first output. */
const OPENING_EVENTS: ReadonlySet<string> = new Set(['response.created', 'response.in_progress']);
const EVENT_FIELD = 'event:';
/** Longer than any event line: a longer line is a data line. */
const MAX_EVENT_LINE = 128;
const LF = 0x0a;

/**
 * A predicate for one response: whether its stream has shown its first token by `chunk` (called with
 * each non-empty chunk in order; true from that chunk on).
 */
export function firstTokenWatch(kind: InferenceKind | undefined): (chunk: Buffer) => boolean {
  if (kind !== 'responses') return (chunk) => chunk.length > 0;
  const opening = new ResponsesOpening();
  let seen = false;
  return (chunk) => (seen ||= opening.passedBy(chunk));
}

/** Reads a Responses stream's event lines until one is not an opening event. */
class ResponsesOpening {
  /** The start of a line the last chunk cut, while it may be an event line. */
  private partial: string | undefined = '';

  /** Whether `chunk` holds an event line past the opening events. */
  passedBy(chunk: Buffer): boolean {
    let at = 0;
    while (at < chunk.length) {
      const lf = chunk.indexOf(LF, at);
      const end = lf === -1 ? chunk.length : lf;
      let line = this.partial;
      if (line !== undefined) {
        line += chunk.toString('latin1', at, Math.min(end, at + MAX_EVENT_LINE));
        if (line.length > MAX_EVENT_LINE || !mayBeEventLine(line)) line = undefined;
      }
      if (lf === -1) {
        this.partial = line;
        return false;
      }
      if (line !== undefined && line.startsWith(EVENT_FIELD)) {
        if (!OPENING_EVENTS.has(line.slice(EVENT_FIELD.length).trim())) return true;
      }
      this.partial = '';
      at = lf + 1;
    }
    return false;
  }
}

/** Whether a line (or the start of one) is, or may still become, an `event:` line. */
function mayBeEventLine(line: string): boolean {
  return line.length < EVENT_FIELD.length ? EVENT_FIELD.startsWith(line) : line.startsWith(EVENT_FIELD);
}
