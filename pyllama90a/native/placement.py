"""`Placement`: which devices a model's layers go to (llama.cpp's split_mode, tensor_split, main_gpu) and the RPC
workers whose devices join them, checked before llama.cpp sees them. The checks against the devices themselves
(how many there are) are ModelHandle's, which knows them."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import INT32_MAX, InvalidArgumentError, about, int_in_range
from .rpc import Endpoint

SPLIT_MODES = ("none", "layer", "row")
MAX_WORKERS = 16  # GGML_RPC_MAX_SERVERS


@dataclass(frozen=True)
class Placement:
    """split_mode: "layer" (llama.cpp's default: whole layers, with their KV cache, spread over the devices),
    "row" (each weight matrix split by rows, where the backend has a split buffer type: CUDA; elsewhere as
    "layer") or "none" (everything offloaded on device main_gpu). tensor_split: one non-negative share per
    device (None: in proportion to their free memory). main_gpu: the index of the device for "none" (and the
    one that holds the unsplit tensors for "row"). rpc: "host:port" of pyllama90a workers, whose devices come
    first in the device list, before this machine's GPUs (llama.cpp's order)."""

    split_mode: str = "layer"
    tensor_split: tuple[float, ...] | None = None
    main_gpu: int = 0
    rpc: tuple[Endpoint, ...] = ()

    @classmethod
    def checked(cls, split_mode: object = "layer", tensor_split: object = None, main_gpu: object = 0,
                rpc: object = ()) -> Placement:
        if split_mode not in SPLIT_MODES:
            raise InvalidArgumentError(f"split_mode must be one of {', '.join(SPLIT_MODES)}, got {split_mode!r}",
                                       param="split_mode")
        with about("main_gpu"):
            main_gpu = int_in_range("main_gpu", main_gpu, 0, INT32_MAX)
        return cls(split_mode, _shares(tensor_split), main_gpu, _endpoints(rpc))

    def check_devices(self, labels: list[str]) -> None:
        """tensor_split and main_gpu against the devices the model would use (their labels, in order)."""
        listed = ", ".join(f"{i}: {label}" for i, label in enumerate(labels)) or "none: the model runs on the CPU"
        if self.tensor_split is not None and len(self.tensor_split) != len(labels):
            raise InvalidArgumentError(f"tensor_split has {len(self.tensor_split)} shares, but the model has "
                                       f"{len(labels)} devices to split across ({listed})", param="tensor_split")
        if self.main_gpu and self.main_gpu >= len(labels):
            raise InvalidArgumentError(f"main_gpu={self.main_gpu} names a device that does not exist (devices: "
                                       f"{listed})", param="main_gpu")


def _shares(value: object) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidArgumentError(f"tensor_split must be a non-empty list of numbers, got {value!r}",
                                   param="tensor_split")
    for i, share in enumerate(value):
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or share < 0:
            raise InvalidArgumentError(f"tensor_split[{i}] must be a finite number >= 0, got {share!r}",
                                       param="tensor_split")
    if not sum(value) > 0:
        raise InvalidArgumentError("tensor_split must give some device a share above 0 (None: by free memory)",
                                   param="tensor_split")
    return tuple(float(share) for share in value)


def _endpoints(value: object) -> tuple[Endpoint, ...]:
    if isinstance(value, str):  # a lone "host:port" would otherwise be taken letter by letter
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise InvalidArgumentError(f"rpc must be a list of 'host:port' strings, got {value!r}", param="rpc")
    found = tuple(parse_endpoint(item, f"rpc[{i}]") for i, item in enumerate(value))
    if len(set(found)) != len(found):
        raise InvalidArgumentError(f"rpc names a worker twice: {', '.join(map(str, found))}", param="rpc")
    if len(found) > MAX_WORKERS:
        raise InvalidArgumentError(f"rpc names {len(found)} workers; ggml-rpc takes at most {MAX_WORKERS}",
                                   param="rpc")
    return found


def parse_endpoint(text: object, name: str) -> Endpoint:
    """'host:port' (an IPv4 address or a host name: ggml-rpc connects over IPv4) as an Endpoint."""
    if not isinstance(text, str) or text.count(":") != 1:
        raise InvalidArgumentError(f"{name} must be 'host:port' (IPv4 or a host name), got {text!r}",
                                   param=name.split("[")[0])
    host, _, port = text.partition(":")
    if not host or any(c.isspace() for c in host) or "\0" in host or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"{name} must be 'host:port' with a port in 1-65535, got {text!r}",
                                   param=name.split("[")[0])
    return Endpoint(host, int(port))
