/**
 * CIDR allow-list for service discovery.
 *
 * `parseCidrList(['10.0.0.0/8', 'fd00::/8', '192.168.1.7'])` builds a matcher over Node's
 * `net.BlockList` (used here as an allow list). Rules:
 * - an entry is `address/prefix` or a bare address (a single host: /32 for IPv4, /128 for IPv6);
 *   IPv6 entries may be written in brackets (`[fd00::]/8`);
 * - an empty list allows every address (discovery is open unless the operator restricts it);
 * - IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`) match IPv4 rules and vice versa
 *   (`net.BlockList` normalises both forms);
 * - an IPv6 zone id (`fe80::1%eth0`) is ignored when matching;
 * - anything that is not an IP literal (DNS names, garbage) is never allowed by a non-empty list:
 *   resolve names first.
 * Invalid entries throw at parse time (configuration errors should fail startup, not be skipped).
 */
import { BlockList, isIP } from 'node:net';

export interface CidrMatcher {
  /** True when `ip` (an IPv4 or IPv6 literal, optionally bracketed) falls inside one of the rules. */
  allows(ip: string): boolean;
  /** True when the list was empty (everything is allowed). */
  readonly allowsAll: boolean;
  /** The rules as given, for logs and the admin API. */
  readonly rules: readonly string[];
}

type Family = 'ipv4' | 'ipv6';

/** Strips `[...]` brackets and an IPv6 zone id; returns the family, or undefined for a non-IP. */
function normaliseIp(raw: string): { address: string; family: Family } | undefined {
  let address = raw.trim();
  if (address.startsWith('[') && address.endsWith(']')) address = address.slice(1, -1);
  const zone = address.indexOf('%');
  if (zone >= 0) address = address.slice(0, zone);
  const version = isIP(address);
  if (version === 4) return { address, family: 'ipv4' };
  if (version === 6) return { address, family: 'ipv6' };
  return undefined;
}

/** Parses an allow list. Throws `Error` naming the first invalid entry. */
export function parseCidrList(list: readonly string[]): CidrMatcher {
  const rules = list.map((entry) => entry.trim()).filter((entry) => entry.length > 0);
  const blockList = new BlockList();
  for (const rule of rules) {
    const slash = rule.indexOf('/');
    const addressPart = slash >= 0 ? rule.slice(0, slash) : rule;
    const ip = normaliseIp(addressPart);
    if (ip === undefined) throw new Error(`invalid CIDR ${JSON.stringify(rule)}: not an IP address`);
    const maxPrefix = ip.family === 'ipv4' ? 32 : 128;
    let prefix = maxPrefix;
    if (slash >= 0) {
      const prefixText = rule.slice(slash + 1);
      if (!/^\d{1,3}$/.test(prefixText)) {
        throw new Error(`invalid CIDR ${JSON.stringify(rule)}: bad prefix length`);
      }
      prefix = Number(prefixText);
      if (prefix > maxPrefix) {
        throw new Error(`invalid CIDR ${JSON.stringify(rule)}: prefix length above ${maxPrefix}`);
      }
    }
    blockList.addSubnet(ip.address, prefix, ip.family);
  }
  const allowsAll = rules.length === 0;
  return {
    allowsAll,
    rules: Object.freeze(rules),
    allows(raw: string): boolean {
      if (allowsAll) return true;
      const ip = normaliseIp(raw);
      if (ip === undefined) return false;
      try {
        return blockList.check(ip.address, ip.family);
      } catch {
        return false;
      }
    },
  };
}
