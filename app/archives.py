"""Safe intake of uploaded archives and source directories, and tar.gz streams for download.

An upload is copied to a temporary file with the size limit checked while reading. Archives
(.tar.gz/.tgz/.tar/.zip, recognised by content) are checked member by member before anything
is written: no absolute paths, no ``..``, no links, no device files or FIFOs, a bounded number
of members, a bounded total size and compression ratio. Members are then written one by one
with the byte count checked again. Pickle files are refused afterwards.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from app.errors import BadRequest, Forbidden, PayloadTooLarge, UnsafeArchive
from app.settings import Settings
from recycling_core.files import refuse_pickle_files

CHUNK_BYTES = 1024 * 1024
RATIO_CHECK_MIN_BYTES = 1024 * 1024
"""Below this much uncompressed data the compression ratio is not checked (tiny text files)."""
_SKIPPED_PREFIXES = ("__MACOSX/",)


@dataclass(frozen=True)
class ArchiveLimits:
    """How much an upload may hold."""

    max_upload_bytes: int
    max_extracted_bytes: int
    max_members: int
    max_compression_ratio: float

    @classmethod
    def from_settings(cls, settings: Settings) -> ArchiveLimits:
        return cls(
            max_upload_bytes=settings.max_upload_bytes,
            max_extracted_bytes=settings.max_extracted_bytes,
            max_members=settings.max_archive_members,
            max_compression_ratio=settings.max_compression_ratio,
        )


@dataclass(frozen=True)
class IncomingFile:
    """An uploaded file as services see it: a name and a readable binary stream."""

    filename: str | None
    stream: BinaryIO


# --------------------------------------------------------------------------- uploads


def save_stream(source: BinaryIO, dest: Path, max_bytes: int, *, what: str = "upload") -> int:
    """Copy ``source`` to ``dest`` chunk by chunk; stop with 413 once ``max_bytes`` is passed."""
    written = 0
    with open(dest, "xb") as out:
        while chunk := source.read(CHUNK_BYTES):
            written += len(chunk)
            if written > max_bytes:
                out.close()
                dest.unlink(missing_ok=True)
                raise PayloadTooLarge(f"{what} is larger than the {max_bytes}-byte limit")
            out.write(chunk)
    return written


# --------------------------------------------------------------------------- members


@dataclass(frozen=True)
class _Member:
    path: PurePosixPath
    is_dir: bool
    size: int
    compressed_size: int | None  # zip only
    handle: tarfile.TarInfo | zipfile.ZipInfo


def _normalise_name(raw: str) -> PurePosixPath | None:
    """The safe relative path of a member, None for the archive root; UnsafeArchive otherwise."""
    if "\x00" in raw:
        raise UnsafeArchive(f"member {raw!r} has a NUL byte in its name")
    if "\\" in raw:
        raise UnsafeArchive(f"member {raw!r} has a backslash in its name")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise UnsafeArchive(f"member {raw!r} has an absolute path")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"member {raw!r} escapes the archive (path traversal)")
    return PurePosixPath(*parts) if parts else None


def _tar_members(archive: tarfile.TarFile) -> Iterator[_Member]:
    for info in archive:
        path = _normalise_name(info.name)
        if info.issym():
            raise UnsafeArchive(f"member {info.name!r} is a symbolic link (to {info.linkname!r})")
        if info.islnk():
            raise UnsafeArchive(f"member {info.name!r} is a hard link (to {info.linkname!r})")
        if info.ischr() or info.isblk():
            raise UnsafeArchive(f"member {info.name!r} is a device file")
        if info.isfifo():
            raise UnsafeArchive(f"member {info.name!r} is a FIFO")
        if not (info.isreg() or info.isdir()):
            raise UnsafeArchive(f"member {info.name!r} has an unsupported type")
        if path is None:
            continue
        yield _Member(path, info.isdir(), info.size if info.isreg() else 0, None, info)


def _zip_members(archive: zipfile.ZipFile) -> Iterator[_Member]:
    for info in archive.infolist():
        path = _normalise_name(info.filename)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            raise UnsafeArchive(f"member {info.filename!r} is a symbolic link")
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise UnsafeArchive(f"member {info.filename!r} is a device file")
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise UnsafeArchive(f"member {info.filename!r} is a FIFO or socket")
        if info.flag_bits & 0x1:
            raise UnsafeArchive(f"member {info.filename!r} is encrypted")
        if path is None:
            continue
        is_dir = info.is_dir()
        yield _Member(path, is_dir, 0 if is_dir else info.file_size, info.compress_size, info)


def _check_members(
    members: Iterator[_Member], archive_bytes: int, limits: ArchiveLimits
) -> list[_Member]:
    """Walk the members lazily, refusing the archive as soon as one limit is crossed."""
    checked: list[_Member] = []
    files: set[PurePosixPath] = set()
    seen: set[PurePosixPath] = set()
    total = 0
    for member in members:
        if any(str(member.path).startswith(prefix.rstrip("/")) for prefix in _SKIPPED_PREFIXES):
            continue
        if len(checked) + 1 > limits.max_members:
            raise UnsafeArchive(
                f"archive has more than {limits.max_members} members (at {str(member.path)!r})"
            )
        if member.path in seen:
            if member.is_dir and member.path not in files:
                continue  # a directory listed twice is harmless
            raise UnsafeArchive(f"member {str(member.path)!r} appears twice")
        if any(parent in files for parent in member.path.parents):
            raise UnsafeArchive(f"member {str(member.path)!r} is inside a file member")
        seen.add(member.path)
        if not member.is_dir:
            files.add(member.path)
        total += member.size
        if total > limits.max_extracted_bytes:
            raise UnsafeArchive(
                f"archive unpacks to more than {limits.max_extracted_bytes} bytes "
                f"(at {str(member.path)!r})"
            )
        if member.compressed_size is not None and member.size > RATIO_CHECK_MIN_BYTES:
            ratio = member.size / max(member.compressed_size, 1)
            if ratio > limits.max_compression_ratio:
                raise UnsafeArchive(
                    f"member {str(member.path)!r} has compression ratio {ratio:.0f}, over the "
                    f"limit of {limits.max_compression_ratio:.0f}"
                )
        if total > RATIO_CHECK_MIN_BYTES:
            ratio = total / max(archive_bytes, 1)
            if ratio > limits.max_compression_ratio:
                raise UnsafeArchive(
                    f"archive has compression ratio {ratio:.0f} (at {str(member.path)!r}), over "
                    f"the limit of {limits.max_compression_ratio:.0f}"
                )
        checked.append(member)
    return checked


def _strip_prefix(members: list[_Member]) -> PurePosixPath | None:
    """The single top-level directory every member lives in, if there is one."""
    tops = {member.path.parts[0] for member in members}
    if len(tops) != 1:
        return None
    top = PurePosixPath(next(iter(tops)))
    if any(member.path == top and not member.is_dir for member in members):
        return None
    if not any(member.path != top for member in members):
        return None
    return top


def _write_member(source: IO[bytes], target: Path, declared: int, budget: list[int]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    written = 0
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        while chunk := source.read(CHUNK_BYTES):
            written += len(chunk)
            budget[0] -= len(chunk)
            if written > declared or budget[0] < 0:
                raise UnsafeArchive(f"member {target.name!r} unpacks to more than it declares")
            out.write(chunk)


def _archive_format(path: Path) -> str:
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith((b"\x1f\x8b", b"BZh", b"\xfd7zXZ")):
        return "tar"
    try:
        if tarfile.is_tarfile(path):
            return "tar"
    except OSError:
        pass
    raise BadRequest(
        "the upload is not a .tar.gz, .tgz, .tar or .zip archive", code="UnsupportedArchive"
    )


def extract_archive(archive_path: Path, dest: Path, limits: ArchiveLimits) -> Path:
    """Unpack an archive into the empty directory ``dest`` and return the content's root.

    A single top-level directory is stripped. Raises UnsafeArchive (400) naming the member
    for unsafe content, BadRequest for a file that is not a supported archive, and
    recycling_core's UnsafeFileError for pickle files.
    """
    dest.mkdir(parents=True, exist_ok=True)
    archive_bytes = archive_path.stat().st_size
    fmt = _archive_format(archive_path)
    try:
        if fmt == "zip":
            with zipfile.ZipFile(archive_path) as zip_archive:
                members = _check_members(_zip_members(zip_archive), archive_bytes, limits)

                def open_zip_member(member: _Member) -> IO[bytes]:
                    assert isinstance(member.handle, zipfile.ZipInfo)
                    return zip_archive.open(member.handle)

                _extract_members(members, dest, limits, open_zip_member)
        else:
            with tarfile.open(archive_path, "r:*") as tar_archive:
                members = _check_members(_tar_members(tar_archive), archive_bytes, limits)

                def open_tar_member(member: _Member) -> IO[bytes]:
                    assert isinstance(member.handle, tarfile.TarInfo)
                    handle = tar_archive.extractfile(member.handle)
                    if handle is None:
                        raise UnsafeArchive(f"member {str(member.path)!r} cannot be read")
                    return handle

                _extract_members(members, dest, limits, open_tar_member)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise BadRequest(f"the archive is corrupt: {error}", code="CorruptArchive") from error
    if not members:
        raise BadRequest("the archive is empty", code="EmptyArchive")
    root = dest
    prefix = _strip_prefix(members)
    if prefix is not None:
        root = dest / prefix
    refuse_pickle_files(root)
    return root


def _extract_members(
    members: list[_Member],
    dest: Path,
    limits: ArchiveLimits,
    open_member: Callable[[_Member], IO[bytes]],
) -> None:
    budget = [limits.max_extracted_bytes]
    for member in members:
        target = dest.joinpath(*member.path.parts)
        if member.is_dir:
            target.mkdir(parents=True, exist_ok=True)
            continue
        with open_member(member) as source:
            _write_member(source, target, member.size, budget)


# --------------------------------------------------------------------------- sources


def check_source_allowed(source_uri: str, settings: Settings) -> None:
    """Refuse a ``source_uri`` outside the configured roots (none configured: embedded only)."""
    roots = settings.source_uri_roots
    if not roots:
        if settings.environment == "production":
            raise Forbidden(
                "source_uri registration is disabled: set RECYCLE_SOURCE_URI_ROOTS",
                code="SourceUriNotAllowed",
            )
        return
    fs, path = fsspec.core.url_to_fs(source_uri)
    for root in roots:
        root_fs, root_path = fsspec.core.url_to_fs(root)
        if type(root_fs) is not type(fs):
            continue
        if isinstance(fs, LocalFileSystem):
            if Path(path).resolve().is_relative_to(Path(root_path).resolve()):
                return
        elif os.path.normpath(path).startswith(root_path.rstrip("/") + "/"):
            return
    raise Forbidden(
        f"source_uri {source_uri!r} is outside the allowed roots", code="SourceUriNotAllowed"
    )


def materialize_source(source_uri: str, workdir: Path, limits: ArchiveLimits) -> Path:
    """Copy a directory (or unpack an archive) that the server can read into ``workdir``."""
    try:
        fs, path = fsspec.core.url_to_fs(source_uri)
        is_dir = fs.isdir(path)
        is_file = not is_dir and fs.isfile(path)
    except (ValueError, ImportError) as error:
        raise BadRequest(
            f"cannot read source_uri {source_uri!r}: {error}", code="InvalidSourceUri"
        ) from error
    if is_file:
        local_archive = workdir / "source.archive"
        with fs.open(path, "rb") as handle:
            save_stream(handle, local_archive, limits.max_upload_bytes, what="source archive")
        return extract_archive(local_archive, workdir / "content", limits)
    if not is_dir:
        raise BadRequest(f"source_uri {source_uri!r} does not exist", code="SourceNotFound")
    target = workdir / "content"
    found = fs.find(path, withdirs=False, detail=True)
    if len(found) > limits.max_members:
        raise UnsafeArchive(f"source holds more than {limits.max_members} files")
    total = sum(int(info.get("size") or 0) for info in found.values())
    if total > limits.max_extracted_bytes:
        raise PayloadTooLarge(f"source holds more than {limits.max_extracted_bytes} bytes")
    base = path.rstrip("/")
    for remote in sorted(found):
        relative = _normalise_name(os.path.relpath(remote, base).replace(os.sep, "/"))
        if relative is None:
            continue
        local = target.joinpath(*relative.parts)
        local.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(remote, str(local))
    target.mkdir(parents=True, exist_ok=True)
    refuse_pickle_files(target)
    return target


def receive_directory(
    *,
    upload: IncomingFile | None,
    source_uri: str | None,
    workdir: Path,
    settings: Settings,
) -> Path:
    """The directory an upload or a ``source_uri`` holds, unpacked safely under ``workdir``."""
    if (upload is None) == (not source_uri):
        raise BadRequest("give exactly one of an archive file or source_uri", code="InvalidSource")
    limits = ArchiveLimits.from_settings(settings)
    if upload is not None:
        archive = workdir / "upload.archive"
        save_stream(upload.stream, archive, limits.max_upload_bytes)
        return extract_archive(archive, workdir / "content", limits)
    assert source_uri is not None
    check_source_allowed(source_uri, settings)
    return materialize_source(source_uri, workdir, limits)


# --------------------------------------------------------------------------- downloads


def _tar_header(relative: str, size: int, mtime: float) -> bytes:
    info = tarfile.TarInfo(relative)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT)


def iter_tar_gz(directory: Path, arcname: str) -> Iterator[bytes]:
    """Stream ``directory`` as a .tar.gz whose members live under ``arcname/``.

    Written incrementally (tar blocks through zlib), so memory stays bounded whatever the
    file sizes.
    """
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    files = sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    now = time.time()
    for path in files:
        relative = f"{arcname}/{path.relative_to(directory).as_posix()}"
        size = path.stat().st_size
        out = compressor.compress(_tar_header(relative, size, now))
        if out:
            yield out
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                out = compressor.compress(chunk)
                if out:
                    yield out
        padding = (-size) % tarfile.BLOCKSIZE
        if padding:
            out = compressor.compress(b"\0" * padding)
            if out:
                yield out
    yield compressor.compress(b"\0" * (2 * tarfile.BLOCKSIZE)) + compressor.flush()


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
