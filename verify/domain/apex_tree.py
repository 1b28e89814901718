"""The Apex source-tree check (docker/fetch-apex.sh's is_apex_tree says the same)."""

from __future__ import annotations

from pathlib import Path

from verify.domain.problem import ValueProblem


def check_apex_tree(src: Path) -> None:
    """ValueProblem unless `src` is the root of an NVIDIA/apex checkout (a directory with setup.py and
    apex/__init__.py): the one check of `build.py image/matrix/wheel --apex-src` and the builder;
    docker/fetch-apex.sh's is_apex_tree says the same for the build context."""
    if not src.is_dir():
        raise ValueProblem("no such directory", "clone https://github.com/NVIDIA/apex and pass its path")
    if not (src / "setup.py").is_file() or not (src / "apex" / "__init__.py").is_file():
        raise ValueProblem(
            "not an Apex source tree (needs setup.py and apex/__init__.py)",
            "pass the root of an NVIDIA/apex checkout",
        )
