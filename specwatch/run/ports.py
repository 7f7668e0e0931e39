"""Ports for servers: free now, outside the kernel's ephemeral range, side ports kept apart.

`free_port(avoid)` picks a port the way SGLang picks the ports it binds late (below the ephemeral
range, so no client socket takes it first), with SGLang's side ports of it (`side_ports`) free and
apart from those of every port in `avoid` (configs running in parallel). `port_free(port)`: can a
server listen there now?

Not here: starting servers (see `launch`).
"""
from __future__ import annotations

import errno
import random
import socket
from pathlib import Path

HOST = "127.0.0.1"


class NoFreePort(RuntimeError):
    """No port satisfies the constraints; the message says what to do."""


def port_free(port: int, host: str = HOST) -> bool:
    """Can a server listen on this port now? (SO_REUSEADDR: TIME_WAIT leftovers do not count.)"""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        s.close()


# SGLang's ports beside --port (0.5.23 server_args.py PortArgs.init_new and
# data_parallel_controller.py): with DP attention dist_init_port = port + ZMQ_TCP_PORT_DELTA (233)
# and port_base = dist_init_port + 1, whose +0..+5 are the tokenizer, detokenizer, rpc, metrics,
# scheduler-input and load-collector ports (port+233..+239); the DP handshake uses
# port + DP_ATTENTION_HANDSHAKE_PORT_DELTA (13); SMG's gRPC mode puts a sidecar on port + 1. Its
# NCCL port is picked by SGLang itself in 22000..29999 below the ephemeral range
# (utils/network.py get_free_port_below_ephemeral), so ours stay below 22000.
SIDE_OFFSETS = (1, 13) + tuple(range(233, 240))
PORT_LOW, PORT_HIGH = 10000, 21999 - 239


def side_ports(port: int) -> set[int]:
    """`port` and the ports SGLang derives from it."""
    return {port} | {port + d for d in SIDE_OFFSETS if port + d <= 65535}


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (bind(0) and connect() pick from it)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def block_free(port: int, host: str = HOST) -> bool:
    """Are `port` and all of its SGLang side ports free now?"""
    return all(port_free(p, host) for p in side_ports(port))


def free_port(avoid: set[int] = frozenset(), host: str = HOST) -> int:
    """A port for a server, like SGLang picks the ports it binds late: outside the kernel's
    ephemeral range (so no client socket takes it before the server binds), with it and its
    SGLang side ports (`side_ports`) free now and apart from every port in `avoid` and their
    side ports (configs running in parallel)."""
    taken = set().union(*(side_ports(a) for a in avoid)) if avoid else set()
    lo_e, hi_e = ephemeral_range()
    top = max(SIDE_OFFSETS)
    candidates = [p for p in range(PORT_LOW, PORT_HIGH + 1) if p + top < lo_e or p > hi_e]
    if not candidates:              # the whole range is ephemeral: any port will do
        candidates = list(range(1024, 65535 - 240))
    for port in random.sample(candidates, min(200, len(candidates))):
        block = side_ports(port)
        if not block & taken and block_free(port, host):
            return port
    raise NoFreePort(f"could not find a free port in {PORT_LOW}..{PORT_HIGH} (with SGLang's "
                       "side ports); free some, or set `port` in the sweep file")
