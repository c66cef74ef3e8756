"""`Record`: `typing.NamedTuple` to the type checker, the same named tuple without its field check at run time.

When a `typing.NamedTuple` class is created, each field's annotation is checked, and under
`from __future__ import annotations` that compiles every annotation string: across the two dozen
records a warm start loads, about as long as loading the rest of their modules. `Record` classes
are declared the same way (fields with annotations and defaults, docstrings, methods) and are the
same `collections.namedtuple` at run time, built without that check; type checkers see
`typing.NamedTuple` itself.

The fields are read from the class's `__annotations__`, which the interpreter fills at class
creation only while annotations are postponed (`from __future__ import annotations`, which ruff
requires in every module): from Python 3.14 on, annotations are otherwise evaluated lazily and
the class body has none to read.
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
            if not fields:  # Python 3.14 fills `__annotations__` only when annotations are postponed
                raise TypeError(f"{typename}: a record without fields; declare it in a module that starts with "
                                "`from __future__ import annotations`")
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
