"""Quick probe: prefill and decode speed at depth per attention mode on a synthetic model (one process)."""
import json
import os
import time

import pyllama90a as pl
from pyllama90a.synthetic import SHAPES, synthetic_model

MODES = [("off", "f16", "f16"), ("on", "f16", "f16"), ("on", "q4_0", "q4_0"), ("off", "q4_0", "q4_0"),
         ("off", "q8_0", "q8_0"), ("off", "iq4_nl", "iq4_nl")]
SHAPE = os.environ.get("PROBE_SHAPE", "1b-hd64")
DEPTHS = [int(d) for d in os.environ.get("PROBE_DEPTHS", "512,8192,32768").split(",")]
N_DECODE = 32

path = synthetic_model(SHAPE)
n_vocab = SHAPES[SHAPE].n_vocab
rows = []
for depth in DEPTHS:
    prompt = [1] + [259 + (i * 7919) % (n_vocab - 259) for i in range(depth - 1)]
    for fa, ctk, ctv in MODES:
        try:
            with pl.Model(path, ctk=ctk, ctv=ctv, flash_attn=fa, n_ctx=depth + N_DECODE + 16, n_batch=2048,
                          n_ubatch=512) as m:
                m.generate(prompt[:64], max_tokens=4, temperature=0)  # warm-up
                c = m.generate(prompt, max_tokens=N_DECODE, temperature=0)
                row = dict(shape=SHAPE, depth=depth, mode=f"fa-{fa}:{ctk}/{ctv}",
                           pp_tps=round(c.timings.prompt_tokens_per_s, 1),
                           tg_tps=round(c.timings.generate_tokens_per_s, 1),
                           tg_tokens=c.usage.completion_tokens, kv_mib=round(m.kv_cache.total_bytes / 2**20, 1))
        except pl.LlamaError as e:
            row = dict(shape=SHAPE, depth=depth, mode=f"fa-{fa}:{ctk}/{ctv}", error=str(e).splitlines()[0])
        rows.append(row)
        print(json.dumps(row), flush=True)
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "depth_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)
