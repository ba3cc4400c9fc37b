#!/usr/bin/env python3
"""The char-RNN example (examples/char_rnn) against PyTorch (Debian's python3-torch) in the
same run, same text, sizes, batch, sequence length, optimizer and threads:

- training: characters per second over --iters iterations (wall clock of the whole
  training command / loop, no validation inside it), then validation bits per character
  on the held-out text after those iterations;
- sampling at batch 1: characters per second generating --sample-length characters, at
  each of --sample-threads.

bakusoku trains with `bakusoku train` on the example's files (max_iter set to --iters),
scores with `bakusoku test --stage validation` and samples with `bakusoku sample`.
PyTorch runs nn.Embedding -> nn.LSTM (2 layers) -> nn.Linear with RMSprop and the same
gradient clipping, on the same streams (32 streams of the text, state carried between
batches of 50, truncated backpropagation through time).

Usage: python3 bench/char_rnn.py [--bakusoku build/src/bakusoku] [--threads 2] [--iters 300]
       [--sample-threads 1,2]
"""
import argparse
import glob
import math
import os
import re
import subprocess
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NET = os.path.join(ROOT, "examples", "char_rnn", "char_rnn_train_test.prototxt")
SOLVER = os.path.join(ROOT, "examples", "char_rnn", "char_rnn_solver.prototxt")
SOURCE = "/usr/share/games/fortunes/*.u8"
STREAMS, SEQ, HOLDOUT, VOCAB, EMBED, HIDDEN = 32, 50, 0.05, 128, 64, 256
VALIDATION_BATCHES = 80


def read_text():
    text = "".join(open(f, encoding="utf-8").read() for f in sorted(glob.glob(SOURCE)))
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    held = int(len(ids) * HOLDOUT)
    return chars, ids[: len(ids) - held], ids[len(ids) - held:]


def streams(ids):
    """(T * batches, N) inputs and labels: N equal streams, as TextData cuts them."""
    per = (len(ids) - 1) // STREAMS
    batches = per // SEQ
    x = torch.stack([ids[n * per: n * per + batches * SEQ] for n in range(STREAMS)], 1)
    y = torch.stack([ids[n * per + 1: n * per + 1 + batches * SEQ] for n in range(STREAMS)], 1)
    return x, y, batches


class CharRnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, EMBED)
        self.lstm = torch.nn.LSTM(EMBED, HIDDEN, num_layers=2)
        self.out = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, x, state):
        h, state = self.lstm(self.embed(x), state)
        return self.out(h), state


def torch_train(train_ids, held_ids, iters, threads):
    torch.manual_seed(1)
    torch.set_num_threads(threads)
    model = CharRnn()
    for p in model.parameters():
        torch.nn.init.uniform_(p, -0.08, 0.08)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.002, alpha=0.95, eps=1e-8)
    x, y, batches = streams(train_ids)
    loss_fn = torch.nn.CrossEntropyLoss()
    state = None
    start = time.perf_counter()
    for it in range(iters):
        b = it % batches
        if b == 0:
            state = None
        xs, ys = x[b * SEQ: (b + 1) * SEQ], y[b * SEQ: (b + 1) * SEQ]
        logits, state = model(xs, state)
        state = tuple(s.detach() for s in state)
        loss = loss_fn(logits.reshape(-1, VOCAB), ys.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    seconds = time.perf_counter() - start
    # Validation: the held-out streams from the start, state carried.
    hx, hy, hb = streams(held_ids)
    total, state = 0.0, None
    with torch.no_grad():
        for b in range(min(hb, VALIDATION_BATCHES)):
            logits, state = model(hx[b * SEQ: (b + 1) * SEQ], state)
            total += loss_fn(logits.reshape(-1, VOCAB), hy[b * SEQ: (b + 1) * SEQ].reshape(-1)).item()
    bpc = total / min(hb, VALIDATION_BATCHES) / math.log(2)
    return iters * STREAMS * SEQ / seconds, bpc, model


def torch_sample(model, chars, length, threads):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)
    x = torch.tensor([[chars.index("\n")]])
    state, out = None, []
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(length):
            logits, state = model(x, state)
            # The net has VOCAB classes, the text fewer characters: only those are drawn.
            p = torch.softmax(logits[0, 0, : len(chars)], 0)
            c = torch.multinomial(p, 1, generator=gen)
            out.append(chars[c.item()])
            x = c.view(1, 1)
    return length / (time.perf_counter() - start)


def bakusoku_train(bks, iters, threads, run_dir):
    with open(SOLVER) as f:
        solver = f.read()
    solver = re.sub(r"max_iter: \d+", f"max_iter: {iters}", solver)
    solver = re.sub(r"test_interval: \d+", f"test_interval: {iters + 1}", solver)
    solver = re.sub(r"snapshot: \d+", f"snapshot: {iters}", solver)
    solver = solver.replace('net: "examples/', f'net: "{ROOT}/examples/')
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
        f.write(solver)
    start = time.perf_counter()
    subprocess.run([bks, "train", "--solver", f.name, "--out", run_dir, "--threads", str(threads)], check=True,
                   capture_output=True, text=True)
    seconds = time.perf_counter() - start
    os.unlink(f.name)
    weights = os.path.join(run_dir, "snapshots", f"iter_{iters}.safetensors")
    out = subprocess.run([bks, "test", "--model", NET, "--weights", weights, "--iterations", str(VALIDATION_BATCHES),
                          "--stage", "validation", "--threads", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    bpc = float(re.search(r"^bpc = ([0-9.]+)", out, re.M).group(1))
    return iters * STREAMS * SEQ / seconds, bpc, weights


def bakusoku_sample(bks, weights, length, threads):
    r = subprocess.run([bks, "sample", "--model", NET, "--weights", weights, "--length", str(length),
                        "--threads", str(threads)], check=True, capture_output=True, text=True)
    return float(re.search(r"\(([0-9.]+) characters/s\)", r.stderr).group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--sample-length", type=int, default=2000)
    # Sampling is timed at each of these thread counts, both peers alike. At batch 1 each
    # character reads all 3.4 MB of the LSTMs' weights: on one core they stream from L3,
    # on two each core keeps its half in its own L2.
    p.add_argument("--sample-threads", default="1,2", help="comma-separated thread counts")
    a = p.parse_args()
    chars, train_ids, held_ids = read_text()
    run_dir = tempfile.mkdtemp(prefix="bks_char_rnn_bench_")
    ours_cps, ours_bpc, weights = bakusoku_train(a.bakusoku, a.iters, a.threads, os.path.join(run_dir, "run"))
    theirs_cps, theirs_bpc, model = torch_train(train_ids, held_ids, a.iters, a.threads)
    samples = []
    for t in (int(x) for x in a.sample_threads.split(",")):
        samples.append((t, bakusoku_sample(a.bakusoku, weights, a.sample_length, t),
                        torch_sample(model, chars, a.sample_length, t)))
    print(f"char-RNN on {SOURCE}: 2 x LSTM {HIDDEN}, batch {STREAMS} x {SEQ}, {a.iters} iterations, "
          f"{a.threads} threads; PyTorch {torch.__version__}")
    print("| | bakusoku | PyTorch | bakusoku / PyTorch |")
    print("|---|---|---|---|")
    print(f"| training, characters/s | {ours_cps:,.0f} | {theirs_cps:,.0f} | {ours_cps / theirs_cps:.2f}x |")
    print(f"| validation bits/character after {a.iters} iterations | {ours_bpc:.3f} | {theirs_bpc:.3f} | "
          f"{ours_bpc / theirs_bpc:.3f} |")
    for t, ours, theirs in samples:
        print(f"| sampling at batch 1, characters/s ({t} thread{'s' if t > 1 else ''}) | {ours:,.0f} | "
              f"{theirs:,.0f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
