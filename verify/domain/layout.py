"""What one build leaves in its folder: the builder's --out, and /opt/apex in an image (IMAGE)."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

MANIFEST_NAME = "build-manifest.json"
LOG_NAME = "apex-build.log"
STATIC_REPORT_NAME = "verify-static.json"
STATIC_MARKDOWN_NAME = "verify-static.md"
STATIC_SLIM_REPORT_NAME = "verify-static-slim.json"  # runtime-slim's second gate
STATIC_SLIM_MARKDOWN_NAME = "verify-static-slim.md"
INPUTS_NAME = "inputs"
WHEEL_HASHES_NAME = "wheels.sha256"  # under inputs/: the torch wheels installed (docker/install-torch.sh)


@dataclasses.dataclass(frozen=True)
class ApexLayout:
    """What one build leaves in its folder: the builder's --out, and /opt/apex in an image (IMAGE)."""

    root: PurePosixPath

    @property
    def manifest(self) -> PurePosixPath:
        return self.root / MANIFEST_NAME

    @property
    def log(self) -> PurePosixPath:
        return self.root / LOG_NAME

    @property
    def static_report(self) -> PurePosixPath:
        return self.root / STATIC_REPORT_NAME

    @property
    def static_markdown(self) -> PurePosixPath:
        return self.root / STATIC_MARKDOWN_NAME

    @property
    def static_slim_report(self) -> PurePosixPath:
        return self.root / STATIC_SLIM_REPORT_NAME

    @property
    def static_slim_markdown(self) -> PurePosixPath:
        return self.root / STATIC_SLIM_MARKDOWN_NAME

    @property
    def inputs(self) -> PurePosixPath:
        return self.root / INPUTS_NAME

    @property
    def wheel_hashes(self) -> PurePosixPath:
        return self.inputs / WHEEL_HASHES_NAME

    @property
    def wheels(self) -> PurePosixPath:
        """The glob of the wheel(s) the build left there."""
        return self.root / "*.whl"

    def paths(self) -> dict[str, PurePosixPath]:
        """Every path by its name (the Dockerfile test checks them against docker/)."""
        names = (
            "manifest",
            "log",
            "static_report",
            "static_markdown",
            "static_slim_report",
            "static_slim_markdown",
            "inputs",
            "wheel_hashes",
            "wheels",
        )
        return {"root": self.root, **{name: getattr(self, name) for name in names}}


IMAGE = ApexLayout(PurePosixPath("/opt/apex"))
