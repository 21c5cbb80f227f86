/**
 * Envoy's ORIGINAL_DST cluster needs a literal `ip:port` in x-gateway-destination-endpoint, so worker
 * host names are resolved once, when a worker is registered (never on the request path).
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';

export function formatEndpoint(ip: string, port: number): string {
  return isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`;
}

export async function resolveEndpoint(host: string, port: number): Promise<string> {
  const bare = host.replace(/^\[|\]$/g, '');
  if (isIP(bare)) return formatEndpoint(bare, port);
  const { address } = await lookup(bare, { order: 'ipv4first' });
  return formatEndpoint(address, port);
}
