// Where the package lives, and how a path is written into what others read. Resolving against
// the package rather than the working directory lets the commands find what the package ships
// (models/default) from any directory. Model cards, manifests, benchmark results and the command
// lines they quote are committed, so a path in them must mean the same on every checkout, not name
// a directory of the machine that wrote them; training/caper_train/model/paths.py applies the same rule
// to what Python writes.
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';

/** The package root (the checkout): this file is dist/src/core/paths.js under it. */
export const PACKAGE_ROOT = resolve(import.meta.dirname, '..', '..', '..');

/**
 * What `caper serve` serves when neither --model nor CAPER_MODEL names a model. Found from the
 * package, not the working directory, so `npx caper serve` works from any directory.
 */
export const DEFAULT_MODEL_DIR = join(PACKAGE_ROOT, 'models', 'default');

/**
 * `p` as a committed file should name it. An absolute path becomes relative to the package root
 * when it lies in the checkout or beside it (the data root ../shared/data/spider is a sibling of
 * the checkout), so the name works on any machine with that layout; elsewhere it stays absolute,
 * since a relative name climbing out of the checkout's parent would still spell out this
 * machine's directories (test/no-machine-paths.test.ts keeps such paths out of the committed
 * files). A relative path is returned as given: it is relative to where the command ran (the repo
 * root, for the documented runs), and may not be a path at all (a model hub id, a pool name).
 */
export function shownPath(p: string, root: string = PACKAGE_ROOT): string {
  if (!isAbsolute(p)) return p;
  const rel = relative(root, p);
  if (rel === '') return '.';
  if (isAbsolute(rel)) return p; // another drive (Windows)
  const outside = relative(dirname(root), p);
  if (outside === '..' || outside.startsWith('..' + sep) || isAbsolute(outside)) return p;
  return rel.split(sep).join('/');
}

/** A command line's arguments as a committed file should quote them: each one, and the value of `--flag=VALUE`, through shownPath. */
export function shownArgs(args: readonly string[], root: string = PACKAGE_ROOT): string[] {
  return args.map((a) => {
    const m = /^(--[^=]+=)(.*)$/s.exec(a);
    return m ? m[1]! + shownPath(m[2]!, root) : shownPath(a, root);
  });
}
