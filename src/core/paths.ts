// Where the package lives. Resolving against it rather than the working directory lets the
// commands find what the package ships (models/default) from any directory.
import { join, resolve } from 'node:path';

/** The package root (the checkout): this file is dist/src/core/paths.js under it. */
export const PACKAGE_ROOT = resolve(import.meta.dirname, '..', '..', '..');

/**
 * What `caper serve` serves when neither --model nor CAPER_MODEL names a model. Found from the
 * package, not the working directory, so `npx caper serve` works from any directory.
 */
export const DEFAULT_MODEL_DIR = join(PACKAGE_ROOT, 'models', 'default');
