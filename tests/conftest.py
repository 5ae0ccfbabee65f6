"""Shared test helpers: a scripted HTTP server on 127.0.0.1 that records what it saw."""

from __future__ import annotations

import http.server
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Union

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@dataclass
class Seen:
    method: str
    path: str
    headers: Dict[str, str]
    at: float


@dataclass
class Reply:
    status: int = 200
    body: Union[bytes, str] = b"{}"
    headers: Dict[str, str] = field(default_factory=dict)
    #: "drop" closes without answering, "stall" never answers, "trickle" sends one byte a
    #: second, "truncate" declares the full length and sends half.
    action: Optional[str] = None


Handler = Callable[[Seen, int], Reply]


class ScriptedServer:
    """Answers each request with ``handler(seen, n)`` where ``n`` counts requests to that path."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.seen: List[Seen] = []
        self.counts: Dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        outer = self

        class RequestHandler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                seen = Seen("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, time.monotonic())
                with outer.lock:
                    outer.seen.append(seen)
                    n = outer.counts.get(self.path, 0) + 1
                    outer.counts[self.path] = n
                reply = outer.handler(seen, n)
                body = reply.body.encode() if isinstance(reply.body, str) else reply.body
                if reply.action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if reply.action == "stall":
                    outer.stop_event.wait(30)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if reply.action == "truncate":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if reply.action == "trickle":
                    for byte in body:
                        if outer.stop_event.wait(1.0):
                            return
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    return
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def paths(self) -> List[str]:
        with self.lock:
            return [s.path for s in self.seen]

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator[Callable[[Handler], ScriptedServer]]:
    servers: List[ScriptedServer] = []

    def start(handler: Handler) -> ScriptedServer:
        server = ScriptedServer(handler)
        server.__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def listing_reply(token: str = "bitcoin") -> Reply:
    from bodies import listing_bytes

    return Reply(200, listing_bytes(id=token))


def split_path(path: str) -> Tuple[str, str]:
    """('listing' | 'markets', raw last segment)."""
    if path.startswith("/listings/market/"):
        return "markets", path[len("/listings/market/") :]
    return "listing", path[len("/listings/") :]


@pytest.fixture(scope="module")
def s3() -> Iterator[Dict[str, str]]:
    """``storage_options`` of an S3 server on loopback, one a test module (tests/s3_server.py)."""
    from s3_server import moto_server

    with moto_server() as options:
        yield options


@pytest.fixture
def bucket(s3: Dict[str, str]) -> str:
    """A new, empty bucket of that server, as an ``s3://`` URL."""
    import uuid

    from s3_server import client

    name = f"history-{uuid.uuid4().hex[:12]}"
    client(s3).create_bucket(Bucket=name)
    return f"s3://{name}"
