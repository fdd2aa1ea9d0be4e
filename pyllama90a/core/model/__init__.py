"""`Model` and what it is made of: opening, settings, attention paths, memory, LoRA, state files, embeddings.

    model: `Model`, the user-level class over a loaded model and a context on it
    context_guard: who may use a Model's context and when (one thing at a time; BusyError, ClosedError)
    open: opening a model from its settings, in the one order Model, with_context and plan_memory follow
    settings: `ContextSettings`, the one declaration of a context's settings
    file: the facts of a loaded GGUF that every Model on its weights shares, checked against the settings
    sequence_cache: sequence 0's KV cache on a Model's context: its tokens, a generation's decodes, eval, truncate
    draft_model: speculative decoding's draft model, in a context of its own beside the target's, and its drafters
    prompt: a generation's prompt as tokens: text tokenized as the model wants it, or token ids checked
    attention_paths: which of pyllama90a's attention kernels a context may use
    attention_policy: what flash_attn="auto" means per backend and KV types, from measured results
    calibration: a device's measured speed, memory and KV quality on file, and what "auto" takes from it
    shape: a model's attention shape (layers, KV heads, head dims) from its GGUF header
    memory_plan: how much memory a Model of given settings takes, before loading it
    kv_budget: KV cache sizes from the GGUF header alone
    kv_auto: ctk="auto", ctv="auto": the smallest calibrated cache type within kv_quality and kv_budget
    lora: LoRA adapter files checked, loaded beside the weights, and the scales a context applies
    state_file: a Model's KV cache and tokens on disk, with a header that says whose they are
    state_bounds: how large llama.cpp's state of a context or sequence can be
    embedding: embeddings on a context made with embedding=True
    rerank: a reranker's relevance scores of documents for a query (rank pooling), prompts made as llama-server's
    fim: fill-in-the-middle prompts from a coder model's FIM tokens
"""
