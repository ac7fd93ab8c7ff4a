"""SQL of registered models, versions, tags and aliases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.interfaces import LoaderOption

from app.db import ModelAlias, ModelVersion, ModelVersionTag, RegisteredModel, VersionStatus
from app.db.upsert import upsert
from app.pagination import Pagination

VERSION_INSERT_ATTEMPTS = 8


class VersionNumberConflict(Exception):
    """Every attempt to take the next version number collided with a concurrent writer."""


class ModelRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---------------------------------------------------------------- models

    def get_model(self, name: str, *, include_deleted: bool = False) -> RegisteredModel | None:
        query = sa.select(RegisteredModel).where(RegisteredModel.name == name)
        if not include_deleted:
            query = query.where(RegisteredModel.deleted_at.is_(None))
        return self.session.scalar(query)

    def get_model_by_id(self, model_id: int) -> RegisteredModel | None:
        return self.session.get(RegisteredModel, model_id)

    def add_model(self, model: RegisteredModel) -> RegisteredModel:
        """Insert a model; raises IntegrityError (transaction intact) when the name is taken."""
        with self.session.begin_nested():
            self.session.add(model)
            self.session.flush()
        return model

    def list_models(self, page: Pagination) -> tuple[list[RegisteredModel], int]:
        query = sa.select(RegisteredModel).where(RegisteredModel.deleted_at.is_(None))
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.options(selectinload(RegisteredModel.aliases).joinedload(ModelAlias.version))
            .order_by(RegisteredModel.name)
            .limit(page.limit)
            .offset(page.offset)
        ).all()
        return list(rows), total

    def latest_version_numbers(self, model_ids: Iterable[int]) -> dict[int, int]:
        """Highest READY, live version number per model."""
        ids = list(model_ids)
        if not ids:
            return {}
        rows = self.session.execute(
            sa.select(ModelVersion.model_id, sa.func.max(ModelVersion.version))
            .where(
                ModelVersion.model_id.in_(ids),
                ModelVersion.deleted_at.is_(None),
                ModelVersion.status == VersionStatus.READY,
            )
            .group_by(ModelVersion.model_id)
        ).all()
        return {model_id: version for model_id, version in rows}

    # ---------------------------------------------------------------- versions

    @staticmethod
    def _version_loads() -> tuple[LoaderOption, ...]:
        return (
            selectinload(ModelVersion.tags),
            selectinload(ModelVersion.aliases),
            selectinload(ModelVersion.parent),
            selectinload(ModelVersion.model),
        )

    def _versions(self) -> sa.Select[ModelVersion]:
        return sa.select(ModelVersion).options(*self._version_loads())

    def get_version(
        self, model_id: int, version: int, *, include_deleted: bool = False
    ) -> ModelVersion | None:
        query = self._versions().where(
            ModelVersion.model_id == model_id, ModelVersion.version == version
        )
        if not include_deleted:
            query = query.where(ModelVersion.deleted_at.is_(None))
        return self.session.scalar(query)

    def get_version_by_id(self, version_id: int) -> ModelVersion | None:
        return self.session.scalar(self._versions().where(ModelVersion.id == version_id))

    def list_versions(
        self, model_id: int, page: Pagination, *, status: VersionStatus | None = None
    ) -> tuple[list[ModelVersion], int]:
        query = sa.select(ModelVersion).where(
            ModelVersion.model_id == model_id, ModelVersion.deleted_at.is_(None)
        )
        if status is not None:
            query = query.where(ModelVersion.status == status)
        total = self.session.scalar(sa.select(sa.func.count()).select_from(query.subquery())) or 0
        rows = self.session.scalars(
            query.options(*self._version_loads())
            .order_by(ModelVersion.version.desc())
            .limit(page.limit)
            .offset(page.offset)
        ).all()
        return list(rows), total

    def next_version_number(self, model_id: int) -> int:
        """max(version) + 1 over every version ever registered (deleted ones included)."""
        current = self.session.scalar(
            sa.select(sa.func.max(ModelVersion.version)).where(ModelVersion.model_id == model_id)
        )
        return (current or 0) + 1

    def add_version_with_next_number(self, version: ModelVersion) -> ModelVersion:
        """Insert ``version`` numbered max+1, retrying when a concurrent insert took the number.

        Each attempt runs in a SAVEPOINT, so a unique-constraint collision leaves the
        surrounding transaction usable.
        """
        for _attempt in range(VERSION_INSERT_ATTEMPTS):
            version.version = self.next_version_number(version.model_id)
            try:
                with self.session.begin_nested():
                    self.session.add(version)
                    self.session.flush()
                return version
            except IntegrityError:
                if (
                    self.session.scalar(
                        sa.select(sa.func.count())
                        .select_from(ModelVersion)
                        .where(
                            ModelVersion.model_id == version.model_id,
                            ModelVersion.version == version.version,
                        )
                    )
                    == 0
                ):
                    raise  # not a version-number collision: another constraint failed
        raise VersionNumberConflict(
            f"could not take a version number after {VERSION_INSERT_ATTEMPTS} attempts"
        )

    # ---------------------------------------------------------------- tags

    def set_tags(self, version: ModelVersion, changes: Mapping[str, str | None]) -> None:
        """Add or replace tags; a None value deletes the tag."""
        current = {tag.key: tag for tag in version.tags}
        for key, value in changes.items():
            if value is None:
                if key in current:
                    version.tags.remove(current[key])
            elif key in current:
                current[key].value = value
            else:
                version.tags.append(ModelVersionTag(key=key, value=value))
        self.session.flush()

    # ---------------------------------------------------------------- aliases

    def set_alias(self, model_id: int, alias: str, version_id: int, now: dt.datetime) -> None:
        """Point ``alias`` at a version, moving it if it pointed elsewhere (upsert)."""
        upsert(
            self.session,
            ModelAlias.__table__,  # type: ignore[arg-type]
            {
                "model_id": model_id,
                "alias": alias,
                "model_version_id": version_id,
                "updated_at": now,
            },
            conflict_columns=("model_id", "alias"),
            update_columns=("model_version_id", "updated_at"),
        )

    def remove_aliases(
        self, model_id: int, aliases: Iterable[str], version_id: int | None = None
    ) -> None:
        """Drop aliases of a model (only those pointing at ``version_id`` when given)."""
        statement = sa.delete(ModelAlias).where(
            ModelAlias.model_id == model_id, ModelAlias.alias.in_(list(aliases))
        )
        if version_id is not None:
            statement = statement.where(ModelAlias.model_version_id == version_id)
        self.session.execute(statement)

    def remove_version_aliases(self, version_id: int) -> None:
        self.session.execute(sa.delete(ModelAlias).where(ModelAlias.model_version_id == version_id))

    def remove_model_aliases(self, model_id: int) -> None:
        self.session.execute(sa.delete(ModelAlias).where(ModelAlias.model_id == model_id))

    def get_alias_target(self, model_id: int, alias: str) -> ModelVersion | None:
        return self.session.scalar(
            self._versions()
            .join(ModelAlias, ModelAlias.model_version_id == ModelVersion.id)
            .where(ModelAlias.model_id == model_id, ModelAlias.alias == alias)
        )

    def refresh_aliases(self, *objects: ModelVersion | RegisteredModel) -> None:
        """Reload alias collections after they were changed with bulk statements."""
        for obj in objects:
            self.session.refresh(obj, ["aliases"])
