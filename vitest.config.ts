import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // 2-core machines: real Envoy processes and simulators share the CPU.
    maxWorkers: 2,
    pool: 'forks',
    reporters: ['default'],
  },
});
