"""A fault proxy on one agent's link: it passes the node API on to the internal listener and,
when told, loses the answer of a request the server has already carried out (the claim that
leased jobs, the result that settled one), as a connection that drops after the server
committed would. Run on the agent's host; the agent speaks plain HTTP to it.

    python -m bench.lab.proxy --listen 10.213.0.33:9000 --upstream https://10.213.0.10:8443 --history FILE

`POST /__lab__/drop {"path": "jobs/claim", "count": 1}` loses the next `count` answers of
requests whose path ends with `path` (a claim's only when it leased a job).
"""

import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
import urllib3

urllib3.disable_warnings()  # the lab's own self-signed certificate

RULES: dict[str, int] = {}
LOCK = threading.Lock()
LOCAL = threading.local()


def _take_rule(path: str, answer: bytes) -> bool:
    with LOCK:
        for suffix, left in RULES.items():
            if left and path.endswith(suffix):
                if suffix.endswith("claim") and not json.loads(answer or b"{}").get("jobs"):
                    return False
                RULES[suffix] = left - 1
                return True
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = ""
    history = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        self._forward("POST")

    def do_GET(self):
        self._forward("GET")

    def _forward(self, method: str):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/__lab__/drop":
            rule = json.loads(body)
            with LOCK:
                RULES[rule["path"]] = RULES.get(rule["path"], 0) + int(rule.get("count", 1))
            return self._answer(200, b"{}", "application/json")
        session = getattr(LOCAL, "session", None) or requests.Session()
        LOCAL.session = session
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
        try:
            answer = session.request(method, self.server.upstream + self.path, data=body, headers=headers,
                                     timeout=60, verify=False)
        except requests.RequestException:
            return self._answer(502, b'{"error":"bad_gateway","detail":"upstream"}', "application/json")
        if _take_rule(self.path, answer.content):
            with LOCK:
                self.server.history.write(json.dumps({"t": time.time(), "kind": "answer_dropped", "path": self.path,
                                                      "status": answer.status_code,
                                                      "answer": answer.json()}) + "\n")
            # Gone after the server committed: the connection closes with no answer at all.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self._answer(answer.status_code, answer.content, answer.headers.get("Content-Type", "application/json"))

    def _answer(self, status: int, body: bytes, content_type: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--history", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    server.upstream = args.upstream.rstrip("/")
    server.history = open(args.history, "a", buffering=1)
    server.serve_forever()


if __name__ == "__main__":
    main()
