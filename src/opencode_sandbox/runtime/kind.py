"""The VM runtimes; kept apart so configuration loads without the runtime types."""

from __future__ import annotations

from enum import StrEnum


class RuntimeKind(StrEnum):
    MICROSANDBOX = "microsandbox"
    DOCKER = "docker"
