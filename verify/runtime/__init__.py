"""The project's shared runtime: one safe write path, bounded reads, field checks, messages, exit codes, signals,
child processes and console streams (verify, verify bench and build.py all use it; standard library only)."""
