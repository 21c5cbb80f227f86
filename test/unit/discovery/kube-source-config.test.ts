/** The Kubernetes discovery flags (reference router spelling) through the real parser, and the rules they make. */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, type Config } from '../../../src/config.js';
import { kubeRoleRules } from '../../../src/discovery/kube-source-config.js';

function parse(argv: string[]): Config {
  const parsed = parseConfig(argv, {});
  if (parsed.help) throw new Error('help');
  return parsed.config;
}

describe('Kubernetes discovery flags', () => {
  it('regular mode: --selector pairs (repeated or comma-separated) select regular worker pods', () => {
    const c = parse(['--service-discovery', '--selector', 'app=vllm', '--selector', 'tier=gpu,zone=a']);
    expect(c.serviceDiscoveryNamespace).toBe(''); // unset = all namespaces
    expect(kubeRoleRules(c)).toEqual([
      { role: 'regular', selector: { app: 'vllm', tier: 'gpu', zone: 'a' }, port: 8000 },
    ]);
  });

  it('pd mode: prefill and decode selectors, port, namespace, metrics and KV-event port fallbacks', () => {
    const c = parse([
      '--mode=pd',
      '--service-discovery',
      '--prefill-selector=app=vllm,vllm.ai/role=prefill',
      '--decode-selector=app=vllm,vllm.ai/role=decode',
      '--service-discovery-port=8100',
      '--service-discovery-namespace=llm',
      '--service-discovery-metrics-port=8100',
      '--service-discovery-kv-events-port=5557',
    ]);
    expect(c.serviceDiscoveryNamespace).toBe('llm');
    const common = { port: 8100, metricsPort: 8100, kvEventsPort: 5557 };
    expect(kubeRoleRules(c)).toEqual([
      { role: 'prefill', selector: { app: 'vllm', 'vllm.ai/role': 'prefill' }, ...common },
      { role: 'decode', selector: { app: 'vllm', 'vllm.ai/role': 'decode' }, ...common },
    ]);
  });

  const errors: Array<[string[], RegExp]> = [
    [['--service-discovery'], /needs --selector/],
    [['--service-discovery', '--mode=pd', '--prefill-selector=a=b'], /needs --decode-selector/],
    [['--service-discovery', '--selector=app'], /--selector: .*key=value/],
    [['--service-discovery', '--selector=app=a,app=b'], /two values/],
    [['--service-discovery', '--selector=a=b', '--service-discovery-port=70000'], /out of range/],
    [['--service-discovery', '--selector=a=b', '--service-discovery-port=0'], /must be set/],
  ];
  it.each(errors)('rejects %j', (argv, message) => {
    expect(() => parse(argv)).toThrow(ConfigError);
    expect(() => parse(argv)).toThrow(message);
  });
});
