"""The one timestamp format of records written here (results, publish records, audits, build dates)."""

from __future__ import annotations

import datetime as dt


def now() -> str:
    """The current time as records carry it: UTC, ISO 8601, seconds."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
