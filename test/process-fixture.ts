// The real `caper serve` process (dist/src/cli.js) on a port the OS picks, for tests that need
// what only a process has: signals, exit codes, the environment, resident memory.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { REPO } from './server-fixture.js';

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  /** Resolves with the exit code (null if killed by a signal) once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts `caper serve --port 0 --quiet ...args` and waits for its "ready on" / "not ready on"
 * line, which carries the bound URL (the origin: a --base-path is not part of it). Rejects (after killing the process) if it exits or stays
 * silent for timeoutMs. `cwd` is the directory it runs in (the repo root unless a test moves it).
 */
export async function spawnServe(args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 60_000, cwd = REPO): Promise<ServeProcess> {
  // An undefined value unsets the variable, for tests of what happens without it.
  const merged = Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, v]) => v !== undefined));
  const child = spawn(process.execPath, [join(REPO, 'dist', 'src', 'cli.js'), 'serve', '--port', '0', '--quiet', ...args], {
    cwd,
    env: merged,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) =>
    child.once('exit', (code, signal) => res({ code, signal })),
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`caper serve printed no ready line in ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    child.stderr!.on('data', (d) => {
      err += String(d);
      const m = /ready on (http:\/\/[^\s/]+?:\d+)(?=[:\s/])/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`caper serve exited (${code ?? signal}) before it was ready: ${err}`));
    });
  });
  return { child, url, stderr: () => err, exited };
}
