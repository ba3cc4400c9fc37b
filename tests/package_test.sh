#!/usr/bin/env bash
# The installed package works for a program of someone else's: install the build tree to
# a fresh prefix, build examples/embed on its own against it (find_package(bakusoku)),
# make a bundle with the installed `bakusoku` and run the example on it.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
ninja -C "$work/embed" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
# Nothing of the build tree may be needed any more.
if ldd "$work/embed/bakusoku_embed_example" | grep -q "$build"; then
  echo "the example links libraries from the build tree:"; ldd "$work/embed/bakusoku_embed_example"; exit 1
fi
cat > "$work/solver.prototxt" <<SOLVER
net: "$src/examples/fashion_mnist/lenet_train_test.prototxt"
base_lr: 0.01 lr_policy: "fixed" max_iter: 2 random_seed: 1
SOLVER
"$work/prefix/bin/bakusoku" train --solver "$work/solver.prototxt" --out "$work/run" > "$work/train.log" 2>&1 ||
  { cat "$work/train.log"; exit 1; }
"$work/prefix/bin/bakusoku" deploy --model "$src/examples/fashion_mnist/lenet_train_test.prototxt" \
  --weights "$work/run/snapshots/iter_2.safetensors" -o "$work/lenet.bks" > "$work/deploy.log" 2>&1 ||
  { cat "$work/deploy.log"; exit 1; }
"$work/embed/bakusoku_embed_example" "$work/lenet.bks"
