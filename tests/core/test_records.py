"""`Record` classes behave as the `typing.NamedTuple` classes they are declared as."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import opencode_sandbox
from opencode_sandbox.core.records import Record

PACKAGE = Path(opencode_sandbox.__file__).parent


class Point(Record):
    """A point."""

    x: int
    y: int = 0
    label: str | None = None

    def moved(self, by: int) -> Point:
        return self._replace(x=self.x + by)


class TypingPoint(NamedTuple):
    """A point."""

    x: int
    y: int = 0
    label: str | None = None


def test_a_record_is_the_named_tuple_typing_would_make() -> None:
    point, typed = Point(1, label="a"), TypingPoint(1, label="a")
    assert tuple(point) == tuple(typed) == (1, 0, "a")
    assert Point._fields == TypingPoint._fields
    assert Point._field_defaults == TypingPoint._field_defaults
    assert Point.__match_args__ == TypingPoint.__match_args__
    assert repr(point) == repr(typed).replace("TypingPoint", "Point")
    assert point._asdict() == typed._asdict()
    assert Point._make([2, 3, None]) == Point(2, 3)
    assert (Point.__doc__, Point.__module__, Point.__name__) == ("A point.", __name__, "Point")
    assert point.moved(2) == Point(3, 0, "a")
    assert hash(point) == hash((1, 0, "a"))
    x, y, label = point
    assert (x, y, label) == (1, 0, "a")
    with pytest.raises(AttributeError):
        point.x = 5  # type: ignore[misc]



class Bare(Record):
    x: int


class TypingBare(NamedTuple):
    x: int


def raised(make: Any) -> tuple[type[BaseException], str]:
    try:
        make()
    except (TypeError, ValueError) as error:
        return type(error), str(error).replace("TypingPoint", "Point")
    raise AssertionError("nothing was raised")


@pytest.mark.parametrize("make", [lambda point: point(), lambda point: point(1, 2, "a", 4),
                                  lambda point: point(1, z=2), lambda point: point(1, x=2),
                                  lambda point: point._make([1]), lambda point: point(1)._replace(z=1)],
                         ids=["none", "too many", "unknown", "twice", "make short", "replace unknown"])
def test_a_record_fails_as_the_named_tuple_does(make: Any) -> None:
    assert raised(lambda: make(Point)) == raised(lambda: make(TypingPoint))


def test_a_record_copies_pickles_and_matches_as_the_named_tuple_does() -> None:
    import copy
    import pickle

    point = Point(1, 2, "a")
    assert pickle.loads(pickle.dumps(point)) == point and type(pickle.loads(pickle.dumps(point))) is Point
    assert copy.copy(point) == copy.deepcopy(point) == point and type(copy.copy(point)) is Point
    assert point.__getnewargs__() == TypingPoint(1, 2, "a").__getnewargs__()
    match point:
        case Point(x, y, label=label):
            assert (x, y, label) == (1, 2, "a")
    assert isinstance(point, tuple) and not hasattr(point, "__dict__")
    assert Point.x.__doc__ == TypingPoint.x.__doc__
    assert Point._fields == ("x", "y", "label") and Point(*range(3)) == (0, 1, 2)
    assert (Bare.__doc__, Bare(1)) == (str(TypingBare.__doc__).replace("TypingBare", "Bare"), (1,))
    assert [name for name in dir(TypingPoint) if name not in dir(Point)] == ["__orig_bases__"]  # typing's own


class Keyed(Record):
    name: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple.__eq__(self, other)


class TypingKeyed(NamedTuple):
    name: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and tuple.__eq__(self, other)


def test_a_record_that_defines_equality_still_hashes_as_the_named_tuple_does() -> None:
    assert hash(Keyed("a")) == hash(TypingKeyed("a")) == hash(("a",))


@pytest.mark.skipif(sys.version_info < (3, 13), reason="copy.replace is Python 3.13's")
def test_copy_replace_makes_a_changed_record_as_for_the_named_tuple() -> None:
    import copy

    assert copy.replace(Point(1), y=2) == copy.replace(TypingPoint(1), y=2) == (1, 2, None)  # type: ignore[attr-defined]

def test_declarations_typing_refuses_are_refused() -> None:
    with pytest.raises(TypeError, match="without a default follows"):
        class Broken(Record):
            first: int = 1
            second: int

    with pytest.raises(AttributeError, match="_replace"):
        class Overwriting(Record):
            x: int

            def _replace(self) -> None:  # type: ignore[override]
                pass

    with pytest.raises(ValueError, match="underscore"):
        class Hidden(Record):
            _x: int


def declared_records() -> list[tuple[str, str, tuple[str, ...]]]:
    """(module, class, annotated field names) of every `Record` class in the package's source."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("opencode_sandbox", *path.relative_to(PACKAGE).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(isinstance(base, ast.Name) and base.id == "Record"
                                                      for base in node.bases):
                fields = tuple(statement.target.id for statement in node.body
                               if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name))
                found.append((module, node.name, fields))
    return found


RECORDS = declared_records()


def test_the_package_declares_its_records_with_record() -> None:
    assert len(RECORDS) > 40


@pytest.mark.parametrize(("module", "name", "fields"), RECORDS, ids=[f"{m}.{n}" for m, n, _ in RECORDS])
def test_each_record_of_the_package_keeps_its_declared_fields(module: str, name: str, fields: tuple[str, ...]) -> None:
    record = getattr(importlib.import_module(module), name)
    assert fields
    assert record._fields == fields


def test_a_record_whose_annotations_are_not_postponed_is_refused() -> None:
    """What a class body holds from Python 3.14 on without `from __future__ import annotations`."""

    def annotate(format: int) -> dict[str, Any]:
        return {"x": int}

    with pytest.raises(TypeError, match="from __future__ import annotations"):
        type(Record)("Lazy", (Record,), {"__module__": __name__, "__annotate__": annotate})
