/**
 * vLLM's sleep mode as the simulator's engine keeps it (vllm/v1/worker/gpu_worker.py sleep/wake_up,
 * docs/features/sleep_mode.md): the memory tagged `weights` and `kv_cache` sleeps and wakes per tag
 * (`POST /wake_up?tags=weights`; no tags wakes both). Level 1 offloads the weights to CPU memory, and
 * waking brings them back. Level 2 discards them: waking the `weights` tag maps the memory back with
 * no model in it, and the engine generates garbage until they are loaded again (`POST /collective_rpc
 * {"method": "reload_weights"}`, or an RL trainer's weight update). The engine sleeps (`/is_sleeping`,
 * the sleep-state gauge) while any tag does.
 */
export type SleepTag = 'weights' | 'kv_cache';

const TAGS: readonly SleepTag[] = ['weights', 'kv_cache'];

export class SleepState {
  private readonly asleep = new Set<SleepTag>();
  private lastLevel: 1 | 2 = 1;
  private discarded = false;

  /** 0 awake, else the level of the sleep while any tag sleeps (`vllm:engine_sleep_state`). */
  get level(): number {
    return this.asleep.size > 0 ? this.lastLevel : 0;
  }

  /** The weights' memory holds no model: a level-2 sleep, not reloaded since. */
  get weightsDiscarded(): boolean {
    return this.discarded;
  }

  sleep(level: 1 | 2): void {
    for (const t of TAGS) this.asleep.add(t);
    this.lastLevel = level;
    if (level === 2) this.discarded = true;
  }

  /** Wakes `tags` (every tag when none); a tag that is not asleep, or unknown, is left as it is. */
  wakeUp(tags: readonly string[] = []): void {
    for (const t of tags.length === 0 ? TAGS : tags) this.asleep.delete(t as SleepTag);
  }

  /** `reload_weights`: false while the weights' memory sleeps (there is nothing to load them into). */
  reloadWeights(): boolean {
    if (this.asleep.has('weights')) return false;
    this.discarded = false;
    return true;
  }
}
