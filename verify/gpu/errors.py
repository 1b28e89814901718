"""Errors a GPU worker reports by exit code rather than as a failed check (torch-free)."""


class NoDevice(RuntimeError):
    """A GPU group was started where torch sees no CUDA device (worker exit code 3)."""
