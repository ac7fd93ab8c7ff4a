"""The artifact store: model, adapter and dataset directories on any fsspec filesystem.

Every stored directory is written under ``<key>.tmp-<uuid>``, verified, then renamed into
place, so a reader never sees half a directory. What was stored is described by its manifest
(relative path → sha256); fetching verifies every file against it.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from app.errors import ArtifactCorrupted, ArtifactStoreUnavailable, NotFound
from recycling_core.files import file_manifest, manifest_digest, sha256_file

_HASH_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class StoredArtifact:
    """Where a directory (or file) was stored and what it holds."""

    uri: str
    manifest: dict[str, str]
    fingerprint: str
    size_bytes: int


def _check_relative(relative: str) -> str:
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe relative path {relative!r}")
    return relative


def _store_failure(error: OSError) -> bool:
    """An I/O failure of the store itself (disk full, network), not a caller's mistake."""
    return not isinstance(error, (ArtifactStoreUnavailable, FileExistsError, FileNotFoundError))


class ArtifactStore:
    """Directories and files under one root: a local directory or an fsspec URL."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.fs, root_path = fsspec.core.url_to_fs(str(root))
        self.root_path = root_path.rstrip("/") or "/"
        self.is_local = isinstance(self.fs, LocalFileSystem)
        if self.is_local:
            Path(self.root_path).mkdir(parents=True, exist_ok=True)

    @property
    def root_uri(self) -> str:
        return str(self.fs.unstrip_protocol(self.root_path))

    # ------------------------------------------------------------------ naming

    def _key_path(self, key: str) -> str:
        return posixpath.join(self.root_path, _check_relative(key.strip("/")))

    def _path_of(self, uri: str) -> str:
        """The store path of ``uri``; refuses URIs outside this store's root."""
        fs, path = fsspec.core.url_to_fs(uri)
        if type(fs) is not type(self.fs):
            raise ValueError(f"{uri!r} is not in the artifact store {self.root_uri!r}")
        path = posixpath.normpath(str(path))
        if not path.startswith(self.root_path.rstrip("/") + "/"):
            raise ValueError(f"{uri!r} is not in the artifact store {self.root_uri!r}")
        return path

    def uri_for(self, key: str) -> str:
        return str(self.fs.unstrip_protocol(self._key_path(key)))

    def local_directory(self, uri: str) -> Path | None:
        """The directory itself when the store is local (read it, never write to it)."""
        return Path(self._path_of(uri)) if self.is_local else None

    # ------------------------------------------------------------------ writing

    def put_directory(
        self, local_dir: str | os.PathLike[str], key: str, *, move: bool = False
    ) -> StoredArtifact:
        """Store a local directory under ``key`` atomically and return its manifest.

        With ``move=True`` on a local store the files are moved (renamed when on the same
        filesystem) instead of copied; ``local_dir`` is consumed either way.
        """
        source = Path(local_dir)
        manifest = file_manifest(source)
        final = self._key_path(key)
        if self.fs.exists(final):
            raise FileExistsError(f"artifact {key!r} already exists")
        staging = f"{final}.tmp-{uuid.uuid4().hex}"
        size = sum((source / relative).stat().st_size for relative in manifest)
        try:
            if self.is_local and move:
                Path(staging).parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(source), staging)
                self._verify_present(staging, manifest)
            else:
                for relative in manifest:
                    target = posixpath.join(staging, relative)
                    self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
                    self.fs.put_file(str(source / relative), target)
                self._verify(staging, manifest)
            self._rename(staging, final)
        except OSError as error:
            self._remove_quietly(staging)
            if _store_failure(error):
                raise ArtifactStoreUnavailable(f"writing {key!r}: {error}") from error
            raise
        except BaseException:
            self._remove_quietly(staging)
            raise
        return StoredArtifact(
            uri=self.fs.unstrip_protocol(final),
            manifest=manifest,
            fingerprint=manifest_digest(manifest),
            size_bytes=size,
        )

    def put_file(self, local_file: str | os.PathLike[str], key: str) -> StoredArtifact:
        """Store one file under ``key`` (written to a temporary name, verified, renamed)."""
        source = Path(local_file)
        digest = sha256_file(source)
        final = self._key_path(key)
        staging = f"{final}.tmp-{uuid.uuid4().hex}"
        self.fs.makedirs(posixpath.dirname(final), exist_ok=True)
        try:
            self.fs.put_file(str(source), staging)
            if self._hash_remote(staging) != digest:
                raise ArtifactCorrupted(f"stored copy of {source.name} does not match its sha256")
            self._rename(staging, final)
        except OSError as error:
            self._remove_quietly(staging)
            if _store_failure(error):
                raise ArtifactStoreUnavailable(f"writing {key!r}: {error}") from error
            raise
        except BaseException:
            self._remove_quietly(staging)
            raise
        manifest = {source.name: digest}
        return StoredArtifact(
            uri=self.fs.unstrip_protocol(final),
            manifest=manifest,
            fingerprint=manifest_digest(manifest),
            size_bytes=source.stat().st_size,
        )

    def _rename(self, staging: str, final: str) -> None:
        if self.is_local:
            os.replace(staging, final)  # atomic on one filesystem; refuses a non-empty target
        else:
            self.fs.mv(staging, final, recursive=True)

    def _hash_remote(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(path, "rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def _verify(self, directory: str, manifest: Mapping[str, str]) -> None:
        for relative, expected in manifest.items():
            if self._hash_remote(posixpath.join(directory, relative)) != expected:
                raise ArtifactCorrupted(f"stored copy of {relative!r} does not match its sha256")

    def _verify_present(self, directory: str, manifest: Mapping[str, str]) -> None:
        missing = [rel for rel in manifest if not self.fs.isfile(posixpath.join(directory, rel))]
        if missing:
            raise ArtifactCorrupted(f"stored artifact lacks {missing[:3]}")

    def _remove_quietly(self, path: str) -> None:
        try:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except OSError:
            pass

    # ------------------------------------------------------------------ reading

    def exists(self, uri: str) -> bool:
        return bool(self.fs.exists(self._path_of(uri)))

    def list_files(self, uri: str) -> list[str]:
        """Relative paths of the files under a stored directory, sorted."""
        base = self._path_of(uri)
        found = self.fs.find(base, withdirs=False)
        return sorted(posixpath.relpath(path, base) for path in found)

    def fetch_directory(
        self,
        uri: str,
        dest: str | os.PathLike[str],
        manifest: Mapping[str, str] | None = None,
    ) -> Path:
        """Copy a stored directory to ``dest`` (created; must be absent or empty).

        With a manifest every file is checked against its sha256 (ArtifactCorrupted on a
        mismatch or a missing file) and only the manifest's files are fetched; without one,
        every file under the URI is copied unchecked.
        """
        base = self._path_of(uri)
        if not self.fs.isdir(base):
            raise NotFound(f"artifact {uri} does not exist", code="ArtifactMissing")
        target = Path(dest)
        if target.exists() and any(target.iterdir()):
            raise FileExistsError(f"{target} is not empty")
        staging = target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex}")
        relatives = list(manifest) if manifest is not None else self.list_files(uri)
        try:
            for relative in relatives:
                local = staging / _check_relative(relative)
                local.parent.mkdir(parents=True, exist_ok=True)
                remote = posixpath.join(base, relative)
                if not self.fs.isfile(remote):
                    raise ArtifactCorrupted(f"artifact {uri} lacks {relative!r}")
                self.fs.get_file(remote, str(local))
                if manifest is not None and sha256_file(local) != manifest[relative]:
                    raise ArtifactCorrupted(
                        f"file {relative!r} of {uri} does not match its recorded sha256"
                    )
            staging.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.rmdir()
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return target

    def open_stream(self, uri: str, relative: str | None = None) -> IO[bytes]:
        """Open a stored file (or a file inside a stored directory) for reading."""
        path = self._path_of(uri)
        if relative is not None:
            path = posixpath.join(path, _check_relative(relative))
        if not self.fs.isfile(path):
            raise NotFound(
                f"artifact file {relative or uri} does not exist", code="ArtifactMissing"
            )
        handle: IO[bytes] = self.fs.open(path, "rb")
        return handle

    def iter_bytes(self, uri: str, relative: str | None = None) -> Iterator[bytes]:
        with self.open_stream(uri, relative) as handle:
            while chunk := handle.read(_HASH_CHUNK):
                yield chunk

    # ------------------------------------------------------------------ deleting / health

    def delete(self, uri: str) -> None:
        """Remove a stored directory or file (no error when it is already gone)."""
        self._remove_quietly(self._path_of(uri))

    def check_writable(self) -> None:
        """Write, read back and delete a probe file; raises OSError when the store is unusable."""
        probe = posixpath.join(self.root_path, f".probe-{uuid.uuid4().hex}")
        self.fs.makedirs(self.root_path, exist_ok=True)
        try:
            with self.fs.open(probe, "wb") as handle:
                handle.write(b"ok")
            with self.fs.open(probe, "rb") as handle:
                if handle.read() != b"ok":
                    raise OSError("artifact store returned different bytes than written")
        finally:
            self._remove_quietly(probe)
