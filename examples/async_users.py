"""Several users served from one BatchEngine under asyncio, without HTTP: each user is a task that streams its
answer; a user who leaves (a task cancelled) frees its slot for the next one.

    python examples/async_users.py [model.gguf]
"""
from __future__ import annotations

import asyncio
import sys

import pyllama90a as pl

QUESTIONS = {"ana": "The capital of France is", "ben": "Water boils at", "chen": "The largest planet is",
             "dev": "Once upon a time"}


async def user(engine: pl.BatchEngine, name: str, prompt: str) -> None:
    text = []
    async for chunk in engine.astream(prompt, max_tokens=24, temperature=0):
        text.append(chunk.text)
    print(f"{name}: {prompt}{''.join(text)!r}")


async def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else None  # None: the default model
    with pl.BatchEngine(path, ctk="q4_0", ctv="q4_0", parallel=2, n_ctx=1024) as engine:
        impatient = asyncio.ensure_future(user(engine, "eve", "Tell me everything about"))
        await asyncio.sleep(0.2)
        impatient.cancel()  # eve leaves: her slot goes to the next user
        await asyncio.gather(*(user(engine, n, q) for n, q in QUESTIONS.items()))


if __name__ == "__main__":
    asyncio.run(main())
