#!/usr/bin/env python3
"""A webhook receiver for the demo: appends each POST (headers and body) as a JSON line.

usage: webhook_sink.py HOST:PORT FILE
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    out = sys.argv[2]

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            record = {"headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(body)}
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer((host, int(port)), Sink)
    print(f"MAESTRO_READY service=webhook-sink addr={host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
