"""The toy engine's server: a few log lines, then /health and /stats on loopback.

Not SGLang in any respect: its log, its pages and its figures are its own, so a test that
runs it through engram-top shows that nothing outside an engine module assumes SGLang.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CAPACITY = 4096  # tokens its cache holds: what the toy's /stats reports


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--fail", action="store_true", help="die during loading")
    args = p.parse_args()

    def say(text: str) -> None:
        print(f"toy| {text}", flush=True)

    say("stage=load")
    if args.fail:
        say("fatal: cannot load the toy weights")
        sys.exit(3)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path == "/health":
                body = b"ok"
            elif self.path == "/stats":
                body = json.dumps({"capacity_tokens": CAPACITY, "used_tokens": 16,
                                   "engine": "toy 0.1"}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *a: object) -> None:
            say(f"access {fmt % a}")

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: (say("stopping"), sys.exit(0)))
    say(f"stage=serve port={args.port}")
    say("ready")
    server.serve_forever()


if __name__ == "__main__":
    main()
