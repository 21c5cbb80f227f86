/**
 * Runs one of the project's idempotent setup scripts (scripts/install-*.sh) and returns what it prints
 * on stdout (a path). Already set up: the script only prints. Not set up and impossible here: an error
 * that names the script to run, never a skip.
 */
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';

const REPO = resolve(import.meta.dirname, '../..');

/**
 * `bash scripts/<script> [...args]`; `what` says what is missing in the error (e.g. "the CRDs of
 * deploy/kubernetes/"), `hint` what setting it up takes.
 */
export function runSetupScript(script: string, what: string, hint: string, args: string[] = []): string {
  try {
    return execFileSync('bash', [join(REPO, 'scripts', script), ...args], {
      cwd: REPO,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();
  } catch (err) {
    throw new Error(
      `${what} is missing: run "bash scripts/${script}" (${hint}): ` +
        `${(err as { stderr?: string }).stderr ?? String(err)}`,
      { cause: err },
    );
  }
}
