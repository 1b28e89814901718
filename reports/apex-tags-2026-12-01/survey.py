"""Read setup.py of every tag of an NVIDIA/apex git mirror with toolchain.builder.apex_setup and print, per tag: the
flag style, how it takes parallelism, the hard-coded archs nvcc 13.0 rejects (per switch), and whether the
module map (verify/data/apex_modules.json, since/until) agrees with the modules that setup.py names.

    python reports/apex-tags-2026-12-01/survey.py MIRROR > reports/apex-tags-2026-12-01/survey.txt

MIRROR: a clone of https://github.com/NVIDIA/apex with its tags.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from toolchain.builder import apex_setup  # noqa: E402
from toolchain.spec import compat  # noqa: E402
from verify.layers import module_map  # noqa: E402


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def main(repo: str) -> int:
    tags = sorted(git(repo, "tag").split(), key=lambda t: module_map.tag_key(t) or ())
    nvcc13 = set(compat.load().toolkit("13.0").archs)
    print(
        f"mirror HEAD {git(repo, 'rev-parse', 'HEAD').strip()}; nvcc 13.0 archs from compat.toml: {len(nvcc13)}"
    )
    print(
        "ref       commit    date        style  parallel  archs nvcc 13.0 rejects (switch: arch@line)      map"
    )
    for ref in [*tags, "HEAD"]:
        text = git(repo, "show", f"{ref}:setup.py")
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "setup.py").write_text(text)
            setup = apex_setup.read(Path(tmp))
        named = set(re.findall(r"""(?:\bname\s*=\s*|Extension\(\s*)["'](\w+)["']""", text)) - {
            "apex",
            "_nccl_version_getter",
        }
        disagree = []
        for m in module_map.modules():
            claimed = (m.until is None) if ref == "HEAD" else module_map.in_tag(m.name, ref)
            if claimed != (m.name in setup.modules(m.switch)) or claimed != (m.name in named):
                disagree.append(m.name)
        switches = sorted({s for b in setup.blocks for s in b.switches})
        rejects = [f"{s}: {a}@{line}" for s in switches for a, line in setup.dropped_archs(s, nvcc13)]
        commit = git(repo, "rev-list", "-n1", ref).strip()[:8]
        date = git(repo, "log", "-1", "--format=%cs", ref).strip()
        print(
            f"{ref:9} {commit}  {date}  {setup.style:5}  {setup.parallel:8}  {'; '.join(rejects) or '-':44} "
            f"{'agrees' if not disagree else 'DIFFERS: ' + ', '.join(disagree)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
