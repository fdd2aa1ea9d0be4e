"""How long a context fits a memory budget with each KV type and attention path: K, V and the compute buffers
counted, from llama.cpp's simulated allocations (nothing is loaded).

    python examples/context_budget.py [MODEL.gguf] [BUDGET_MIB]
"""
import sys

import pyllama90a as pl

path = sys.argv[1] if len(sys.argv) > 1 else pl.default_model()
budget = int(sys.argv[2]) * 2**20 if len(sys.argv) > 2 else 512 * 2**20
print(f"budget for K, V and compute buffers: {budget / 2**20:.0f} MiB")
for kv in ("f16", "q8_0", "q4_0"):
    for flash_attn in ("off", "on"):
        n_ctx = pl.max_n_ctx(path, budget, kv, kv, flash_attn=flash_attn)
        cache = pl.plan_memory(path, n_ctx=n_ctx, ctk=kv, ctv=kv, flash_attn=flash_attn).cache
        print(f"  K and V {kv:5} FA {flash_attn:3}: up to {n_ctx:7d} tokens "
              f"({cache.total_bytes / 2**20:.0f} MiB KV + {cache.compute_bytes / 2**20:.0f} MiB compute)")
