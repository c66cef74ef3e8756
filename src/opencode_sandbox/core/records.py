"""`Record`: `typing.NamedTuple` to the type checker, the same named tuple without its field check at run time.

When a `typing.NamedTuple` class is created, each field's annotation is checked, and under
`from __future__ import annotations` that compiles every annotation string: across the two dozen
records a warm start loads, about as long as loading the rest of their modules. `Record` classes
are declared the same way (fields with annotations and defaults, docstrings, methods) and are the
same `collections.namedtuple` at run time, built without that check; type checkers see
`typing.NamedTuple` itself.
"""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any
    from typing import NamedTuple as Record
else:
    import collections

    _SPECIAL = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                             "_make", "_replace", "_asdict", "_source"})

    class _RecordType(type):
        def __new__(cls, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:
                return super().__new__(cls, typename, bases, namespace)
            fields = tuple(namespace.get("__annotations__", {}))
            defaults = [namespace[name] for name in fields if name in namespace]
            if any(name not in namespace for name in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{typename}: a field without a default follows one with a default")
            record = collections.namedtuple(typename, fields, defaults=defaults, module=namespace["__module__"])
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"{typename}: cannot overwrite the named tuple attribute {key}")
                if key not in _SPECIAL and key not in fields:
                    setattr(record, key, value)
            return record

    class Record(metaclass=_RecordType):
        pass

__all__ = ["Record"]
