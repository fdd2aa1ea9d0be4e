"""How often structured output and tool calls succeed on a model, through `python -m pyllama90a.server` and the
openai client (issue 21: calls and schemas that end). Prints a table and writes JSON.

    python benchmarks/tool_call_success.py [--repo DIR] [--label NAME] [--out FILE.json]

--repo: the source tree whose server is started (default: this one), e.g. /work/main for "before".
Paths: response_format json_schema, and tools with tool_choice auto / required / a named function; each at
temperature 0 once and at the server's default temperature over seeds 1-10 (max_tokens 128).

Success: finish_reason is not "length", and
- structured: the content is JSON valid under the schema read as llama.cpp reads it (an object with
  `properties` and no `additionalProperties` has no other keys);
- tools: exactly one call, of a listed function (the named one when named), whose arguments are JSON valid
  under that function's parameters read the same way, and no "<tool_call>" text in the content.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai

import pyllama90a as pl
from pyllama90a.tools.server_process import ServerProcess

SEEDS = range(1, 11)
MAX_TOKENS = 128

PLACES = {"type": "object", "properties": {"city": {"type": "string"},
                                           "sights": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "sights"]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER, TIME]
CHOICES = {"auto": "auto", "required": "required",
           "named": {"type": "function", "function": {"name": "get_weather"}}}


def closed(schema: dict) -> dict:
    """`schema` with additionalProperties false where it has properties and says nothing of extras."""
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:
        node = stack.pop()
        if "properties" in node:
            node.setdefault("additionalProperties", False)
            stack += [v for v in node["properties"].values() if isinstance(v, dict)]
        if isinstance(node.get("items"), dict):
            stack.append(node["items"])
    return out


def structured(client: openai.OpenAI, seed: int | None) -> str:
    """"ok" or why not."""
    extra = {"temperature": 0} if seed is None else {"seed": seed}
    r = client.chat.completions.create(
        model="m", max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": "List the main sights of Paris."}],
        response_format={"type": "json_schema", "json_schema": {"name": "places", "schema": PLACES}}, **extra)
    choice = r.choices[0]
    if choice.finish_reason == "length":
        return "length"
    try:
        value = json.loads(choice.message.content or "")
    except ValueError:
        return "not JSON"
    try:
        jsonschema.validate(value, closed(PLACES))
    except jsonschema.ValidationError as e:
        return f"invalid: {e.validator}"
    return "ok"


def tool_call(client: openai.OpenAI, path: str, seed: int | None) -> str:
    extra = {"temperature": 0} if seed is None else {"seed": seed}
    r = client.chat.completions.create(
        model="m", max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=TOOLS, tool_choice=CHOICES[path], **extra)
    choice = r.choices[0]
    calls = choice.message.tool_calls or []
    if "<tool_call>" in (choice.message.content or ""):
        return "partial call in content"
    if choice.finish_reason == "length":
        return "length"
    if len(calls) != 1:
        return f"{len(calls)} calls"
    (call,) = calls
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    if call.function.name not in schemas or (path == "named" and call.function.name != "get_weather"):
        return "wrong function"
    try:
        args = json.loads(call.function.arguments)
    except ValueError:
        return "arguments not JSON"
    try:
        jsonschema.validate(args, closed(schemas[call.function.name]))
    except jsonschema.ValidationError as e:
        return f"invalid: {e.validator}"
    return "ok" if choice.finish_reason == "tool_calls" else f"finish_reason {choice.finish_reason}"


def run(base_url: str) -> dict:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", timeout=600, max_retries=0)
    paths = {"structured": lambda seed: structured(client, seed),
             **{f"tools {p}": (lambda seed, p=p: tool_call(client, p, seed)) for p in CHOICES}}
    results = {}
    with ThreadPoolExecutor(4) as pool:  # the server's 4 slots decode together
        for name, one in paths.items():
            greedy = pool.submit(one, None)
            seeded = list(pool.map(one, SEEDS))
            results[name] = {"temperature 0": greedy.result(), "seeds": seeded}
            print(f"{name}: t=0 {results[name]['temperature 0']}; seeds {Counter(seeded)}", file=sys.stderr)
    return results


def table(results: dict) -> str:
    lines = ["| path | temperature 0 | default temperature, 10 seeds | failures |", "| --- | --- | --- | --- |"]
    for name, r in results.items():
        fails = Counter(x for x in [r["temperature 0"], *r["seeds"]] if x != "ok")
        lines.append(f"| {name} | {r['temperature 0']} | {r['seeds'].count('ok')}/{len(r['seeds'])} ok | "
                     f"{', '.join(f'{k} x{v}' for k, v in fails.items()) or '-'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--label", default="")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    flags = ["--model", str(pl.default_model()), "--parallel", "4", "--n-ctx", "4096"]
    env = {"PYTHONPATH": args.repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ServerProcess(flags, env=env, timeout=300) as srv:
        results = run(srv.base_url)
    print(table(results))
    if args.out:
        Path(args.out).write_text(json.dumps({"label": args.label, "repo": args.repo, "model": pl.default_model().name,
                                              "max_tokens": MAX_TOKENS, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
