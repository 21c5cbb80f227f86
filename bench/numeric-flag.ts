/** `--name <number>` from a micro-benchmark's command line (a number >= 0), or `fallback` if absent. */
export function numericFlag(name: string, fallback: number, argv: readonly string[] = process.argv): number {
  const i = argv.indexOf(`--${name}`);
  if (i === -1) return fallback;
  const v = Number(argv[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new RangeError(`--${name} needs a number >= 0`);
  return v;
}
