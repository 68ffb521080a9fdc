// A one-node ONNX model (C = A x B, float32, dynamic shapes) encoded by hand, so the benchmark
// can measure this machine's onnxruntime MatMul rate without any Python/onnx dependency.
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

function valueInfo(name: string, dims: string[]): number[] {
  const shape = dims.flatMap((d) => bytes(1, str(2, d))); // TensorShapeProto.dim { dim_param }
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
