// Times one ONNX model in ONNX Runtime (CPU execution provider), the peer bakusoku's bundles
// race: the same .onnx file, the same batch, the same number of threads.
// Usage: node ort_time.mjs MODEL.onnx --batch N --threads T [--iterations K] [--warmup W]
//                          [--profile PREFIX]
// Prints one JSON line: {"median_ms", "mean_ms", "min_ms", "iterations", "batch", "threads",
// "input", "shape", "version"}. The input is filled with a fixed pseudo-random pattern.
// --profile: also ONNX Runtime's own per-node times (its profiler, which adds a little to
// each node), written as PREFIX_<date>.json (Chrome trace; bench/ort_layers.py reads it).
import ort from "onnxruntime-node";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const model = args[0];
const opt = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const batch = opt("batch", 1), threads = opt("threads", 1), iterations = opt("iterations", 50);
const warmup = opt("warmup", 5);
const profileAt = args.indexOf("--profile"), profile = profileAt >= 0 ? args[profileAt + 1] : "";
if (!model || !Number.isInteger(batch) || batch < 1 || !Number.isInteger(threads) || threads < 1) {
  console.error(
    "usage: node ort_time.mjs MODEL.onnx --batch N --threads T [--iterations K] [--warmup W] [--profile PREFIX]",
  );
  process.exit(2);
}

const session = await ort.InferenceSession.create(readFileSync(model), {
  executionProviders: ["cpu"],
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
  executionMode: "sequential",
  graphOptimizationLevel: "all",
  ...(profile ? { enableProfiling: true, profileFilePrefix: profile } : {}),
});
const name = session.inputNames[0];
const meta = session.inputMetadata?.find?.((m) => m.name === name) ?? session.inputMetadata?.[0];
// The model's input shape with its batch (first) dimension set to `batch`; symbolic
// dimensions elsewhere are an error: the caller exports fixed sizes.
const dims = (meta?.shape ?? []).map((d, i) => (i === 0 ? batch : d));
if (dims.length === 0 || dims.some((d) => typeof d !== "number" || d <= 0)) {
  console.error(`ort_time: ${model}: input '${name}' has shape [${meta?.shape}]; export it with fixed sizes`);
  process.exit(2);
}
const n = dims.reduce((a, b) => a * b, 1);
const data = new Float32Array(n);
for (let i = 0; i < n; ++i) data[i] = ((i * 2654435761) % 1000) / 1000 - 0.5;
const feeds = { [name]: new ort.Tensor("float32", data, dims) };

for (let i = 0; i < warmup; ++i) await session.run(feeds);
const times = [];
for (let i = 0; i < iterations; ++i) {
  const t0 = process.hrtime.bigint();
  await session.run(feeds);
  times.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
if (profile) session.endProfiling();
times.sort((a, b) => a - b);
const require = createRequire(import.meta.url);
console.log(
  JSON.stringify({
    median_ms: times[Math.floor(times.length / 2)],
    mean_ms: times.reduce((a, b) => a + b, 0) / times.length,
    min_ms: times[0],
    iterations,
    batch,
    threads,
    input: name,
    shape: dims,
    version: require("onnxruntime-node/package.json").version,
  }),
);
