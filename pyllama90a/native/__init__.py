"""The binding floor: the modules that talk to the compiled library (`pyllama90a._native`, through `_ffi`).

- ggml.py     ggml-level facts: KV type numbers and row sizes, backend devices, system info
"""
