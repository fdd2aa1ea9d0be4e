"""Save a conversation's KV cache to disk and continue from it in a new process-sized Model.

    python examples/save_and_resume.py [MODEL.gguf]
"""
import sys
import tempfile
from pathlib import Path

import pyllama90a as pl

path = sys.argv[1] if len(sys.argv) > 1 else pl.default_model()
prompt = "A short story about a lighthouse keeper:"
with tempfile.TemporaryDirectory() as tmp:
    state = Path(tmp) / "story.state"
    with pl.Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off", n_ctx=1024) as m:
        first = m.generate(prompt, max_tokens=24, temperature=0)
        m.save_state(state)
    with pl.Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off", n_ctx=1024) as m:
        m.load_state(state)
        again = m.generate(prompt, max_tokens=24, temperature=0)
    print(f"state file: {state.stat().st_size / 2**10:.0f} KiB; prompt tokens decoded after loading: "
          f"{again.timings.prompt_tokens_evaluated}; same continuation: {first.text == again.text}")
