"""Tools that drive a pyllama90a (or llama.cpp) server from outside: starting one in a child process and the
malformed-request campaign. Used by the server load bench, the campaign's command line and the tests; nothing in
pyllama90a.server (what a deployment runs) imports them.

Modules:
    server_process: a server in a child process until it answers /health, and stopped
    worker_process: `python -m pyllama90a.worker` in a child process until it answers HELLO
    malformed_requests: malformed and hostile HTTP requests against a running server, counted by answer
    pool_saturation: pool saturation, a class of hostile load
    synthetic: random-weight GGUF models of realistic llama shapes, for benchmarks and tests
    synthetic_lora: a random LoRA adapter GGUF for a synthetic model, as llama.cpp's loader reads one
    synthetic_reranker: a random-weight reranker GGUF (Qwen3-Reranker's kind, rank pooling), for tests
    synthetic_target: a real model with extra zero-output layers, the draft-model bench's larger target
"""
