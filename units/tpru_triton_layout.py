"""What the TPRU Triton kernels share: their settings (`TritonConfig`), the sizes of a call and the
compile-time constants they select (`Layout`), the kernel modules (compiled or interpreted) and the
no-GPU compile check (`ptxas_report`).

Why a module of its own: the batch kernels' host side (tpru_triton.py, which also picks a kernel per
call) and the persistent kernel's (tpru_persist.py) both build on these; with them here, tpru_triton
imports tpru_persist and nothing imports back (tests/test_import_graph.py forbids the circle, even
through an import inside a function).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from .tpru_fused import NORM_EPS

try:
    import triton
except ImportError as error:  # optional dependency: pip install 'tprbench[gpu]'
    triton = None
    _IMPORT_ERROR: str | None = f"Triton is not installed ({error}; pip install 'tprbench[gpu]')"
else:
    _IMPORT_ERROR = None


SUPPORTED_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class PersistentConfig:
    """Tiles and grid of the persistent kernel (units/tpru_persist.py). Tuned on an H100
    (scripts/gpu_tune_persist.py, docs/gpu/tune_persist*.json): more programs per SM pay where a step
    has many column tiles (`tpru_persist.programs_per_sm`); 16 × 16 tiles with 4 warps are the fastest
    setting that can take them (32 × 32 tiles with 8 warps fit one program an SM; at B 64, 20 rounds
    put them 8-14% ahead at d = 512 only, within the bench's spread, and behind at d = 256:
    docs/benchmarks.md, "Tuned")."""

    block_c: int = 16  # state columns per column tile
    block_n: int = 16  # roles per role tile
    block_k: int = 64  # reduction chunk
    programs_per_sm: int | None = None  # None: by a step's column tiles (tpru_persist.programs_per_sm)
    num_warps: int = 4
    programs: int | None = None  # None: SMs × programs per SM on a card (one per tile in the interpreter)
    grid_sync: bool | None = None  # None: a grid barrier on a card; False: one program plays every program in turn


KERNELS = ("auto", "batch", "persistent")  # TritonConfig.kernel / TPRBENCH_TRITON_KERNEL: see kernel_for


@dataclass(frozen=True)
class TritonConfig:
    """Tile sizes and launch settings (untuned: docs/benchmarks.md has the first GPU timings)."""

    block_b: int = 16  # sequences per program (>= 16: tl.dot's minimum)
    block_k: int = 32  # reduction tile over d (tiled kernels)
    block_s: int = 64  # column tile of a slice (tiled kernels)
    block_n: int = 64  # role tile (tiled kernels)
    resident_max: int = 16384  # elements of W_b, Uᵀ V_b and R together that stay in registers
    num_warps: int = 8  # with num_stages=1: no register spills at d <= 1024 when compiled for sm_90
    num_stages: int = 1  # no software pipelining: the time loop is latency-bound, not bandwidth-bound
    force_tiled: bool = False  # tests: exercise the tiled kernels on small shapes
    kernel: str | None = None  # one of KERNELS; None: the environment's TPRBENCH_TRITON_KERNEL, else auto
    persistent: PersistentConfig = PersistentConfig()


DEFAULT_CONFIG = TritonConfig()


def _pow2(n: int) -> int:
    return max(16, 1 << (max(1, n) - 1).bit_length())


KERNEL_MODULES = ("tpru_triton_kernels", "tpru_persist_kernels")  # the second imports helpers from the first
_KERNELS: dict[tuple[str, bool], ModuleType] = {}


def kernels(interpret: bool, name: str = "tpru_triton_kernels") -> ModuleType:
    """A kernel module of KERNEL_MODULES, compiled (CUDA tensors) or interpreted (CPU tensors)."""
    if (name, interpret) not in _KERNELS:
        if interpret:
            _KERNELS[name, True] = _load_interpreted(name)
        else:
            _KERNELS[name, False] = importlib.import_module(f"{__package__}.{name}")
    return _KERNELS[name, interpret]


def _load_interpreted(name: str) -> ModuleType:
    """A second copy of kernel module `name`, its @triton.jit functions made in interpreter mode.
    The interpreter cannot call compiled @triton.jit functions, so while the copy loads, its imports of
    the kernel modules before it in KERNEL_MODULES resolve to their interpreted copies; sys.modules
    and TRITON_INTERPRET are restored afterwards, so nothing leaks into the compiled modules."""
    earlier = {f"{__package__}.{m}": kernels(True, m) for m in KERNEL_MODULES[: KERNEL_MODULES.index(name)]}
    saved = {key: sys.modules.get(key) for key in earlier}
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"{__package__}._{name}_interpreted", path)
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules.update(earlier)
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = True
            spec.loader.exec_module(module)
    finally:
        for key, value in saved.items():
            if value is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = value
    return module


def _dot_precision(dtype: torch.dtype) -> str:
    """IEEE for float64; for float32 TF32 exactly when torch uses it for CUDA matmuls."""
    if dtype != torch.float32:
        return "ieee"
    matmul = torch.backends.cuda.matmul
    setting = getattr(matmul, "fp32_precision", None)
    if setting in ("tf32", "ieee"):
        return setting
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return "tf32" if matmul.allow_tf32 else "ieee"


def _interpreting(device: torch.device) -> bool:
    if device.type == "cuda":
        return bool(triton.knobs.runtime.interpret)
    if device.type == "cpu":
        return True
    raise RuntimeError(f"the Triton TPRU kernel runs on CUDA tensors (or CPU tensors in Triton's interpreter), not {device}")


@dataclass(frozen=True)
class Layout:
    """Sizes of one call and the kernel they select, with each kernel's compile-time constants."""

    d: int
    roles: int
    slices: int
    rows: int  # rows of W_rec: d + kN folded, 2d (V_b) or d (V_b = I) unfolded
    folded: bool
    relu2: bool
    tanh: bool
    precision: str  # tl.dot input precision
    config: TritonConfig

    @classmethod
    def of(cls, W_rec, R_slices, U_slices, relu2: bool, tanh: bool, config: TritonConfig) -> Layout:
        k, _, N = R_slices.shape
        return cls(W_rec.shape[1], N, k, W_rec.shape[0], U_slices is None, relu2, tanh, _dot_precision(W_rec.dtype), config)

    @property
    def resident(self) -> bool:
        dp, np_ = _pow2(self.d), _pow2(self.roles)
        return self.folded and self.slices == 1 and not self.config.force_tiled and dp * dp + 2 * dp * np_ <= self.config.resident_max

    def grid(self, batch: int) -> tuple[int]:
        return (triton.cdiv(batch, self.config.block_b),)

    def constants(self) -> dict:
        c = self.config
        common = dict(D=self.d, N=self.roles, RELU2=self.relu2, TANH=self.tanh, BLOCK_B=c.block_b, PRECISION=self.precision, EPS=NORM_EPS)
        if self.resident:
            return dict(common, DP=_pow2(self.d), NP=_pow2(self.roles))
        s = self.d // self.slices
        return dict(
            common,
            K=self.slices,
            S=s,
            FOLDED=self.folded,
            HAS_VB=self.rows > self.d,
            BLOCK_K=min(c.block_k, _pow2(max(self.d, self.rows))),
            BLOCK_S=min(c.block_s, _pow2(s)),
            BLOCK_N=min(c.block_n, _pow2(self.roles)),
        )

    def kernel_constants(self, direction: str) -> tuple[str, dict]:
        """(kernel name, constexpr arguments) for direction "forward" or "backward"."""
        name = f"{direction}_{'resident' if self.resident else 'tiled'}"
        constants = self.constants()
        if direction == "backward" and not self.resident:
            constants["ROWS"] = self.rows
        return name, constants


def ptxas_report(fn, constants: dict, types: dict, options: dict, arch: int = 90, dtype: str = "fp32") -> dict:
    """`compile_report` for any kernel: arguments not in `constants` or `types` are pointers to `dtype`."""
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    signature = {a: "constexpr" if a in constants else types.get(a, f"*{dtype}") for a in fn.arg_names}
    compiled = triton.compile(ASTSource(fn, signature, constexprs=constants), target=GPUTarget("cuda", arch, 32), options=options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        gpu = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
        log = subprocess.run(
            [get_ptxas(arch).path, "-v", f"--gpu-name={gpu}", ptx.name, "-o", "/dev/null"], capture_output=True, text=True, check=True
        ).stderr
    registers = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores", log)
    return dict(
        registers=int(registers.group(1)) if registers else None,
        spill_stores=int(spills.group(1)) if spills else None,
        shared_bytes=compiled.metadata.shared,
        ptx=compiled.asm["ptx"],
    )
