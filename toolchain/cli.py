"""build.py: validate the matrix, plan and build images, verify and inspect them, report on the matrix.

    build.py plan     [--cuda 12.4 ...]   resolved build args and the build command; nothing built
    build.py validate                     check every cell of matrix.toml against the compatibility facts
    build.py image    --cuda 12.4 [...]   build one image (validated first)
    build.py matrix   [--cuda ...]        build (and verify) every selected cell; a failure does not stop the rest
    build.py verify   IMAGE               run verify inside IMAGE (GPU when the daemon has one, else --static)
    build.py inspect  IMAGE               labels and embedded reports, no container run
    build.py report                       all cells -> out/matrix-report.md + .html
    build.py wheel    --apex-src DIR ...  the Apex wheel builder (bare metal, no Docker)
    build.py gh-matrix | bake | pull      CI generators and pulling a prebuilt image (by digest: --by-digest)
    build.py facts check                  compare the compatibility facts with what PyPI publishes
    build.py publish  --cell X --registry R   push a built cell, record its digest (out/cells/<id>/published.json)
    build.py zipapp   --out verify.pyz    verify as one file: `python verify.pyz` audits any Python + torch
    build.py verify-wheel --out dist/     verify as the apex-verify wheel (`apex-verify install --index URL`)
    build.py index WHEELS --index DIR     checked, manylinux-tagged wheels -> a PEP 503/691 index per stack
    build.py release --apex-src DIR       the publish workflow here: wheel, index, fresh venv, apex-verify install

The commands are in toolchain/commands/ (parser.py names each one's function); this is the entry point:
signals and child processes as every CLI of the project, one line and an exit code for every error, and
the output folders a failed command made removed again.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from pathlib import Path

from toolchain.commands.parser import Parser, build_parser
from toolchain.console import Console
from toolchain.errors import EnvironmentUnavailable, ToolchainError, UsageError, report
from verify.runtime import atomic, entry_point, exit_codes, input_files
from verify.runtime.messages import did_you_mean, shown
from verify.runtime.out_dirs import OutputDirs

# atomic writes go through a temp file `.NAME.XXXXXXXX.tmp` beside the target: name the target instead
_ATOMIC_TEMP = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")


def _option_of(path: Path | None, args: argparse.Namespace | None) -> str | None:
    """The command-line option (and its value) whose path the failing path is, or lies under: `--out OUT`
    for OUT/x.md."""
    if path is None or args is None:
        return None
    for name, value in vars(args).items():
        if isinstance(value, (str, Path)) and str(value) and name not in ("command", "func"):
            given = Path(value)
            if path == given or given in path.parents:
                return f"--{name.replace('_', '-')} {value}"
    return None


def _os_error(err: OSError, args: argparse.Namespace | None = None) -> ToolchainError:
    """An OSError that reached the top, as one line: a full disk is the environment (exit 3); a path
    the user gave (--matrix, --out, --logs, --output) that cannot be read or written is usage (exit 2)."""
    path = err.filename
    if path is not None:
        path = Path(os.fsdecode(path))
        if match := _ATOMIC_TEMP.match(path.name):
            path = path.with_name(match["name"])
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        # a report or log could not be written: atomic writes leave the previous file whole
        where = f" writing {path}" if path else ""
        return EnvironmentUnavailable(
            f"the disk is full (no space left on device){where}; free space, or point "
            "--out/--logs at another filesystem"
        )
    if isinstance(err, atomic.UnwritableTarget):  # its text already says what the path is and what to do
        # a link met inside a folder the tool owns (--out, --logs): the option that named the folder too
        option = _option_of(path, args) if isinstance(err, atomic.LinkInOwnedTree) else None
        return UsageError(f"{option}: {path}: {err.strerror}" if option else f"{path}: {err.strerror}")
    if path is None:  # no path to blame: a socket or device, not an input (requests' errors land here)
        return EnvironmentUnavailable(
            f"{err.strerror or err}; check the Docker daemon and the network, then retry"
        )
    option = _option_of(path, args)
    if option:  # name the option the path came from, not every option that takes one
        where = "" if str(path) == option.split(" ", 1)[1] else f" ({path})"
        return UsageError(f"{option}{where}: {err.strerror or err}; pass a path this user can read and write")
    return UsageError(
        f"{path}: {err.strerror or err}; pass a path that exists and this user can read and write "
        "(check --matrix, --out, --logs and --output)"
    )


def _parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """parse_args, with "did you mean" for a mistyped command or option."""
    if argv and not argv[0].startswith("-") and argv[0] not in parser.commands:
        hint = did_you_mean(argv[0], parser.commands)
        raise UsageError(
            f"unknown command {shown(argv[0])}; "
            + (f"{hint} " if hint else "")
            + f"(commands: {', '.join(parser.commands)})"
        )
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = parser.commands.get(args.command or "", parser)
        options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
        word = extra[0].split("=", 1)[0]
        hint = did_you_mean(word, options) if word.startswith("-") else None
        what = "unknown option" if word.startswith("-") else "unexpected argument"
        raise UsageError(
            f"{command.prog}: {what} {shown(word)}; "
            + (f"{hint} " if hint else "")
            + f"see `{command.prog} --help`"
        )
    return args


def _run(args: argparse.Namespace, console: Console) -> int:
    """Run the command; if it fails, remove the output directories it created and left empty."""
    output = getattr(args, "output", None)
    made = OutputDirs(
        [
            getattr(args, "out", None),
            getattr(args, "logs", None),
            output.parent if output is not None else None,
        ]
    )
    return made.run(lambda: args.func(args, console))


def main(argv: list[str] | None = None) -> int:
    """build.py: signals, stdout and child processes as every CLI of the project (verify.runtime.entry_point)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return entry_point.run("build.py", lambda: _main(argv))


def _main(argv: list[str]) -> int:
    console = Console()
    args = None
    try:
        if argv[:1] == ["wheel"]:  # the builder parses its own options (it also runs inside images)
            from toolchain.builder import apex_builder
            from toolchain.spec import compat

            # the builder cannot read compat.toml in the image (no tomllib), so its default is handed in
            return apex_builder.main(argv[1:], default_flags=",".join(compat.load().apex_core_flags))
        parser = build_parser()
        args = _parse(parser, argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return exit_codes.USAGE
        return _run(args, console)
    except ToolchainError as err:
        if console.github:
            console.error(str(err).splitlines()[0])
        return report(err)
    except OSError as err:
        return report(_os_error(err, args))
    except (
        input_files.InputFileError
    ) as err:  # a file the bounded reader refused: the input, its problem, the fix
        return report(UsageError(str(err)))
    except ModuleNotFoundError as err:
        if err.name != "docker":  # only the optional SDK is an environment problem; anything else is a bug
            raise
        return report(EnvironmentUnavailable(f"{err}; install the build extras: pip install -e '.[build]'"))
