/** pino logger factory: JSON lines on stdout (stderr for the demo's child processes is left as is). */
import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

export function createLogger(level: LevelWithSilent = 'info', name = 'vllm-extproc-router'): Logger {
  return pino({ name, level, base: { pid: process.pid } });
}
