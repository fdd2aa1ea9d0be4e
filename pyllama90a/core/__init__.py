"""The library floor: what `Model`, `BatchEngine` and their callers are made of, over the binding (`native/`).

Sub-packages, bottom to top; each imports only those before it (pyproject.toml's import-linter contracts):
    gguf/: GGUF files read in Python before llama.cpp opens them, and the default model
    toolcalls/: tool-call formats: detection from a chat template, tools checked, generated calls parsed
    constrained/: constrained decoding (llguidance) and the worker processes that run untrusted programs
    generation/: one generation: the checked request, the step, the text it streams and what it gives back
    chat/: chat messages rendered by the model's template (in a worker process) and the output read back
    model/: `Model` and what it is made of: opening, settings, attention, memory, LoRA, state files
    engine/: `BatchEngine`, continuous batching over one context, and its asyncio face
"""
