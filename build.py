#!/usr/bin/env python3
"""Entry point behind the Makefile: argument parsing and everything else live in toolchain/."""
from toolchain.cli import main

raise SystemExit(main())
