// The shapes a FLOP count needs, read from a served ONNX graph without loading its weights: the
// nodes (operator, inputs, integer attributes) and each initializer's name and dims. A minimal
// protobuf walker over positional reads, so a 1 GB fp32 export costs a few reads, not 1 GB of
// memory: tensor payloads (raw_data, typed data) are skipped by their length.
// Protobuf wire format: key = (field << 3) | wire type; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
// Fields read (onnx.proto): ModelProto.graph = 7; GraphProto.node = 1, .initializer = 5, .input = 11;
// NodeProto.input = 1, .output = 2, .op_type = 4, .attribute = 5; AttributeProto.name = 1, .i = 3;
// TensorProto.dims = 1, .name = 8; ValueInfoProto.name = 1.
import { openSync, readSync, closeSync, fstatSync } from 'node:fs';

export interface GraphNode {
  op: string;
  inputs: string[];
  outputs: string[];
  /** integer attributes (MatMulNBits' K, N, bits, ...) */
  ints: Record<string, number>;
}

export interface GraphShapes {
  nodes: GraphNode[];
  /** initializer name -> dims */
  inits: Map<string, number[]>;
  inputs: string[];
}

class Reader {
  private buf = Buffer.alloc(0);
  private at = 0;
  constructor(private fd: number) {}

  /** bytes [pos, pos + n) */
  bytes(pos: number, n: number): Buffer {
    if (pos < this.at || pos + n > this.at + this.buf.length) {
      this.buf = Buffer.alloc(Math.max(n, 1 << 16));
      const got = readSync(this.fd, this.buf, 0, this.buf.length, pos);
      this.buf = this.buf.subarray(0, got);
      this.at = pos;
      if (got < n) throw new Error(`truncated ONNX file (wanted ${n} bytes at ${pos})`);
    }
    return this.buf.subarray(pos - this.at, pos - this.at + n);
  }

  varint(pos: number): [number, number] {
    let v = 0;
    let mul = 1;
    for (let k = 0; k < 10; k++) {
      const b = this.bytes(pos + k, 1)[0]!;
      v += (b & 127) * mul;
      mul *= 128;
      if (b < 128) return [v, pos + k + 1];
    }
    throw new Error(`bad varint at ${pos}`);
  }

  /** Calls f(field, wire, valueOrLength, start) for each field of the message in [start, end). */
  fields(start: number, end: number, f: (field: number, wire: number, v: number, at: number) => void): void {
    let p = start;
    while (p < end) {
      const [key, q] = this.varint(p);
      const field = Math.floor(key / 8);
      const wire = key & 7;
      if (wire === 0) {
        const [v, r] = this.varint(q);
        f(field, wire, v, q);
        p = r;
      } else if (wire === 2) {
        const [len, r] = this.varint(q);
        f(field, wire, len, r);
        p = r + len;
      } else if (wire === 1) p = q + 8;
      else if (wire === 5) p = q + 4;
      else throw new Error(`unsupported wire type ${wire} at ${p}`);
    }
    if (p !== end) throw new Error(`field overran its message (${p} > ${end})`);
  }

  str(pos: number, len: number): string {
    return this.bytes(pos, len).toString('utf8');
  }
}

export function readGraphShapes(file: string): GraphShapes {
  const fd = openSync(file, 'r');
  try {
    const r = new Reader(fd);
    const size = fstatSync(fd).size;
    const out: GraphShapes = { nodes: [], inits: new Map(), inputs: [] };
    let found = false;
    r.fields(0, size, (field, wire, len, at) => {
      if (field !== 7 || wire !== 2) return;
      found = true;
      r.fields(at, at + len, (gf, gw, glen, gat) => {
        if (gw !== 2) return;
        if (gf === 1) {
          const node: GraphNode = { op: '', inputs: [], outputs: [], ints: {} };
          r.fields(gat, gat + glen, (nf, nw, nlen, nat) => {
            if (nw !== 2) return;
            if (nf === 1) node.inputs.push(r.str(nat, nlen));
            else if (nf === 2) node.outputs.push(r.str(nat, nlen));
            else if (nf === 4) node.op = r.str(nat, nlen);
            else if (nf === 5) {
              let name = '';
              let i: number | undefined;
              r.fields(nat, nat + nlen, (af, aw, av, aat) => {
                if (af === 1 && aw === 2) name = r.str(aat, av);
                else if (af === 3 && aw === 0) i = av;
              });
              if (i !== undefined) node.ints[name] = i;
            }
          });
          out.nodes.push(node);
        } else if (gf === 5) {
          let name = '';
          const dims: number[] = [];
          r.fields(gat, gat + glen, (tf, tw, tv, tat) => {
            if (tf === 8 && tw === 2) name = r.str(tat, tv);
            else if (tf === 1 && tw === 0) dims.push(tv);
            else if (tf === 1 && tw === 2) {
              // packed repeated int64
              for (let p = tat; p < tat + tv; ) {
                const [d, q] = r.varint(p);
                dims.push(d);
                p = q;
              }
            }
          });
          out.inits.set(name, dims);
        } else if (gf === 11) {
          r.fields(gat, gat + glen, (vf, vw, vlen, vat) => {
            if (vf === 1 && vw === 2) out.inputs.push(r.str(vat, vlen));
          });
        }
      });
    });
    if (!found) throw new Error(`${file}: no graph in this ONNX file`);
    return out;
  } finally {
    closeSync(fd);
  }
}

export interface ModelShape {
  /** decoder layers: one Softmax per attention layer in CAPER's exports */
  layers: number;
  /** hidden width: the reward head's input (the one constant matmul with a single output column) */
  hidden: number;
  /** rows of the token-embedding table (the constant the graph Gathers by input_ids) */
  embeddingRows: number;
  /** weights of the constant matrix products (MatMul, MatMulNBits, MatMulInteger, Gemm): 2 FLOPs each per token */
  matmulWeights: number;
}

/** Layers, hidden width, embedding rows and matmul weights of a CAPER reward-model graph. */
export function modelShape(file: string): ModelShape {
  const g = readGraphShapes(file);
  const inputs = new Set(g.inputs);
  let matmulWeights = 0;
  let hidden = 0;
  for (const n of g.nodes) {
    let k = 0;
    let m = 0;
    if (n.op === 'MatMulNBits') {
      k = n.ints.K ?? 0;
      m = n.ints.N ?? 0;
    } else if (n.op === 'MatMul' || n.op === 'MatMulInteger' || n.op === 'Gemm') {
      const w = g.inits.get(n.inputs[1] ?? '');
      if (!w || w.length !== 2) continue;
      // Gemm with transB=1 stores the weight as [N, K]: K x N is the same count either way.
      [k, m] = n.op === 'Gemm' && n.ints.transB === 1 ? [w[1]!, w[0]!] : [w[0]!, w[1]!];
    } else continue;
    matmulWeights += k * m;
    if (m === 1) hidden = k;
  }
  const gather = g.nodes.find((n) => n.op === 'Gather' && g.inits.has(n.inputs[0] ?? '') && inputs.has(n.inputs[1] ?? ''));
  const embeddingRows = gather ? g.inits.get(gather.inputs[0]!)![0] ?? 0 : 0;
  const layers = g.nodes.filter((n) => n.op === 'Softmax').length;
  if (!hidden || !embeddingRows || !layers) {
    throw new Error(`${file}: could not read the model's shape (hidden ${hidden}, embedding rows ${embeddingRows}, layers ${layers})`);
  }
  return { layers, hidden, embeddingRows, matmulWeights };
}
