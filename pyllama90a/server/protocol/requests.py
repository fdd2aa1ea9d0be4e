"""The request bodies of the OpenAI routes (/v1/completions, /v1/chat/completions) and of
llama-server's native ones (/completion, /infill, /tokenize, /detokenize, /apply-template) as strict pydantic
models, each field declared once: its type and range here are what is checked and what /openapi.json shows
(openapi.py). Each model converts once into what the routes take (a `Generation` around the core
GenerationRequest; a chat's typed Messages, Tools and ToolChoice: chat.py), through the library's own checkers
(normalize_messages, check_tools, check_tool_choice, constraint_from), whose errors name their field. Fields that
would change the output but are not implemented are refused (refused_fields.py); llama.cpp extensions
implemented: top_k, min_p, repeat_penalty, ignore_eos, grammar, json_schema.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, WithJsonSchema, model_validator

from ...core.chat.messages import Messages
from ...core.chat.template import check_template_variables
from ...core.constrained import Constraint, constraint_from
from ...core.generation.lora_request import MAX_SCALE, RequestedLora
from ...core.generation.request import MAX_TOP_LOGPROBS, GenerationRequest
from ...core.generation.sampling import SamplingParams
from ...core.model.fim import CHUNK_FILENAME, infill_prompt
from ...core.toolcalls import ToolChoice, Tools
from ...errors import about
from ...native.sampler import RANDOM_SEED
from ..errors import APIError
from .base import LIMIT, Between, Limits, ProtocolModel, bad, shown
from .chat import ChatFields
from .refused_fields import CHAT_ONLY_FIELDS, REQUEST_FIELDS

COMPLETIONS_MAXTOKENS_DEFAULT = 16  # OpenAI's, for /v1/completions
MAX_N = 128  # OpenAI's limit on choices per request


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


TOKENS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}


def _prompt(value: Any, mixed: bool) -> Any:
    """One prompt: a string, token ids, or a list holding one of those; /completion's may mix ids and strings."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if (isinstance(value, str) and value) or _token_ids(value):
        return value
    if mixed and isinstance(value, list) and any(type(p) is int for p in value) and any(
            isinstance(p, str) for p in value):
        for i, part in enumerate(value):
            if not ((isinstance(part, str) and part) or type(part) is int):
                raise bad("a prompt list holds token ids and non-empty strings", i)
        return value
    raise bad("'prompt' must be a non-empty string, a list of token ids, or a list with one of those (several "
              "prompts per request are not supported)")


_PROMPT = {"anyOf": [{"type": "string", "minLength": 1}, TOKENS, {"type": "array", "minItems": 1, "maxItems": 1,
                     "items": {"anyOf": [{"type": "string", "minLength": 1}, TOKENS]}}]}
Prompt = Annotated[Any, AfterValidator(lambda v: _prompt(v, False)), WithJsonSchema(_PROMPT)]


def _stops(value: Any) -> tuple[str, ...]:
    """Less empty strings: OpenAI's API takes "" and means nothing by it, a GenerationRequest refuses it."""
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 16 or not all(isinstance(s, str) for s in stops):
        raise bad("'stop' must be a string or a list of at most 16 strings")
    return tuple(s for s in stops if s)


BiasKey = int | str  # a token id, or a text whose tokens are biased (llama-server's string form)


def _logit_bias(value: Any) -> list[tuple[BiasKey, float]]:
    """OpenAI's {"id": bias} and llama-server's forms: [[id, bias]], [["text", bias]], {"text": bias}, and false
    for a bias that bans (-100 here), as (token id or text, bias) pairs in their order."""
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise bad("'logit_bias' must be an object mapping token ids (or texts) to biases, or a list of [token id "
                  "or text, bias] pairs")
    checked: list[tuple[BiasKey, float]] = []
    for i, (key, bias) in enumerate(pairs):
        bias = -100 if bias is False else bias
        if type(bias) not in (int, float) or not -100 <= bias <= 100:
            raise bad(f"'logit_bias': the bias of {shown(key)} must be a number in [-100, 100] or false (a ban), "
                      f"got {shown(bias)}")
        if isinstance(key, str) and key.isascii() and key.isdigit():
            key = int(key) if len(key) <= 12 else -1
        if not ((type(key) is int and key >= 0) or (isinstance(key, str) and key)):
            raise bad(f"'logit_bias': {shown(key)} is neither a token id nor a non-empty text", i)
        checked.append((key, float(bias)))
    return checked


def bias_by_id(pairs: list[tuple[BiasKey, float]], model: Any) -> dict[object, object]:
    """The token ids' biases: a text's tokens each get its bias (tokenized as llama-server does: no BOS, special
    tokens as text); a later pair wins over an earlier one of the same token."""
    biases: dict[object, object] = {}
    for key, bias in pairs:
        if isinstance(key, int):
            biases[key] = bias
            continue
        if model is None:
            raise APIError(400, "'logit_bias' by text is not served on this route", param="logit_bias")
        for token in model.tokenize(key, add_special=False, parse_special=False):
            biases[token] = bias
    return biases


EmbeddingText = str | list[int] | list[int | str]  # a text, token ids, or llama.cpp's mix of ids and texts


def one_input(value: Any) -> EmbeddingText | None:
    """One input as llama.cpp reads it: a non-empty string, token ids, ids and non-empty strings mixed, or
    {"prompt_string": text} / {"content": [{"type": "text", "text": ...}, ...]} (its texts joined); else None."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, list) and value and all((type(v) is int) or (isinstance(v, str) and v) for v in value) \
            and any(type(v) is int for v in value):
        return value
    if isinstance(value, dict) and len(value) == 1:
        if isinstance(value.get("prompt_string"), str):
            return value["prompt_string"] or None
        parts = value.get("content")
        if isinstance(parts, list) and parts and all(
                isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts):
            return "".join(p["text"] for p in parts) or None
    return None


def _native_prompt(value: Any) -> Any:
    """/completion's prompt: one (a string, token ids, ids and strings mixed), or llama-server's batch, a list
    of several of llama.cpp's inputs (as embeddings take them: one_input), as a tuple: one generation each."""
    if isinstance(value, dict):  # ({"prompt_string": text}: llama-server's prompt object, without media)
        prompt = one_input(value)
        if prompt is None:
            raise bad("a prompt object must be {\"prompt_string\": a non-empty string}")
        return prompt
    if not (isinstance(value, list) and len(value) > 1 and not any(type(v) is int for v in value)):
        return _prompt(value, True)
    prompts = [one_input(v) for v in value]
    for i, prompt in enumerate(prompts):
        if prompt is None:
            raise bad("each of several prompts must be a non-empty string, token ids (ids and strings may mix) or "
                      "a {\"prompt_string\"} object", i)
    if len(prompts) > MAX_N:
        raise bad(f"'prompt' may hold at most {MAX_N} prompts, got {len(prompts)}")
    return tuple(prompts)


NativePrompt = Annotated[Any, AfterValidator(_native_prompt), WithJsonSchema({"anyOf": [
    _PROMPT, {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "integer", "minimum": 0},
                                                                   {"type": "string", "minLength": 1}]}},
    {"type": "array", "minItems": 2, "maxItems": MAX_N, "description": "several prompts: one answer each"}]})]


def mixed_tokens(model: Any, prompt: Sequence[int | str], *, add_special: bool = True) -> list[int]:
    """A prompt of token ids and strings as ids: each string tokenized (BOS only before a first one, special-token
    text kept as text), as llama-server reads it."""
    return [t for i, p in enumerate(prompt) for t in (
        model.tokenize(p, add_special=add_special and i == 0, parse_special=False) if isinstance(p, str) else [p])]


MaxTokens = Annotated[int, Between(1, LIMIT)]


@dataclass
class Generation:
    """What the completion routes hand to the engine: the checked GenerationRequest (for a chat, the response
    format's constraint: tools add theirs when the chat is prepared) and how to serve it."""
    request: GenerationRequest
    stream: bool = False
    include_usage: bool = False   # stream_options.include_usage: a last chunk with the usage
    n: int = 1                    # choices: n generations of the same prompt, in parallel slots
    prompt: Any = None            # a string or token ids (completions)
    prompts: list[Any] | None = None  # /completion's several prompts (n of them): one generation each
    messages: Messages | None = None       # (chat)
    tools: Tools | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # None: the chat template's capability (chat.prepare_chat)
    template_kwargs: dict[str, Any] | None = None  # chat_template_kwargs: extra template variables
    add_generation_prompt: bool = True     # (chat) prepare_chat's, as the request gives them
    continue_final_message: bool = False
    reasoning_format: str | None = None    # (chat) None: the server's --reasoning-format
    reasoning_budget: int | None = None    # (chat) None: the server's --reasoning-budget
    reasoning_budget_message: str | None = None
    return_tokens: bool = False   # /completion: the token ids in a whole answer's `tokens` (a stream has them)
    n_probs: int = 0              # /completion: top logprobs per token in completion_probabilities
    answer: AnswerOptions = dataclasses.field(default_factory=lambda: AnswerOptions())
    slot: int | None = None       # id_slot: the slot its generations run in (None: the engine picks)


@dataclass(frozen=True)
class AnswerOptions:
    """llama-server's request fields that shape the answer, not the generation (responses/openai.py's Shape)."""
    timings_per_token: bool = False
    return_progress: bool = False
    verbose: bool = False
    response_fields: tuple[str, ...] = ()

    def shape_settings(self, model: Any, prompt: list[int]) -> dict[str, Any]:
        """The Shape's settings for a request whose prompt is `prompt` on `model`."""
        return {"prompt_tokens": len(prompt), "timings_per_token": self.timings_per_token,
                "response_fields": self.response_fields,
                "verbose_prompt": (lambda: model.detokenize(prompt, special=True)) if self.verbose else None}


class Harmless(ProtocolModel):
    """Fields accepted on every route because they change nothing in the answer (bookkeeping, caching hints,
    routing); a wrong type is still a client's bug."""
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prediction: Any = None
    prompt_cache_key: Any = None
    safety_identifier: Any = None
    cache_prompt: Any = Field(None, description="llama.cpp's: KV cache reuse, which this server decides itself")


class StreamOptions(ProtocolModel):
    include_usage: bool = False


class LoraScale(ProtocolModel):
    """One LoRA adapter of a request's `lora` (or of POST /lora-adapters): its id (GET /lora-adapters) and scale."""
    id: Annotated[int, Between(0, 2**31 - 1)]
    scale: Annotated[float, Between(-MAX_SCALE, MAX_SCALE)]


def lora_pairs(items: list[LoraScale]) -> RequestedLora:
    """[{id, scale}, ...] as (id, scale) pairs, in their order: lora.requested_lora checks them (an id twice is a
    LoraAdapterError, a 400 naming `lora`) where GenerationRequest and the engine's defaults take them."""
    return tuple((item.id, item.scale) for item in items)


_BIAS = {"type": "number", "minimum": -100, "maximum": 100}


class GenerationBody(Harmless):
    """The fields of every generation route."""
    refused = REQUEST_FIELDS
    model: str | None = Field(None, description="any name: the one loaded model answers")
    n: Annotated[int, Between(1, MAX_N)] = 1
    response_format: dict[str, Any] | None = None
    grammar: str | None = Field(None, description="a GBNF grammar (llama.cpp's extension)")
    json_schema: dict[str, Any] | None = Field(None, description="llama.cpp's extension: the output's JSON schema")
    logit_bias: Annotated[Any, AfterValidator(_logit_bias), WithJsonSchema({"anyOf": [
        {"type": "object", "additionalProperties": {"anyOf": [_BIAS, {"const": False}]}},
        {"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [
            {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]},
            {"anyOf": [_BIAS, {"const": False}]}]}}]})] = ()
    ignore_eos: bool = False
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = Field(None, description="OpenAI's newer max_tokens; wins over it")
    stream: bool = False
    stream_options: StreamOptions = StreamOptions()
    temperature: Annotated[float, Between(0.0, 2.0)] = 1.0
    top_p: Annotated[float, Between(0.0, 1.0)] = 1.0
    top_k: Annotated[int, Between(0, 1 << 30)] = 40
    min_p: Annotated[float, Between(0.0, 1.0)] = 0.05
    repeat_penalty: Annotated[float, Between(1e-6, 100.0)] = 1.0
    frequency_penalty: Annotated[float, Between(-2.0, 2.0)] = 0.0
    presence_penalty: Annotated[float, Between(-2.0, 2.0)] = 0.0
    seed: Annotated[int, Between(-(2**63), 2**64 - 1)] | None = None
    stop: Annotated[Any, AfterValidator(_stops), WithJsonSchema({"anyOf": [
        {"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 16}]})] = ()
    lora: list[LoraScale] | None = Field(None, description="the LoRA adapters this request runs with, by id "
                                         "(GET /lora-adapters), as llama-server's: adapters not named are off; "
                                         "absent: the server's default scales")
    timings_per_token: bool = Field(False, description="llama-server's: every stream event has the timings so far")
    return_progress: bool = Field(False, description="llama-server's: a stream reports the prompt's evaluation "
                                  "(prompt_progress) after each batch of it, before the first token")
    verbose: bool = Field(False, description="llama-server's: a whole answer has `__verbose` (the prompt's text)")
    id_slot: Annotated[int, Between(-1, 2**31 - 1)] = Field(-1, description="llama-server's: the slot the request "
                                                            "runs in (it waits for that one); -1: the server picks")
    n_keep: Annotated[int, Between(-1, 2**31 - 1)] = Field(0, description="llama-server's: the prompt tokens a "
                                                           "context shift keeps (--context-shift); -1: all of them")

    @model_validator(mode="after")
    def _server_defaults(self, info: ValidationInfo) -> GenerationBody:
        """The server's --seed and --temp where the request sets none (a null one is none: ProtocolModel)."""
        limits = info.context
        if isinstance(limits, Limits):
            for name in ("seed", "temperature"):
                if name not in self.model_fields_set and getattr(limits, name) is not None:
                    setattr(self, name, getattr(limits, name))
        return self

    def _constraint(self) -> Constraint | None:
        """OpenAI's response_format, or llama.cpp's grammar or json_schema ("" and {} mean none, as there)."""
        given = {k: v for k, v in (("response_format", self.response_format), ("grammar", self.grammar or None),
                                   ("json_schema", self.json_schema or None)) if v is not None}
        if len(given) > 1:
            raise APIError(400, f"give at most one of response_format, grammar and json_schema, got "
                                f"{', '.join(given)}", param=list(given)[1])
        if not given:
            return None
        ((name, _),) = given.items()
        with about(name):  # (the one given; the others are None)
            return constraint_from(response_format=self.response_format, grammar=self.grammar or None,
                                   json_schema=self.json_schema or None)

    def _generation(self, max_tokens: int, logprobs: int | None, *, model: Any = None, **how: Any) -> Generation:
        sampling = {f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingParams)}  # (same names)
        if self.seed is not None:  # llama.cpp's seeds are uint32 (the low 32 bits, as llama-server takes them),
            seed = self.seed & RANDOM_SEED  # and RANDOM_SEED (which -1 is, llama-server's default) draws one
            sampling["seed"] = None if seed == RANDOM_SEED else seed
        request = GenerationRequest(max_tokens, self.stop, SamplingParams(**sampling), self._constraint(),
                                    bias_by_id(list(self.logit_bias), model) or None, logprobs, self.ignore_eos,
                                    None if self.lora is None else lora_pairs(self.lora), n_keep=self.n_keep)
        answer = AnswerOptions(self.timings_per_token, self.return_progress, self.verbose,
                               tuple(getattr(self, "response_fields", ())))
        return Generation(request, self.stream, self.stream_options.include_usage, self.n, **how, answer=answer,
                          slot=None if self.id_slot == -1 else self.id_slot)

    def _max_tokens(self, limits: Limits, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or min(default, limits.max_tokens_limit)


class CompletionRequest(GenerationBody):
    """POST /v1/completions."""
    refused = {**REQUEST_FIELDS, **CHAT_ONLY_FIELDS}  # noqa: RUF012 (a ClassVar of ProtocolModel; a prompt has no tools)
    prompt: Prompt
    logprobs: Annotated[int, Between(0, 5)] | None = None

    def convert(self, limits: Limits, model: Any = None) -> Generation:
        return self._generation(self._max_tokens(limits, COMPLETIONS_MAXTOKENS_DEFAULT), self.logprobs,
                                prompt=self.prompt, model=model)


class ChatRequest(GenerationBody, ChatFields):
    """POST /v1/chat/completions."""
    logprobs: bool = False
    top_logprobs: Annotated[int, Between(0, MAX_TOP_LOGPROBS)] | None = None
    continue_final_message: bool = Field(False, description="vLLM's: continue the last (assistant) message, no "
                                         "new turn (with add_generation_prompt false)")
    reasoning_format: Literal["none", "deepseek", "auto"] | None = Field(
        None, description="llama-server's: where a thinking block goes (absent: the server's --reasoning-format)")
    reasoning_budget_tokens: Annotated[int, Between(-1, 1 << 30)] | None = Field(
        None, description="llama-server's: tokens of thinking before its end is forced (-1: the server's)")
    thinking_budget_tokens: Annotated[int, Between(-1, 1 << 30)] | None = Field(
        None, description="llama-server's other name for reasoning_budget_tokens")
    reasoning_budget_message: str | None = Field(None, description="text forced before the end of thinking when "
                                                 "the budget is spent")

    @model_validator(mode="after")
    def _top_logprobs(self) -> ChatRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return self

    def convert(self, limits: Limits, model: Any = None) -> Generation:
        messages, tools, tool_choice = self.chat()
        return self._generation(self._max_tokens(limits, limits.max_tokens_default),
                                (self.top_logprobs or 0) if self.logprobs else None, model=model, messages=messages,
                                tools=tools,
                                tool_choice=tool_choice, parallel_tool_calls=self.parallel_tool_calls,
                                template_kwargs=self.chat_template_kwargs or None,
                                add_generation_prompt=self.add_generation_prompt,
                                continue_final_message=self.continue_final_message,
                                reasoning_format=self.reasoning_format, reasoning_budget=self._reasoning_budget(),
                                reasoning_budget_message=self.reasoning_budget_message)

    def _reasoning_budget(self) -> int | None:
        """llama-server's reading: reasoning_budget_tokens, else thinking_budget_tokens; -1 or absent: the server's."""
        given = [b for b in (self.reasoning_budget_tokens, self.thinking_budget_tokens) if b is not None and b != -1]
        return given[0] if given else None


class NativeCompletionRequest(CompletionRequest):
    """POST /completion: /v1/completions' fields, llama-server's names for three (n_predict: max_tokens, -1 its
    default, until the slot is full: --max-tokens-limit; n_probs; return_tokens), a prompt of mixed ids and
    strings (special-token text stays text, as llama-server reads it)."""
    n: Literal[1] = Field(1, description="one completion per prompt: /v1/completions serves n > 1")
    prompt: NativePrompt
    n_predict: Annotated[int, Between(-1, LIMIT)] | None = None
    n_probs: Annotated[int, Between(0, MAX_TOP_LOGPROBS)] = 0
    return_tokens: bool = False
    post_sampling_probs: bool = Field(False, description="llama-server's: `prob`, `top_probs` after the sampler chain")
    response_fields: list[str] = Field([], description="llama-server's: only these fields of the answer, each by "
                                       "its path (\"generation_settings/n_predict\")")

    @model_validator(mode="before")
    @classmethod
    def _one_length(cls, body: Any) -> Any:
        if isinstance(body, dict) and body.get("n_predict") is not None:
            given = [name for name in ("max_tokens", "max_completion_tokens") if body.get(name) is not None]
            if given:
                raise bad(f"give n_predict or {given[0]}, not both", "n_predict")
            if body["n_predict"] == 0:
                raise bad("'n_predict' must be -1 (until the slot is full) or at least 1 (0, evaluating the "
                          "prompt only, is not supported)", "n_predict")
        return body

    def native(self, limits: Limits, prompt: str | list[int], model: Any = None) -> Generation:
        n_predict = limits.max_tokens_limit if self.n_predict == -1 else self.n_predict
        max_tokens = n_predict or self._max_tokens(limits, limits.max_tokens_default)  # (not /v1/completions' 16)
        gen = self._generation(max_tokens, self.n_probs or self.logprobs, prompt=prompt, model=model,
                               return_tokens=self.return_tokens, n_probs=self.n_probs)
        with about("post_sampling_probs"):  # (its checks: GenerationRequest's)
            return dataclasses.replace(gen, request=dataclasses.replace(gen.request, post_sampling_probs=True)) \
                if self.post_sampling_probs else gen

    def convert(self, limits: Limits, model: Any = None) -> Generation:
        """A mixed prompt's strings tokenized (BOS only before a first one), special-token text kept as text;
        several prompts: one generation each."""
        prompts = [mixed_tokens(model, p) if isinstance(p, list) else p
                   for p in (self.prompt if isinstance(self.prompt, tuple) else [self.prompt])]
        gen = self.native(limits, prompts[0], model)
        return dataclasses.replace(gen, n=len(prompts), prompts=prompts) if isinstance(self.prompt, tuple) else gen


class Chunk(ProtocolModel):
    """One of /infill's input_extra: another file's text."""
    keep_none = True  # (a null filename is an error, not the default)
    filename: str = CHUNK_FILENAME
    text: str


class InfillRequest(NativeCompletionRequest):
    """POST /infill: /completion's fields around the model's FIM prompt (pyllama90a/core/model/fim.py)."""
    input_prefix: str = Field(description="the text before the gap (it may be empty)")
    input_suffix: str = Field(description="the text after the gap")
    input_extra: list[Chunk] = Field([], description="other files' chunks, put before the FIM prefix")
    prompt: str = Field("", description="the start of the middle, after the FIM middle token")

    def convert(self, limits: Limits, model: Any = None) -> Generation:
        """Run in a worker thread: the texts are tokenized here."""
        tokens = infill_prompt(model, self.input_prefix, self.input_suffix, prompt=self.prompt,
                               input_extra=[c.model_dump() for c in self.input_extra])
        return self.native(limits, tokens, model)


class TokenizeRequest(Harmless):
    """POST /tokenize, with llama-server's defaults (no BOS, special tokens parsed, ids only)."""
    content: str = Field(description="the text to tokenize")
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(Harmless):
    """POST /detokenize: token ids, checked against the vocabulary by the model."""
    tokens: list[int]


class ApplyTemplateRequest(Harmless, ChatFields):
    """POST /apply-template: a chat request's messages and tools, checked as /v1/chat/completions checks them;
    converts to apply_chat_template's arguments (the tools it is shown: none with tool_choice "none")."""
    model: str | None = None

    def convert(self, limits: Limits) -> tuple[Messages, Tools | None, dict[str, Any]]:
        messages, tools, tool_choice = self.chat()
        # (add_generation_prompt is apply_chat_template's own argument, which the route passes these to: a template
        # variable of that name is refused, not merged)
        check_template_variables(self.chat_template_kwargs)
        return messages, tools if tool_choice.mode != "none" else None, {
            **self.chat_template_kwargs, "add_generation_prompt": self.add_generation_prompt}
