#!/usr/bin/env python3
"""Entry point behind the Makefile: argument parsing and everything else live in toolchain/."""

from verify.runtime import interrupts

interrupts.early()  # a signal from here on is held until the CLI's handlers take it (one line, exit 1)
from toolchain.cli import main  # noqa: E402

raise SystemExit(main())
