"""Serve an index folder over HTTP on localhost, for tests and for trying an index before hosting it:

    python -m toolchain.index.serve INDEX [--port 0] [--bind 127.0.0.1] [--timeout 10] [--max-connections 32]

PEP 503 is static, so any static file server (a bucket, GitHub Pages, `python -m http.server`) serves
the HTML pages as they are. This one is the standard library's static server plus PEP 691's content
negotiation: a client that asks for `application/vnd.pypi.simple.v1+json` (pip and uv both do, first)
gets the folder's index.json with that type, everyone else its index.html. It prints
`serving INDEX at http://HOST:PORT/` once it listens, so a caller that passed --port 0 learns the port.

What a client cannot do to it: read a file outside INDEX through a symlink inside it (404);
hold it with idle or half-sent connections (each socket read or write waits at most --timeout seconds,
then the connection is closed; at most --max-connections are served at once, one more gets 503 at
once); start-up errors and signals are one line as every CLI of the project (exit codes in
verify/runtime/exit_codes.py: a bad value 2, a port in use or an address this machine lacks 3, a signal 1).
"""

from __future__ import annotations

from verify.runtime import interrupts

if __name__ == "__main__":
    interrupts.early()  # a signal from here on is held until the CLI's handlers take it (one line, exit 1)

import argparse  # noqa: E402
import collections  # noqa: E402
import contextlib  # noqa: E402
import errno  # noqa: E402
import functools  # noqa: E402
import http.server  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from toolchain.index.pages import JSON_TYPE  # noqa: E402
from verify.runtime import entry_point, exit_codes, input_files  # noqa: E402
from verify.runtime.messages import printable, shown  # noqa: E402

PROG = "python -m toolchain.index.serve"
TIMEOUT_S = 10.0  # a socket read or write that waits longer closes the connection (pip's own is 15 s)
MAX_CONNECTIONS = 32  # served at once; pip and uv open a handful
_REFUSED_LINGER_S = 1.0  # a refused connection's 503 stays readable this long before the socket closes
_REFUSED_MAX = 1024  # refused sockets waiting to close; past it the oldest closes at once
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 37\r\nConnection: close\r\n\r\nbusy: too many connections; try again"
)


class StartupError(Exception):
    """A start-up problem: one line naming the input, the problem and the fix, and its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Handler(http.server.SimpleHTTPRequestHandler):
    server: BoundedServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.connection_timeout)  # every read and write of this socket

    def _inside(self, path: str | Path) -> bool:
        """Whether `path`, every symlink followed, is still under the served folder."""
        real = os.path.realpath(path)
        return real == self.server.root or real.startswith(self.server.root + os.sep)

    def send_head(self):
        path = Path(self.translate_path(self.path))  # `..` is already dropped; only links can leave
        if not self._inside(path) or (
            path.is_dir()
            and not all(self._inside(path / n) for n in ("index.html", "index.htm", "index.json"))
        ):
            self.send_error(404, "File not found")
            return None
        wants_json = JSON_TYPE in (self.headers.get("Accept") or "")
        if (
            path.is_dir()
            and self.path.split("?", 1)[0].endswith("/")
            and wants_json
            and (path / "index.json").is_file()
        ):
            try:  # the bounded reader: a FIFO swapped in for the page is refused, never waited on
                body = input_files.read_bytes(path / "index.json", input_files.PUBLISHED)
            except input_files.InputFileError:
                self.send_error(404, "File not found")
                return None
            self.send_response(200)
            self.send_header("Content-Type", JSON_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Vary", "Accept")
            self.end_headers()
            return _Body(body)
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        # the request line is the client's text: escaped, so it cannot add a line of its own
        sys.stderr.write(f"[index] {printable(self.address_string())} {printable(format % args)}\n")


class BoundedServer(http.server.HTTPServer):
    """HTTPServer with a thread per connection, at most `max_connections` of them. One more is answered
    503 from the accepting thread (a write into a fresh socket's empty buffer: it never waits), then closed
    a second later by the accept loop: closing at once, with the client's request still unread, would
    reset the connection and could discard the 503 before the client read it."""

    def __init__(
        self, address: tuple, family: int, root: Path, *, timeout: float, max_connections: int
    ) -> None:
        self.address_family = family
        self.root = os.path.realpath(root)
        self.connection_timeout = timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused: collections.deque[tuple[float, socket.socket]] = collections.deque()
        handler = functools.partial(Handler, directory=str(root))
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if self.slots.acquire(blocking=False):
            threading.Thread(target=self._serve, args=(request, client_address), daemon=True).start()
            return
        request.setblocking(False)
        _drain(request)
        with contextlib.suppress(OSError):
            request.send(_BUSY)
            request.shutdown(socket.SHUT_WR)
        self.refused.append((time.monotonic() + _REFUSED_LINGER_S, request))
        while len(self.refused) > _REFUSED_MAX:  # a flood: the oldest goes first
            _drain(self.refused.popleft()[1], close=True)

    def service_actions(self) -> None:  # the accept loop, after each connection or half-second
        while self.refused and self.refused[0][0] <= time.monotonic():
            _drain(self.refused.popleft()[1], close=True)

    def server_close(self) -> None:
        super().server_close()
        while self.refused:
            self.refused.popleft()[1].close()

    def _serve(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception as exc:  # a client that vanished mid-answer: one line, never a traceback
            sys.stderr.write(f"[index] {printable(client_address[0])} connection ended: {printable(exc)}\n")
        finally:
            self.shutdown_request(request)
            self.slots.release()


def _drain(sock: socket.socket, *, close: bool = False) -> None:
    """Read what a refused client sent (non-blocking socket), so that closing it is not a reset."""
    with contextlib.suppress(OSError):
        while sock.recv(65536):
            pass
    if close:
        sock.close()


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, *_: object) -> bytes:
        data, self.data = self.data, b""
        return data

    def close(self) -> None:
        pass


class _ServeParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise StartupError(f"{printable(message)}; see `{PROG} --help`", exit_codes.USAGE)


def _port(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", value) or int(value) > 65535:
        raise StartupError(
            f"--port {shown(value)}: not a TCP port number; pass one from 1024 to 65535, or 0 for any free one",
            exit_codes.USAGE,
        )
    return int(value)


def _positive(flag: str, value: str, *, integer: bool, high: float) -> float:
    try:
        number = int(value) if integer and value.isascii() else float(value) if value.isascii() else -1.0
    except ValueError:
        number = -1.0
    if not (math.isfinite(number) and 0 < number <= high):
        kind = "a whole number" if integer else "a number of seconds"
        raise StartupError(
            f"{flag} {shown(value)}: not {kind} above 0 and at most {high:g}; pass e.g. {flag} "
            f"{MAX_CONNECTIONS if integer else int(TIMEOUT_S)}",
            exit_codes.USAGE,
        )
    return number


def _address(bind: str, port: int) -> tuple[int, tuple]:
    """(family, address) for --bind, a numeric address or a name this machine's resolver knows."""
    try:
        found = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise StartupError(
            f"--bind {shown(bind)}: not an address or a host name this machine knows "
            f"({printable(exc)}); pass one of its addresses, e.g. --bind 127.0.0.1",
            exit_codes.USAGE,
        ) from None
    family, _, _, _, address = found[0]
    return family, address


def _listen(index: Path, bind: str, port: int, *, timeout: float, max_connections: int) -> BoundedServer:
    family, address = _address(bind, port)
    try:
        return BoundedServer(address, family, index, timeout=timeout, max_connections=max_connections)
    except OSError as exc:
        where = f"{shown(bind)} port {port}"
        reason = printable(exc.strerror or exc)
        if exc.errno == errno.EADDRINUSE:
            message = f"--port {port}: in use on {shown(bind)} ({reason}); pass another, or --port 0 for any free one"
        elif exc.errno == errno.EADDRNOTAVAIL:
            message = f"--bind {shown(bind)}: not an address of this machine ({reason}); pass one it has, e.g. 127.0.0.1"
        elif exc.errno == errno.EACCES:
            message = (
                f"--port {port}: this user may not listen there ({reason}; ports below 1024 need root); "
                "pass a port from 1024 up, or 0"
            )
        else:
            message = f"cannot listen on {where} ({reason}); check --bind and --port"
        raise StartupError(message, exit_codes.ENVIRONMENT) from None


def _serve(argv: list[str] | None) -> int:
    parser = _ServeParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("index", type=Path, help="the folder build.py index wrote")
    parser.add_argument("--port", default="0", help="TCP port (default 0: any free one, printed)")
    parser.add_argument("--bind", default="127.0.0.1", help="address (default 127.0.0.1: this machine only)")
    parser.add_argument(
        "--timeout",
        default=str(TIMEOUT_S),
        help=f"seconds a connection may stay silent (default {TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-connections", default=str(MAX_CONNECTIONS), help=f"served at once (default {MAX_CONNECTIONS})"
    )
    args = parser.parse_args(argv)
    port = _port(args.port)
    timeout = _positive("--timeout", args.timeout, integer=False, high=3600)
    max_connections = int(_positive("--max-connections", args.max_connections, integer=True, high=1024))
    if not (args.index / "stacks.json").is_file():
        raise StartupError(
            f"{printable(args.index)}: no stacks.json here; pass the folder `build.py index --index DIR` wrote",
            exit_codes.USAGE,
        )
    with _listen(args.index, args.bind, port, timeout=timeout, max_connections=max_connections) as server:
        host, port = server.socket.getsockname()[:2]  # as bound (server_address's host may be bytes)
        host = f"[{host}]" if ":" in host else host
        print(f"serving {printable(args.index)} at http://{printable(host)}:{int(port)}/", flush=True)
        server.serve_forever()  # until a signal: entry_point prints its line, exit 1
    return exit_codes.OK


def main(argv: list[str] | None = None) -> int:
    """The server under the project's CLI rules (verify.runtime.entry_point): a signal is one line, exit 1."""

    def body() -> int:
        try:
            return _serve(argv)
        except StartupError as err:
            sys.stderr.write(f"{PROG}: {printable(err)}\n")
            return err.code

    return entry_point.run(PROG, body, on_interrupt="the server stopped")


if __name__ == "__main__":
    raise SystemExit(main())
