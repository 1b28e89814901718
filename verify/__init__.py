"""verify: does this Apex install really work on this GPU, and if not, why not.

Runs inside any image or on any host; depends on the standard library and torch only.
"""

__version__ = "0.1.0"
# 2: timings carry two figures (kernel_time, host_inclusive) with winners; 3: the compile and large
# layers, and per-feature recommendations from the timings (compiled torch among the natives)
SCHEMA_VERSION = "3"
# PyPI's unrelated `verify` (an assertion library) installs a top-level package of the same name: the
# apex-verify console script (apex_verify_entry.py) checks for this attribute before running anything
APEX_VERIFY_MARKER = "apex-toolchain verify"
