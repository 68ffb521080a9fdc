// `caper serve`: the verifier HTTP service (see src/server.ts).
import { parseArgs, flagString, flagNumber } from './args.js';

const USAGE = `usage: caper serve [--model DIR] [--db-dir DIR] [--host H] [--port P] [--device auto|cuda|cpu]
       [--max-batch-tokens N] [--max-wait-ms MS] [--max-batch-size N] [--max-queue-tokens N]
       [--exec-timeout-ms MS] [--threads N] [--quantized[=int8|int4]] [--no-prefix-sharing] [--quiet] [--api-key KEY]
  --quantized: the model's int8 weights file (weight-only for fp16 exports); =int4 its int4 one (CPU)
  --no-prefix-sharing: score each candidate as its own sequence instead of one prefix-tree row per
  request (models exported before prefix-tree packing always do)
  --api-key (or env CAPER_API_KEY, preferred: flags show in ps): require Authorization: Bearer KEY
  on every route except /healthz and /readyz`;

export async function run(argv: string[]): Promise<number> {
  const a = parseArgs(argv, ['quantized', 'quiet', 'help', 'no-prefix-sharing']);
  if (a.flags.has('help')) {
    console.log(USAGE);
    return 0;
  }
  const device = flagString(a, 'device', 'auto')!;
  if (device !== 'auto' && device !== 'cuda' && device !== 'cpu') {
    console.error(`caper serve: --device must be auto, cuda or cpu\n${USAGE}`);
    return 2;
  }
  // An explicit but empty or unusable key is refused rather than silently serving without auth.
  const keyFlag = a.flags.get('api-key');
  if (keyFlag === true) {
    console.error(`caper serve: --api-key needs a value\n${USAGE}`);
    return 2;
  }
  const apiKey = keyFlag ?? process.env.CAPER_API_KEY;
  if (apiKey !== undefined) {
    const { apiKeyProblem } = await import('../routes/auth.js');
    const problem = apiKeyProblem(apiKey);
    if (problem) {
      console.error(`caper serve: ${problem} (${keyFlag !== undefined ? '--api-key' : 'CAPER_API_KEY'})`);
      return 2;
    }
  }
  const q = a.flags.get('quantized');
  if (q !== undefined && q !== true && q !== 'int8' && q !== 'int4') {
    console.error(`caper serve: --quantized takes int8 or int4, got "${q}"\n${USAGE}`);
    return 2;
  }
  const { buildServer } = await import('../server.js');
  const modelDir = flagString(a, 'model');
  const dbDir = flagString(a, 'db-dir');
  const maxWait = flagString(a, 'max-wait-ms');
  const app = await buildServer({
    ...(modelDir ? { modelDir } : {}),
    ...(dbDir ? { dbDir } : {}),
    device,
    ...(a.flags.has('max-batch-tokens') ? { maxBatchTokens: flagNumber(a, 'max-batch-tokens', 0) } : {}),
    ...(maxWait !== undefined ? { maxWaitMs: flagNumber(a, 'max-wait-ms', 0) } : {}),
    ...(a.flags.has('max-batch-size') ? { maxBatchSize: flagNumber(a, 'max-batch-size', 0) } : {}),
    ...(a.flags.has('max-queue-tokens') ? { maxQueueTokens: flagNumber(a, 'max-queue-tokens', 0) } : {}),
    ...(a.flags.has('exec-timeout-ms') ? { execTimeoutMs: flagNumber(a, 'exec-timeout-ms', 5000) } : {}),
    ...(a.flags.has('threads') ? { threads: flagNumber(a, 'threads', 0) } : {}),
    quantized: q === 'int4' ? 'int4' : q !== undefined,
    ...(a.flags.has('no-prefix-sharing') ? { prefixSharing: false } : {}),
    ...(apiKey !== undefined ? { apiKey } : {}),
    logger: !a.flags.has('quiet'),
  });
  const host = flagString(a, 'host', '127.0.0.1')!;
  const port = flagNumber(a, 'port', 8080);
  await app.listen({ host, port });
  // With --port 0 the OS picks the port; report the real one (tests and scripts read it).
  const addr = app.server.address();
  const url = `http://${host}:${typeof addr === 'object' && addr ? addr.port : port}`;
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
  if (app.caper.notReadyReason) console.error(`caper serve: not ready on ${url}: ${app.caper.notReadyReason}`);
  else console.error(`caper serve: ready on ${url} (model ${app.caper.model!.manifest.name}, ${app.caper.model!.provider})`);
  // Keep the process alive while the server runs.
  return new Promise<number>(() => undefined);
}
