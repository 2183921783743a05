"""The one serialiser every store uses: JSON text through cached pydantic TypeAdapters.

Stores never call json.dumps on domain objects themselves, so the SQLite and DynamoDB adapters
write the same documents and a message read back is the message written.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter

T = TypeVar("T")


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(tp: Any) -> TypeAdapter[Any]:
    # Building a TypeAdapter compiles a validator; do it once per type, not per call.
    adapter = _ADAPTERS.get(tp)
    if adapter is None:
        adapter = _ADAPTERS[tp] = TypeAdapter(tp)
    return adapter


def dumps(value: Any, tp: Any = None) -> str:
    """Serialise a model, a list of models or a union value to compact JSON text."""
    adapter = _adapter(tp if tp is not None else type(value))
    return adapter.dump_json(value, exclude_none=False).decode()


def loads(tp: type[T] | Any, data: str | bytes) -> T:
    result: T = _adapter(tp).validate_json(data)
    return result


def to_jsonable(value: Any, tp: Any = None) -> Any:
    """Plain JSON-compatible Python (dicts, lists, str) for APIs that want objects, not text."""
    return _adapter(tp if tp is not None else type(value)).dump_python(value, mode="json")


def from_jsonable(tp: type[T] | Any, data: Any) -> T:
    result: T = _adapter(tp).validate_python(data)
    return result
