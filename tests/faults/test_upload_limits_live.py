"""Oversize uploads to a running server: 413 and the stream is cut off early, not read to the end.

A raw socket streams a multipart upload of up to 1 GiB to ``uvicorn app.main:create_app``
(``RECYCLE_MAX_UPLOAD_BYTES`` = 1 MiB) and stops sending as soon as the server answers. What it
managed to send before that is the proof that the server stopped reading: a few MiB at most
(the limit, the multipart allowance and the socket buffers), never the whole body. A caller
without a key is refused (401) before the body is read at all. Nothing is stored.
"""

from __future__ import annotations

import select
import socket
import time

import httpx
import pytest
from live_stack import create_api_key

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.timeout(180)]

MiB = 1024 * 1024
LIMIT = 1 * MiB
WHOLE_BODY = 1024 * MiB
BOUNDARY = "recycle-boundary"


def stream_upload(port: int, headers: dict[str, str], *, chunked: bool = True) -> tuple[int, bytes]:
    """Send an endless upload until the server answers; return (bytes sent, response)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # measure, not buffer
    head = [
        "POST /v1/models/big/versions HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {WHOLE_BODY}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    part = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="m.tar"\r\n'
        "Content-Type: application/x-tar\r\n\r\n"
    ).encode()
    payload = b"\0" * (64 * 1024)
    sent, response = 0, b""
    first = True
    while sent < WHOLE_BODY:
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            break
        data = (part if first else b"") + payload
        first = False
        frame = f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(data)
    sock.settimeout(10)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            response += chunk
            if b"\r\n\r\n" in response and response.rstrip().endswith(b"}"):
                break
    except (TimeoutError, ConnectionResetError):
        pass
    sock.close()
    return sent, response


def test_oversize_uploads_are_cut_off_early(pg_url, redis_url, start_server, tmp_path):  # type: ignore[no-untyped-def]
    server = start_server(pg_url, redis_url, RECYCLE_MAX_UPLOAD_BYTES=str(LIMIT))
    key = create_api_key(pg_url)
    auth = {"Authorization": f"Bearer {key}"}
    assert (
        httpx.post(f"{server.url}/v1/models", json={"name": "big"}, headers=auth).status_code == 201
    )
    port = server.port
    allowance = LIMIT + 1 * MiB  # the upload limit plus room for the multipart framing

    started = time.monotonic()
    sent, response = stream_upload(port, auth, chunked=True)
    assert response.startswith(b"HTTP/1.1 413"), response[:300]
    assert b'"PayloadTooLarge"' in response
    assert sent <= allowance + 2 * MiB, f"the server read {sent} bytes of a {WHOLE_BODY}-byte body"
    assert time.monotonic() - started < 60
    print(f"chunked oversize upload: server answered 413 after {sent} of {WHOLE_BODY} bytes")

    sent, response = stream_upload(port, auth, chunked=False)  # declared too large: not read
    assert response.startswith(b"HTTP/1.1 413"), response[:300]
    assert b'"PayloadTooLarge"' in response and sent <= 1 * MiB, sent
    print(f"declared oversize upload: 413 after {sent} bytes")

    sent, response = stream_upload(port, {}, chunked=True)  # no key: refused before reading
    assert response.startswith(b"HTTP/1.1 401"), response[:300]
    assert b'"Unauthorized"' in response and sent <= 1 * MiB, sent
    print(f"upload without a key: 401 after {sent} bytes")

    versions = httpx.get(f"{server.url}/v1/models/big/versions", headers=auth).json()
    assert versions["total"] == 0
    stored = tmp_path / "data" / "artifacts" / "models"
    assert not stored.exists() or not any(stored.rglob("*"))
    leftovers = tmp_path / "data" / "tmp"
    assert not leftovers.exists() or not any(leftovers.rglob("*"))
