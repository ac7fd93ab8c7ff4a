"""Request and response bodies of ``/v1/models``."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.db import ModelVersion, RegisteredModel, VersionStatus

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{0,63}$"
TAG_KEY_PATTERN = r"^[A-Za-z0-9_.:/-]{1,250}$"
MAX_TAG_VALUE = 5000


def check_alias(alias: str) -> str:
    if not re.fullmatch(ALIAS_PATTERN, alias):
        raise ValueError(
            f"alias {alias!r} must start with a letter and hold only letters, digits, '.', '_' "
            "or '-' (at most 64 characters)"
        )
    return alias


def check_tags(tags: dict[str, str | None]) -> dict[str, str | None]:
    for key, value in tags.items():
        if not re.fullmatch(TAG_KEY_PATTERN, key):
            raise ValueError(f"tag key {key!r} must match {TAG_KEY_PATTERN}")
        if value is not None and len(value) > MAX_TAG_VALUE:
            raise ValueError(f"tag {key!r} is longer than {MAX_TAG_VALUE} characters")
    return tags


Alias = Annotated[str, AfterValidator(check_alias)]
TagMap = Annotated[dict[str, str], AfterValidator(check_tags)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class ModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    description: str | None = Field(default=None, max_length=10_000)


class ModelOut(BaseModel):
    name: str
    description: str | None
    latest_version: int | None = Field(description="highest READY version")
    aliases: dict[str, int] = Field(description="alias → version number")
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def build(cls, model: RegisteredModel, latest_version: int | None) -> ModelOut:
        return cls(
            name=model.name,
            description=model.description,
            latest_version=latest_version,
            aliases={alias.alias: alias.version.version for alias in model.aliases},
            created_at=model.created_at,
            updated_at=model.updated_at,
        )


class VersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    model: str
    version: int
    parent_version: int | None
    status: VersionStatus
    status_message: str | None
    description: str | None
    artifact_uri: str | None
    fingerprint: str | None
    manifest: dict[str, str]
    signature: dict[str, Any]
    model_class: str | None
    size_bytes: int | None
    tags: dict[str, str]
    aliases: list[str]
    created_at: dt.datetime
    updated_at: dt.datetime

    @model_validator(mode="before")
    @classmethod
    def _from_orm(cls, value: Any) -> Any:
        if isinstance(value, ModelVersion):
            return {
                "id": value.id,
                "model": value.model.name,
                "version": value.version,
                "parent_version": value.parent.version if value.parent else None,
                "status": value.status,
                "status_message": value.status_message,
                "description": value.description,
                "artifact_uri": value.artifact_uri,
                "fingerprint": value.fingerprint,
                "manifest": value.manifest,
                "signature": value.signature,
                "model_class": value.model_class,
                "size_bytes": value.size_bytes,
                "tags": {tag.key: tag.value for tag in value.tags},
                "aliases": [alias.alias for alias in value.aliases],
                "created_at": value.created_at,
                "updated_at": value.updated_at,
            }
        return value


class AliasChanges(BaseModel):
    model_config = ConfigDict(extra="forbid")

    add: list[Alias] = Field(
        default_factory=list, description="point these aliases here (moves them)"
    )
    remove: list[Alias] = Field(
        default_factory=list, description="drop these aliases from this version"
    )


class VersionUpdate(BaseModel):
    """Partial update of a version: description, tags (null deletes a tag), aliases."""

    model_config = ConfigDict(extra="forbid")

    description: str | None = Field(default=None, max_length=10_000)
    tags: Annotated[dict[str, str | None], AfterValidator(check_tags)] = Field(default_factory=dict)
    aliases: AliasChanges = Field(default_factory=AliasChanges)
