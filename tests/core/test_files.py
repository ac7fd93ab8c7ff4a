"""Tests of recycling_core.files: manifests, pickle refusal, symlink escapes, atomic writes."""

from __future__ import annotations

import io
import json
import os
import pickle
import stat
import zipfile
from pathlib import Path

import pytest

from recycling_core.errors import UnsafeFileError
from recycling_core.files import (
    PICKLE_SUFFIXES,
    atomic_write_bytes,
    atomic_write_text,
    file_manifest,
    looks_like_pickle,
    manifest_digest,
    refuse_pickle_files,
    sha256_file,
)

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def _safetensors_bytes(header: dict[str, object], payload: bytes = b"") -> bytes:
    encoded = json.dumps(header).encode()
    return len(encoded).to_bytes(8, "little") + encoded + payload


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    (directory / "sub").mkdir(parents=True)
    (directory / "config.json").write_text('{"hidden_size": 8}')
    (directory / "sub" / "notes.txt").write_bytes(b"abc")
    (directory / "model.safetensors").write_bytes(
        _safetensors_bytes({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    )
    return directory


def test_sha256_file_matches_known_digests(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "abc").write_bytes(b"abc")
    assert sha256_file(tmp_path / "empty") == EMPTY_SHA256
    assert sha256_file(tmp_path / "abc") == ABC_SHA256


def test_sha256_file_streams_files_larger_than_one_chunk(tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "big").write_bytes(data)
    assert sha256_file(tmp_path / "big") == hashlib.sha256(data).hexdigest()


def test_manifest_lists_every_file_with_relative_posix_paths(model_dir: Path) -> None:
    manifest = file_manifest(model_dir)
    assert list(manifest) == ["config.json", "model.safetensors", "sub/notes.txt"]
    assert manifest["sub/notes.txt"] == ABC_SHA256


def test_manifest_digest_is_stable_and_order_independent(model_dir: Path) -> None:
    manifest = file_manifest(model_dir)
    assert file_manifest(model_dir) == manifest
    reversed_manifest = dict(reversed(list(manifest.items())))
    assert manifest_digest(reversed_manifest) == manifest_digest(manifest)


def test_manifest_digest_changes_when_one_byte_changes(model_dir: Path) -> None:
    before = manifest_digest(file_manifest(model_dir))
    (model_dir / "sub" / "notes.txt").write_bytes(b"abd")
    after = manifest_digest(file_manifest(model_dir))
    assert after != before


def test_manifest_digest_changes_when_a_file_is_renamed(model_dir: Path) -> None:
    before = manifest_digest(file_manifest(model_dir))
    (model_dir / "sub" / "notes.txt").rename(model_dir / "sub" / "renamed.txt")
    assert manifest_digest(file_manifest(model_dir)) != before


def test_manifest_refuses_symlink_pointing_outside(model_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (model_dir / "sub" / "link.txt").symlink_to(secret)
    with pytest.raises(UnsafeFileError, match=r"sub/link\.txt") as caught:
        file_manifest(model_dir)
    assert caught.value.field == "sub/link.txt"


def test_manifest_refuses_directory_symlink_pointing_outside(
    model_dir: Path, tmp_path: Path
) -> None:
    (model_dir / "escape").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(UnsafeFileError, match="escape"):
        file_manifest(model_dir)


def test_manifest_accepts_symlink_inside_directory(model_dir: Path) -> None:
    (model_dir / "alias.json").symlink_to(model_dir / "config.json")
    manifest = file_manifest(model_dir)
    assert manifest["alias.json"] == manifest["config.json"]


def test_manifest_of_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        file_manifest(tmp_path / "absent")


def test_clean_directory_passes_pickle_check(model_dir: Path) -> None:
    refuse_pickle_files(model_dir)


@pytest.mark.parametrize("suffix", PICKLE_SUFFIXES)
def test_pickle_suffix_is_refused_anywhere(model_dir: Path, suffix: str) -> None:
    (model_dir / "sub" / f"weights{suffix.upper()}").write_bytes(b"not even a pickle")
    with pytest.raises(UnsafeFileError) as caught:
        refuse_pickle_files(model_dir)
    message = str(caught.value)
    assert "pickle" in message
    assert f"sub/weights{suffix.upper()}" in message
    assert "only safetensors is accepted" in message


def test_pickle_renamed_to_safetensors_is_refused(model_dir: Path) -> None:
    (model_dir / "adapter_model.safetensors").write_bytes(pickle.dumps({"w": [1, 2, 3]}))
    with pytest.raises(UnsafeFileError, match=r"adapter_model\.safetensors") as caught:
        refuse_pickle_files(model_dir)
    assert "only safetensors is accepted" in str(caught.value)


def test_torch_style_zip_renamed_to_safetensors_is_refused(model_dir: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"w": 1}))
        archive.writestr("archive/version", "3\n")
    path = model_dir / "model.safetensors"
    path.write_bytes(buffer.getvalue())
    assert looks_like_pickle(path)
    with pytest.raises(UnsafeFileError, match=r"model\.safetensors"):
        refuse_pickle_files(model_dir)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_looks_like_pickle_detects_binary_protocols(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "x"
    path.write_bytes(pickle.dumps([1, "a"], protocol=protocol))
    assert looks_like_pickle(path)


def test_real_safetensors_file_is_not_a_pickle(model_dir: Path) -> None:
    assert not looks_like_pickle(model_dir / "model.safetensors")


def test_safetensors_whose_length_prefix_starts_like_pickle_is_accepted(tmp_path: Path) -> None:
    # A 640-byte header is stored as 80 02 00 .. : the same first bytes as a protocol-2 pickle.
    encoded = json.dumps({"__metadata__": {"format": "pt"}}).encode()
    encoded = encoded + b" " * (640 - len(encoded))
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded)
    assert path.read_bytes()[:2] == b"\x80\x02"
    assert not looks_like_pickle(path)
    refuse_pickle_files(tmp_path)


def test_atomic_write_replaces_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "report.json"
    atomic_write_text(target, "first")
    atomic_write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_atomic_write_uses_umask_permissions(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "f.txt", "x")
    current_umask = os.umask(0)
    os.umask(current_umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~current_umask


def test_atomic_write_failure_keeps_old_file(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
