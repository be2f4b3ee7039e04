#!/usr/bin/env python3
"""A demo/test backend that says who it is.

    backend.py --name web1 --http-port 8080     HTTP/1.1 on [::]:8080 (IPv4 and IPv6); every
                                                 GET answers 200 with body "web1\\n"
                                                 (Content-Length set, keep-alive honoured,
                                                 X-Client: the peer's address:port)
    backend.py --name echo --udp-port 7007      UDP on [::]:7007 (IPv4 and IPv6); every
                                                 datagram is answered with b"echo:" + the
                                                 datagram

Started by scripts/topology inside a backend network namespace; runs until SIGTERM.
Only the standard library is used.
"""

import argparse
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def http_handler(name: str) -> type:
    body = (name + "\n").encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive unless the client says close
        def version_string(self) -> str:
            return "torii-backend"

        def _head(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", name)
            # The address the connection came from (a gateway's SNAT address and port):
            # tests/scale_out.rs tells by it which gateway carried a connection.
            self.send_header("X-Client", f"{self.client_address[0]}:{self.client_address[1]}")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._head()
            self.wfile.write(body)

        def do_HEAD(self) -> None:  # noqa: N802
            self._head()

        def log_message(self, fmt: str, *args: object) -> None:
            sys.stderr.write(f"{name} [{self.client_address[0]}]:{self.client_address[1]} {fmt % args}\n")
            sys.stderr.flush()

    return Handler


def family_of(bind: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in bind else socket.AF_INET


def dual_stack(sock: socket.socket) -> None:
    """An IPv6 socket bound to :: also takes IPv4 (as ::ffff:a.b.c.d)."""
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)


class DualStackHTTPServer(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def server_bind(self) -> None:
        dual_stack(self.socket)
        super().server_bind()


def serve_udp(name: str, bind: str, port: int) -> None:
    prefix = (name + ":").encode()
    sock = socket.socket(family_of(bind), socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    dual_stack(sock)
    sock.bind((bind, port))
    print(f"{name}: udp listening on {bind}:{port}", file=sys.stderr, flush=True)
    while True:
        data, peer = sock.recvfrom(65535)
        sock.sendto(prefix + data, peer)
        print(f"{name} [{peer[0]}]:{peer[1]} udp {len(data)} bytes", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="what every answer says (web1, echo, ...)")
    parser.add_argument("--bind", default="::", help="address to listen on (:: takes IPv4 and IPv6)")
    parser.add_argument("--http-port", type=int, help="serve HTTP/1.1 on this TCP port")
    parser.add_argument("--udp-port", type=int, help="echo datagrams on this UDP port")
    args = parser.parse_args()
    if args.http_port is None and args.udp_port is None:
        parser.error("give --http-port and/or --udp-port")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    threads = []
    if args.udp_port is not None:
        t = threading.Thread(target=serve_udp, args=(args.name, args.bind, args.udp_port), daemon=True)
        t.start()
        threads.append(t)
    if args.http_port is not None:
        DualStackHTTPServer.address_family = family_of(args.bind)
        server = DualStackHTTPServer((args.bind, args.http_port), http_handler(args.name))
        print(f"{args.name}: http listening on {args.bind}:{args.http_port}", file=sys.stderr, flush=True)
        server.serve_forever()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
