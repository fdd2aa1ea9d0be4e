"""`BatchEngine`: many generations share one llama context, one engine thread decodes them all.

    engine: `BatchEngine`: the queue, the engine thread (waits for work, runs a step), cancel and shutdown
    step: `EngineStep`, one decode step: admit waiting requests, fill the batch, decode, sample, send the chunks
    slots: what the engine keeps per request (Job, its Chunks) and per slot (Slot), shared by the modules here
    counts: the engine's counts behind stats() and the metrics (requests, tokens, drafts, decode calls, rate)
    async_api: asyncio over a BatchEngine (astream, acomplete)
    lora_turns: LoRA adapter sets per request, switched between decode steps
    prefix_reuse: which free slot a request takes, and its prompt's cached prefix from any slot or the RAM cache
    prompt_cache: the host-RAM prompt cache (sequence states by their tokens, bounded in bytes, LRU)
    slot_files: a slot's KV cells in a state file, and back (the server's /slots/{id} save and restore)
"""
