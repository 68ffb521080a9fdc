// The thread bench/healthz.ts's startHealthzProber runs its probe loop on: probes until the
// parent posts 'stop', then posts every sample back and ends.
import { parentPort, workerData } from 'node:worker_threads';
import { runProbeLoop, type ProberOptions } from './healthz.js';

const { url, intervalMs, timeoutMs } = workerData as ProberOptions;
const loop = runProbeLoop(url, intervalMs, timeoutMs);
parentPort!.once('message', async () => {
  parentPort!.postMessage(await loop.stop());
  parentPort!.close();
});
