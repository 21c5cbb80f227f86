/**
 * `GET /v1/models` answered for the whole fleet. Passed on, it would reach one worker, which lists
 * only what it serves itself: in a fleet that mixes models (workers/served-models.ts), a client
 * listing models would see a different, partial list on each call. The router already reads every
 * worker's list (discovery/models-poller.ts), so it answers with their union: one card per model id,
 * as the first worker that lists it wrote it (vLLM's ModelCard: `id`, `object`, `created`,
 * `owned_by`, `root`, `parent`, `max_model_len`, `permission`).
 *
 * In P/D mode a request's decode worker serves its model (a prefill worker may not: it is then served
 * whole on the decode worker, pd/pd-dispatcher.ts decodeOnly), so the list is the decode workers' one,
 * without the models a request cannot be served for (`servable`): a model listed only by prefill
 * workers gets no decode worker, as the reference router lists its first prefill worker's models.
 *
 * Passed on to a worker as before when no worker's list is known (the poller is off, or no worker
 * has answered it yet), and when the workers want an API key (`--worker-api-key`) that the request
 * does not carry: the router must not list what the workers themselves would refuse to.
 */
import type { LocalAnswer } from '../extproc/dispatch.js';
import type { ModelCard } from '../workers/served-models.js';

export interface ModelListOptions {
  /** The URLs of the members whose models are listed (all roles; in P/D mode, the decode workers). */
  readonly memberUrls: () => Iterable<string>;
  /** Whether a request for this listed model can be served (P/D: pd-dispatcher.ts `servable`); absent: all. */
  readonly servable?: (model: string) => boolean;
  /** The union of those members' listed models, undefined when none is listed. */
  readonly cardsOf: (urls: Iterable<string>) => ModelCard[] | undefined;
  /** The workers' API key (`--worker-api-key`), when they want one. */
  readonly apiKey?: string;
}

/** The answer to `method path` when it is the fleet's model list, else undefined (route it). */
export function modelListAnswer(
  opts: ModelListOptions,
  method: string,
  path: string,
  headers: Readonly<Record<string, string>>,
): LocalAnswer | undefined {
  if (method !== 'GET' || (path !== '/v1/models' && !path.startsWith('/v1/models?'))) return undefined;
  if (opts.apiKey !== undefined && opts.apiKey !== '' && headers.authorization !== `Bearer ${opts.apiKey}`) {
    return undefined;
  }
  const cards = opts.cardsOf(opts.memberUrls());
  if (cards === undefined) return undefined;
  const servable = opts.servable;
  const data = servable === undefined ? cards : cards.filter((c) => servable(c.id as string));
  return { status: 200, body: { object: 'list', data }, details: 'models' };
}
