"""verify.layers.fatbin on real ELF files: a minimal ELF64 built here byte by byte, and (when nvcc is installed)
real shared libraries compiled by nvcc.

The builder below writes the documented layout (see verify/layers/fatbin.py's docstring; sources:
n-eiling/cuda-fatbin-decompression `fatbin-decompress.h`, GrigoryEvko/nvopen-tools
`fatbin/FORMAT_SPECIFICATION.md`): an ELF64 header, a `.shstrtab` and a `.nv_fatbin` section holding
containers (u32 magic 0xBA55ED50, u16 version 1, u16 header size 16, u64 size) of entries (u16 kind
1=PTX/2=ELF, u32 header size, u64 payload size, u16/u16 code version, u32 arch, u64 flags). The nvcc test
checks that the builder and nvcc agree, so the hand-made bytes are not just the parser's own assumptions.
"""

from __future__ import annotations

import importlib.util
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from verify.layers import fatbin


def fatbin_container(entries: list[tuple[int, int, int]]) -> bytes:
    """entries: (kind, arch, flags) -> one container; payloads are 8 bytes of filler."""
    body = b""
    for kind, arch, flags in entries:
        payload = b"\x7fELF\0\0\0\0" if kind == 2 else b".version"
        header = struct.pack(
            "<HHIQIIHHIIIQQQ",
            kind,
            0x0101,
            64,
            len(payload),
            0,
            0,
            8 if kind == 2 else 0,
            1 if kind == 2 else 9,
            arch,
            0,
            0,
            flags,
            0,
            0,
        )
        body += header + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_sections(sections: dict[str, bytes]) -> bytes:
    """A minimal little-endian ELF64 file with the given PROGBITS sections and a .shstrtab."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    data = b""
    layout = []  # (name offset, file offset, size, type)
    offset = 64
    for name, blob in [*sections.items(), (".shstrtab", names)]:
        pad = -(offset + len(data)) % 8
        data += b"\0" * pad
        layout.append(
            (
                names.index(name.encode() + b"\0"),
                offset + len(data),
                len(blob),
                3 if name == ".shstrtab" else 1,
            )
        )
        data += blob
    shoff = offset + len(data) + (-(offset + len(data)) % 8)
    data += b"\0" * (shoff - offset - len(data))
    shdrs = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)  # the null section
    for name_off, off, size, typ in layout:
        shdrs += struct.pack("<IIQQQQIIQQ", name_off, typ, 0, 0, off, size, 0, 0, 8, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(layout) + 1, len(layout)
    )
    return header + data + shdrs


def test_reads_sass_and_ptx_from_two_containers(tmp_path: Path) -> None:
    blob = fatbin_container([(2, 80, 0x11)]) + fatbin_container([(2, 90, 0x100011), (1, 90, 0x8011)])
    so = tmp_path / "amp_C.so"
    so.write_bytes(elf_with_sections({".text": b"\x90" * 5, ".nv_fatbin": blob}))
    targets = fatbin.read_targets(so)
    assert targets is not None
    assert targets.to_json() == {"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90"]}


def test_relocatable_fatbin_section_is_read(tmp_path: Path) -> None:
    obj = tmp_path / "k.o"
    obj.write_bytes(elf_with_sections({"__nv_relfatbin": fatbin_container([(2, 86, 0x11)])}))
    targets = fatbin.read_targets(obj)
    assert targets and targets.sass == ["sm_86"]


def test_elf_without_gpu_code_is_none(tmp_path: Path) -> None:
    plain = tmp_path / "cpu_only.so"
    plain.write_bytes(elf_with_sections({".text": b"\xc3"}))
    assert fatbin.read_targets(plain) is None
    spec = importlib.util.find_spec("_ctypes")  # a real CPU-only extension module of this Python
    assert spec and spec.origin
    real = spec.origin
    assert fatbin.read_targets(real) is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"not an elf at all", "not an ELF"), (b"\x7fELF\x01\x01" + b"\0" * 58, "ELF64")],
)
def test_non_elf_is_a_clear_error(tmp_path: Path, content: bytes, problem: str) -> None:
    bad = tmp_path / "bad.so"
    bad.write_bytes(content)
    with pytest.raises(fatbin.FatbinError, match=problem):
        fatbin.read_targets(bad)


def test_corrupt_fatbin_magic_is_a_clear_error(tmp_path: Path) -> None:
    blob = bytearray(fatbin_container([(2, 90, 0x11)]))
    blob[0] ^= 0xFF
    so = tmp_path / "broken.so"
    so.write_bytes(elf_with_sections({".nv_fatbin": bytes(blob)}))
    with pytest.raises(fatbin.FatbinError, match="bad fatbin magic"):
        fatbin.read_targets(so)


def _targets(*names: str) -> fatbin.FatbinTargets:
    out = []
    for name in names:
        kind = "sass" if name.startswith("sm_") else "ptx"
        digits = name.split("_")[1]
        variant = digits[-1] if digits[-1] in "af" else ""
        out.append(fatbin.CodeTarget(kind, int(digits.rstrip("af")), variant))
    return fatbin.FatbinTargets(tuple(out))


@pytest.mark.parametrize(
    ("built", "capability", "compatible", "via"),
    [
        (("sm_90",), (9, 0), True, "sm_90"),
        (("sm_80",), (8, 6), True, "sm_80"),  # same major, newer minor: binary compatible
        (("sm_86",), (8, 0), False, None),  # never downwards
        (("sm_80",), (9, 0), False, None),  # SASS never crosses a major version
        (("sm_80", "compute_80"), (9, 0), True, "compute_80"),  # PTX JIT
        (("sm_90a",), (9, 0), True, "sm_90a"),
        (("compute_90a",), (10, 0), False, None),  # arch-specific: exactly 9.0 only
        (("sm_100f",), (10, 3), True, "sm_100f"),  # family
        (("sm_120",), (12, 1), True, "sm_120"),
        ((), (9, 0), False, None),
    ],
)
def test_compatibility_rule(built, capability, compatible, via) -> None:
    verdict = fatbin.compatibility(_targets(*built), capability)
    assert (verdict.compatible, verdict.via) == (compatible, via)


def test_mismatch_message_names_archs_and_fix() -> None:
    verdict = fatbin.compatibility(_targets("sm_80"), (9, 0))
    assert verdict.message == (
        "arch mismatch: built for sm_80 only, this GPU is sm_90 — rebuild with TORCH_CUDA_ARCH_LIST=9.0"
    )


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc not installed: the real-.so check runs where it is"
)
def test_real_nvcc_shared_library(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(
        "__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n"
        'extern "C" void launch(float* x) { k<<<1, 32>>>(x); }\n'
    )
    so = tmp_path / "k.so"
    subprocess.run(
        [
            "nvcc",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90a,code=sm_90a",
            "-gencode",
            "arch=compute_90,code=compute_90",
            "-o",
            str(so),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    targets = fatbin.read_targets(so)
    assert targets is not None
    assert targets.to_json() == {"sass": ["sm_80", "sm_90a"], "ptx": ["compute_90"]}
    assert fatbin.compatibility(targets, (9, 0)).via == "sm_90a"
    assert fatbin.compatibility(targets, (10, 0)).via == "compute_90"
    assert not fatbin.compatibility(targets, (7, 5)).compatible


def _ext(tmp_path: Path, name: str, entries: list[tuple[int, int, int]]):
    from verify.layers.extensions import ExtensionResult

    so = tmp_path / f"{name}.so"
    so.write_bytes(elf_with_sections({".nv_fatbin": fatbin_container(entries)}))
    return ExtensionResult(name, "APEX_CUDA_EXT", "core", True, "ok", path=str(so))


def test_arch_is_checked_on_every_gpu_of_the_node(tmp_path: Path) -> None:
    from verify.layers.arch import arch_layer, usable_on_devices

    one = [_ext(tmp_path, "amp_C", [(2, 90, 0x11)])]
    single = arch_layer(one, (9, 0), [(9, 0)])
    assert single.checks[0].status.value == "PASS" and "GPUs" not in single.checks[0].summary
    assert (
        "devices" not in (single.extensions[0].arch or {}) and one[0].arch is None
    )  # a new result; the input stays
    eight = arch_layer([_ext(tmp_path, "amp_C", [(2, 90, 0x11)])], (9, 0), [(9, 0)] * 8)
    assert eight.checks[0].status.value == "PASS" and eight.checks[0].summary.endswith(
        "; all 8 GPUs can run it"
    )
    eight_arch = eight.extensions[0].arch
    assert eight_arch and [d["compatible"] for d in eight_arch["devices"]] == [True] * 8
    # a mixed node: cuda:2 is an A100 and the build has sm_90 only
    mixed = [
        _ext(tmp_path, "amp_C", [(2, 90, 0x11)]),
        _ext(tmp_path, "fused_layer_norm_cuda", [(2, 80, 0x11), (2, 90, 0x11)]),
    ]
    layer = arch_layer(mixed, (9, 0), [(9, 0), (9, 0), (8, 0)])
    checks = {c.name: c for c in layer.checks}
    assert (
        checks["amp_C"].status.value == "FAIL"
        and "cuda:2: arch mismatch: built for sm_90 only" in checks["amp_C"].summary
    )
    assert checks["fused_layer_norm_cuda"].status.value == "PASS"
    assert (layer.extensions[0].arch or {})[
        "compatible"
    ] is True  # GPU 0, where parity and timing run, is fine
    usable = usable_on_devices(layer.extensions, 3)
    assert usable[0] == usable[1] == {"amp_C", "fused_layer_norm_cuda"} and usable[2] == {
        "fused_layer_norm_cuda"
    }
