"""Serve several generations at once from one context, in-process (what the server does under its routes).

    python examples/batch_engine.py [MODEL.gguf]
"""
import sys
import threading

import pyllama90a as pl

path = sys.argv[1] if len(sys.argv) > 1 else pl.default_model()
questions = ["What is the capital of France?", "Name a large animal.", "What colour is the sky?"]
answers = {}

with pl.BatchEngine(path, ctk="q8_0", ctv="q8_0", parallel=len(questions), n_ctx=2048) as engine:
    def ask(question: str) -> None:
        # (a system message of our own: SmolLM2's template would add its default one, which leads the 135M
        # model astray on short questions)
        tokens = engine.chat_prompt([{"role": "system", "content": "You are a helpful assistant."},
                                     {"role": "user", "content": question}])
        answers[question] = "".join(chunk.text for chunk in engine.stream(tokens, max_tokens=24, temperature=0))

    threads = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in questions:
        print(f"{q} -> {answers[q].strip()}")
    stats = engine.stats()
    print(f"{stats.requests_total} requests, {stats.completion_tokens_total} tokens generated, "
          f"{engine.parallel} slots of {engine.n_ctx_slot} tokens")
