"""Small chat templates written for these tests, each in the style of one model family's tool calling (the
markers are the families'; the template text is ours). Shared by test_chat_template and test_tool_calls."""
from __future__ import annotations

# Hermes/Qwen style: ChatML turns, tools listed in <tools> in the system turn, calls in <tool_call> blocks,
# results in <tool_response> blocks inside a user turn.
HERMES_STYLE = """\
{%- set ns = namespace(system='') %}
{%- if messages[0].role == 'system' %}{% set ns.system = messages[0].content %}{% endif %}
{%- if tools %}
<|im_start|>system
{% if ns.system %}{{ ns.system }}

{% endif %}You may call functions. Their signatures:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Write each call as <tool_call>
{"name": <name>, "arguments": <object>}
</tool_call><|im_end|>
{% elif ns.system %}
<|im_start|>system
{{ ns.system }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}{% continue %}{% endif %}
{%- if m.role == 'assistant' and m.tool_calls %}
<|im_start|>assistant
{% if m.content %}{{ m.content }}
{% endif %}
{%- for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}<|im_start|>user
{% endif %}<tool_response>
{{ m.content }}
</tool_response>
{% if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>
{% endif %}
{%- else %}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""

# Llama 3.1 style: header ids, BOS in the text, tools described in the system turn, calls as
# <|python_tag|>{"name": ..., "parameters": ...}, results in "ipython" turns.
LLAMA3_STYLE = """\
{{- bos_token }}
{%- if tools %}
<|start_header_id|>system<|end_header_id|>

Answer with a function call when one helps, as JSON: {"name": function name, "parameters": arguments object}.
{% for tool in tools %}{{ tool.function | tojson(indent=2) }}
{% endfor %}<|eot_id|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}
<|start_header_id|>assistant<|end_header_id|>

{% for c in m.tool_calls %}<|python_tag|>{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}<|eom_id|>
{%- elif m.role == 'tool' %}
<|start_header_id|>ipython<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- else %}
<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content | trim }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}
"""

# Mistral style: [INST] turns that must alternate, [AVAILABLE_TOOLS] before the last user turn, calls as
# [TOOL_CALLS][...] and results as [TOOL_RESULTS]; call ids must be 9 letters/digits, as Mistral's require.
MISTRAL_STYLE = """\
{{- bos_token }}
{%- set ns = namespace(users=0, last_user=0) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages %}
{%- if m.role == 'user' %}
{%- if loop.index0 > 0 and messages[loop.index0 - 1].role == 'user' %}
{{- raise_exception('After a user message comes an assistant or tool message') }}
{%- endif %}
{%- if tools and loop.index0 == ns.last_user %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}
[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls %}
{%- set calls = [] %}
{%- for c in m.tool_calls %}
{%- if c.id is not defined or c.id | length != 9 %}{{ raise_exception('Tool call ids must be 9 letters or digits') }}{% endif %}
{%- endfor %}
[TOOL_CALLS][{% for c in m.tool_calls %}{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}, "id": "{{ c.id }}"}{{ ", " if not loop.last }}{% endfor %}]{{ eos_token }}
{%- elif m.role == 'tool' %}
[TOOL_RESULTS]{{ {"call_id": m.tool_call_id, "content": m.content} | tojson }}[/TOOL_RESULTS]
{%- elif m.role == 'assistant' %}
{{ m.content }}{{ eos_token }}
{%- else %}
[INST]{{ m.content }}[/INST]
{%- endif %}
{%- endfor %}
"""

# A template with no tool syntax at all (the generic format's case): plain ChatML.
PLAIN_STYLE = """\
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
"""

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather of a city — température in °C",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time",
    "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
NO_ARGS = {"type": "function", "function": {"name": "ping", "description": "Check the service"}}
TOOLS = [WEATHER, TIME, NO_ARGS]
