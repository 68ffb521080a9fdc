// Which of a model's two graphs runs: the one it was shipped with (fp32 arithmetic on its 4-bit
// weights), or the same graph with int8 activations (caper.json `matmul_accuracy`, written by
// python -m caper_train.ship.int8). The weights, inputs and outputs are the same; only onnxruntime's
// CPU kernels compute differently. int8 arithmetic pays most where the CPU multiplies and adds
// int8 vectors in one instruction (AVX-512 VNNI, AVX-VNNI, Arm's dot product); elsewhere the gain
// is small while the rounding moves scores (and can swap close candidates) just the same
// (bench/results/int8.md), so `auto` takes it only on such CPUs.
// The choice and its reason are made here, once at load, and /info and the start-up line say both.
import { readFileSync } from 'node:fs';
import { INT8_ACCURACY_LEVEL } from '../scoring/manifest.js';

export const MATMUL_CHOICES = ['auto', 'fp32', 'int8'] as const;
export type MatmulChoice = (typeof MATMUL_CHOICES)[number];
export type MatmulArithmetic = 'fp32' | 'int8';

/** What the service runs, for /info and the start-up line. */
export interface MatmulDecision {
  arithmetic: MatmulArithmetic;
  reason: string;
}

/** What caper.json says about the int8 graph (its `matmul_accuracy`), or null when it has none. */
export interface Int8Graph {
  file: string;
  accuracyLevel: number;
}

/** /proc/cpuinfo flags of int8 dot-product instructions onnxruntime's int8 kernels use. */
export const INT8_DOT_FLAGS = ['avx512_vnni', 'avx_vnni', 'asimddp'] as const;

/**
 * The int8 dot-product flags every processor of a /proc/cpuinfo text lists (x86 `flags`, Arm
 * `Features`), sorted. Every one, not any: a thread may run on whichever core, and a kernel chosen
 * for an instruction one core lacks would fault there.
 */
export function int8DotFlags(cpuinfo: string): string[] {
  let common: Set<string> | null = null;
  for (const line of cpuinfo.split('\n')) {
    const m = /^(?:flags|features)\s*:(.*)$/i.exec(line.trim());
    if (!m) continue;
    const here = new Set(m[1]!.trim().split(/\s+/));
    const wanted: string[] = INT8_DOT_FLAGS.filter((f) => here.has(f) && (common === null || common.has(f)));
    common = new Set(wanted);
  }
  return common ? [...common].sort() : [];
}

/** /proc/cpuinfo, or null where there is none (not Linux) or it cannot be read. */
export function readCpuInfo(): string | null {
  try {
    return readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return null;
  }
}

export interface MatmulInput {
  requested: MatmulChoice;
  /** The model's int8 graph, or null when caper.json records none. */
  graph: Int8Graph | null;
  /** /proc/cpuinfo's text, or null when it could not be read. */
  cpuinfo: string | null;
  device: 'auto' | 'cuda' | 'cpu';
  /** The weights file served (--weights): the int8 graph is a variant of `model` only. */
  weights: 'model' | 'int8' | 'int4';
}

/**
 * Which graph runs and why. Throws when `int8` is asked for and cannot be served: an operator who
 * names it wants to know, not to be served the other graph quietly.
 */
export function chooseMatmul(x: MatmulInput): MatmulDecision {
  const graph = x.graph && x.graph.accuracyLevel === INT8_ACCURACY_LEVEL ? x.graph : null;
  if (x.requested === 'int8') {
    if (x.weights !== 'model') throw new Error(`--matmul int8 is the int8 graph of the model file, and --weights ${x.weights} serves another file`);
    if (!graph) throw new Error('--matmul int8: caper.json records no int8 graph (matmul_accuracy with accuracy_level 4; python -m caper_train.ship.int8 --model DIR writes it)');
    return { arithmetic: 'int8', reason: `asked for (--matmul int8), ${graph.file}` };
  }
  if (x.requested === 'fp32') return { arithmetic: 'fp32', reason: 'asked for (--matmul fp32)' };
  if (x.weights !== 'model') return { arithmetic: 'fp32', reason: `--weights ${x.weights} serves its own file, not the model's int8 graph` };
  if (!graph) return { arithmetic: 'fp32', reason: 'the model has no int8 graph (caper.json matmul_accuracy)' };
  if (x.device === 'cuda') return { arithmetic: 'fp32', reason: "--device cuda: accuracy_level is read by onnxruntime's CPU kernels" };
  if (x.cpuinfo === null) return { arithmetic: 'fp32', reason: "the CPU's instructions are unknown (no /proc/cpuinfo)" };
  const flags = int8DotFlags(x.cpuinfo);
  if (flags.length === 0) return { arithmetic: 'fp32', reason: `this CPU has no int8 dot-product instructions (${INT8_DOT_FLAGS.join(', ')})` };
  return { arithmetic: 'int8', reason: `this CPU has int8 dot-product instructions (${flags.join(', ')}) and the model has an int8 graph (${graph.file})` };
}
