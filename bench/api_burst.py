#!/usr/bin/env python3
"""Bursts of parallel API requests: --parallel GETs sent at the same moment, each on a fresh
connection, --rounds times. Prints one summary line:

  path=/api/status parallel=200 rounds=20 answered=A/N non200=X failed=F p50_ms=... p95_ms=... p99_ms=... max_ms=...

Latency is from opening the connection to the end of the response, so a connection the
server's listen queue dropped (and the client's SYN retry, 1 s later) shows. Python 3
standard library only.

Usage: api_burst.py --port P [--host 127.0.0.1] [--path /api/status] [--parallel 200]
                    [--rounds 20] [--timeout 60]
"""
import argparse
import asyncio
import time


async def one(host, port, path, timeout):
    """(status or None, seconds) of one GET on its own connection."""
    start = time.monotonic()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), timeout)  # to the server's close
        parts = response.split(b" ", 2)
        status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
        return status, time.monotonic() - start
    except (OSError, asyncio.TimeoutError):
        return None, time.monotonic() - start
    finally:
        if writer is not None:
            writer.close()


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/api/status")
    ap.add_argument("--parallel", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()

    results = []
    for _ in range(a.rounds):
        results += await asyncio.gather(*(one(a.host, a.port, a.path, a.timeout) for _ in range(a.parallel)))
    total = len(results)
    answered = sum(s is not None for s, _ in results)
    non200 = sum(s is not None and s != 200 for s, _ in results)
    ms = sorted(t * 1000 for s, t in results if s is not None)
    print(
        f"path={a.path} parallel={a.parallel} rounds={a.rounds} answered={answered}/{total} non200={non200} "
        f"failed={total - answered} p50_ms={percentile(ms, 50):.1f} p95_ms={percentile(ms, 95):.1f} "
        f"p99_ms={percentile(ms, 99):.1f} max_ms={(ms[-1] if ms else float('nan')):.1f}",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
