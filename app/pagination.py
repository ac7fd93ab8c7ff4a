"""Offset pagination shared by every list endpoint: ``?limit=&offset=`` → ``{"items", "total"}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Query
from pydantic import BaseModel

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


@dataclass(frozen=True)
class Pagination:
    limit: int = DEFAULT_LIMIT
    offset: int = 0


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of rows as services return it."""

    items: list[T]
    total: int
    pagination: Pagination


class Page(BaseModel, Generic[T]):
    """One page of a list response."""

    items: list[T]
    total: int
    limit: int
    offset: int


async def pagination_params(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")] = DEFAULT_LIMIT,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1, description="rows to skip")] = 0,
) -> Pagination:
    return Pagination(limit=limit, offset=offset)


PaginationDep = Annotated[Pagination, Depends(pagination_params)]


S = TypeVar("S", bound=BaseModel)


def page_of(paged: Paged[Any], schema: type[S]) -> Page[S]:
    """Render a service page with ``schema`` built from each row's attributes."""
    return Page[schema](  # type: ignore[valid-type]
        items=[schema.model_validate(item) for item in paged.items],
        total=paged.total,
        limit=paged.pagination.limit,
        offset=paged.pagination.offset,
    )
