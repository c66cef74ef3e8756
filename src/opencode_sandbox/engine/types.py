"""The records the image engine answers with."""

from __future__ import annotations

from opencode_sandbox import TYPE_CHECKING
from opencode_sandbox.core.records import Record

if TYPE_CHECKING:
    from datetime import datetime


class ListedImage(Record):
    """An image in the engine: one per tag, or one for an untagged (dangling) image."""

    image_id: str
    reference: str | None
    """`repository:tag`; None for a dangling image."""
    created_at: datetime | None


class BuildOutcome(Record):
    exit_code: int
    image_id: str | None
    """The built image's ID (`sha256:<64 hex>`); None when the build failed."""
