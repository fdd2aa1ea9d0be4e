"""`BatchEngine`: many generations share one llama context, one engine thread decodes them all.

    engine: `BatchEngine` and `Chunk`: slots, the queue, the decode loop, cancel and shutdown
    async_api: asyncio over a BatchEngine (astream, acomplete)
    lora_turns: LoRA adapter sets per request, switched between decode steps
    slot_files: a slot's KV cells in a state file, and back (the server's /slots/{id} save and restore)
"""
