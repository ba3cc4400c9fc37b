#!/usr/bin/env python3
"""Many live-chart viewers at once: N Server-Sent Events streams on one job of `bakusoku serve`.

Opens every stream at once, writes --ready-file when each has its answer (the first event, a
refusal or an error, or --ready-timeout), keeps the streams open until SIGTERM/SIGINT or
--hold seconds, then prints one summary line:

  viewers=N streaming=S refused_503=R unanswered=U other_status=O failed=F dropped=D events=E ...

streaming: answered 200 with at least one event; refused_503: the server's viewer budget said
no (with Retry-After); unanswered: no status line or no event by the end of the run (a
connection the server accepted but never served); failed: the connection broke; dropped:
streams the server closed before the end of the run (a job that ended closes its streams too). Python 3 standard library only.

Usage: sse_viewers.py --port P --job ID [--host 127.0.0.1] [--viewers 500] [--hold 60]
                      [--ready-file PATH] [--ready-timeout 30]
"""
import argparse
import asyncio
import signal
import statistics
import time


class Viewer:
    def __init__(self):
        self.status = None  # HTTP status, or "failed"
        self.first_event_s = None
        self.events = 0
        self.open = False
        self.answered = asyncio.Event()


async def watch(v, host, port, path):
    """Runs until the server closes the stream or main() cancels it at the end of the run."""
    start = time.monotonic()
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
        await writer.drain()
        parts = (await reader.readline()).split()
        v.status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else "failed"
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass  # headers
        if v.status != 200:
            return
        v.open = True
        while True:
            line = await reader.readline()
            if not line:
                v.open = False  # the server closed the stream
                return
            if line.startswith(b"event:"):
                v.events += 1
                if v.first_event_s is None:
                    v.first_event_s = time.monotonic() - start
                    v.answered.set()
    except (OSError, asyncio.IncompleteReadError, ValueError):
        v.status = v.status or "failed"
        v.open = False
    finally:
        v.answered.set()
        if writer is not None:
            writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--viewers", type=int, default=500)
    ap.add_argument("--hold", type=float, default=60.0)
    ap.add_argument("--ready-file")
    ap.add_argument("--ready-timeout", type=float, default=30.0)
    a = ap.parse_args()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    path = f"/api/jobs/{a.job}/events"
    viewers = [Viewer() for _ in range(a.viewers)]
    tasks = [asyncio.ensure_future(watch(v, a.host, a.port, path)) for v in viewers]

    try:
        await asyncio.wait_for(asyncio.gather(*(v.answered.wait() for v in viewers)), a.ready_timeout)
    except asyncio.TimeoutError:
        pass
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write(f"{sum(v.first_event_s is not None for v in viewers)} streaming\n")
    try:
        await asyncio.wait_for(stop.wait(), a.hold)
    except asyncio.TimeoutError:
        pass
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    firsts = sorted(v.first_event_s * 1000 for v in viewers if v.first_event_s is not None)
    streaming = sum(v.status == 200 and v.first_event_s is not None for v in viewers)
    refused = sum(v.status == 503 for v in viewers)
    unanswered = sum(v.status is None or (v.status == 200 and v.first_event_s is None) for v in viewers)
    failed = sum(v.status == "failed" for v in viewers)
    other = a.viewers - streaming - refused - unanswered - failed
    dropped = sum(v.status == 200 and not v.open for v in viewers)
    p50 = statistics.median(firsts) if firsts else float("nan")
    worst = firsts[-1] if firsts else float("nan")
    print(
        f"viewers={a.viewers} streaming={streaming} refused_503={refused} unanswered={unanswered} "
        f"other_status={other} failed={failed} "
        f"dropped={dropped} events={sum(v.events for v in viewers)} "
        f"first_event_p50_ms={p50:.0f} first_event_max_ms={worst:.0f}",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
