// Safe SQL execution shared by annotation, the evaluations and the HTTP service: where callers
// import it from. The parts:
//  - gate.ts       the read-only gate every engine shares (checkReadOnlySelect);
//  - scheduler.ts  the engine-neutral executor: cache, fair round-robin across owners, abort and
//                  deadline, slots and their one teardown;
//  - sqlite.ts     SQLite files through a pool of child processes (SqlExecutor);
//  - postgres.ts   PostgreSQL databases through a bounded pool of connections per database;
//  - types.ts      ExecResult and the engine interface (open, run with a limit, cancel, describe).
export type { ExecResult, ExecErrorCode, RunOptions, ExecutorOptions, ExecEngine, EngineSession, EngineJob, EngineReply } from './types.js';
export { SKIPPED_DEADLINE } from './types.js';
export { checkReadOnlySelect, calledFunctions } from './gate.js';
export { Executor, SLOT_REST } from './scheduler.js';
export { SqlExecutor, SqliteEngine } from './sqlite.js';
