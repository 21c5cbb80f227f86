import { describe, expect, it } from 'vitest';
import { parseCidrList } from '../../../src/discovery/cidr.js';

describe('parseCidrList', () => {
  const rules = ['10.0.0.0/8', '192.168.1.7', 'fd00::/8', '[2001:db8::]/32', ' 172.16.0.0/12 '];
  const matcher = parseCidrList(rules);

  it.each([
    { ip: '10.1.2.3', allowed: true },
    { ip: '10.255.255.255', allowed: true },
    { ip: '11.0.0.1', allowed: false },
    { ip: '192.168.1.7', allowed: true },
    { ip: '192.168.1.8', allowed: false },
    { ip: '172.31.0.1', allowed: true },
    { ip: '172.32.0.1', allowed: false },
    { ip: 'fd12::1', allowed: true },
    { ip: 'FD12::1', allowed: true },
    { ip: '[fd12::1]', allowed: true },
    { ip: 'fe80::1', allowed: false },
    { ip: '2001:db8:1::5', allowed: true },
    { ip: '::ffff:10.1.2.3', allowed: true },
    { ip: '::ffff:11.1.2.3', allowed: false },
    { ip: '::ffff:a01:203', allowed: true },
    { ip: 'fd00::1%eth0', allowed: true },
    { ip: 'localhost', allowed: false },
    { ip: '', allowed: false },
    { ip: '10.1.2', allowed: false },
  ])('$ip -> $allowed', ({ ip, allowed }) => {
    expect(matcher.allows(ip)).toBe(allowed);
  });

  it('an IPv6-mapped rule matches plain IPv4 addresses', () => {
    expect(parseCidrList(['::ffff:10.0.0.0/104']).allows('10.9.9.9')).toBe(true);
  });

  it('an empty list allows everything', () => {
    const open = parseCidrList([]);
    expect(open.allowsAll).toBe(true);
    expect(open.allows('8.8.8.8')).toBe(true);
    expect(open.allows('::1')).toBe(true);
    expect(parseCidrList(['', '  ']).allowsAll).toBe(true);
  });

  it('keeps the trimmed rules', () => {
    expect(matcher.rules).toContain('172.16.0.0/12');
    expect(matcher.allowsAll).toBe(false);
  });

  it.each([
    ['10.0.0.0/33'],
    ['::/129'],
    ['10.0.0.0/'],
    ['10.0.0.0/-1'],
    ['10.0.0.0/8x'],
    ['example.com/8'],
    ['10.0.0/8'],
  ])('rejects %s', (rule) => {
    expect(() => parseCidrList([rule])).toThrow(/invalid CIDR/);
  });
});
