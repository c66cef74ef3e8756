"""`Record` classes behave as the `typing.NamedTuple` classes they are declared as."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from opencode_sandbox.core.records import Record


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
