"""`apex-verify install --index URL`: from an environment's torch to a verified Apex in one command.

`local_stack.py` reads the stack from the installed torch (version, CUDA build, C++ ABI, Python, platform,
glibc); `index_stacks.py` reads the index's stacks.json (the bounded URL reader, shape-checked);
`choice.py` picks the stack and wheel tags that fit, or the refusal that names the nearest stack and the
build command; `installer.py` runs uv or pip with torch pinned exactly; `command.py` is the command
line. Each refusal is an InstallProblem: one line, an exit code, raised before anything is installed.
"""
