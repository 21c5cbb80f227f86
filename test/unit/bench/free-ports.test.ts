import { describe, expect, it } from 'vitest';
import { freePorts } from '../../support/free-ports.js';

describe('freePorts', () => {
  it('never hands the same port twice to one child', async () => {
    for (let round = 0; round < 50; round++) {
      const ports = await freePorts(3);
      expect(ports).toHaveLength(3);
      expect(new Set(ports).size).toBe(3);
      for (const port of ports) expect(port).toBeGreaterThan(0);
    }
  });
});
