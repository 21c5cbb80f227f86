#!/usr/bin/env -S node --min-semi-space-size=16 --initial-old-space-size=128
/** `vllm-extproc-router` entry point: parse config, start, shut down in order on signals. */
import { ConfigError, helpText, parseConfig } from './config.js';
import { startRouter } from './router.js';
import { createLogger } from './observability/logger.js';
import { nodeFlagsNote } from './runtime/node-flags.js';

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseConfig(process.argv.slice(2));
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`vllm-extproc-router: ${err.message}\n(see --help)\n`);
      process.exit(2);
    }
    throw err;
  }
  if (parsed.help) {
    process.stdout.write(helpText());
    return;
  }
  const config = parsed.config;
  const logger = createLogger(config.logLevel);
  const note = nodeFlagsNote();
  if (note) logger.info(note);
  const router = await startRouter(config, { logger });

  let signals = 0;
  const shutdown = async (signal: string) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    logger.info({ signal, drainTimeoutMs: config.drainTimeoutMs }, 'draining');
    const drained = await router.drain();
    logger.info({ drained }, 'closing');
    await router.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`vllm-extproc-router: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
