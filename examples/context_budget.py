"""How long a context fits a memory budget with each KV type, read from the GGUF header alone.

    python examples/context_budget.py [MODEL.gguf] [BUDGET_MIB]
"""
import sys

import pyllama90a as pl

path = sys.argv[1] if len(sys.argv) > 1 else pl.default_model()
budget = int(sys.argv[2]) * 2**20 if len(sys.argv) > 2 else 512 * 2**20
print(f"KV budget {budget / 2**20:.0f} MiB")
for kv in ("f16", "q8_0", "q4_0"):
    n_ctx = pl.max_n_ctx(path, budget, kv, kv)
    print(f"  K and V {kv:5}: up to {n_ctx:7d} tokens ({pl.kv_bytes(path, n_ctx, kv, kv).total_bytes / 2**20:.0f} MiB)")
