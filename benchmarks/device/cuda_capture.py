"""ncu's capture range (cudaProfilerStart / cudaProfilerStop) around a block, for the scripts that run under
`ncu --profile-from-start off` (ncu_depths.py, ncu_batched.py). Without CUDA's runtime (a CPU build) the block runs
with no range, as a quick check of the script."""
import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterator


def _runtime() -> "ctypes.CDLL | None":
    try:
        return ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    except OSError:
        print("no CUDA runtime: the steps run without a capture range", file=sys.stderr, flush=True)
        return None


_CUDART = _runtime()


@contextlib.contextmanager
def captured() -> Iterator[None]:
    """The block's kernels inside ncu's capture range; the device synchronized before the range ends."""
    if _CUDART is not None:
        _CUDART.cudaProfilerStart()
    try:
        yield
    finally:
        if _CUDART is not None:
            _CUDART.cudaDeviceSynchronize()
            _CUDART.cudaProfilerStop()
