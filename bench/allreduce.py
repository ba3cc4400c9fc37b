"""Gradient allreduce on this machine, 2 ranks: per message size (4 KB to 64 MB), one
blocking MPI_Allreduce against bakusoku's bucketed path (the one training uses: gradients
copied into buckets, MPI_Iallreduce per bucket, the mean written back), as bus bandwidth.
Two links: shared memory between two processes, and TCP between two network namespaces
joined by a veth pair (two "hosts"; needs root, skipped otherwise).
Usage: /usr/bin/python3 bench/allreduce.py build/src/bakusoku [--rounds N]"""
import json
import os
import subprocess
import sys
import tempfile

NET = "10.78.0"


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def shared_memory(binary, rounds):
    cmd = ["mpirun", "-np", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return run(cmd + [binary, "allreduce-bench", "--rounds", str(rounds)])


def veth(binary, rounds):
    """TCP between two network namespaces, or None where they cannot be made."""
    if os.geteuid() != 0:
        return None
    a, b = f"bks_bench_a{os.getpid()}", f"bks_bench_b{os.getpid()}"
    va, vb = f"bkba{os.getpid() % 10000}", f"bkbb{os.getpid() % 10000}"
    setup = [f"ip netns add {a}", f"ip netns add {b}", f"ip link add {va} type veth peer name {vb}",
             f"ip link set {va} netns {a}", f"ip link set {vb} netns {b}",
             f"ip -n {a} addr add {NET}.1/24 dev {va}", f"ip -n {b} addr add {NET}.2/24 dev {vb}",
             f"ip -n {a} link set {va} up", f"ip -n {b} link set {vb} up",
             f"ip -n {a} link set lo up", f"ip -n {b} link set lo up"]
    try:
        for c in setup:
            if subprocess.run(c.split(), capture_output=True).returncode != 0:
                print(f"(no veth run: '{c}' failed)")
                return None
        with tempfile.TemporaryDirectory() as tmp:
            agent = os.path.join(tmp, "agent.sh")
            with open(agent, "w") as f:
                f.write(f'#!/bin/sh\nhost=$1; shift\ncase "$host" in {NET}.2) ns={b} ;; *) ns={a} ;; esac\n'
                        'exec ip netns exec "$ns" /bin/sh -c "$*"\n')
            os.chmod(agent, 0o700)
            # Each "host" would bind its rank to its core 0, the same core: no binding.
            return run(["ip", "netns", "exec", a, "mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "2", "-H",
                        f"{NET}.1:1,{NET}.2:1", "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self",
                        "--mca", "btl_tcp_if_include", f"{NET}.0/24", "--mca", "oob_tcp_if_include",
                        f"{NET}.0/24", binary, "allreduce-bench", "--rounds", str(rounds)])
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)


def table(title, rows):
    print(f"\n{title}\n")
    print("| message | MPI_Allreduce ms | bus GB/s | bucketed path ms | bus GB/s | bucketed / MPI_Allreduce time |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        size = r["bytes"]
        name = f"{size // 1024} KB" if size < 1 << 20 else f"{size >> 20} MB"
        print(f"| {name} | {r['allreduce_ms']:.3f} | {r['allreduce_bus_gbs']:.2f} | {r['buckets_ms']:.3f} | "
              f"{r['buckets_bus_gbs']:.2f} | {r['buckets_ms'] / r['allreduce_ms']:.2f} |")


def main():
    binary = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 10
    table("2 ranks, shared memory (Open MPI vader)", shared_memory(binary, rounds))
    rows = veth(binary, rounds)
    if rows:
        table("2 ranks in two network namespaces, TCP over a veth pair", rows)


if __name__ == "__main__":
    main()
