"""One generation, shared by Model and BatchEngine: the checked request, the step, and what it gives back.

    request: `GenerationRequest`, what to generate, checked once where user input enters
    lora_request: a request's LoRA adapters as values ({id: scale}, checked and sorted)
    sampling: sampling settings, checked in Python (native.SamplerChain builds llama.cpp's chain from them)
    sequence: `GenerationSequence`, one generation, one token per step (rules, sample, accept, stop)
    post_sampling: llama-server's post_sampling_probs, the probabilities over the candidates the chain kept
    thinking: a generation's thinking block: its end marker forced at the budget, the constraint after it
    speculative: `Speculation`, the drafter interface, prompt-lookup (n-gram) drafting for speculative decoding
    prefix_cache: reuse of the KV cells a new prompt shares with what a sequence holds
    context_shift: llama-server's context shift: a full sequence keeps n_keep tokens, drops half the rest, goes on
    text_stream: token pieces to text: incremental UTF-8 and stop strings
    output_checks: NaN or infinite logits and embeddings are an error, not text
    outputs: `Piece`, `Completion`, `Usage`, `Timings`: what a generation gives back
"""
