"""The `apex-verify` console script (the apex-verify wheel, `build.py verify-wheel`): checks that the
`verify` package Python imports is this project's, then runs `verify.cli`.

Why a module of its own: the import name `verify` is shared with PyPI's unrelated `verify` distribution (a
2017 assertion library). Whichever was installed last owns site-packages/verify/, and a `verify` earlier
on sys.path shadows ours; running verify.cli from such a package would fail with a traceback or do
something else entirely. This module's name is unique, so it always starts, and it says what it found.
Standard library only, and nothing of `verify` is imported beyond its __init__ before the check.
"""

from __future__ import annotations

import sys

MARKER = ("APEX_VERIFY_MARKER", "apex-toolchain verify")  # verify/__init__.py's attribute and value
USAGE, ENVIRONMENT = 2, 3  # verify.runtime.exit_codes' values, before verify can be trusted
REINSTALL = "pip install --force-reinstall --no-deps apex-verify"


def problem() -> tuple[int, str] | None:
    """(exit code, one line) when the importable `verify` is not apex-verify's; None when it is."""
    try:
        import verify
    except Exception as exc:  # a missing package, or another package's __init__ failing as it imports
        return ENVIRONMENT, (
            f"apex-verify: cannot import its `verify` package ({type(exc).__name__}: {exc}); reinstall it:"
            f" {REINSTALL}"
        )
    attribute, value = MARKER
    if getattr(verify, attribute, None) == value:
        return None
    where = getattr(verify, "__file__", None) or ", ".join(getattr(verify, "__path__", [])) or "?"
    return USAGE, (
        f"apex-verify: the `verify` package Python imports here is another one ({where}), most likely"
        " PyPI's unrelated `verify` distribution, which uses the same import name; remove it with"
        f" `pip uninstall verify` and then `{REINSTALL}`, or install apex-verify into a venv of its own"
    )


def main() -> int:
    found = problem()
    if found is not None:
        code, line = found
        sys.stderr.write(line + "\n")
        return code
    from verify.runtime import interrupts

    interrupts.early()  # a signal from here on is held until verify's handlers take it (one line, exit 1)
    from verify.cli import main as verify_main

    return verify_main(prog="apex-verify")


if __name__ == "__main__":
    raise SystemExit(main())
