"""Figures of one built cell, from the image and its run's files: python3 figures.py TAG CONSOLE_LOG (from the repo root).
Reads the image through the project's own command (`build.py inspect TAG`), importing nothing of the code."""

import json
import re
import subprocess
import sys
from pathlib import Path

tag, log = sys.argv[1], Path(sys.argv[2])
info = json.loads(
    subprocess.run(
        [sys.executable, "build.py", "inspect", tag], capture_output=True, text=True, check=True
    ).stdout
)
out = {
    "tag": tag,
    "size_bytes": info["size_bytes"],
    "labels": info["labels"],
    "base": info["oci"].get("base.name"),
    "apex_commit": info["apex_commit"],
}
rep = info["static_report"]
out["gate"] = {"verdict": rep["verdict"], "summary": rep["summary"]}
out["sass"] = {e["module"]: (e.get("arch") or {}).get("sass") for e in rep["extensions"] if e.get("arch")}
out["ptx"] = {e["module"]: (e.get("arch") or {}).get("ptx") for e in rep["extensions"] if e.get("arch")}
m = info["manifest"]
out["manifest"] = {
    k: m["versions"].get(k) for k in ("torch", "torch_cuda", "nvcc", "nvcc_source", "python", "gcc")
}
out["manifest"]["arch_list"] = m.get("arch_list")
out["manifest"]["build_s"] = (m.get("build") or {}).get("duration_s") or (m.get("timing") or {}).get("wall_s")
res = json.loads(Path("out/cells", tag, "result.json").read_text())
out["result"] = {
    "status": res["status"],
    "build_s": res["build"].get("duration_s"),
    "verify": {k: res.get("verify", {}).get(k) for k in ("verdict", "mode", "summary", "exit_code")},
}
vrep = json.loads(Path(res["verify"]["report_path"]).read_text())
out["verify_identity"] = [
    (c["name"], c["status"], c["summary"]) for c in vrep["checks"] if c["id"].startswith("identity")
][:6]
out["verify_warn_fail"] = [
    (c["id"], c["status"], c["summary"][:160]) for c in vrep["checks"] if c["status"] in ("WARN", "FAIL")
]
text = log.read_text(errors="replace")
prog = re.findall(r"#\d+ ([\d.]+) \[apex-builder\] progress: (.*)", text)
out["progress_lines"] = len(prog)
out["progress_sample"] = [f"{t} s: {p}" for t, p in (prog[:2] + prog[-2:])]
gaps = [float(b[0]) - float(a[0]) for a, b in zip(prog, prog[1:], strict=False)]
out["progress_max_gap_s"] = max(gaps) if gaps else None
base_line = [line for line in text.splitlines() if line.startswith("[ BASE ]")]
out["base_line"] = base_line
run = subprocess.run(
    [
        "docker",
        "run",
        "--rm",
        tag,
        "python",
        "-c",
        "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)",
    ],
    capture_output=True,
    text=True,
)
out["import_torch"] = {"stdout": run.stdout.strip(), "stderr": run.stderr.strip()}
print(json.dumps(out, indent=1))
