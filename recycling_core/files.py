"""File safety and fingerprints: sha256 manifests, pickle refusal and atomic writes.

Every model, adapter and data set that enters the service is fingerprinted with
:func:`file_manifest` / :func:`manifest_digest` (DESIGN §4, §7) and checked with
:func:`refuse_pickle_files` before anything loads it: only safetensors weights are accepted,
because unpickling a file can run arbitrary code.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from recycling_core.errors import UnsafeFileError

HASH_CHUNK_BYTES = 1024 * 1024
"""Read size used when hashing files (1 MiB)."""

PICKLE_SUFFIXES: tuple[str, ...] = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
"""File name endings of formats that are (or usually are) pickles; compared case-insensitively."""

SAFETENSORS_SUFFIX = ".safetensors"

# Pickle protocols 2-5 start with the PROTO opcode (0x80) followed by the protocol number.
_PICKLE_PROTO_OPCODE = 0x80
_PICKLE_PROTOCOLS_WITH_PROTO_OPCODE = frozenset({2, 3, 4, 5})
_ZIP_MAGIC = b"PK\x03\x04"
# A safetensors file starts with an 8-byte little-endian header length and a JSON header.
_SAFETENSORS_MAX_HEADER_BYTES = 100 * 1024 * 1024


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a file's content, read in 1 MiB chunks.

    Args:
        path: the file to hash.

    Returns:
        The lowercase hexadecimal sha256 digest (64 characters).

    Raises:
        OSError: when the file cannot be opened or read.
    """
    with open(path, "rb") as handle:
        status = os.fstat(handle.fileno())
        # Any write to the file changes its ctime (which no caller can set back), so a file with
        # the same device, inode, size, mtime and ctime has the content hashed before: a worker
        # does not re-read a multi-GB base model for every job.
        key = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        with _DIGEST_LOCK:
            known = _DIGESTS.get(key)
        if known is not None:
            return known
        digest = hashlib.sha256()
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    value = digest.hexdigest()
    if time.time_ns() - max(status.st_mtime_ns, status.st_ctime_ns) < _SETTLED_NS:
        return value  # written just now: a write in the same clock tick would keep the key
    with _DIGEST_LOCK:
        _DIGESTS[key] = value
        while len(_DIGESTS) > _DIGEST_MEMO_SIZE:
            _DIGESTS.popitem(last=False)
    return value


_DIGEST_MEMO_SIZE = 4096
_SETTLED_NS = 2_000_000_000
_DIGESTS: OrderedDict[tuple[int, ...], str] = OrderedDict()
_DIGEST_LOCK = threading.Lock()


def _require_directory(directory: str | os.PathLike[str]) -> Path:
    root = Path(directory)
    if not root.exists():
        raise FileNotFoundError(f"directory {str(root)!r} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{str(root)!r} is not a directory")
    return root.resolve()


def _iter_regular_files(root: Path) -> list[tuple[str, Path]]:
    """List (relative POSIX path, real path) for every regular file under ``root``, sorted.

    Symbolic links are checked first: a link whose target lies outside ``root`` raises
    :class:`UnsafeFileError`. A link to a file inside ``root`` is listed under the link's own
    path; a link to a directory inside ``root`` is not followed (its files are listed under
    their real location). Sockets, FIFOs and device files are skipped.
    """
    files: list[tuple[str, Path]] = []
    for current, dir_names, file_names in os.walk(root, followlinks=False):
        current_path = Path(current)
        for name in sorted(dir_names + file_names):
            entry = current_path / name
            relative = entry.relative_to(root).as_posix()
            if entry.is_symlink():
                target = entry.resolve()
                if not target.is_relative_to(root):
                    raise UnsafeFileError(
                        f"symbolic link {relative!r} points outside the directory "
                        f"(to {str(target)!r})",
                        field=relative,
                    )
                if name in file_names and target.is_file():
                    files.append((relative, target))
            elif name in file_names and entry.is_file():
                files.append((relative, entry))
    files.sort(key=lambda item: item[0])
    return files


def file_manifest(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Map every regular file of a directory (recursively) to its sha256.

    Args:
        directory: the directory to fingerprint (a model, an adapter or a task directory).

    Returns:
        ``{relative POSIX path: hex sha256}``, with keys in sorted order.

    Raises:
        UnsafeFileError: when a symbolic link points outside the directory (the error's
            ``field`` is the link's relative path).
        FileNotFoundError: when the directory does not exist.
        NotADirectoryError: when the path is not a directory.
    """
    root = _require_directory(directory)
    return {relative: sha256_file(real_path) for relative, real_path in _iter_regular_files(root)}


def manifest_digest(manifest: Mapping[str, str]) -> str:
    """Fold a file manifest into one sha256: the fingerprint of a whole directory.

    The digest covers the sorted lines ``path + "\\0" + sha256 + "\\n"``, so it changes when a
    file is added, removed, renamed or modified, and not when the manifest's order changes.

    Args:
        manifest: ``{relative path: sha256}`` as returned by :func:`file_manifest`.

    Returns:
        The hex sha256 of the manifest lines.
    """
    digest = hashlib.sha256()
    for relative in sorted(manifest):
        digest.update(f"{relative}\0{manifest[relative]}\n".encode())
    return digest.hexdigest()


def _is_safetensors_header(head: bytes, file_size: int, path: Path) -> bool:
    """Tell whether a file starts like a safetensors file (length-prefixed JSON object)."""
    if len(head) < 9:
        return False
    header_length = int.from_bytes(head[:8], "little")
    if not 2 <= header_length <= min(file_size - 8, _SAFETENSORS_MAX_HEADER_BYTES):
        return False
    if head[8:9] != b"{":
        return False
    with open(path, "rb") as handle:
        handle.seek(8)
        header = handle.read(header_length)
    try:
        return isinstance(json.loads(header), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def _zip_holds_pickle(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(name.rsplit("/", 1)[-1].endswith((".pkl", ".pickle")) for name in names)


def looks_like_pickle(path: str | os.PathLike[str]) -> bool:
    """Sniff a file's first bytes to tell whether it is a pickle whatever its name.

    Detected: a binary pickle (protocols 2-5, which start with the ``PROTO`` opcode ``0x80``
    and the protocol number) and a zip archive holding a ``*.pkl`` entry such as
    ``archive/data.pkl`` (the format of ``torch.save``). A file that parses as a safetensors
    header is never reported, even when its length prefix happens to start with ``0x80``.
    Text pickles (protocols 0 and 1) are not recognised; they fail to load as safetensors.

    Args:
        path: the file to inspect.

    Returns:
        True when the content looks like a pickle.
    """
    file_path = Path(path)
    file_size = file_path.stat().st_size
    with open(file_path, "rb") as handle:
        head = handle.read(16)
    if _is_safetensors_header(head, file_size, file_path):
        return False
    if (
        len(head) >= 2
        and head[0] == _PICKLE_PROTO_OPCODE
        and head[1] in _PICKLE_PROTOCOLS_WITH_PROTO_OPCODE
    ):
        return True
    if head.startswith(_ZIP_MAGIC):
        return _zip_holds_pickle(file_path)
    return False


def refuse_pickle_files(directory: str | os.PathLike[str]) -> None:
    """Refuse a directory that holds any pickle file, by name or by content.

    Files whose name ends with one of :data:`PICKLE_SUFFIXES` are refused outright (whatever
    their content); ``*.safetensors`` files are sniffed with :func:`looks_like_pickle` so that a
    renamed pickle is refused too. Symbolic links escaping the directory are refused as well.

    Args:
        directory: the model, adapter or upload directory to check.

    Raises:
        UnsafeFileError: naming the first offending file (relative path, also in ``field``).
        FileNotFoundError: when the directory does not exist.
        NotADirectoryError: when the path is not a directory.
    """
    root = _require_directory(directory)
    for relative, real_path in _iter_regular_files(root):
        lowered = relative.lower()
        if lowered.endswith(PICKLE_SUFFIXES):
            raise UnsafeFileError(
                f"pickle file {relative!r} refused: pickle files can run code when loaded, "
                "only safetensors is accepted",
                field=relative,
            )
        if lowered.endswith(SAFETENSORS_SUFFIX) and looks_like_pickle(real_path):
            raise UnsafeFileError(
                f"file {relative!r} is a pickle under a safetensors name: pickle files can run "
                "code when loaded, only safetensors is accepted",
                field=relative,
            )


def _fsync_directory(directory: Path) -> None:
    """Flush a directory entry to disk where the platform allows it (POSIX)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write bytes so that readers see either the old file or the complete new one.

    The data goes to a temporary file in the same directory, is flushed and fsynced, then
    renamed over ``path`` with :func:`os.replace`. Missing parent directories are created. The
    new file gets the usual permissions (``0o666`` minus the umask).

    Args:
        path: destination file.
        data: the complete new content.

    Returns:
        The destination path.

    Raises:
        OSError: when the directory is not writable or the disk is full; the temporary file
            is removed and ``path`` is left untouched.
    """
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(f".{destination.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, destination)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync_directory(destination.parent)
    return destination


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write text atomically (see :func:`atomic_write_bytes`).

    Args:
        path: destination file.
        text: the complete new content.
        encoding: text encoding, UTF-8 by default.

    Returns:
        The destination path.
    """
    return atomic_write_bytes(path, text.encode(encoding))
