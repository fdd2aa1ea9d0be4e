"""split_mode, tensor_split, main_gpu and rpc are checked before llama.cpp sees them, naming the parameter; a split
or a main_gpu naming a device that does not exist is refused against the devices the model would have. The
values reaching llama.cpp (buffers per device) are tested with RPC workers in test_rpc.py."""
from __future__ import annotations

import re

import pytest

import pyllama90a as pl
from pyllama90a.native.devices import device_memory, local_offload_devices
from pyllama90a.native.placement import Placement

N_LOCAL = len(local_offload_devices())  # 0 on the CPU-only machine


@pytest.mark.parametrize("kwargs, param, words", [
    ({"split_mode": "diagonal"}, "split_mode", "one of none, layer, row"),
    ({"split_mode": None}, "split_mode", "one of"),
    ({"tensor_split": [1.0, -0.5]}, "tensor_split", "tensor_split[1] must be a finite number >= 0"),
    ({"tensor_split": [float("nan")]}, "tensor_split", "tensor_split[0]"),
    ({"tensor_split": [True]}, "tensor_split", "tensor_split[0]"),
    ({"tensor_split": [0, 0]}, "tensor_split", "a share above 0"),
    ({"tensor_split": []}, "tensor_split", "non-empty list"),
    ({"tensor_split": "3,1"}, "tensor_split", "non-empty list"),
    ({"main_gpu": -1}, "main_gpu", "main_gpu must be in"),
    ({"main_gpu": 1.0}, "main_gpu", "integer"),
    ({"rpc": ["127.0.0.1"]}, "rpc", "'host:port'"),
    ({"rpc": ["127.0.0.1:0"]}, "rpc", "port in 1-65535"),
    ({"rpc": ["127.0.0.1:70000"]}, "rpc", "port in 1-65535"),
    ({"rpc": ["::1:5000"]}, "rpc", "IPv4"),
    ({"rpc": [5000]}, "rpc", "'host:port'"),
    ({"rpc": ["h:1", "h:1"]}, "rpc", "names a worker twice"),
    ({"rpc": [f"h:{p}" for p in range(1, 18)]}, "rpc", "at most 16"),
    ({"rpc": {"h": 1}}, "rpc", "list of 'host:port'"),
])
def test_bad_placement_is_refused_naming_the_parameter(kwargs, param, words):
    with pytest.raises(pl.InvalidArgumentError, match=re.escape(words)) as e:
        Placement.checked(**kwargs)
    assert e.value.param == param


def test_a_lone_endpoint_string_is_one_worker():
    assert [str(w) for w in Placement.checked(rpc="10.0.0.2:50052").rpc] == ["10.0.0.2:50052"]


def test_split_over_devices_that_do_not_exist_is_refused(model_path):
    shares = [1.0] * (N_LOCAL + 1)
    with pytest.raises(pl.InvalidArgumentError, match=f"tensor_split has {N_LOCAL + 1} shares, but the model has "
                                                      f"{N_LOCAL} devices") as e:
        pl.Model(model_path, tensor_split=shares, n_ctx=256)
    assert e.value.param == "tensor_split"
    with pytest.raises(pl.InvalidArgumentError, match=f"main_gpu={N_LOCAL + 1} names a device that does not "
                                                      "exist") as e:
        pl.Model(model_path, split_mode="none", main_gpu=N_LOCAL + 1, n_ctx=256)
    assert e.value.param == "main_gpu"


def test_the_default_placement_still_loads_and_reports_its_devices(model_path):
    with pl.Model(model_path, split_mode="none", main_gpu=0, n_ctx=256) as m:
        assert len(m.devices) == N_LOCAL
        assert m.generate("Hi", max_tokens=2, temperature=0).tokens


def test_batch_engine_checks_placement_too(model_path):
    with pytest.raises(pl.InvalidArgumentError) as e:
        pl.BatchEngine(model_path, parallel=1, n_ctx=512, split_mode="rows")
    assert e.value.param == "split_mode"


def test_a_device_s_memory_is_what_its_backend_reports() -> None:
    """The CPU device reports the system's memory (ggml's CPU backend: the physical pages), which psutil reads too;
    each GPU its own, free at most total."""
    import psutil

    from pyllama90a.native._ffi import lib

    free, total = device_memory(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
    assert total == pytest.approx(psutil.virtual_memory().total, rel=0.01) and 0 < free <= total
    for dev in local_offload_devices():
        free, total = device_memory(dev)
        assert 0 < free <= total
