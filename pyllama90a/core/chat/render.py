"""Chat templates compiled and rendered in a worker process (pyllama90a.core.constrained.isolation), within limits.

A template is a program that a model file (or Model(chat_template=...), --chat-template-file) brings: two
nested range(100000) loops run for hours, string doubling fills the memory, a tojson with a huge indent asks
for gigabytes. jinja2's sandbox stops a template from reaching Python internals, not from using time or memory,
and a Python thread cannot be stopped. So the template compiles (`check`) and renders (`render`) in a worker:
it is killed after `render_timeout_s`, its address space is bounded (isolation.Settings.memory_mb), and the
output is counted as it is produced (`max_output_chars`). Every failure is a ChatTemplateError whose message
names the limit, or the template's own error and line.

Defaults (TemplateLimits; the server's --template-* flags, `set_limits()` in Python): render_timeout_s 5,
max_output_chars 16 Mi (16,777,216 characters, the server's largest request body).

The environment is jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols
extension, the globals `raise_exception(message)` and `strftime_now(format)`, the variable `now` (the render's
datetime, unless the caller gives one), a `tojson` filter that keeps
non-ASCII text and takes indent/separators/sort_keys, and a `{% generation %}` block that renders its body.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ...errors import ChatTemplateError, InvalidArgumentError, PositiveSettings
from ..constrained import isolation

if TYPE_CHECKING:  # pragma: no cover (jinja2 is imported where a template is compiled: in the worker)
    import jinja2
    from jinja2.parser import Parser
    from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["TemplateLimits", "check", "get_limits", "render", "set_limits"]


@dataclass(frozen=True)
class TemplateLimits(PositiveSettings):
    WHAT = "chat template limit"
    render_timeout_s: float = 5.0
    max_output_chars: int = 16 * 2**20


_limits = TemplateLimits()


def get_limits() -> TemplateLimits:
    return _limits


def set_limits(**changes: Any) -> TemplateLimits:
    """Change the template limits (e.g. set_limits(render_timeout_s=1)) for every later render."""
    global _limits
    _limits = replace(_limits, **changes)
    return _limits


# -- the caller's side ----------------------------------------------------------------------------------------

def _not_plain_data(e: isolation.UnsendablePayload) -> InvalidArgumentError:
    return InvalidArgumentError(f"template variables must be plain data (str, numbers, lists, dicts): {e.original}",
                                param="chat_template_kwargs")


_WORDING = isolation.Wording(
    ChatTemplateError, memory="chat template {message} (server flag --isolation-memory-mb)",
    other="chat template failed: {kind}: {message}",
    timeout="chat template ran past the time limit of {timeout:g} s (server flag --template-timeout)",
    crash="chat template failed: its render process died ({crash}; memory limit {memory_mb} MiB, server flag "
          "--isolation-memory-mb)",
    unsendable=_not_plain_data)


def _isolated(task: str, payload: Any) -> Any:
    return isolation.run_as(task, payload, timeout_s=_limits.render_timeout_s, wording=_WORDING)


def check(source: str) -> frozenset[str]:
    """Compile `source` (ChatTemplateError if it does not); the names of the variables it reads."""
    return frozenset(_isolated("template_check", source))


def render(source: str, variables: dict[str, Any]) -> str:
    """Render template text with exactly `variables` (plain data: str, numbers, lists, dicts: else an
    InvalidArgumentError, found as the worker's payload is pickled, once)."""
    return cast(str, _isolated("template", (source, variables, _limits.max_output_chars)))  # (render_in_worker's str)


# -- the worker's side ----------------------------------------------------------------------------------------

def _environment() -> ImmutableSandboxedEnvironment:
    import jinja2
    from jinja2.exceptions import SecurityError
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        """{% generation %}...{% endgeneration %} (HF marks the assistant's tokens with it): renders the body."""

        tags = {"generation"}  # noqa: RUF012 (declared so by jinja2.ext.Extension)

        def parse(self, parser: Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    class Sandbox(ImmutableSandboxedEnvironment):
        def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
            # the default gives an Undefined that fails only when used further ({{ x.__class__ }} prints "")
            raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")

    def raise_exception(message: object) -> None:
        raise jinja2.TemplateError(str(message))

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Sequence[str] | None = None, sort_keys: bool = False) -> str:
        seps = None
        if separators is not None:  # templates pass a list or tuple of (item, key) separators
            item_sep, key_sep = separators
            seps = (str(item_sep), str(key_sep))
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=seps, sort_keys=sort_keys)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                  extensions=["jinja2.ext.loopcontrols", GenerationBlock])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_env: ImmutableSandboxedEnvironment | None = None
# template text -> (the compiled template, the variables it reads)
_compiled: OrderedDict[str, tuple[jinja2.Template, frozenset[str]]] = OrderedDict()
_CACHE_SIZE = 16


def _template_line(exc: BaseException) -> int | None:
    """The template line an error was raised at (jinja2 rewrites tracebacks so they show template lines)."""
    line = getattr(exc, "lineno", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _compile(source: str) -> tuple[jinja2.Template, frozenset[str]]:
    global _env
    hit = _compiled.get(source)
    if hit is not None:
        _compiled.move_to_end(source)
        return hit
    import jinja2
    from jinja2 import meta

    if _env is None:
        _env = _environment()
    try:
        tree = _env.parse(source)
        names = frozenset(meta.find_undeclared_variables(tree))
        template = _env.from_string(tree)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template syntax error at line {e.lineno}: {e.message}") from None
    except (RecursionError, SyntaxError, MemoryError) as e:  # (IndentationError is a SyntaxError)
        # Python's own compiler refuses 20+ nested loops or 100 nested blocks; jinja's parser recurses
        raise ChatTemplateError(f"chat template does not compile: nested too deeply ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None
    _compiled[source] = (template, names)
    while len(_compiled) > _CACHE_SIZE:
        _compiled.popitem(last=False)
    return template, names


def check_in_worker(source: str) -> list[str]:
    return sorted(_compile(source)[1])


def render_in_worker(payload: tuple[str, dict[str, Any], int]) -> str:
    import jinja2

    source, variables, max_chars = payload
    template, _ = _compile(source)
    parts, size = [], 0
    try:
        variables = {"now": datetime.now(), **variables}  # (a datetime: sent as plain data it would be a str)
        for part in template.generate(variables):  # (a dict: a variable named "self" is no keyword clash)
            size += len(part)
            if size > max_chars:
                raise ChatTemplateError(f"chat template output is over the limit of {max_chars} characters "
                                        "(server flag --template-max-output)")
            parts.append(part)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        line = _template_line(e)
        where = f" (template line {line})" if line else ""
        kind = "raised an error:" if type(e) is jinja2.TemplateError else f"failed: {type(e).__name__}:"
        raise ChatTemplateError(f"chat template {kind} {e.message or e}{where}") from None
    except RecursionError:
        raise ChatTemplateError("chat template failed: recursion too deep") from None
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a template's TypeError, ValueError, ... in its expressions
        line = _template_line(e)
        where = f" (template line {line})" if line else ""
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {str(e)[:500]}{where}") from None
    return "".join(parts)
