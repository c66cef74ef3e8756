from __future__ import annotations

__version__ = "0.1.0"

# `typing.TYPE_CHECKING` without loading `typing`, which the warm path does not otherwise need:
# type checkers take any `if TYPE_CHECKING:` as true, and at run time it is false.
TYPE_CHECKING = False
