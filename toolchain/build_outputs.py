"""What a build produced, read from its real outputs: the extension modules inside the wheel and
the contrib extensions Apex's setup.py skipped with only a warning (its "Skip `--flag`" lines)."""

from __future__ import annotations

import dataclasses
import re
import zipfile
from pathlib import Path

from verify import module_map

# setup.py: warnings.warn(f"Skip `{global_option}` as it requires cuDNN 8400 or later, but ...")
_SKIP = re.compile(r"Skip `(--[a-z0-9_]+)`(.*)")


def extension_modules(wheel: str | Path) -> list[str]:
    """Importable names of the compiled extensions in a wheel: `amp_C.cpython-312-x86_64-linux-gnu.so`
    -> `amp_C`; a package member `pkg/_ext.abi3.so` -> `pkg._ext`."""
    names = []
    with zipfile.ZipFile(wheel) as archive:
        for entry in archive.namelist():
            path = Path(entry)
            if (
                ".dist-info" in entry
                or ".data/" in entry
                or not (path.suffix == ".so" or ".so." in path.name)
            ):
                continue
            stem = path.name.split(".", 1)[0]
            names.append(".".join((*path.parent.parts, stem)) if path.parent.parts else stem)
    return sorted(set(names))


def flag_env_name(option: str) -> str:
    """setup.py's command-line option to its environment flag: `--cudnn_gbn` -> `APEX_CUDNN_GBN`."""
    return "APEX_" + option.lstrip("-").upper()


@dataclasses.dataclass(frozen=True)
class SkipWarning:
    flag: str
    line_no: int  # 1-based line in the build log
    text: str


def skip_warnings(log_lines: list[str]) -> list[SkipWarning]:
    found: dict[str, SkipWarning] = {}
    for number, line in enumerate(log_lines, start=1):
        match = _SKIP.search(line)
        if match:
            flag = flag_env_name(match.group(1))
            found.setdefault(flag, SkipWarning(flag, number, line[match.start() :].strip()))
    return list(found.values())


def skipped_extensions(log_lines: list[str]) -> list[dict[str, str]]:
    """Manifest entries {"module", "warning"}: every module of a flag that setup.py skipped."""
    entries = []
    for warning in skip_warnings(log_lines):
        names = [m.name for m in module_map.modules() if m.flag == warning.flag] or [warning.flag]
        entries.extend({"module": name, "warning": warning.text} for name in names)
    return entries


@dataclasses.dataclass(frozen=True)
class MissingModule:
    module: str
    flag: str
    log_line: int | None  # where the log says why, if it does
    why: str

    def message(self, log_path: str | Path) -> str:
        where = (
            f"see build log line {self.log_line} of {log_path}"
            if self.log_line
            else f"see build log {log_path}"
        )
        return f"expected module {self.module} (flag {self.flag}) is not in the wheel: {self.why}; {where}"


def missing_modules(expected: list[str], built: list[str], log_lines: list[str]) -> list[MissingModule]:
    """The static gate's first half: every expected module that the wheel does not hold, with the
    log line that explains it (a Skip warning, else the last line naming the module)."""
    built_set = set(built) | {name.rsplit(".", 1)[-1] for name in built}
    skips = {w.flag: w for w in skip_warnings(log_lines)}
    missing = []
    for name in expected:
        if name in built_set:
            continue
        try:
            flag = module_map.module(name).flag
        except KeyError:
            flag = "unknown"
        if flag in skips:
            missing.append(
                MissingModule(name, flag, skips[flag].line_no, f"setup.py skipped it ({skips[flag].text})")
            )
            continue
        line_no = _last_line_naming(log_lines, name)
        why = "the log names it last here"
        if line_no is None:
            line_no = _last_line_naming(log_lines, flag)
            why = (
                "setup.py did not build it although it saw the flag"
                if line_no
                else "setup.py did not build it"
            )
        missing.append(MissingModule(name, flag, line_no, why))
    return missing


def _last_line_naming(log_lines: list[str], word: str) -> int | None:
    return next((i for i in range(len(log_lines), 0, -1) if word in log_lines[i - 1]), None)
