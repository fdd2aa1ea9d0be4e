"""The logging proxy between the clients and the server: it forwards each request, and records its body and
our answer under the check now running (a child marks each check with GET /__check/CLIENT/API/CHECK), so that a
failing check's report carries the exact exchanges."""
from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    label: ClassVar[list[str]] = ["-"]  # the check now running (one at a time)
    log: ClassVar[dict[str, list[dict[str, Any]]]] = {}
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a client closing its kept-alive connection
            super().handle()

    def relay(self) -> None:
        if self.path.startswith("/__check/"):
            self.label[0] = self.path[len("/__check/"):]
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        up = http.client.HTTPConnection(*self.upstream, timeout=600)
        up.request(self.command, self.path, body=body, headers=headers)
        answer = up.getresponse()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        seen = bytearray()
        while chunk := answer.read1(65536):
            if len(seen) < 6000:
                seen += chunk
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        up.close()
        entry = {"method": self.command, "path": self.path, "request": body.decode("utf-8", "replace"),
                 "status": answer.status, "answer": seen[:6000].decode("utf-8", "replace")}
        with self.lock:
            self.log.setdefault(self.label[0], []).append(entry)

    do_GET = do_POST = do_DELETE = relay


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
