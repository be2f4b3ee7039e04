#!/usr/bin/env python3
"""Many concurrent TCP connections, each carrying a byte both ways, held open.

    hold_connections.py serve --port 9000 --name a
        Listens on 0.0.0.0:PORT (backlog 65535, SO_REUSEPORT: several servers may share
        the port). On every connection: reads one byte, answers with NAME's first byte,
        then holds the connection until the peer closes it. Runs until SIGTERM.

    hold_connections.py connect --to 203.0.113.20:9000,203.0.113.20:9001 --count 70000
        Opens COUNT connections, spread over the --to addresses in turn, at most
        --concurrency handshakes at a time; on each sends one byte and reads the one-byte
        answer (which names the server). Prints progress on stderr, then one JSON line on
        stdout: {"held": N, "failed": M, "errors": {...}, "answers": {"a": n, ...}, "seconds": s},
        and holds every connection open until stdin reaches end of file (or SIGTERM).

Used by tests/snat_connections.rs inside network namespaces, to put more TCP connections
through one SNAT address than its 64 512 ports. Raises RLIMIT_NOFILE to what it needs, up
to the hard limit (keep each process's connections below it). Only the standard library is
used.
"""

import argparse
import asyncio
import collections
import json
import resource
import sys
import time


def raise_nofile(n: int) -> None:
    """Raises the soft RLIMIT_NOFILE towards n, up to the hard limit (which a process
    without CAP_SYS_RESOURCE cannot raise: run several processes instead)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def serve(port: int, name: str) -> None:
    answer = name.encode()[:1]
    held = set()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.add(writer)
        try:
            if await reader.read(1):
                writer.write(answer)
                await writer.drain()
                while await reader.read(4096):
                    pass
        except OSError:
            pass
        finally:
            held.discard(writer)
            writer.close()

    server = await asyncio.start_server(
        on_connection, "0.0.0.0", port, backlog=65535, reuse_address=True, reuse_port=True
    )
    print(f"listening on 0.0.0.0:{port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


async def connect(targets: list, count: int, concurrency: int, timeout_s: float) -> None:
    held = []
    answers = collections.Counter()
    errors = collections.Counter()
    gate = asyncio.Semaphore(concurrency)
    start = time.monotonic()

    async def one(i: int) -> None:
        host, port = targets[i % len(targets)]
        async with gate:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
            except (OSError, asyncio.TimeoutError) as e:
                errors[f"connect: {type(e).__name__}: {e}"[:120]] += 1
                return
            try:
                writer.write(b"x")
                await writer.drain()
                got = await asyncio.wait_for(reader.read(1), timeout_s)
            except (OSError, asyncio.TimeoutError) as e:
                errors[f"exchange: {type(e).__name__}"] += 1
                writer.close()
                return
            if not got:
                errors["exchange: closed without an answer"] += 1
                writer.close()
                return
            answers[got.decode(errors="replace")] += 1
            held.append(writer)
            if len(held) % 10000 == 0:
                print(f"{len(held)} connections held, {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(i) for i in range(count)))
    report = {
        "held": len(held),
        "failed": sum(errors.values()),
        "errors": dict(errors.most_common(5)),
        "answers": dict(answers),
        "seconds": round(time.monotonic() - start, 2),
    }
    print(json.dumps(report), flush=True)
    # Hold until stdin closes.
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    for w in held:
        w.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--name", required=True)
    c = sub.add_parser("connect")
    c.add_argument("--to", required=True, help="comma-separated address:port list")
    c.add_argument("--count", type=int, required=True)
    c.add_argument("--concurrency", type=int, default=1000)
    c.add_argument("--timeout", type=float, default=30.0, help="per handshake and per answer, seconds")
    a = p.parse_args()
    if a.mode == "serve":
        raise_nofile(200_000)
        asyncio.run(serve(a.port, a.name))
    else:
        targets = []
        for t in a.to.split(","):
            host, port = t.rsplit(":", 1)
            targets.append((host, int(port)))
        raise_nofile(a.count + 1000)
        asyncio.run(connect(targets, a.count, a.concurrency, a.timeout))


if __name__ == "__main__":
    main()
