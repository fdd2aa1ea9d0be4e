"""What the server answers, built from the engine's Chunks.

    openai: text_completion and chat.completion objects and their stream chunks
    openai_responses: the Responses API's response object and its typed stream events
    llama_server: llama-server's answers of /completion (content, tokens, stop, probabilities)
    anthropic: Anthropic's message and its named stream events (content blocks, stop_reason)
    timings: llama-server's `timings` object, measured from when the request is queued
"""
