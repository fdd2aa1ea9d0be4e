"""Generate, stream and chat with a quantized K and V cache and flash attention off.

    python examples/quickstart.py [MODEL.gguf]
"""
import sys

import pyllama90a as pl

path = sys.argv[1] if len(sys.argv) > 1 else pl.default_model()
with pl.Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off", n_ctx=2048) as m:
    print(m.generate("The capital of France is", max_tokens=16, temperature=0).text.strip())
    for piece in m.generate("Write a haiku about rivers:", max_tokens=40, temperature=0.7, seed=1, stream=True):
        print(piece.text, end="", flush=True)
    print()
    reply = m.chat([{"role": "user", "content": "Name three colours."}], max_tokens=32, temperature=0)
    print(reply.text.strip())
    kv = m.kv_cache
    print(f"KV cache: K {kv.type_k} {kv.k_bytes / 2**20:.1f} MiB + V {kv.type_v} {kv.v_bytes / 2**20:.1f} MiB "
          f"for {kv.n_ctx} tokens; attention: flash_attn={m.attention.flash_attn} on {m.attention.backend}")
