"""Is this node's NVIDIA driver new enough for torch's CUDA? The rule is NVIDIA's minor version
compatibility: CUDA X.y runs on any driver of at least the branch that data/cuda_drivers.json names
for major X (CUDA 13 needs R580+, CUDA 12 R525+, CUDA 11 R450+), newer drivers always work.

A node whose driver is too old makes torch see no CUDA device; without this, verify could only say
"no CUDA device visible", which sends people looking for a missing GPU instead of the driver.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from verify.runtime import resources

_DATA = "data/cuda_drivers.json"


@dataclasses.dataclass(frozen=True)
class DriverFloor:
    cuda_major: int
    branch: int  # R580 -> 580
    linux_minimum: str | None  # a finer floor inside the branch, when NVIDIA documents one


@dataclasses.dataclass(frozen=True)
class DriverVerdict:
    driver: str
    cuda: str
    floor: DriverFloor | None  # None: no facts for this CUDA major (newer than the table)
    ok: bool | None  # None when the facts do not say

    @property
    def summary(self) -> str:
        if self.floor is None:
            return (
                f"NVIDIA driver {self.driver} (R{branch_of(self.driver)}); no driver facts for CUDA "
                f"{self.cuda} in verify/data/cuda_drivers.json"
            )
        needs = f"R{self.floor.branch}+" + (
            f" (>= {self.floor.linux_minimum})" if self.floor.linux_minimum else ""
        )
        return f"NVIDIA driver {self.driver} (R{branch_of(self.driver)}); CUDA {self.floor.cuda_major}.x needs {needs}"

    def fix(self) -> str:
        assert self.floor is not None
        older = [
            f for f in floors() if f.cuda_major < self.floor.cuda_major and driver_at_least(self.driver, f)
        ]
        alternative = (
            (
                f", or use an image built for CUDA {older[-1].cuda_major}.x (R{older[-1].branch}+), which this "
                "driver runs"
            )
            if older
            else ""
        )
        return (
            f"upgrade the node's NVIDIA driver to R{self.floor.branch} or newer{alternative}; data-center GPUs can "
            f"also run it through the CUDA forward-compatibility package (cuda-compat) in the image"
        )


@functools.lru_cache(maxsize=1)
def _raw() -> dict:
    return resources.read_json(_DATA)


def source() -> str:
    return _raw()["source"]


def floors() -> tuple[DriverFloor, ...]:
    return tuple(
        sorted(
            (
                DriverFloor(f["cuda_major"], f["branch"], f.get("linux_minimum"))
                for f in _raw()["minimum_driver"]
            ),
            key=lambda f: f.cuda_major,
        )
    )


def _numbers(version: str) -> tuple[int, ...]:
    match = re.match(r"\s*(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"not a driver version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def branch_of(driver: str) -> int:
    """'580.95.05' -> 580."""
    return _numbers(driver)[0]


def driver_at_least(driver: str, floor: DriverFloor) -> bool:
    numbers = _numbers(driver)
    if numbers[0] != floor.branch or not floor.linux_minimum:
        return numbers[0] >= floor.branch
    return numbers >= _numbers(floor.linux_minimum)


def floor_for(cuda: str) -> DriverFloor | None:
    major = int(cuda.split(".")[0])
    return next((f for f in floors() if f.cuda_major == major), None)


def judge(driver: str, cuda: str) -> DriverVerdict:
    """Does `driver` (e.g. '535.104.05') run CUDA `cuda` (torch.version.cuda, e.g. '13.0')?"""
    floor = floor_for(cuda)
    return DriverVerdict(
        driver=driver, cuda=cuda, floor=floor, ok=None if floor is None else driver_at_least(driver, floor)
    )
