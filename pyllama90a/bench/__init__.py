"""`python -m pyllama90a.bench [server|batched|constrained|quality|prompt-cache|speculative]`: the benchmarks that
prove speed, memory and quality targets.

    __main__: the command line: a subcommand, or the depth bench without one
    depths: prefill and decode speed per attention mode at chosen depths
    batched: N sequences at depth D decoding together, per attention mode
    server: the OpenAI server under N concurrent streaming clients
    constrained: constrained decoding against free decoding in one BatchEngine
    prompt_cache: time to first token of a repeated system prompt, with no reuse, the RAM prompt cache, a slot
    speculative: speculative decoding (prompt lookup) against plain decoding on code editing
    quality: what a quantized KV cache costs in quality (KL, top-1, perplexity) against an f16 cache
    calibrate: `python -m pyllama90a calibrate`: speed, memory and quality on this device, as a calibration file
    calibration_report: a calibration's markdown and PNG
    modes: the attention modes a bench compares (fa-on/off/auto, hybrid; ctk/ctv)
    report: the machine's name and the result files
    roofline: the bytes one decode step reads, against a copy bandwidth
    cpu_features: the x86-64 features ggml's CPU backend can use, and which this CPU has
"""
