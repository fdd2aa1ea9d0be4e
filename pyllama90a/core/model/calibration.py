"""A calibration: what `python -m pyllama90a calibrate` measured on one device, for one build and one model shape,
and what flash_attn="auto" takes from it.

The file is JSON, $PYLLAMA90A_HOME/calibrations/<key digest>.json, written whole by calibrate(). Its key says
where the numbers hold: the device attention runs on (name and description), the build (the backends it
loaded, CK FlashAttention or not, a digest of its native libraries: another patch series or compiler makes
other libraries) and the model shape (layers, KV heads, K and V head dims). A file whose key is not this one
(copied from another machine, another build) or that does not parse as this format is refused with a logged
message, and `auto` falls back to the built-in table (attention_policy.py).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ...errors import LlamaError
from ..gguf.default_model import home
from .shape import AttentionShape

logger = logging.getLogger("pyllama90a")

FORMAT = "pyllama90a-calibration"
VERSION = 1
PHASES = ("prefill", "decode")
# the request auto serves fastest: (prompt, reply) tokens, a chat turn's order of magnitude
REQUEST = (512, 128)
FLASH_ATTN = ("on", "off", "hybrid")
# a calibration speaks for contexts up to this many times the deepest depth it measured a K/V pair at: the full
# preset measures to at least n_ctx / 4 (depths 0, 1024, 4096, ... up to --n-ctx), --quick to 256 (so 1024)
REACH = 4


class CalibrationError(LlamaError):
    """A calibration file that is corrupt, of another format, or made for another device, build or model shape."""


@dataclass(frozen=True)
class CalibrationKey:
    device: str    # the device attention runs on: "CPU (AMD EPYC 7B13 ...)", "ROCm0 (AMD Instinct MI210)"
    backends: str  # the ggml backends this build loaded, e.g. "CPU:libggml-cpu-zen4.so RPC"
    ck: bool       # CK FlashAttention built in (gfx90a builds)
    libraries: str  # sha256 of the native libraries, first 16 hex digits
    n_layer: int
    n_head_kv: int
    head_k: int
    head_v: int

    @property
    def file_name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"{digest[:16]}.json"


@dataclass(frozen=True)
class SpeedPoint:
    flash_attn: str      # "on", "off", "hybrid"
    fused_decode: bool   # hybrid's decode through the fused kernel
    ctk: str
    ctv: str
    phase: str           # "prefill" or "decode"
    depth: int           # tokens in the cache before the measured ones
    tok_s: float


@dataclass(frozen=True)
class MemoryPoint:
    flash_attn: str
    ctk: str
    ctv: str
    n_ctx: int
    kv_bytes: int
    compute_bytes: int   # the compute buffers of this path (plan_memory)


@dataclass(frozen=True)
class QualityPoint:
    flash_attn: str
    phase: str
    ctk: str
    ctv: str
    mean_kl: float       # mean KL(f16 || this type) of the next-token distributions, nats
    top1: float
    perplexity: float
    perplexity_f16: float


@dataclass(frozen=True)
class Calibration:
    key: CalibrationKey
    model: str           # the model file measured (its name; the key holds its shape)
    created: str
    speed: tuple[SpeedPoint, ...]
    memory: tuple[MemoryPoint, ...]
    quality: tuple[QualityPoint, ...]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, **asdict(self)}, indent=1)


def calibrations_dir() -> Path:
    return home() / "calibrations"


def _records(cls: type[Any], values: object, what: str) -> tuple[Any, ...]:
    """`values` (a JSON list of objects) as records of `cls`, every field present and of its declared type."""
    if not isinstance(values, list):
        raise CalibrationError(f"{what} must be a list")
    kinds: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float), "bool": bool}
    out = []
    for i, value in enumerate(values):
        if not isinstance(value, dict) or set(value) != {f.name for f in fields(cls)}:
            raise CalibrationError(f"{what}[{i}] must have exactly the fields {[f.name for f in fields(cls)]}")
        for f in fields(cls):
            v = value[f.name]
            if not isinstance(v, kinds[str(f.type)]) or (f.type != "bool" and isinstance(v, bool)) or \
                    (isinstance(v, float) and not math.isfinite(v)):
                raise CalibrationError(f"{what}[{i}].{f.name} must be a {f.type}, got {v!r}")
        out.append(cls(**value))
    return tuple(out)


def parse(text: str, expected: CalibrationKey | None = None) -> Calibration:
    """A calibration from its JSON text, checked field by field (and against `expected`'s key)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CalibrationError(f"not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CalibrationError(f"not a {FORMAT} file")
    if data.get("version") != VERSION:
        raise CalibrationError(f"version {data.get('version')!r}, this pyllama90a reads version {VERSION}")
    if not isinstance(data.get("model"), str) or not isinstance(data.get("created"), str):
        raise CalibrationError("model and created must be strings")
    key = _records(CalibrationKey, [data.get("key")], "key")[0]
    if expected is not None and key != expected:
        differ = [f.name for f in fields(CalibrationKey) if getattr(key, f.name) != getattr(expected, f.name)]
        theirs, ours = (", ".join(str(getattr(k, d)) for d in differ) for k in (key, expected))
        raise CalibrationError(f"made for another {', '.join(differ)} ({theirs}; here: {ours})")
    calibration = Calibration(key, data["model"], data["created"], _records(SpeedPoint, data.get("speed"), "speed"),
                              _records(MemoryPoint, data.get("memory"), "memory"),
                              _records(QualityPoint, data.get("quality"), "quality"))
    for p in calibration.speed:
        if p.flash_attn not in FLASH_ATTN or p.phase not in PHASES or p.depth < 0 or p.tok_s <= 0:
            raise CalibrationError(f"speed point {p} is out of range")
    return calibration


def write(calibration: Calibration, folder: Path | None = None) -> Path:
    """The calibration's file under `folder` (default calibrations_dir()), replaced whole."""
    path = (folder or calibrations_dir()) / calibration.key.file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(calibration.to_json())
    tmp.replace(path)
    return path


_guessing_logged: set[str] = set()


def lookup(key: CalibrationKey, *, table_measured: bool = False) -> tuple[Calibration, Path] | None:
    """This key's calibration, if a valid one exists; a refused file is logged (each time: it may be fixed), a
    missing one once per device ("auto" then follows the built-in table, a guess for this device): at INFO where
    the table was measured on this kind of device (`table_measured`: CPUs, CUDA), else as a WARNING."""
    path = calibrations_dir() / key.file_name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if key.device not in _guessing_logged:
            _guessing_logged.add(key.device)
            logger.log(logging.INFO if table_measured else logging.WARNING,
                       "no calibration for %s with this build and model shape: flash_attn=auto follows the built-in "
                       "table, a guess here; `python -m pyllama90a calibrate` measures it", key.device)
        return None
    except (OSError, UnicodeDecodeError) as e:
        logger.warning("calibration %s refused: %s; flash_attn=auto follows the built-in table", path, e)
        return None
    try:
        return parse(text, key), path
    except CalibrationError as e:
        logger.warning("calibration %s refused: %s; flash_attn=auto follows the built-in table", path, e)
        return None


def reach(calibration: Calibration, ctk: str, ctv: str) -> int:
    """The deepest n_ctx this calibration's speed points for the K/V pair speak for (0: the pair not measured)."""
    return REACH * max((p.depth for p in calibration.speed if (p.ctk, p.ctv) == (ctk, ctv)), default=0)


@dataclass(frozen=True)
class CalibratedChoice:
    flash_attn: str
    fused_decode: bool
    reason: str


def choose_flash_attn(calibration: Calibration, ctk: str, ctv: str, n_ctx: int) -> CalibratedChoice | None:
    """The path that serves REQUEST fastest for this K/V pair: its prompt at each mode's measured prefill speed and
    its reply at its decode speed, averaged over the measured depths up to n_ctx (the shallowest if none is); None
    when the pair was not measured in both phases at those depths. One time per mode, not one winner per phase: a
    decode winner whose prefill is 25x slower (iq4_nl on an H100, whose FA falls back to the CPU) never wins."""
    points = [p for p in calibration.speed if (p.ctk, p.ctv) == (ctk, ctv)]
    if not points:
        return None
    depths = sorted({p.depth for p in points})
    depths = [d for d in depths if d <= n_ctx] or depths[:1]
    tokens = dict(zip(PHASES, REQUEST, strict=True))
    seconds: dict[tuple[str, bool], list[float]] = {}
    for p in points:
        if p.depth in depths:
            seconds.setdefault((p.flash_attn, p.fused_decode), []).append(tokens[p.phase] / p.tok_s)
    complete = {mode: sum(s) / len(depths) for mode, s in seconds.items() if len(s) == len(PHASES) * len(depths)}
    if not complete:
        return None
    mode = min(complete, key=lambda m: complete[m])
    times = ", ".join(f"{fa}{' + fused' if fused else ''} {t:.3f} s"
                      for (fa, fused), t in sorted(complete.items(), key=lambda kv: kv[1]))
    fused = " (fused decode)" if mode[1] else ""
    return CalibratedChoice(mode[0], mode[1], f"calibrated at depths {depths}: a {REQUEST[0]}-token prompt and "
                                              f"{REQUEST[1]}-token reply take {times} -> {mode[0]}{fused}")


@lru_cache(maxsize=1)
def build_identity() -> tuple[str, bool, str]:
    """(backends, CK built, libraries digest) of the loaded build, computed once per process."""
    import ctypes

    from ...native.ggml import gpu_backend_devices, loaded_cpu_backend

    spec = find_spec("pyllama90a._native")
    folder = Path(spec.origin).parent if spec is not None and spec.origin else Path()
    libraries = sorted(folder.glob("*.so"))
    digest = hashlib.sha256()
    for lib in libraries:
        digest.update(lib.name.encode() + b"\0" + lib.read_bytes())
    ck = False
    hip = folder / "libggml-hip.so"
    if hip.is_file():
        try:
            ck = hasattr(ctypes.CDLL(str(hip)), "pyllama90a_ck_fa_default_min_queries")
        except OSError:
            ck = False
    gpus = [f"{name}:{n}" for name, n in gpu_backend_devices().items()]
    return " ".join([f"CPU:{loaded_cpu_backend()}", *gpus]), ck, digest.hexdigest()[:16]


def calibration_key(device: str, shape: AttentionShape) -> CalibrationKey:
    """The key of a calibration for attention on `device` (a label, "CPU" taken as this host's CPU)."""
    if device == "CPU":
        from ...native.ggml import devices

        cpu = next((d for d in devices() if d.name == "CPU"), None)
        device = f"CPU ({cpu.description})" if cpu is not None else device
    backends, ck, libraries = build_identity()
    return CalibrationKey(device, backends, ck, libraries, shape.n_layer, shape.n_head_kv, shape.head_k, shape.head_v)
