"""Fuzzing pyllama90a with untrusted input (issue 9): mutated GGUF model files and hostile API calls.

`python -m pyllama90a.fuzz --help`. Modules: gguf_file (parse and write GGUF headers), bases (the files
mutated), gguf_mutations (mutation specs: apply, describe), gguf_generator
(mutation specs from a seed), api_cases (API misuse specs),
model_case (what a child does with a file), runner (forked children under limits, outcome classes),
campaign (batches, dedupe, shrinking, reports).

Modules:
    __main__: the command line: targets, seeds, limits, the report
    runner: functions run in child processes under a wall timeout and an RSS limit, outcomes classified
    campaign: a fuzz run: cases generated, run, recorded
    bases: the well-formed GGUF files that cases mutate
    gguf_file: a GGUF file as editable data
    gguf_mutations: mutations of GGUF files as JSON specs, applied to a base
    gguf_generator: GGUF mutation cases generated from a seed
    tensor_types: the class "tensor types per role"
    model_case: one GGUF case in the child: load, decode, report
    api_cases: API misuse cases
    adapter_cases: the target "adapter": malformed LoRA adapters
    state_cases: the target "state": state and slot files
    rpc_protocol: ggml-rpc's wire format, as the fuzzer needs it
    rpc_sessions: the RPC fuzzer's corpus of recorded sessions
    rpc_cases: RPC protocol cases
    rpc_replay: one RPC case in the runner's child
    rpc_worker: the worker an RPC case runs against
"""
