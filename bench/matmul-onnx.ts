// One-node ONNX models encoded by hand, so the benchmarks can measure this machine's onnxruntime
// matrix-product rates without any Python/onnx dependency: C = A x B in float32 (dynamic shapes),
// and the 4-bit MatMulNBits the shipped graphs use, at fp32 or int8 activations (accuracy_level).
// Protobuf wire format: field key = (number << 3) | wire type; 0 = varint, 2 = length-delimited.

function varint(n: number): number[] {
  const out: number[] = [];
  let v = n;
  while (v > 127) {
    out.push((v & 127) | 128);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}

const enc = new TextEncoder();
const vint = (field: number, n: number) => [...varint((field << 3) | 0), ...varint(n)];
const bytes = (field: number, b: number[] | Uint8Array) => [...varint((field << 3) | 2), ...varint(b.length), ...b];
const str = (field: number, s: string) => bytes(field, Array.from(enc.encode(s)));

function valueInfo(name: string, dims: (string | number)[]): number[] {
  // TensorShapeProto.dim { dim_value } for a fixed size, { dim_param } for a named free one
  const shape = dims.flatMap((d) => bytes(1, typeof d === 'number' ? vint(1, d) : str(2, d)));
  const tensorType = [...vint(1, 1), ...bytes(2, shape)]; // elem_type FLOAT, shape
  const typeProto = bytes(1, tensorType); // TypeProto.tensor_type
  return [...str(1, name), ...bytes(2, typeProto)];
}

export function matmulModel(): Uint8Array {
  const node = [...str(1, 'A'), ...str(1, 'B'), ...str(2, 'C'), ...str(3, 'mm'), ...str(4, 'MatMul')];
  const graph = [
    ...bytes(1, node),
    ...str(2, 'matmul'),
    ...bytes(11, valueInfo('A', ['M', 'K'])),
    ...bytes(11, valueInfo('B', ['K', 'N'])),
    ...bytes(12, valueInfo('C', ['M', 'N'])),
  ];
  const opset = [...str(1, ''), ...vint(2, 17)];
  const model = [...vint(1, 8), ...str(2, 'caper-bench'), ...bytes(7, graph), ...bytes(8, opset)];
  return Uint8Array.from(model);
}

/** Parts (small field lists or large byte blocks) laid end to end. */
function cat(parts: ArrayLike<number>[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A length-delimited field whose payload may be megabytes (a weight block): no spread into an array. */
const block = (field: number, b: Uint8Array) => cat([varint((field << 3) | 2), varint(b.length), b]);

/** TensorProto: dims, data_type (1 float, 2 uint8), name, raw_data. */
function initializer(name: string, dims: number[], dataType: number, raw: Uint8Array): Uint8Array {
  return cat([...dims.map((d) => vint(1, d)), vint(2, dataType), str(8, name), block(9, raw)]);
}

const intAttribute = (name: string, v: number) => bytes(5, [...str(1, name), ...vint(3, v), ...vint(20, 2)]); // AttributeProto, type INT

/** MatMulNBits' constant weights: every 4-bit code 9, every scale 0.5, so each weight is (9 - 8) x 0.5 = 0.5 (no zero points: 8). */
export const NBITS_WEIGHT = 0.5;

/**
 * A one-node graph Y = A x W with W [K, N] stored as the shipped graphs store their matrices:
 * com.microsoft MatMulNBits, 4 bits in blocks of `blockSize`, constant (so onnxruntime packs it at
 * load, as it does the model's), computed at onnxruntime's `accuracyLevel` (0: fp32 activations,
 * 4: int8). A is [M, K] with M free. K must be a multiple of blockSize.
 */
export function matmulNBitsModel(k: number, n: number, accuracyLevel: number, blockSize = 128): Uint8Array {
  if (k % blockSize !== 0) throw new Error(`K ${k} is not a multiple of the block ${blockSize}`);
  const blocks = k / blockSize;
  const codes = new Uint8Array(n * blocks * (blockSize / 2)).fill(0x99);
  const scales = new Uint8Array(new Float32Array(n * blocks).fill(NBITS_WEIGHT).buffer);
  const node = [
    ...str(1, 'A'), ...str(1, 'W'), ...str(1, 'scales'), ...str(2, 'Y'), ...str(3, 'mm'), ...str(4, 'MatMulNBits'),
    ...intAttribute('K', k), ...intAttribute('N', n), ...intAttribute('bits', 4), ...intAttribute('block_size', blockSize),
    ...intAttribute('accuracy_level', accuracyLevel), ...str(7, 'com.microsoft'),
  ];
  const graph = cat([
    bytes(1, node),
    str(2, 'matmul_nbits'),
    block(5, initializer('W', [n, blocks, blockSize / 2], 2, codes)),
    block(5, initializer('scales', [n * blocks], 1, scales)),
    bytes(11, valueInfo('A', ['M', k])),
    bytes(12, valueInfo('Y', ['M', n])),
  ]);
  const opsets = [bytes(8, [...str(1, ''), ...vint(2, 17)]), bytes(8, [...str(1, 'com.microsoft'), ...vint(2, 1)])];
  return cat([vint(1, 8), str(2, 'caper-bench'), block(7, graph), ...opsets]);
}
