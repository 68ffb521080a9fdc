// Runs the Python training tests when the training environment exists (.ci/run creates it);
// on a machine without it the Node suite still passes and this says what was skipped.
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
const py = process.env.CAPER_PYTHON ?? 'training/.venv/bin/python';
if (!existsSync(py)) {
  console.log(`pytest skipped: no training environment at ${py} (bash .ci/run or "caper train" creates it)`);
  process.exit(0);
}
// The research experiments (research/caper_research) are tested in their own run: they build on
// caper_train, which never imports them.
let status = 0;
for (const [dir, path] of [['training/tests', 'training'], ['research/tests', 'training:research']]) {
  const r = spawnSync(py, ['-m', 'pytest', '-q', dir], { stdio: 'inherit', env: { ...process.env, PYTHONPATH: path } });
  const code = r.status === 5 ? 0 : (r.status ?? 1);
  if (code !== 0) status = code;
}
process.exit(status);
