"""`Model`: the user-level class over a loaded model (native.ModelHandle) and a context on it
(native.ContextHandle): text generation, chat, embeddings, state, and the rule of one user at a time."""
from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import (
    INT32_MAX,
    ContextOverflowError,
    InvalidArgumentError,
    flag,
    fs_path,
    int_in_range,
    utf8,
)
from ...native import ContextHandle, ContextParams, ModelHandle
from ...native.placement import Placement
from ..chat.messages import Messages, normalize_messages
from ..chat.prepare import prepare_chat, render_chat
from ..chat.reasoning import ReasoningOutput
from ..chat.template import ChatTemplate
from ..chat.tool_output import ToolCallOutput, completion_of
from ..constrained import constraint_from
from ..generation.context_shift import kept_at_shift
from ..generation.outputs import Completion, Piece
from ..generation.request import GenerationRequest
from ..generation.sampling import SamplingParams
from ..generation.sequence import GenerationSequence
from ..generation.speculative import Speculation, speculation
from .attention_paths import AttentionPaths
from .attention_policy import AttentionChoice
from .context_guard import ContextGuard
from .draft_model import Drafting
from .embedding import embed_inputs, embedding_inputs
from .file import ModelFile, check_header
from .kv_auto import resolve_kv_types
from .lora import LoraAdapters
from .memory_plan import KVCacheInfo, kv_cache_info
from .open import checked_file, context_params, load_weights, model_path, open_context
from .prompt import prompt_tokens
from .rerank import rerank_prompts, score_prompts
from .sequence_cache import SequenceCache
from .settings import ContextSettings
from .state_file import StateIdentity, check_key, context_limits


class Model:
    """A GGUF model with a context, e.g. `Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off")`.

    KV types by name: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; flash_attn "on", "off", "hybrid" or "auto".
    Use as a context manager or call close(); a model that is garbage collected is freed too.
    `with_context(...)` makes another Model on the same loaded weights (e.g. an embedder beside a generator).

    Threads: a Model runs one thing on its context at a time. While a generation runs (a non-streaming call, or
    a stream from its first piece until it ends or its iterator is closed), every method that uses the context
    raises BusyError, from any thread, the stream's own thread included: generate, chat, eval, logits,
    last_logits, truncate, embed, rerank, save_state, load_state, compute_buffer_bytes and close. Methods that
    only read the model (tokenize, detokenize, prompt_tokens, apply_chat_template, metadata, kv_cache, n_ctx,
    n_ctx_seq, n_ctx_train, n_cached, attention) are always allowed. A lock serializes the calls, so close()
    never frees the context under another thread's call."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, n_gpu_layers: int = -1, split_mode: str = "layer",
                 tensor_split: Sequence[float] | None = None, main_gpu: int = 0, rpc: Sequence[str] = (),
                 lora: Sequence[tuple[str | os.PathLike[str], float]] = (), speculative: Speculation | None = None,
                 **settings: Any) -> None:
        """`settings`: the fields of ContextSettings (ctk, ctv, flash_attn, n_ctx, ...), as keywords. split_mode,
        tensor_split, main_gpu: llama.cpp's placement of the n_gpu_layers offloaded layers over the devices;
        rpc: "host:port" of `python -m pyllama90a.worker`s whose devices join them (see placement.Placement).
        lora: LoRA adapter GGUFs for this model with their scales, applied to every decode (see lora.py).
        speculative: a Speculation (prompt lookup, a draft model) for every generation; None: a token per decode."""
        context_settings = ContextSettings(**settings)
        placement = Placement.checked(split_mode, tensor_split, main_gpu, rpc)
        self._guard = ContextGuard()
        raw_path = model_path(path)
        context_settings = resolve_kv_types(context_settings, raw_path, n_gpu_layers)  # ctk="auto": a calibration's
        self.path = Path(os.fsdecode(raw_path))
        params = self._settle(context_settings, speculation(speculative))
        file = checked_file(raw_path, n_gpu_layers, params)  # (the state files' identity, from the file loaded next)
        handle = load_weights(raw_path, n_gpu_layers, placement)
        self.drafting = Drafting(self.speculative, handle, params, Model) if self.speculative else None
        self._lora = LoraAdapters.load(handle, file.header, lora)  # (freed by close, or with it)
        self._open(file, handle, params, context_settings.attention_paths)

    def with_context(self, **settings: Any) -> Model:
        """A new Model with a context of its own on this Model's loaded weights: no second load, no second copy
        of the weights (e.g. an embedder beside a BatchEngine's model). It takes Model()'s context settings; the
        file and n_gpu_layers are this Model's, not its LoRA adapters nor its speculation. Each Model has its own
        context, lock and close(): both may run on different threads at once; the last close() frees the weights."""
        # allowed while this Model is busy: only the weights are shared, and holding their handle keeps them loaded
        # whatever this Model does meanwhile
        context_settings = resolve_kv_types(ContextSettings(**settings), self.path, self._file.n_gpu_layers)
        handle = self.handle
        other = Model.__new__(Model)  # (no second load: __init__ is for a file)
        other._guard = ContextGuard()
        other.path = self.path
        params = other._settle(context_settings)
        check_header(self._file, params)
        other._open(self._file, handle, params, context_settings.attention_paths)
        return other

    def _settle(self, settings: ContextSettings, speculative: Speculation | None = None) -> ContextParams:
        """Check the settings (before llama.cpp sees anything) and keep the Model's own; the context's params."""
        self.speculative = speculative  # (a with_context Model drafts nothing)
        self.drafting = None  # each generation's drafter, and the draft model's context (Model() sets it)
        self._stream: weakref.ref[Generator[Piece, None, None]] | None = None  # the last generation started
        self._lora = LoraAdapters()
        s = settings
        params = context_params(s)
        self.ctk, self.ctv, self.flash_attn = params.type_k, params.type_v, params.flash_attn
        self._sampling_seed = s.seed
        if s.seed is not None:
            SamplingParams(seed=s.seed)  # validates
        self.embedding, self.context_shift = flag("embedding", s.embedding), s.context_shift
        if s.chat_template is not None:  # Jinja text that replaces the GGUF's: compiled now, so errors show here
            ChatTemplate(s.chat_template)
        self._template_source = s.chat_template
        self._chat_template: ChatTemplate | None = None
        self._chat_template_read = False
        return params

    def _open(self, file: ModelFile, handle: ModelHandle, params: ContextParams,
              attention_paths: AttentionPaths | None) -> None:
        self._file = file
        context, self._attention, self._attention_paths = open_context(file, handle, params, self.embedding,
                                                                      attention_paths, self.context_shift)
        self._guard.open(handle, context)
        self._cache = SequenceCache(context)  # (sequence 0's cells and tokens)
        self._lora.apply(context, self._lora.scales)

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context (and a draft model's), and the weights unless a with_context Model still uses them."""
        context = self._guard.take_for_close()
        if context is not None:
            if self.drafting is not None:
                self.drafting.close()
            context.close()
            self._lora.close()  # (after the context that applied them)

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        # a stream left suspended in the block (broken out of, or an exception raised while reading it) ends
        # here: else close() refused (BusyError), which also hid the exception that left the block
        stream = self._stream() if self._stream is not None else None
        if stream is not None and inspect.getgeneratorstate(stream) == inspect.GEN_SUSPENDED:
            stream.close()
        self.close()

    @property
    def closed(self) -> bool:
        return self._guard.closed

    @property
    def handle(self) -> ModelHandle:
        """The loaded weights (vocabulary, metadata) this Model runs on, shared with Models made by
        with_context(). Holding it keeps the weights loaded; its calls are allowed at any time, from any thread."""
        return self._guard.handle

    def hold_context(self, holder: str) -> AbstractContextManager[ContextHandle]:
        """The context, for `holder` (e.g. "a BatchEngine") to use alone while the block runs: every call of this
        Model that uses the context is refused meanwhile with BusyError naming the holder; calls that only read
        the model stay allowed, and close() waits for the block's end."""
        return self._guard.held_by(holder, f"start {holder}")

    # -- facts ---------------------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        with self._guard.reading() as context:
            return context.n_ctx

    @property
    def n_ctx_seq(self) -> int:
        """Cells one sequence can use: n_ctx, or n_ctx / n_seq_max with several sequences."""
        with self._guard.reading() as context:
            return context.n_ctx_seq

    @property
    def n_ctx_train(self) -> int:
        with self._guard.model() as handle:
            return handle.n_ctx_train

    @property
    def kv_cache(self) -> KVCacheInfo:
        """KV types, context size, the exact bytes of the K and V tensors and of the compute buffers reserved for
        the worst-case graphs (fixed when the context is made or its attention paths are set)."""
        with self._guard.reading() as context:
            return kv_cache_info(context)

    @property
    def attention_paths(self) -> AttentionPaths:
        """Which of pyllama90a's attention kernels this context's graphs use (all by default); assign another
        AttentionPaths to switch some off (the compute buffers are re-reserved at once)."""
        return self._attention_paths

    @attention_paths.setter
    def attention_paths(self, paths: AttentionPaths) -> None:
        paths = AttentionPaths.checked(paths)
        with self._guard.using("change the attention paths") as context:
            context.set_attention_paths(paths.bits)
            self._attention_paths = paths

    @property
    def lora(self) -> LoraAdapters:
        """The LoRA adapters loaded with this Model (id, path, scale each), applied to its context."""
        return self._lora

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices the offloaded layers may go to, in llama.cpp's order ("name (description)"; RPC workers'
        first): what tensor_split's shares and main_gpu refer to. Empty: the model runs on the CPU."""
        return self.handle.devices

    @property
    def lost_workers(self) -> tuple[str, ...]:
        """"host:port" of the RPC workers whose connection was lost: every decode fails until the model is loaded
        again (for a server's health report). Empty while all are up, or without workers."""
        return tuple(map(str, self.handle.lost_workers()))

    @property
    def attention(self) -> AttentionChoice:
        """What flash_attn setting llama.cpp was given, on which device, and why (see attention_policy)."""
        return self._attention

    @property
    def compute_buffer_bytes(self) -> int:
        """Bytes of the compute buffers llama.cpp reserved for this context (all backends)."""
        with self._guard.using("read the compute buffers") as context:  # a decode may re-reserve them
            return context.compute_buffer_bytes()

    def metadata(self, key: str) -> str | None:
        """The GGUF metadata value of `key` as text, or None when the model has no such key."""
        with self._guard.model() as handle:
            return handle.metadata(key)

    # -- tokens --------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = utf8("text", text)
        flag("add_special", add_special)
        flag("parse_special", parse_special)
        # without the lock: the handle held here keeps the weights loaded, and its calls only read them, so one
        # long tokenization (a 1 MB /tokenize) does not hold every other tokenizer call of the server behind it
        return self.handle.tokenize(data, add_special, parse_special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        flag("special", special)
        return self.handle.detokenize(tokens, special)  # (without the lock, as tokenize)

    # -- manual cache control (sequence_cache.py) ----------------------------------------------------

    @property
    def n_cached(self) -> int:
        """How many tokens the KV cache holds (sequence 0)."""
        with self._guard.model():
            return len(self._cache.tokens)

    def eval(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` after the cached ones (positions continue); for manual cache control and benchmarks."""
        with self._guard.using("eval"):
            self._cache.eval(tokens)

    def last_logits(self) -> np.ndarray:
        """A copy of the logits after the last cached token, shape (n_vocab,)."""
        with self._guard.using("read the logits"):
            return self._cache.last_logits()

    def truncate(self, n_tokens: int) -> None:
        """Keep only the first `n_tokens` cached tokens."""
        int_in_range("n_tokens", n_tokens, 0, INT32_MAX)  # a position (int32)
        with self._guard.using("truncate the cache"):
            self._cache.truncate(n_tokens)

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` from an empty cache; logits after every token, shape (len(tokens), n_vocab)."""
        with self._guard.using("compute logits"):
            return self._cache.logits(tokens)

    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, seed: int | None = None,
                 stop: str | Sequence[str] | None = (), stream: bool = False, response_format: object = None,
                 json_schema: object = None, grammar: str | None = None, regex: str | None = None,
                 logit_bias: Mapping[object, float] | None = None, n_keep: int = 0, ignore_eos: bool = False,
                 logprobs: int | None = None) -> Completion | Iterator[Piece]:
        """Continue `prompt` (text, or token ids used as they are). temperature=0 is greedy.

        The output can be constrained by at most one of: json_schema (a dict, JSON text or a pydantic model
        class), response_format (OpenAI's {"type": "json_object"} / {"type": "json_schema", ...}, or a pydantic
        model class), grammar (GBNF text, as llama.cpp takes it) or regex; logit_bias maps token ids to a bias
        in [-100, 100] (-100 bans). Constraints need the llguidance package (pyllama90a[structured]).
        n_keep: the prompt tokens (BOS not counted; -1: all) a context shift keeps (Model(context_shift=True)).
        ignore_eos: generate max_tokens, the end-of-generation tokens banned (for benchmarks; no constraint).
        logprobs: None, or each generated token's TokenLogprob (in Piece.logprobs and Completion.logprobs) with its
        `logprobs` most likely alternatives (0 to MAX_TOP_LOGPROBS, as the engine and the server report them).

        With stream=True, an iterator of Pieces; the Model is busy from its first piece until it ends or is closed.
        """
        tokens = self.prompt_tokens(prompt)
        constraint = constraint_from(json_schema=json_schema, response_format=response_format, regex=regex,
                                     grammar=grammar)
        request = GenerationRequest.of(
            max_tokens=max_tokens, stop=stop, constraint=constraint, logit_bias=logit_bias, temperature=temperature,
            top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, seed=self._sampling_seed if seed is None else seed, n_keep=n_keep,
            ignore_eos=ignore_eos, logprobs=logprobs)
        return self._start(tokens, request, stream, None)

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A prompt's tokens: text tokenized with BOS as the model wants, or a list of token ids, checked."""
        return prompt_tokens(self.handle, prompt)  # (without the lock, as tokenize)

    def chat(self, messages: Sequence[dict[str, Any]] | Messages, *, max_tokens: int = 256, temperature: float = 0.8,
             top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
             frequency_penalty: float = 0.0, presence_penalty: float = 0.0, seed: int | None = None,
             stop: str | Sequence[str] | None = (), stream: bool = False, n_keep: int = 0,
             tools: Sequence[dict[str, Any]] | None = None, tool_choice: object = None,
             parallel_tool_calls: bool | None = None, response_format: object = None, json_schema: object = None,
             grammar: str | None = None, regex: str | None = None, logit_bias: Mapping[object, float] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None, reasoning_format: str | None = None,
             reasoning_budget: int | None = None, continue_final_message: bool = False, ignore_eos: bool = False,
             logprobs: int | None = None) -> Completion | Iterator[Piece]:
        """Generate the assistant's reply to `messages` (OpenAI's shape: role, content, an assistant's
        tool_calls, tool results) with the model's chat template (see chat_template). The sampling, constraint,
        n_keep, ignore_eos and logprobs arguments are generate()'s (a token's logprob goes with the piece that shows
        its text, reasoning or content or a tool call's delta).

        tools: OpenAI's function tools; tool_choice "auto" (the default with tools), "none", "required" or
        {"type": "function", "function": {"name": ...}}. A required or named call is guaranteed to be a call of
        a listed function whose arguments match its schema; with "auto" the model may answer in text, and a call it
        starts is constrained from its first marker on. The result's `tool_calls`: the calls (ids, names, arguments
        as JSON text), `text`: the content, finish_reason: "tool_calls".
        parallel_tool_calls: None (the default) takes what the chat template can write back, as llama-server.
        chat_template_kwargs: extra template variables (e.g. {"enable_thinking": False}).
        reasoning_format ("none", "deepseek", "auto"=None), reasoning_budget (thinking tokens before the end marker is
        forced; None: no limit): the thinking goes to `reasoning` (of each Piece when streamed), a constraint after
        it (core/chat/reasoning.py). continue_final_message: the last (assistant) message continued, no new turn.
        """
        constraint = constraint_from(json_schema=json_schema, response_format=response_format, regex=regex,
                                     grammar=grammar)
        request = GenerationRequest.of(
            max_tokens=max_tokens, stop=stop, logit_bias=logit_bias, temperature=temperature, top_k=top_k,
            top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, seed=self._sampling_seed if seed is None else seed, n_keep=n_keep,
            ignore_eos=ignore_eos, logprobs=logprobs)
        prepared = prepare_chat(
            self, normalize_messages(messages), tools=tools, tool_choice=tool_choice, constraint=constraint,
            parallel_tool_calls=parallel_tool_calls, template_kwargs=chat_template_kwargs,
            reasoning_format=reasoning_format, reasoning_budget=reasoning_budget,
            continue_final_message=continue_final_message)
        request = replace(request, constraint=prepared.constraint, thinking=prepared.thinking)
        return self._start(prepared.tokens, request, stream, prepared.output, prepared.reasoning)

    @property
    def chat_template(self) -> ChatTemplate | None:
        """The Jinja template chat() renders: Model(chat_template=...) if given, else the GGUF's
        tokenizer.chat_template; None when there is neither (chat() then uses llama.cpp's built-in ChatML).
        A GGUF template that does not compile raises ChatTemplateError here (and in chat())."""
        with self._guard.model():
            if not self._chat_template_read:
                self._chat_template = ChatTemplate.for_model(self, self._template_source)
                self._chat_template_read = True
            return self._chat_template

    def apply_chat_template(self, messages: Sequence[dict[str, Any]] | Messages, /, *,
                            tools: Sequence[dict[str, Any]] | None = None, add_generation_prompt: bool = True,
                            **template_kwargs: Any) -> str:
        """The prompt text chat() would tokenize for `messages` (and `tools`)."""
        return render_chat(self, normalize_messages(messages), tools or (), add_generation_prompt, template_kwargs)

    def _start(self, tokens: list[int], request: GenerationRequest, stream: bool, output: ToolCallOutput | None,
               reasoning: ReasoningOutput | None = None) -> Completion | Iterator[Piece]:
        flag("stream", stream)
        n_ctx = self.n_ctx_seq
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(f"the prompt has {len(tokens)} tokens but the context holds n_ctx={n_ctx}")
        with self._guard.model() as handle:  # (the constraint compiles here, before the context is taken)
            drafter = self.drafting.drafter(tokens) if self.drafting is not None else None
            keep = kept_at_shift(self.context_shift, request.n_keep, tokens, handle, n_ctx)
            sequence = GenerationSequence(request, handle, n_ctx, drafter, keep)
        pieces = self._run(tokens, sequence)
        self._stream = weakref.ref(pieces)
        read: Iterator[Piece] = pieces if reasoning is None else reasoning.split(pieces)  # (then the tool calls)
        if stream:
            return read if output is None else output.split(read)
        return completion_of(read, output)

    def _run(self, prompt: list[int], sequence: GenerationSequence) -> Generator[Piece, None, None]:
        with self._guard.held_by("another generation", "start a generation"):
            yield from self._cache.generate(prompt, sequence)

    # -- embeddings ----------------------------------------------------------------------------------

    def embed(self, text: str | Sequence[str | Sequence[int]]) -> np.ndarray:
        """L2-normalised embedding(s): shape (n_embd,) for a str, (len(texts), n_embd) for a list of inputs,
        each a str or a list of token ids (embedded as they are)."""
        if not self.embedding:
            raise InvalidArgumentError("embed() needs Model(..., embedding=True)")
        inputs = embedding_inputs(text, self.handle)
        with self._guard.using("embed") as context:
            self._cache.forget()  # (whatever happens: each input starts from an empty cache, and none stays)
            out = embed_inputs(context, inputs, self.tokenize)
        return out[0] if isinstance(text, str) else out

    def rerank(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """A relevance score per document (float32, in order; higher: more relevant): core/model/rerank.py."""
        if not self.embedding:
            raise InvalidArgumentError("rerank() needs Model(..., embedding=True) of a reranker GGUF")
        prompts = rerank_prompts(self.handle, query, documents)
        with self._guard.using("rerank") as context:
            self._cache.forget()  # (each document starts from an empty cache, and none stays)
            return score_prompts(context, prompts)

    # -- state -----------------------------------------------------------------------------------------

    def save_state(self, path: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        """Write the KV cache and its tokens to `path`, with a header naming this model, KV types and n_ctx and a
        checksum, or with `key` (>= 16 bytes) an HMAC-SHA256 only a holder of the key can make (state_file.py).
        The file appears whole or not at all, readable by its owner only (it holds the conversation)."""
        raw_path, key = fs_path("path", path), check_key(key)
        with self._guard.using("save the state") as context:
            self._cache.save(raw_path, self._state_identity(context), key)

    def load_state(self, path: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        """Restore a state written by save_state() of a Model with the same model file, KV types, n_ctx and LoRA
        adapters at the same scales (with the same `key`, if it was saved with one). A missing, corrupt, oversized
        or mismatched file raises StateFileError and leaves the cache as it was."""
        raw_path, key = fs_path("path", path), check_key(key)
        with self._guard.using("load a state") as context:
            self._cache.load(raw_path, self._state_identity(context),
                             context_limits(context, self.n_ctx_seq, len(self._lora)), key)

    def _state_identity(self, context: ContextHandle) -> StateIdentity:
        return StateIdentity(self.fingerprint, self.ctk, self.ctv, context.n_ctx, context.n_seq_max,
                             self._lora.fingerprint, self._lora.scales)

    @property
    def fingerprint(self) -> bytes:
        """The sha256 of the model file's GGUF header and weight samples: whose state a state file holds."""
        return self._file.sha256

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"n_ctx={self.n_ctx}"
        return f"Model({str(self.path)!r}, ctk={self.ctk!r}, ctv={self.ctv!r}, flash_attn={self.flash_attn!r}, {state})"
