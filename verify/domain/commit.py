"""The short-sha rule: which refs name a commit, and the short form a tag or version uses."""

from __future__ import annotations

import re

# A commit named by hex: 7 (git's short form) to 40 characters, lower case as git prints it.
# docker/fetch-apex.sh's is_commit_sha says the same (tests/unit/test_values.py feeds both one case list).
_COMMIT_SHA = re.compile(r"[0-9a-f]{7,40}")
SHORT_SHA_LEN = 7
FULL_SHA_LEN = 40  # a full commit: what --apex-commit records (docker/Dockerfile's apex-build stage)


def is_commit_sha(text: str | None) -> bool:
    """'6424da3' or a full sha: True; a tag, a branch, upper case or non-ASCII: False."""
    return isinstance(text, str) and _COMMIT_SHA.fullmatch(text) is not None


def short_ref(ref: str) -> str:
    """The form a tag or version names an Apex ref by: a commit's first 7 hex digits, else the ref as is."""
    return ref[:SHORT_SHA_LEN] if is_commit_sha(ref) else ref
