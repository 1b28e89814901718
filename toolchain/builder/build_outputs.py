"""What a build produced, read from its real outputs: the extension modules inside the wheel and
the contrib extensions Apex's setup.py skipped with only a warning (its "Skip `--flag`" lines)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from verify.domain import layout
from verify.layers import module_map
from verify.runtime import input_files

MANIFEST_NAME = layout.MANIFEST_NAME
LOG_NAME = layout.LOG_NAME

# setup.py: warnings.warn(f"Skip `{global_option}` as it requires cuDNN 8400 or later, but ...")
_SKIP = re.compile(r"Skip `(--[a-z0-9_]+)`(.*)")


def extension_modules(wheel: str | Path) -> list[str]:
    """Importable names of the compiled extensions in a wheel: `amp_C.cpython-312-x86_64-linux-gnu.so`
    -> `amp_C`; a package member `pkg/_ext.abi3.so` -> `pkg._ext`."""
    names = []
    with input_files.open_zip(wheel) as archive:
        for entry in archive.names():
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
    entries: list[dict[str, str]] = []
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


def _first_line(log_lines: list[str], needle: str) -> int | None:
    return next((i for i, line in enumerate(log_lines, 1) if needle in line), None)


def nothing_built_cause(
    style: str, evidence: str, passed: str, log_lines: list[str], log_path: str | Path
) -> str:
    """Why no expected module is in the wheel, from the flag style and the log: names how the switches were
    passed and whether setup.py ever compiled (`running build_ext`)."""
    said = {"argv": "reads argv switches", "env": "reads APEX_* environment variables"}.get(
        style, "speaks no known flag style"
    )
    build_ext = _first_line(log_lines, "running build_ext")
    pip_line = _first_line(log_lines, "$ ") or 1
    if build_ext is None:
        seen = (
            "the switches never reached it: pip >= 23.1 and setuptools >= 64 forward --config-settings "
            "--build-option to `setup.py bdist_wheel`"
            if style == "argv"
            else "it did not act on the variables: look for its '[apex] Detected APEX_...' lines"
        )
        what = f"setup.py compiled nothing (no 'running build_ext' in {log_path}): {seen}; the pip command is log line {pip_line}"
    else:
        what = f"setup.py ran build_ext (log line {build_ext} of {log_path}) yet built none of them"
    return f"setup.py at this ref {said} ({evidence}); the builder passed {passed}; {what}"


def gate_report(
    missing: list[MissingModule], expected: list[str], cause: str, log_path: str | Path, level: str
) -> list[str]:
    """The gate's verdict, each line once: a headline (with the cause when nothing at all was built), then
    one line per missing module. Lines of outside text (paths, setup.py's words): the printer escapes them."""
    if not missing:
        return []
    if len(missing) == len(expected):
        head = f"none of the {len(expected)} expected modules is in the wheel: {cause}"
    else:
        head = f"{len(missing)} of {len(expected)} expected modules are not in the wheel"
    lines = [f"[apex-builder] {level}: {head}"]
    lines += [f"[apex-builder]   - {item.message(log_path)}" for item in dict.fromkeys(missing)]
    return lines
