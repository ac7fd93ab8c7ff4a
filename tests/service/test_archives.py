"""Upload safety: every unsafe archive is refused with 400/413 and a code, and nothing changes."""

from __future__ import annotations

import asyncio
import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from svc_helpers import create_model, register_version, tar_gz_of, zip_of

from app.archives import ArchiveLimits, IncomingFile, extract_archive, iter_tar_gz, save_stream
from app.errors import BadRequest, PayloadTooLarge, UnsafeArchive

LIMITS = ArchiveLimits(
    max_upload_bytes=10 * 1024 * 1024,
    max_extracted_bytes=20 * 1024 * 1024,
    max_members=50,
    max_compression_ratio=100,
)


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def _zip_with_symlink() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("bundle/config.json", "{}")
        link = zipfile.ZipInfo("bundle/evil")
        link.external_attr = 0o120777 << 16
        archive.writestr(link, "/etc/passwd")
    return buffer.getvalue()


def _zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bundle/config.json", "{}")
        archive.writestr("bundle/zeros.safetensors", b"\0" * (8 * 1024 * 1024))
    return buffer.getvalue()


def _tar_bomb() -> bytes:
    return _tar(
        [_file("bundle/config.json", b"{}"), _file("bundle/zeros.bin", b"\0" * (8 * 1024 * 1024))]
    )


UNSAFE_ARCHIVES = {
    "traversal": (
        _tar([_file("bundle/config.json"), _file("bundle/../../escape.txt")]),
        "escape.txt",
    ),
    "absolute": (_tar([_file("/etc/cron.d/evil")]), "/etc/cron.d/evil"),
    "symlink": (
        _tar(
            [_file("bundle/config.json"), _special("bundle/link", tarfile.SYMTYPE, "/etc/passwd")]
        ),
        "bundle/link",
    ),
    "hardlink": (
        _tar(
            [_file("bundle/config.json"), _special("bundle/hard", tarfile.LNKTYPE, "/etc/passwd")]
        ),
        "bundle/hard",
    ),
    "device": (_tar([_special("bundle/dev", tarfile.CHRTYPE)]), "bundle/dev"),
    "fifo": (_tar([_special("bundle/fifo", tarfile.FIFOTYPE)]), "bundle/fifo"),
    "too_many_members": (_tar([_file(f"bundle/f{i}.txt") for i in range(60)]), "more than 50"),
    "zip_symlink": (_zip_with_symlink(), "bundle/evil"),
    "zip_bomb_ratio": (_zip_bomb(), "compression ratio"),
    "tar_bomb_ratio": (_tar_bomb(), "compression ratio"),
    "zip_traversal": (None, "../evil"),
}


def _zip_traversal() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../evil", "x")
    return buffer.getvalue()


UNSAFE_ARCHIVES["zip_traversal"] = (_zip_traversal(), "../evil")


@pytest.mark.parametrize("case", sorted(UNSAFE_ARCHIVES))
def test_extract_refuses_unsafe_archive(case, tmp_path):
    data, named = UNSAFE_ARCHIVES[case]
    archive = tmp_path / "upload.archive"
    archive.write_bytes(data)
    with pytest.raises(UnsafeArchive) as caught:
        extract_archive(archive, tmp_path / "out", LIMITS)
    assert named in caught.value.detail
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert written == []  # refused before anything was written
    assert not (tmp_path / "escape.txt").exists()


def test_extract_total_size_limit(tmp_path):
    limits = ArchiveLimits(10**7, 1000, 50, 1e9)
    archive = tmp_path / "a.tar"
    archive.write_bytes(_tar([_file("a/x", b"1" * 600), _file("a/y", b"2" * 600)], mode="w"))
    with pytest.raises(UnsafeArchive, match="more than 1000 bytes"):
        extract_archive(archive, tmp_path / "out", limits)


@pytest.mark.parametrize("fmt", ["tar.gz", "tar", "zip"])
def test_extract_strips_single_top_level_directory(fmt, tmp_path, tiny_model_dir):
    from recycling_core.files import file_manifest

    data = {
        "tar.gz": tar_gz_of(tiny_model_dir, top="tiny"),
        "tar": tar_gz_of(tiny_model_dir, top="tiny", mode="w"),
        "zip": zip_of(tiny_model_dir, top="tiny"),
    }[fmt]
    archive = tmp_path / "upload"
    archive.write_bytes(data)
    root = extract_archive(archive, tmp_path / "out", LIMITS)
    assert root == tmp_path / "out" / "tiny"
    assert file_manifest(root) == file_manifest(tiny_model_dir)

    flat = tmp_path / "flat"
    flat.write_bytes(tar_gz_of(tiny_model_dir, top=None))
    assert file_manifest(extract_archive(flat, tmp_path / "out2", LIMITS)) == file_manifest(
        tiny_model_dir
    )


def test_not_an_archive_is_400(tmp_path):
    archive = tmp_path / "upload"
    archive.write_bytes(b"just some text, no archive")
    with pytest.raises(BadRequest) as caught:
        extract_archive(archive, tmp_path / "out", LIMITS)
    assert caught.value.code == "UnsupportedArchive"


def test_save_stream_stops_reading_once_over_the_limit(tmp_path):
    class Endless(io.RawIOBase):
        reads = 0

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            Endless.reads += 1
            return b"z" * (size if size and size > 0 else 1024)

    with pytest.raises(PayloadTooLarge):
        save_stream(Endless(), tmp_path / "upload", max_bytes=3 * 1024 * 1024)  # type: ignore[arg-type]
    assert Endless.reads <= 4  # 1 MiB chunks: aborted at the 4th, never read to the end
    assert not (tmp_path / "upload").exists()


def test_tar_gz_stream_round_trip(tmp_path, tiny_model_dir):
    from recycling_core.files import file_manifest

    data = b"".join(iter_tar_gz(tiny_model_dir, "model"))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(tmp_path, filter="data")
    assert file_manifest(tmp_path / "model") == file_manifest(tiny_model_dir)


# --------------------------------------------------------------------------- over HTTP


API_CASES = [
    "traversal",
    "absolute",
    "symlink",
    "hardlink",
    "device",
    "zip_bomb_ratio",
    "zip_symlink",
    "fifo",
    "tar_bomb_ratio",
    "zip_traversal",
]


@pytest.mark.parametrize("case", API_CASES)
def test_unsafe_upload_is_refused_and_changes_nothing(case, client, tiny_model_dir, registry_state):
    create_model(client)
    register_version(client, tiny_model_dir, aliases=["production"])
    before = registry_state()
    data, named = UNSAFE_ARCHIVES[case]
    response = client.post(
        "/v1/models/tiny/versions",
        data={"parent_version": "1", "aliases": '["production"]'},
        files={"file": ("model.tar.gz", data, "application/gzip")},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "UnsafeArchive"
    assert named in response.json()["detail"]
    assert registry_state() == before
    assert client.get("/v1/models/tiny/aliases/production").json()["version"] == 1


@pytest.mark.parametrize("settings_overrides", [{"max_upload_bytes": 64 * 1024}])
def test_oversize_archive_is_413(client, tiny_model_dir, registry_state):
    create_model(client)
    before = registry_state()
    big = io.BytesIO()
    with tarfile.open(fileobj=big, mode="w") as archive:  # uncompressed: stays large
        import os

        info, data = _file("bundle/model.safetensors", os.urandom(200 * 1024))
        archive.addfile(info, io.BytesIO(data))
    response = client.post(
        "/v1/models/tiny/versions",
        files={"file": ("model.tar", big.getvalue(), "application/x-tar")},
    )
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"
    assert registry_state() == before


@pytest.mark.parametrize("settings_overrides", [{"max_upload_bytes": 64 * 1024}])
def test_oversize_body_is_refused_before_it_is_read(app, make_key):
    """With a Content-Length over the limit the app answers 413 without reading the body; a
    streamed body without Content-Length is cut off as soon as it passes the limit."""
    secret = make_key("admin").encode()

    def run(headers: list[tuple[bytes, bytes]]) -> tuple[int, int, bytes]:
        reads = 0
        messages: list[dict] = []  # type: ignore[type-arg]

        async def receive() -> dict:  # type: ignore[type-arg]
            nonlocal reads
            reads += 1
            if reads == 1:  # a well-formed start of a file part, then file bytes forever
                head = (
                    b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="m.tar"\r\n'
                    b"Content-Type: application/octet-stream\r\n\r\n"
                )
                return {"type": "http.request", "body": head, "more_body": True}
            return {"type": "http.request", "body": b"-" * 65536, "more_body": True}

        async def send(message: dict) -> None:  # type: ignore[type-arg]
            messages.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/models/tiny/versions",
            "raw_path": b"/v1/models/tiny/versions",
            "root_path": "",
            "query_string": b"",
            "server": ("test", 80),
            "client": ("test", 1234),
            "headers": [
                (b"content-type", b"multipart/form-data; boundary=xyz"),
                (b"authorization", b"Bearer " + secret),
                *headers,
            ],
        }
        asyncio.run(app(scope, receive, send))
        start = next(m for m in messages if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        return start["status"], reads, body

    status, reads, body = run([(b"content-length", str(50 * 1024**3).encode())])
    assert status == 413 and reads == 0
    assert b'"PayloadTooLarge"' in body
    status, reads, body = run([])  # chunked: no Content-Length
    limit = 64 * 1024 + 1024 * 1024
    assert status == 413 and reads <= limit // 65536 + 3
    assert b'"PayloadTooLarge"' in body


def test_incoming_file_view():
    stream = io.BytesIO(b"abc")
    assert IncomingFile("a.tgz", stream).stream.read() == b"abc"
    assert isinstance(Path("x"), Path)


def test_json_bodies_get_the_small_limit(client):
    response = client.post(
        "/v1/models",
        content=b'{"name": "x", "description": "' + b"a" * (17 * 1024 * 1024) + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413 and response.json()["error"] == "PayloadTooLarge"


@pytest.mark.parametrize("settings_overrides", [{"source_uri_roots": ["/nonexistent-root"]}])
def test_source_uri_outside_allowed_roots_is_403(client, tiny_model_dir, registry_state):
    create_model(client)
    before = registry_state()
    response = client.post("/v1/models/tiny/versions", data={"source_uri": str(tiny_model_dir)})
    assert response.status_code == 403 and response.json()["error"] == "SourceUriNotAllowed"
    assert registry_state() == before


def test_source_uri_inside_allowed_roots(tmp_path, tiny_model_dir):
    from app.archives import check_source_allowed
    from app.errors import Forbidden
    from app.settings import Settings

    allowed = Settings(data_dir=tmp_path, source_uri_roots=[str(tiny_model_dir.parent)])
    check_source_allowed(str(tiny_model_dir), allowed)
    with pytest.raises(Forbidden):
        check_source_allowed(f"{tiny_model_dir.parent}/../elsewhere", allowed)
    production = Settings(
        data_dir=tmp_path, environment="production", database_url="postgresql+psycopg://x@h/db"
    )
    with pytest.raises(Forbidden):
        check_source_allowed(str(tiny_model_dir), production)
