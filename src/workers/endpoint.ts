/**
 * Envoy's ORIGINAL_DST cluster needs a literal `ip:port` in x-gateway-destination-endpoint, so worker
 * host names are resolved once, when a worker is registered (never on the request path).
 *
 * `resolveHost` is the router's ONE resolver, used by static workers, the admin API and ZMQ
 * discovery alike: IP literals pass through (brackets stripped), names resolve through the OS
 * resolver (`dns.lookup`, /etc/hosts included) preferring IPv4 (`order: 'ipv4first'`), so a name with
 * A and AAAA records maps to the same endpoint however the worker registered.
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';

export function formatEndpoint(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** One IP address for `host` (an IP literal is returned as is). */
export async function resolveHost(host: string): Promise<string> {
  const bare = host.replace(/^\[|\]$/g, '');
  if (isIP(bare)) return bare;
  return (await lookup(bare, { order: 'ipv4first' })).address;
}

/** `ip:port` (`[ip]:port` for IPv6) of `host`, through `resolve` (default `resolveHost`). */
export async function resolveEndpoint(
  host: string,
  port: number,
  resolve: (host: string) => Promise<string> = resolveHost,
): Promise<string> {
  return formatEndpoint(await resolve(host), port);
}
