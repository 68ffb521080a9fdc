// `caper serve`: the verifier HTTP service (see src/server.ts). Every option is a flag and a
// CAPER_* environment variable (src/config.ts holds the one table of them).
import { parseStrict, UsageError } from './args.js';
import { SERVE_OPTIONS, resolveServeOptions, serveHelp, envName, OptionError } from '../core/options.js';
import { DEFAULT_MODEL_DIR } from '../core/paths.js';
import type { MatmulChoice } from '../core/matmul.js';

export const USAGE = serveHelp();

export async function run(argv: string[]): Promise<number> {
  const a = parseStrict(argv, {
    values: SERVE_OPTIONS.filter((o) => o.type !== 'bool').map((o) => o.flag),
    booleans: SERVE_OPTIONS.filter((o) => o.type === 'bool').map((o) => o.flag),
  });
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  let v: ReturnType<typeof resolveServeOptions>;
  try {
    v = resolveServeOptions(a.flags, process.env);
  } catch (e) {
    throw e instanceof OptionError ? new UsageError(e.message) : e;
  }
  const str = (k: string) => v.get(k) as string | undefined;
  const num = (k: string) => v.get(k) as number | undefined;
  // An empty value would otherwise start a server that can never be ready.
  const model = str('model') ?? DEFAULT_MODEL_DIR;
  if (model.trim() === '') throw new UsageError(`${a.flags.has('model') ? '--model' : envName('model')} needs a model directory, got an empty value`);
  // An explicit but empty or unusable key is refused rather than silently serving without auth.
  const apiKey = str('api-key');
  if (apiKey !== undefined) {
    const { apiKeyProblem } = await import('../routes/auth.js');
    const problem = apiKeyProblem(apiKey);
    if (problem) throw new UsageError(`${problem} (${a.flags.has('api-key') ? '--api-key' : envName('api-key')})`);
  }
  const basePath = str('base-path') ?? '';
  if (basePath !== '' && !/^(\/[A-Za-z0-9._~-]+)+\/?$/.test(basePath)) {
    throw new UsageError(`--base-path must look like /prefix or /a/b, got "${basePath}"`);
  }
  const weights = str('weights') ?? 'model';
  if (weights !== 'model' && weights !== 'int8' && weights !== 'int4') throw new UsageError(`--weights must be model, int8 or int4, got "${weights}"`);
  const quantized = weights === 'int4' ? 'int4' : weights === 'int8' || v.get('quantized') === true;
  const { buildServer } = await import('../server.js');
  const host = str('host')!;
  const port = num('port')!;
  const opt = <T>(k: string, f: (x: T) => object) => (v.get(k) !== undefined ? f(v.get(k) as T) : {});
  const app = await buildServer({
    modelDir: model,
    ...opt<string>('db-dir', (x) => ({ dbDir: x })),
    ...opt<string>('postgres', (x) => ({ postgresUrl: x })),
    device: str('device') as 'auto' | 'cuda' | 'cpu',
    ...opt<number>('threads', (x) => ({ threads: x })),
    quantized,
    matmul: str('matmul') as MatmulChoice,
    ...(v.get('no-prefix-sharing') === true ? { prefixSharing: false } : {}),
    ...opt<number>('prefix-cache-mb', (x) => ({ prefixCacheMb: x })),
    ...opt<number>('max-batch-tokens', (x) => ({ maxBatchTokens: x })),
    ...opt<number>('max-wait-ms', (x) => ({ maxWaitMs: x })),
    ...opt<number>('max-batch-size', (x) => ({ maxBatchSize: x })),
    ...opt<number>('max-queue-tokens', (x) => ({ maxQueueTokens: x })),
    ...opt<number>('max-candidates', (x) => ({ maxCandidates: x })),
    ...opt<number>('body-limit', (x) => ({ bodyLimit: x })),
    ...opt<number>('exec-timeout-ms', (x) => ({ execTimeoutMs: x })),
    ...opt<number>('exec-workers', (x) => ({ execWorkers: x })),
    ...opt<number>('exec-cache-mb', (x) => ({ execCacheMb: x })),
    ...opt<number>('exec-queue', (x) => ({ maxExecQueue: x })),
    ...opt<number>('request-timeout-ms', (x) => ({ requestTimeoutMs: x })),
    ...opt<number>('min-confidence', (x) => ({ minConfidence: x })),
    ...opt<string>('cors-origins', (x) => ({ corsOrigins: x })),
    basePath,
    ...(apiKey !== undefined ? { apiKey } : {}),
    logger: v.get('quiet') !== true,
    listen: { host, port },
  });
  await app.listen({ host, port });
  // With --port 0 the OS picks the port; report the real one (tests and scripts read it).
  const addr = app.server.address();
  const url = `http://${host}:${typeof addr === 'object' && addr ? addr.port : port}${basePath.replace(/\/$/, '')}`;
  // Stop accepting, let in-flight requests finish, then exit 0 so orchestrators see a clean stop.
  let closing = false;
  const stop = (sig: string) => {
    if (closing) return;
    closing = true;
    app.log.info(`${sig}: draining`);
    app.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  await app.caper.loaded;
  // The line scripts and people wait for says what the readiness probe says: it asks /readyz
  // itself (in process), so "ready" is never printed while the probe would answer 503.
  const probe = await app.inject({ method: 'GET', url: `${basePath.replace(/\/$/, '')}/readyz` });
  if (probe.statusCode !== 200) {
    const why = (probe.json() as { message?: string }).message ?? app.caper.notReadyReason ?? `readyz answered ${probe.statusCode}`;
    console.error(`caper serve: not ready on ${url}: ${why}`);
  } else {
    const mm = app.caper.matmul;
    console.error(`caper serve: ready on ${url} (model ${app.caper.model!.manifest.name}, ${app.caper.model!.provider}${mm ? `, ${mm.arithmetic} matmul: ${mm.reason}` : ''})`);
  }
  // Keep the process alive while the server runs.
  return new Promise<number>(() => undefined);
}
