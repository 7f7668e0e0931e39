"""A tiny streaming server with known, fixed delays, for measuring the load generator itself.

Speaks the part of SGLang's HTTP API that `specwatch.run.load` uses: POST /generate with
`"stream": true` answers SSE events `data: {"text": ..., "meta_info": {...}}`, the first one
`--ttft-ms` after the request arrived and then one every `--itl-ms`, each adding one completion
token, up to the request's max_new_tokens; then `data: [DONE]`. GET /health, POST /flush_cache and
GET /server_info answer at once; /server_info also reports how late the server itself sent its
events against their schedule (`lateness_ms_p50/p99/max`), so a benchmark can tell the server's
error from the client's.

Plain asyncio streams, one process, no dependencies.
Usage: python benchmarks/fixed_delay_server.py --port 30000 --ttft-ms 200 --itl-ms 50
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time


class Stats:
    def __init__(self):
        self.lateness: list[float] = []
        # per request (keyed by its prompt text): when it arrived and when each event really
        # went out (time.monotonic(), the same clock as the client's perf_counter on Linux)
        self.requests: dict[str, list[float]] = {}

    def summary(self) -> dict:
        v = sorted(self.lateness)
        pick = (lambda q: v[min(len(v) - 1, int(q * len(v)))] if v else None)
        return {"events": len(v), "lateness_ms_p50": pick(0.5), "lateness_ms_p99": pick(0.99),
                "lateness_ms_max": v[-1] if v else None, "requests": self.requests}


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, args, stats: Stats):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    t0 = time.monotonic()
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    body = await reader.readexactly(length) if length else b""

    def reply(obj: dict, status: str = "200 OK") -> bytes:
        data = json.dumps(obj).encode()
        return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: "
                f"{len(data)}\r\nConnection: close\r\n\r\n").encode() + data

    try:
        if path == "/generate" and method == "POST":
            req = json.loads(body)
            n = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
            times = stats.requests.setdefault(str(req.get("text")), [t0])
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Connection: close\r\n\r\n")
            for k in range(1, n + 1):
                due = t0 + (args.ttft_ms + (k - 1) * args.itl_ms) / 1000
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = time.monotonic()
                stats.lateness.append((now - due) * 1000)
                times.append(now)
                meta = {"completion_tokens": k, "prompt_tokens": 8}
                writer.write(b"data: " + json.dumps({"text": "x" * k, "meta_info": meta}).encode()
                             + b"\n\n")
                await writer.drain()
            writer.write(b"data: [DONE]\n\n")
        elif path == "/health":
            writer.write(reply({}))
        elif path == "/flush_cache":
            stats.lateness.clear()
            stats.requests.clear()
            writer.write(reply({}))
        elif path in ("/server_info", "/get_server_info"):
            writer.write(reply(stats.summary()))
        else:
            writer.write(reply({"error": "not found"}, "404 Not Found"))
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main_async(args) -> None:
    stats = Stats()
    server = await asyncio.start_server(lambda r, w: handle(r, w, args, stats), "127.0.0.1",
                                        args.port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=50.0)
    args = ap.parse_args()
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
