"""Deterministic torch set-up and the platform facts that can still change a trained network.

Float32 training is a long chain of rounding: the same code, data and seeds give
bitwise-equal weights only when every kernel adds in the same order. On the CPU
that order depends on the torch build, the SIMD kernels it dispatches to
(``torch.backends.cpu.get_cpu_capability()``, forced with the environment
variable ``ATEN_CPU_CAPABILITY=default|avx2|avx512``) and the number of
threads that split each reduction. :func:`configure_torch` fixes everything
that can be fixed from inside the process (thread counts,
``torch.use_deterministic_algorithms``, cuDNN autotuning off, the cuBLAS
workspace), and :func:`platform_facts` records what cannot, so that a result
file says which platform its numbers belong to. :func:`platform_key` is the
part of those facts two runs must share for their numbers to be compared
exactly.

torch is imported inside the functions only.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["configure_torch", "platform_facts", "platform_key", "cpu_flags", "PLATFORM_KEY_FIELDS"]

PLATFORM_KEY_FIELDS: tuple[str, ...] = ("torch", "cpu_capability", "machine", "cpu", "threads", "device")
"""Fields of :func:`platform_facts` that must agree for two runs to give the same numbers."""

_SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "avx_vnni",
    "asimd",
    "sve",
)


def configure_torch(threads: int | None, deterministic: bool, device: str = "cpu") -> dict[str, Any]:
    """Fix the process-wide torch settings a run depends on; return what was set.

    ``threads``: ``torch.set_num_threads`` (intra-op); the inter-op pool is set
    to the same count when it can still be changed (torch allows that once,
    before any parallel work). ``deterministic``: deterministic algorithms
    (``torch.use_deterministic_algorithms``), cuDNN autotuning off and
    deterministic cuDNN; on CUDA also ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (needed
    by deterministic cuBLAS) and ``warn_only=True``, because torchvision's
    RoI-align backward has no deterministic CUDA kernel and would otherwise raise.
    """
    import torch  # lazy: torch is optional (the [train] extra)

    cuda = str(device).startswith("cuda")
    if threads is not None:
        torch.set_num_threads(int(threads))
        try:
            torch.set_num_interop_threads(int(threads))
        except RuntimeError:  # already set, or parallel work has started: keep torch's value
            pass
    if deterministic:
        if cuda:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=cuda)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "deterministic": bool(deterministic),
        "deterministic_warn_only": bool(deterministic and cuda),
    }


def cpu_flags() -> list[str]:
    """The SIMD feature flags of this CPU that select float kernels (from /proc/cpuinfo; empty elsewhere)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return []
    for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(("flags", "Features")):
            have = set(line.split(":", 1)[1].split())
            return [f for f in _SIMD_FLAGS if f in have]
    return []


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one, else the platform's processor string)."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def platform_facts(device: str = "cpu") -> dict[str, Any]:
    """What a trained network's numbers can still depend on after :func:`configure_torch`.

    torch / torchvision / numpy versions, the dispatched CPU capability and the
    ``ATEN_CPU_CAPABILITY`` override, the CPU model and its SIMD flags, the
    intra-/inter-op thread counts, the BLAS/OpenMP configuration torch reports,
    deterministic mode, and the CUDA device when ``device`` is cuda.
    """
    import torch  # lazy: torch is optional (the [train] extra)
    import torchvision  # lazy: torch is optional (the [train] extra)

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "aten_cpu_capability_env": os.environ.get("ATEN_CPU_CAPABILITY"),
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "openmp": bool(torch.backends.openmp.is_available()),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "device": str(device),
    }
    if str(device).startswith("cuda") and torch.cuda.is_available():
        idx = torch.device(device).index or 0
        facts["cuda"] = {
            "device": torch.cuda.get_device_name(idx),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "capability": list(torch.cuda.get_device_capability(idx)),
        }
    return facts


def platform_key(facts: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``facts`` (:func:`platform_facts`) that must agree for exact comparison of numbers."""
    return {k: facts.get(k) for k in PLATFORM_KEY_FIELDS}
