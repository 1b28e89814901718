"""Serve an index folder over HTTP on localhost, for tests and for trying an index before hosting it:

    python -m toolchain.index.serve INDEX [--port 0] [--bind 127.0.0.1]

PEP 503 is static, so any static file server (a bucket, GitHub Pages, `python -m http.server`) serves
the HTML pages as they are. This one is the standard library's static server plus PEP 691's content
negotiation: a client that asks for `application/vnd.pypi.simple.v1+json` (pip and uv both do, first)
gets the folder's index.json with that type, everyone else its index.html. It prints
`serving INDEX at http://HOST:PORT/` once it listens, so a caller that passed --port 0 learns the port.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
from pathlib import Path

from toolchain.index.pages import JSON_TYPE


class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        path = Path(self.translate_path(self.path))
        wants_json = JSON_TYPE in (self.headers.get("Accept") or "")
        if (
            path.is_dir()
            and self.path.split("?", 1)[0].endswith("/")
            and wants_json
            and (path / "index.json").is_file()
        ):
            body = (path / "index.json").read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", JSON_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Vary", "Accept")
            self.end_headers()
            return _Body(body)
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        sys.stderr.write(f"[index] {self.address_string()} {format % args}\n")


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, *_: object) -> bytes:
        data, self.data = self.data, b""
        return data

    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m toolchain.index.serve", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("index", type=Path, help="the folder build.py index wrote")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free one, printed)")
    parser.add_argument("--bind", default="127.0.0.1", help="address (default 127.0.0.1: this machine only)")
    args = parser.parse_args(argv)
    if not (args.index / "stacks.json").is_file():
        print(
            f"{args.index}: no stacks.json here; pass the folder `build.py index --index DIR` wrote",
            file=sys.stderr,
        )
        return 2
    handler = functools.partial(Handler, directory=str(args.index))
    with http.server.ThreadingHTTPServer((args.bind, args.port), handler) as server:
        host, port = server.socket.getsockname()[:2]  # as bound (server_address's host may be bytes)
        print(f"serving {args.index} at http://{host}:{port}/", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
