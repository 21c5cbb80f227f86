/** Scheduling roles. A prefill and a decode worker at the same URL are different resources. */
export type Role = 'prefill' | 'decode' | 'regular';

export const ROLES: readonly Role[] = ['prefill', 'decode', 'regular'];

export function isRole(value: unknown): value is Role {
  return value === 'prefill' || value === 'decode' || value === 'regular';
}
