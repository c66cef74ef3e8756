"""Durations (`10s`, `90m`, `24h`, `30d`) and sizes (`512M`, `4G`) as users write them."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION_RE = r"^(?P<number>\d+)(?P<unit>[smhd])$"
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = timedelta(days=36500)

_SIZE_RE = r"(?i)^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT])(?:i?B)?$"
_SIZE_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_duration(text: str) -> timedelta:
    """Parse a duration; `0` alone is accepted as no time at all.

    Raises ValueError with the reason, phrased for the user.
    """
    value = text.strip()
    if value == "0":
        return timedelta(0)
    if value.startswith("-"):
        raise ValueError(f"'{text}' is negative; use a positive duration such as 10s, 90m, 24h or 30d")
    match = re.match(_DURATION_RE, value)
    if not match:
        raise ValueError(f"'{text}' is not a duration; write a whole number and one unit: 10s, 90m, 24h, 30d")
    seconds = int(match.group("number")) * _DURATION_UNITS[match.group("unit")]
    duration = timedelta(seconds=seconds)
    if duration > MAX_DURATION:
        raise ValueError(f"'{text}' is longer than {MAX_DURATION.days}d")
    return duration


def format_duration(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_size(text: str) -> int:
    """Parse a size in binary units (`512M`, `4G`, `1.5GiB`) into bytes."""
    match = re.match(_SIZE_RE, text.strip())
    if not match:
        raise ValueError(f"'{text}' is not a size; write a number and a unit: 512M, 4G")
    return int(float(match.group("number")) * _SIZE_UNITS[match.group("unit").upper()])


def format_size(size_bytes: int) -> str:
    """Binary units, one decimal: `1.4 GiB`, `512.0 MiB`, `300 B`."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
