"""Fuzzing pyllama90a with untrusted input (issue 9): mutated GGUF model files and hostile API calls.

`python -m pyllama90a.fuzz --help`. Modules: gguf_file (parse and write GGUF headers), bases (the files
mutated), gguf_mutations (mutation specs: apply, describe), gguf_generator
(mutation specs from a seed), api_cases (API misuse specs),
model_case (what a child does with a file), runner (forked children under limits, outcome classes),
campaign (batches, dedupe, shrinking, reports).
"""
