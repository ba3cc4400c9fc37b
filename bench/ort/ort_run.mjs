// Runs one ONNX model once in ONNX Runtime (CPU) on an input read from a file, and writes its
// first output: the oracle tests/test_onnx_export.cc compares bakusoku's exports against.
// Usage: node ort_run.mjs MODEL.onnx INPUT.f32 N,C,H,W OUTPUT.f32
// The input and output files hold raw little-endian float32; the output's shape is printed
// as one line of JSON ({"output", "shape"}).
import ort from "onnxruntime-node";
import { readFileSync, writeFileSync } from "node:fs";

const [model, input, dimText, output] = process.argv.slice(2);
if (!output) {
  console.error("usage: node ort_run.mjs MODEL.onnx INPUT.f32 N,C,H,W OUTPUT.f32");
  process.exit(2);
}
const dims = dimText.split(",").map(Number);
const bytes = readFileSync(input);
const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
if (dims.reduce((a, b) => a * b, 1) !== data.length) {
  console.error(`ort_run: ${input} holds ${data.length} floats, not a [${dims}] tensor`);
  process.exit(2);
}
const session = await ort.InferenceSession.create(readFileSync(model), {
  executionProviders: ["cpu"],
  intraOpNumThreads: 1,
});
const result = await session.run({ [session.inputNames[0]]: new ort.Tensor("float32", data, dims) });
const y = result[session.outputNames[0]];
writeFileSync(output, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
console.log(JSON.stringify({ output: session.outputNames[0], shape: y.dims }));
