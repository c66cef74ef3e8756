"""`Record`: `typing.NamedTuple` to the type checker, a named tuple built for a short-lived process at run time.

When a `typing.NamedTuple` class is created, each field's annotation is checked, and under
`from __future__ import annotations` that compiles every annotation string: across the two dozen
records a warm start loads, about as long as loading the rest of their modules. And
`collections.namedtuple` compiles a constructor from source text for every class it makes, which
was a tenth of a warm `shell`. `Record` classes are declared the same way (fields with annotations
and defaults, docstrings, methods) and behave as the named tuples they are declared as; at run time
each is a `tuple` subclass whose methods are shared, and whose constructor is one compiled per
number of fields and renamed. Type checkers see `typing.NamedTuple` itself.

The fields are read from the class's `__annotations__`, which the interpreter fills at class
creation only while annotations are postponed (`from __future__ import annotations`, which ruff
requires in every module): from Python 3.14 on, annotations are otherwise evaluated lazily and
the class body has none to read.
"""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    import sys
    from collections.abc import Mapping
    from types import CodeType, FunctionType, MappingProxyType

    try:
        from _collections import _tuplegetter  # the field reader `collections.namedtuple` uses
    except ImportError:  # an interpreter without it
        from operator import itemgetter

        def _tuplegetter(index: int, doc: str) -> property:
            return property(itemgetter(index), doc=doc)

    _SPECIAL = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__"})
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
                             "_make", "_replace", "_asdict", "_source"})
    _UNEXPECTED_FIELD = TypeError if sys.version_info >= (3, 13) else ValueError
    """What `_replace` raises for a field the record lacks: as `collections.namedtuple` does."""
    _CONSTRUCTOR_GLOBALS = {"_tuple_new": tuple.__new__}
    _constructors: dict[int, CodeType] = {}

    def _constructor_code(count: int) -> CodeType:
        """`__new__(_cls, a0, a1, ...)` for `count` fields, compiled once per count."""
        code = _constructors.get(count)
        if code is None:
            names = ", ".join(f"a{index}" for index in range(count))
            made: dict[str, FunctionType] = {}
            exec(f"def __new__(_cls, {names}):\n    return _tuple_new(_cls, ({names},))",
                 _CONSTRUCTOR_GLOBALS, made)
            code = _constructors[count] = made["__new__"].__code__
        return code

    class _RecordTuple(tuple):
        """What every record shares: the methods `collections.namedtuple` gives each of its classes."""

        __slots__ = ()
        _fields: tuple[str, ...] = ()
        _field_defaults: Mapping[str, object] = MappingProxyType({})

        @classmethod
        def _make(cls, iterable):
            made = tuple.__new__(cls, iterable)
            if len(made) != len(cls._fields):
                raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
            return made

        def _replace(self, /, **changes):
            made = self._make(map(changes.pop, self._fields, self))
            if changes:
                raise _UNEXPECTED_FIELD(f"Got unexpected field names: {list(changes)!r}")
            return made

        __replace__ = _replace  # `copy.replace`, as `collections.namedtuple` has it from Python 3.13 on

        def __repr__(self) -> str:
            shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
            return f"{self.__class__.__name__}({shown})"

        def _asdict(self):
            return dict(zip(self._fields, self, strict=True))

        def __getnewargs__(self):
            return tuple(self)

    class _RecordType(type):
        def __new__(cls, typename, bases, namespace):
            if not bases:
                return super().__new__(cls, typename, bases, namespace)
            fields = tuple(namespace.get("__annotations__", {}))
            if not fields:  # Python 3.14 fills `__annotations__` only when annotations are postponed
                raise TypeError(f"{typename}: a record without fields; declare it in a module that starts with "
                                "`from __future__ import annotations`")
            if any(name.startswith("_") for name in fields):
                raise ValueError(f"{typename}: field names cannot start with an underscore: {fields}")
            defaults = tuple(namespace[name] for name in fields if name in namespace)
            if any(name not in namespace for name in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{typename}: a field without a default follows one with a default")
            code = _constructor_code(len(fields)).replace(co_varnames=("_cls", *fields),
                                                           co_qualname=f"{typename}.__new__")
            members = {
                "__doc__": f"{typename}({repr(fields).replace(chr(39), '')[1:-1]})",  # as namedtuple writes it
                "__slots__": (),
                "__new__": FunctionType(code, _CONSTRUCTOR_GLOBALS, "__new__", defaults or None),
                "_fields": fields,
                "_field_defaults": dict(zip(fields[len(fields) - len(defaults):], defaults, strict=True)),
                "__match_args__": fields,
            }
            for index, name in enumerate(fields):
                members[name] = _tuplegetter(index, f"Alias for field number {index}")
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"{typename}: cannot overwrite the named tuple attribute {key}")
                if key not in _SPECIAL and key not in fields:
                    members[key] = value
            if "__eq__" in namespace and "__hash__" not in namespace:
                members["__hash__"] = tuple.__hash__  # a named tuple keeps hashing as a tuple
            members["__module__"] = namespace["__module__"]
            members["__qualname__"] = namespace.get("__qualname__", typename)
            return type(typename, (_RecordTuple,), members)

    class Record(metaclass=_RecordType):
        pass

__all__ = ["Record"]
