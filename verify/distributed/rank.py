"""One rank of the cross-GPU checks: join the process group, run the checks in step with the others.

    python -m verify.distributed.rank --checks NAME,NAME --seed N --timeout S --backend nccl|gloo --device cuda|cpu

Started by verify.distributed.launcher, one process per GPU, with the rendezvous in the environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: torch's env:// method) and NVLink multicast
off. Protocol on stdout, one JSON object a line (the stream of verify.gpu.worker.Protocol; anything else
printed goes to stderr):
    {"event": "ready", "rank", "pid", "device", "backend", "setup_s", "env", "nccl_version"}
    {"event": "start", "rank", "check"}
    {"event": "result", "rank", "check": Check.to_json()}   this rank's view of the check
    {"event": "broken", "rank", "error"}   a check raised: the group is out of step, this rank exits 1
    {"event": "done", "rank"}
Exit codes: 0 done, 1 a check raised (broken) or the process group could not be joined, 2 usage error.

Test hook: VERIFY_FAULT_INJECT (modes of verify.gpu.worker: crash, hang, raise, exit, oom, poison) with
TARGET = CHECK@RANK (that rank only), CHECK (every rank), setup@RANK or setup. A rank that hangs before
a collective leaves the others waiting inside it: the hung-collective case, as a real process.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import os
import sys
import time
import traceback

from verify.checks import Check, Status
from verify.distributed.cases import LAYER, case
from verify.distributed.context import RankContext
from verify.gpu.worker import FAULT_ENV, Protocol, inject, parse_faults
from verify.gpu.worker import _finite as finite  # JSON has no NaN: one rule for both protocols
from verify.runtime import exit_codes

# NVLink multicast (NVLS) off in every rank, also when the caller's environment says otherwise: a
# program that creates multicast objects can leave a shared host's GPUs out of service.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def _fault(faults: dict[str, str], target: str, rank: int) -> str | None:
    return faults.get(f"{target}@{rank}") or faults.get(target)


def _describe_device(torch, device) -> str:  # noqa: ANN001 - torch is imported lazily
    if device.type != "cuda":
        return f"cpu (pid {os.getpid()})"
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)  # tells two GPUs of one model apart
    return f"cuda:{device.index} {props.name} (sm_{props.major}{props.minor}" + (
        f", PCI bus {bus})" if bus else ")"
    )


def _init_group(torch, dist, backend: str, device, timeout_s: float) -> None:  # noqa: ANN001
    kwargs = {"backend": backend, "init_method": "env://", "timeout": datetime.timedelta(seconds=timeout_s)}
    if device.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = (
            device  # bind the rank to its GPU at once (NCCL's eager init where torch has it)
        )
    dist.init_process_group(**kwargs)
    # every rank has joined when any says ready; NCCL makes its communicator here, not in the first check
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def _failed(name: str, rank: int, err: BaseException, seed: int) -> Check:
    first = (str(err).strip().splitlines() or [""])[0][:300]
    tail = "".join(traceback.format_exception(type(err), err, err.__traceback__))[-3000:]
    return Check(
        LAYER,
        name,
        Status.FAIL,
        f"{name} raised {type(err).__name__}: {first}",
        {
            "rank": rank,
            "seed": seed,
            "error": f"{type(err).__name__}: {str(err)[:2000]}",
            "traceback_tail": tail,
        },
    )


def run(args: argparse.Namespace, proto: Protocol) -> int:
    faults = parse_faults(os.environ.get(FAULT_ENV, ""))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    todo = [case(n) for n in args.checks.split(",") if n]
    t0 = time.perf_counter()
    mode = _fault(faults, "setup", rank)
    if mode:
        inject(mode, f"setup@{rank}")

    import torch
    import torch.distributed as dist

    if args.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    try:
        _init_group(torch, dist, args.backend, device, args.timeout)
    except Exception as err:  # noqa: BLE001 - the parent reports it from this line
        print(
            f"verify.distributed.rank {rank}: cannot join the {args.backend} process group: "
            f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}",
            file=sys.stderr,
            flush=True,
        )
        return exit_codes.FAILED
    nccl = None
    if device.type == "cuda":
        version = torch.cuda.nccl.version()  # a tuple in torch >= 1.x releases of this decade; an int before
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    proto.emit(
        "ready",
        rank=rank,
        pid=os.getpid(),
        device=_describe_device(torch, device),
        backend=args.backend,
        setup_s=round(time.perf_counter() - t0, 3),
        env={k: os.environ.get(k) for k in MULTICAST_OFF},
        nccl_version=nccl,
    )
    ctx = RankContext(rank, world, local_rank, args.backend, device, args.seed, args.timeout)
    for dist_case in todo:
        proto.emit("start", rank=rank, check=dist_case.name)
        started = time.perf_counter()
        try:
            mode = _fault(faults, dist_case.name, rank)
            if mode:
                inject(mode, f"{dist_case.name}@{rank}")
            check = importlib.import_module(dist_case.module).run(dist_case, ctx)
        except Exception as err:  # noqa: BLE001 - one FAIL; the group is out of step after it
            check = _failed(dist_case.name, rank, err, args.seed)
            check.duration_s = time.perf_counter() - started
            proto.emit("result", rank=rank, check=finite(check.to_json()))
            proto.emit("broken", rank=rank, error=check.details["error"][:500])
            sys.stderr.flush()
            os._exit(exit_codes.FAILED)  # not a clean exit: tearing down a communicator out of step can block
        check.duration_s = time.perf_counter() - started
        proto.emit("result", rank=rank, check=finite(check.to_json()))
    proto.emit("done", rank=rank)
    dist.destroy_process_group()
    return exit_codes.OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m verify.distributed.rank", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--checks", required=True, help="comma-separated check names (verify.distributed.cases)"
    )
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--timeout", type=float, required=True, help="collective timeout of the process group, s"
    )
    parser.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    args = parser.parse_args(argv)
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        print(
            f"verify.distributed.rank: {', '.join(missing)} not set: this process is started by"
            " `python -m verify --distributed`, which sets the rendezvous",
            file=sys.stderr,
        )
        return exit_codes.USAGE
    try:
        parse_faults(os.environ.get(FAULT_ENV, ""))
        for name in filter(None, args.checks.split(",")):
            case(name)
    except (ValueError, KeyError) as err:
        print(f"verify.distributed.rank: {err.args[0]}", file=sys.stderr)
        return exit_codes.USAGE
    return run(args, Protocol())


if __name__ == "__main__":
    raise SystemExit(main())
