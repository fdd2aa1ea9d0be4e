"""Which load settings crash on this machine? Each variant runs in its own process."""
import subprocess
import sys

CHILD = r'''
import sys
from pyllama90a._ffi import ffi, lib
from pyllama90a.synthetic import synthetic_model, SHAPES
path = synthetic_model(sys.argv[1], weight_type=sys.argv[2])
p = lib.llama_model_default_params()
p.n_gpu_layers = int(sys.argv[3])
p.use_extra_bufts = sys.argv[4] == "1"
m = lib.llama_model_load_from_file(str(path).encode(), p)
print("loaded", m != ffi.NULL)
'''
for shape in ("tiny", "1b-hd64"):
    for wtype in ("f16", "q4_0"):
        for ngl in ("-1", "0"):
            for extra in ("1", "0"):
                r = subprocess.run([sys.executable, "-c", CHILD, shape, wtype, ngl, extra], capture_output=True, text=True, cwd="/")
                print(f"shape={shape} weights={wtype} n_gpu_layers={ngl} use_extra_bufts={extra}: rc={r.returncode}",
                      r.stdout.strip()[-60:], flush=True)
