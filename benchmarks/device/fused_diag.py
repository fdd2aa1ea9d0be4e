"""Pairwise max logit differences of one decode step from one state file, per decoder (diagnostic)."""
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the tests' support package
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "core"))  # where the layout moved it
from test_hybrid_attention import FUSED_SHAPES, N_PROMPT, _tokens

import pyllama90a as pl
from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.tools.synthetic import synthetic_model

DECODERS = {"fused": ("hybrid", AttentionPaths(fused_decode=True), -1), "nonflash": ("hybrid", None, -1),
            "fa-on": ("on", None, -1), "cpu-off": ("off", None, 0)}
for shape in sys.argv[1].split(","):
    for kv in sys.argv[2].split(","):
        prompt, rest = _tokens()[:N_PROMPT], _tokens()[N_PROMPT:]
        path = synthetic_model(FUSED_SHAPES[shape], weight_type="f16")
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "p.state"
            logits = {}
            for name, (fa, paths, ngl) in DECODERS.items():
                with pl.Model(path, ctk=kv, ctv=kv, flash_attn=fa, n_ctx=1024, n_batch=128, n_ubatch=128,
                              attention_paths=paths, n_gpu_layers=ngl) as m:
                    if not state.exists():
                        m.eval(prompt + prompt)
                        m.save_state(state)
                    else:
                        m.load_state(state)
                    m.eval(rest[:1])
                    logits[name] = np.array(m.last_logits(), dtype=np.float32)
        spread = float(np.abs(logits["cpu-off"] - logits["cpu-off"].mean()).max())
        names = list(logits)
        pairs = " ".join(f"{a}~{b}={np.abs(logits[a] - logits[b]).max() / spread:.2e}"
                         for i, a in enumerate(names) for b in names[i + 1:])
        print(f"{shape} {kv}: {pairs}", flush=True)
