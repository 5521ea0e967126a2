#!/usr/bin/env python3
"""Builds the chat-template fixtures in tests/fixtures/chat_templates/.

ft renders HF chat templates with its own Jinja engine, and the renderings must
be byte for byte what transformers' `tokenizer.apply_chat_template(...,
tokenize=False)` gives. There is no model hub here, so the templates are written
out below in the style of the published ones (ChatML, Llama 2, Llama 3, 3.1 and
3.2, Mistral v0.1 and v0.3 with tools, Qwen2.5 and Qwen3 with tools and
reasoning, SmolLM2, Zephyr, Gemma and Gemma 3, Phi-3, DeepSeek-R1, a Hermes-style
tool template built on a recursive macro, and a ChatML template with
{% generation %} marks). Each is saved as <name>.jinja, set on a
PreTrainedTokenizerFast built from scratch (a tiny WordLevel vocabulary with the
template family's special tokens), and applied to a set of conversations: with
and without a system message, multi-turn, with and without the generation
prompt, unicode and quotes and template syntax in the content, empty content,
tool calls and tool results, multimodal content, reasoning, and conversations
the template must refuse (raise_exception) or cannot render.

Written:
  <name>.jinja          the templates (test inputs)
  expected.json         per template and conversation: the rendering, or the
                        exception transformers raised (type and message); and
                        for templates with {% generation %}, the byte ranges
                        transformers' assistant tracking reports
  engine_cases.json     small templates exercising one engine feature each,
                        rendered by transformers' own compiled environment
                        (transformers.utils.chat_template_utils), with their
                        output (object addresses, " at 0x...", removed) or
                        exception (and the line of syntax errors)
  tokenizer/            a tokenizer saved by save_pretrained: tokenizer.json,
                        tokenizer_config.json, chat_template.jinja (the default
                        template) and additional_chat_templates/tool_use.jinja
  legacy_config/        a tokenizer_config.json with the templates stored the
                        older way, as a list of named templates

Deterministic and idempotent (no template reads the clock: Llama 3.2 is given a
date_string):

    tools/.venv/bin/python tools/make_chat_template_fixtures.py
"""
import json
import pathlib
import re
import shutil

import jinja2
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/chat_templates"

# ---------------------------------------------------------------------------
# Templates. Single-line ones are written the way tokenizer_config.json files
# hold them; multi-line ones end with a newline as a .jinja file would (jinja2
# drops one trailing newline of the source).

TEMPLATES = {}

TEMPLATES["chatml"] = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TEMPLATES["llama2"] = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

TEMPLATES["llama3"] = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

TEMPLATES["llama3_1"] = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

TEMPLATES["llama3_2"] = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

TEMPLATES["mistral_v01"] = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

TEMPLATES["mistral_v3_tools"] = r"""{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

TEMPLATES["qwen2_5"] = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

TEMPLATES["qwen3"] = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

TEMPLATES["smollm2"] = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TEMPLATES["zephyr"] = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

TEMPLATES["gemma"] = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

TEMPLATES["gemma3"] = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"""

TEMPLATES["phi3"] = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

TEMPLATES["deepseek_r1"] = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}"
    "{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls']%}"
    "{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments']|tojson + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}"
    "{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments']|tojson + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"
    "{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}"
    "{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}"
    "{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)

TEMPLATES["hermes_tools"] = r"""{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool",
    "null": "None"
} %}

{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec['items']) + "]" }}
{%- elif json_spec.type == "object" %}
    {%- if json_spec.additionalProperties is defined %}
        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + ']' }}
    {%- else %}
        {{- "dict" }}
    {%- endif %}
{%- elif json_spec.type is iterable and json_spec.type is not string %}
    {{- "Union[" }}
    {%- for t in json_spec.type %}
        {{- json_to_python_type({"type": t}) }}
        {%- if not loop.last %}
            {{- "," }}
        {%- endif %}
    {%- endfor %}
    {{- "]" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}

{%- macro render_tool(tool) -%}
{%- set fn = tool.function if tool.function is defined else tool -%}
{{- '{"type": "function", "function": ' }}
{{- '{"name": ' + fn.name|tojson + ', ' }}
{{- '"description": "' + fn.name + '(' }}
{%- for param_name, param_fields in fn.parameters.properties|dictsort %}
    {{- param_name + ": " + json_to_python_type(param_fields) }}
    {%- if not loop.last %}
        {{- ", " }}
    {%- endif %}
{%- endfor %}
{{- ")" }}
{%- if fn.return is defined %}
    {{- " -> " + json_to_python_type(fn.return) }}
{%- endif %}
{{- " - " + fn.description|default('')|trim + '", ' }}
{{- '"parameters": ' + fn.parameters|tojson(sort_keys=true) }}
{{- ', "required": ' + (fn.parameters.required|default([]))|tojson + '}}' }}
{%- endmacro -%}

{{- bos_token }}
{{- '<|im_start|>system\n' }}
{{- "You are a function calling AI model. You may call one or more functions. Here are the available tools: <tools> " }}
{%- for tool in tools|default([], true) %}
    {{- render_tool(tool) }}
    {{- '\n' if not loop.last else ' ' }}
{%- endfor %}
{{- "</tools> Names: " + (tools|default([], true)|map(attribute="function.name")|join(", ")) }}
{{- " Count: " ~ (tools|default([], true)|length) ~ "<|im_end|>\n" }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n' }}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}
            {{- '"name": "' }}
            {{- tool_call.name }}
            {{- '"' }}
            {{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments|tojson }}
                {%- endif %}
            {%- endif %}
            {{- '}' }}
            {{- '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>tool\n' }}
        {%- endif %}
        {{- '<tool_response>\n' }}
        {{- message.content }}
        {%- if not loop.last %}
            {{- '\n</tool_response>\n' }}
        {%- else %}
            {{- '\n</tool_response>' }}
        {%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>' }}
        {%- elif loop.last %}
            {{- '<|im_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

TEMPLATES["chatml_generation"] = r"""{%- for message in messages %}
    {%- if message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- generation %}
            {{- message['content'] | trim + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Special tokens per template family (what the tokenizer's special_tokens_map holds).
SPECIAL = {
    "chatml": {"eos_token": "<|im_end|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral_v01": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral_v3_tools": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2_5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"},
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "gemma3": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "deepseek_r1": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "hermes_tools": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "chatml_generation": {"eos_token": "<|im_end|>"},
}

# Variables some templates need to render deterministically.
VARIABLES = {"llama3_2": {"date_string": "02 Jan 2025"}}

TOOL_TEMPLATES = ["llama3_1", "llama3_2", "mistral_v3_tools", "qwen2_5", "qwen3", "hermes_tools", "deepseek_r1"]

# ---------------------------------------------------------------------------
# Conversations.

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TRICKY = ("Héllo wörld — 日本語 🎉 'single' \"double\" back\\slash\ttab\nnew line  {{ not a tag }} {% neither %} "
          "</s> <|im_end|> \x01 \u2028 end")

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"}],
    "multi_turn": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "system_multi_turn": [
        SYSTEM,
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "  Hello! How can I help?  "},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
    ],
    "unicode_quotes": [
        {"role": "user", "content": TRICKY},
        {"role": "assistant", "content": "Ça va? «quotes» 'it''s' \"fine\" \\n literal"},
        {"role": "user", "content": "ß Σ ǅ İ ﬁ"},
    ],
    "empty_content": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": " "}],
    "whitespace": [{"role": "user", "content": "\n\n  padded \t\n"}, {"role": "assistant", "content": "\t x \n"}],
    "bad_alternation": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "assistant_first": [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "ok"}],
    "unknown_role": [{"role": "user", "content": "hi"}, {"role": "narrator", "content": "Meanwhile..."}],
    "null_fields": [{"role": "user", "content": "hi", "name": None}, {"role": "assistant", "content": "yo", "tool_calls": None}],
    "multimodal": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is in this image? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": "And now?"},
    ],
    "reasoning": [
        {"role": "user", "content": "What is 7 * 6?"},
        {"role": "assistant", "content": "42", "reasoning_content": "7 times 6 is 42."},
        {"role": "user", "content": "And 6 * 7?"},
        {"role": "assistant", "content": "<think>\nCommutative.\n</think>\n\n42"},
    ],
    "thinking_field": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "thinking": "pondering"},
    ],
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given location. ",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
                "hourly": {"type": ["boolean", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            },
            "required": ["location"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web — «unicode» and \"quotes\".",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "return": {"type": "string"},
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]

TOOL_CONVERSATIONS = {
    "tool_call": [
        SYSTEM,
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call12345", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 22, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 22 °C and clear in Paris."},
    ],
    "tool_call_string_arguments": [
        {"role": "user", "content": "Weather in Lyon and Nice?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "abcdefghi", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"location\": \"Lyon\"}"}},
                {"id": "jklmnopqr", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"location\": \"Nice\"}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny"},
        {"role": "tool", "tool_call_id": "jklmnopqr", "content": "rainy"},
    ],
    "tool_user_only": [{"role": "user", "content": "Search for cats"}],
    "bad_tool_id": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "tool_calls": [{"id": "short", "type": "function",
                                              "function": {"name": "search", "arguments": {"query": "x"}}}]},
    ],
}


def exception_record(e):
    record = {"error_type": type(e).__name__, "error": str(e)}
    if isinstance(e, jinja2.TemplateSyntaxError):
        record["line"] = e.lineno
    return record


def make_tokenizer(name, template):
    special = SPECIAL[name]
    vocab = {"[UNK]": 0}
    for token in special.values():
        vocab.setdefault(token, len(vocab))
    for word in ("hello", "world"):
        vocab[word] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    tokenizer.chat_template = template
    return tokenizer


def render_case(name, tokenizer, template, messages, add_generation_prompt, tools=None, variables=None):
    case = {"add_generation_prompt": add_generation_prompt}
    if tools is not None:
        case["tools"] = tools
    if variables:
        case["variables"] = variables
    try:
        case["expected"] = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **(variables or {}))
    except Exception as e:  # noqa: BLE001 - every failure is a fixture
        case.update(exception_record(e))
        return case
    if "{% generation" in template or "{%- generation" in template:
        # transformers' assistant tracking, on the same inputs; offsets are
        # characters in Python, bytes in ft.
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        text, spans = _render_with_assistant_indices(
            _compile_jinja_template(template), chat, tools, None, add_generation_prompt,
            **tokenizer.special_tokens_map, **(variables or {}))
        assert text == case["expected"]
        case["generation_spans"] = [[len(text[:a].encode()), len(text[:b].encode())] for a, b in spans]
    return case


def template_cases():
    cases = []
    for name, template in TEMPLATES.items():
        (OUT / f"{name}.jinja").write_text(template, encoding="utf-8")
        # Render what the file holds, as ft will read it.
        source = (OUT / f"{name}.jinja").read_bytes().decode("utf-8")
        tokenizer = make_tokenizer(name, source)
        variables = VARIABLES.get(name)
        conversations = dict(CONVERSATIONS)
        if name in TOOL_TEMPLATES:
            conversations.update(TOOL_CONVERSATIONS)
        for conv_name, messages in conversations.items():
            for agp in (False, True):
                case = render_case(name, tokenizer, source, messages, agp, None, variables)
                cases.append({"template": name, "conversation": conv_name, **case})
            if name in TOOL_TEMPLATES:
                case = render_case(name, tokenizer, source, messages, True, TOOLS, variables)
                cases.append({"template": name, "conversation": conv_name, **case})
    return cases


# ---------------------------------------------------------------------------
# Engine cases: one feature each, rendered by transformers' environment.

CONTEXT = {
    "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": " Hi! "},
        {"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    ],
    "d": {"b": 1, "a": 2, "c": {"x": [1, 2]}},
    "s": "Hello World",
    "u": "héllo wörld ß ΣΑΣ Straße ǅ",
    "t": "  padded \t\n",
    "n": 5,
    "neg": -7,
    "f": 2.5,
    "big": 12345678901234,
    "l": [3, 1, 2],
    "strs": ["b", "A", "c", "a"],
    "empty": [],
    "nothing": None,
    "yes": True,
    "nested": {"x": {"y": [1, {"z": "deep"}]}},
    "users": [{"name": "bob", "age": 30, "admin": True}, {"name": "Alice", "age": 25},
              {"name": "carol", "age": 30, "admin": False}],
    "tools": None,
}

ENGINE_CASES = [
    # output and whitespace control (trim_blocks, lstrip_blocks, - and +)
    "plain text",
    "line1\nline2\n",
    "a\r\nb\rc\n\n",
    "{{ s }}",
    "a\n  {% if true %}\n  x\n  {% endif %}\nb",
    "a  {% if true %}x{% endif %}  b",
    "  {# comment #}\nz",
    "x {{- ' y ' -}} z",
    "x {%- if true -%} y {%- endif -%} z",
    "a\n    {%+ if true %}kept{% endif %}\nb",
    "{% if true +%}\nkept newline{% endif %}",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}",
    "{% for i in l -%}\n  {{ i }}\n{%- endfor %}",
    "  {{ s }}  {% if true %}\n\ttabbed{% endif %}",
    "{# a -#}   \n  b {#- c #} d",
    "{% raw %}\n{{ not rendered }}{% endraw %}",
    "  {% raw -%}  {{ x }}  {%- endraw %}  ",
    "{{ '{{' }} and {{ '}}' }}",
    "{{ {'a': {'b': 1}} }}",
    "{%if true%}no spaces{%endif%}",
    "x\n{% set y = 1 %}\ny",
    "{{ 1 }}\n{{ 2 }}",
    "trailing\n",
    "{{ s }}\n\n",
    "\t  {%- if true %}a{% endif %}",
    # literals
    "{{ 42 }} {{ -3 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }} {{ 00 }}",
    "{{ 3.0 }} {{ 1.5e3 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 123456789.123 }} {{ -0.0 }}",
    "{{ 1/3 }} {{ 2/3 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }} {{ 5e-324 }}",
    "{{ 'single' }} {{ \"double\" }} {{ 'it\\'s' }} {{ \"a\\\"b\" }} {{ 'adjacent' 'strings' }}",
    "{{ 'a\\tb\\x41\\u00e9\\U0001F600\\n\\101\\q\\\\' }}",
    "{{ 'é\\é' }}",
    "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}",
    "{{ [1, 'a', none, true, 2.5] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {'k': 'v', 1: [2]} }}",
    "{{ [1, 2,] }} {{ {'a': 1,} }}",
    "{{ {'a': 1, 'a': 2} }}",
    "{{ ['quote\\'s', \"dq\\\"\", 'both\\'\"', 'nl\\n', 'tab\\t', 'bs\\\\', '\\x00', 'é', '\\u2028', '\\x7f'] }}",
    "{{ 'x' }}{{ 5 }}{{ nothing }}{{ undefined_name }}{{ yes }}",
    # names, attributes, subscripts, slices
    "{{ messages[1].role }} {{ messages[1]['content'] }} {{ messages.0.role }} {{ messages[-1].role }}",
    "{{ d.b }} {{ d['a'] }} {{ d.c.x[1] }} {{ nested.x.y[1].z }}",
    "[{{ d.missing }}] [{{ messages[10] }}] [{{ s.missing }}] [{{ nothing.x }}] [{{ n.real }}]",
    "{{ d.missing.deeper }}",
    "{{ undefined_name.attr }}",
    "{{ undefined_name['key'] }}",
    "{{ messages[10].role }}",
    "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5:] }} {{ l[-100:100] }} {{ l[2:0:-1] }}",
    "{{ s[0] }} {{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ u[1:3] }} {{ u[::-2] }} {{ u[-1] }}",
    "[{{ s[100] }}] [{{ s[1.5] }}] [{{ l['x'] }}] [{{ l[1.5:] }}]",
    "{{ l[::0] }}",
    "{{ d['items'] }}",
    "{{ d.items }}",
    "{{ d.keys() }} {{ d.values() }} {{ d.items() }}",
    "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.copy() }}",
    "{{ messages[0].pop }}",
    "{{ messages[0].pop('role') }}",
    "{{ l.append(4) }}",
    "{{ l.index(1) }} {{ l.count(3) }} {{ (1, 2, 2).count(2) }}",
    "{{ l.index(9) }}",
    "{{ s.__class__ }}",
    "{{ messages[1].content.strip() }}|{{ t.lstrip() }}|{{ t.rstrip() }}|{{ 'xxhixx'.strip('x') }}",
    # string methods
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }}",
    "{{ ' a b  c '.split(none, 1) }} {{ ' a b  c '.rsplit(none, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ 'x'.split('') }}",
    "{{ s.startswith('Hell') }} {{ s.endswith('World') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('o') }}",
    "{{ s.upper() }} {{ s.lower() }} {{ u.upper() }} {{ u.lower() }} {{ u.title() }} {{ u.capitalize() }}",
    "{{ \"they're bill's\".title() }} {{ 'hELLO wORLD'.swapcase() }} {{ 'ﬁ'.upper() }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'ab'.replace('', '-') }} {{ 'ab'.replace('', '-', 2) }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ u.find('w') }} {{ s.count('l') }} {{ s.count('') }}",
    "{{ s.index('z') }}",
    "{{ '-'.join(['a', 'b']) }} {{ ''.join(s) }} {{ ', '.join(d) }}",
    "{{ '-'.join([1, 2]) }}",
    "{{ '{} and {}'.format(1, 'x') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }} {{ '{!r}'.format('q') }}",
    "{{ 'ab'.center(6, '*') }}|{{ 'ab'.ljust(5) }}|{{ 'ab'.rjust(5, '.') }}|{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}|{{ 'abc'.center(6) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a\\nb'.splitlines(true) }}",
    "{{ 'prefix-body'.removeprefix('prefix-') }} {{ 'body.txt'.removesuffix('.txt') }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ ' \\t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'Ab Cd'.istitle() }} {{ ''.isdigit() }}",
    "{{ s.encode is defined }} {{ s.zfill is defined }} {{ s.nosuch is defined }}",
    # operators
    "{{ 1 + 2 }} {{ 1 + 2.5 }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ (1,) + (2,) }} {{ true + 1 }}",
    "{{ 7 - 2 }} {{ 7 * 3 }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [0] * 3 }} {{ 'x' * 0 }} {{ 'x' * -1 }}",
    "{{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ (-8) ** 2 }}",
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }} {{ 1 ~ 2 + 3 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 ~ [1] ~ undefined_name }}",
    "{{ -n }} {{ +n }} {{ -f }} {{ not n }} {{ not 0 }}",
    "{{ 1 / 0 }}",
    "{{ 1 // 0 }}",
    "{{ 1 % 0 }}",
    "{{ 1.0 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ [1] + 'a' }}",
    "{{ 'a' - 1 }}",
    "{{ 'a' * 'b' }}",
    "{{ -'a' }}",
    "{{ undefined_name + 1 }}",
    "{{ 1 + undefined_name }}",
    "{{ big * 1000 }}",
    "{{ '%s-%d' % ('a', 3) }} {{ '%s' % 'x' }} {{ '100%%' % () }} {{ '%r' % 'q' }}",
    "{{ '%s %s' % ('a',) }}",
    # comparisons and logic
    "{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 <= 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 3 }} {{ 1 != 2 }}",
    "{{ undefined_name == undefined_name }} {{ undefined_name == none }} {{ undefined_name != 1 }}",
    "{{ 'a' < 1 }}",
    "{{ undefined_name < 1 }}",
    "{{ [1] < (1,) }}",
    "{{ 'ell' in s }} {{ 'b' in d }} {{ 2 in l }} {{ 9 not in l }} {{ 'x' in undefined_name }} {{ 1 in [1.0] }} {{ 'a' in strs }}",
    "{{ 1 in 'abc' }}",
    "{{ 1 in 5 }}",
    "{{ [1] in d }}",
    "{{ 0 and 1 }} {{ 2 and 3 }} {{ 0 or 'x' }} {{ '' or [] }} {{ none or 0 }} {{ 1 or undefined_name.x }}",
    "{{ 'yes' if n > 3 else 'no' }} {{ 'yes' if n > 9 else 'no' }} [{{ 'x' if false }}] {{ 'a' if false else 'b' if true else 'c' }}",
    "{{ (1 if false) is defined }} {{ (1 if false)|default('d') }}",
    "{{ not true and false }} {{ not (true and false) }} {{ not 1 == 2 }} {{ not n is none }}",
    # tests
    "{{ n is defined }} {{ zz is defined }} {{ zz is undefined }} {{ nothing is none }} {{ n is number }} {{ f is number }} {{ yes is number }}",
    "{{ yes is boolean }} {{ 1 is boolean }} {{ yes is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}",
    "{{ n is integer }} {{ f is integer }} {{ f is float }} {{ yes is integer }} {{ s is string }} {{ n is string }}",
    "{{ d is mapping }} {{ l is mapping }} {{ l is sequence }} {{ s is sequence }} {{ d is sequence }} {{ n is sequence }} {{ zz is sequence }}",
    "{{ l is iterable }} {{ s is iterable }} {{ d is iterable }} {{ n is iterable }} {{ zz is iterable }} {{ (l|map('string')) is iterable }} {{ d.items() is sequence }}",
    "{{ n is odd }} {{ n is even }} {{ 6 is divisibleby 3 }} {{ 7 is divisibleby(3) }} {{ 2.0 is even }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ '123' is lower }}",
    "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 'a' is ne 'b' }} {{ 3 is gt 2 }} {{ 3 is ge 3 }} {{ 2 is lt 3 }} {{ 2 is le 1 }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 2 }} {{ 1 is == 1 }} {{ 1 is != 1 }}",
    "{{ 2 is in l }} {{ 'q' is in s }} {{ none is sameas none }} {{ 1 is sameas 1 }} {{ true is sameas 1 }}",
    "{{ raise_exception is callable }} {{ n is callable }} {{ zz is callable }} {{ d.get is callable }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}",
    "{{ s is escaped }} {{ n is not none }} {{ n is not string }}",
    "{{ zz is odd }}",
    "{{ 'a' is odd }}",
    "{% if n is nosuchtest %}{% endif %}",
    "{% if false %}{{ n is nosuchtest }}{% endif %}fine",
    "{{ n is nosuchtest }}",
    # filters
    "{{ t|trim }}|{{ 'xxhixx'|trim('x') }}|{{ zz|trim }}|{{ 5|trim }}|{{ '\\u3000wide\\u00a0'|trim }}",
    "{{ l|length }} {{ s|length }} {{ u|length }} {{ d|length }} {{ zz|length }} {{ l|count }}",
    "{{ n|length }}",
    "{{ (l|map('string'))|length }}",
    "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello world-foo(bar)[baz]{q}<x> y'|title }} {{ u|title }} {{ \"they're\"|title }}",
    "{{ s|replace('o', '0') }} {{ s|replace('o', '0', 1) }} {{ 1223|replace(2, 9) }}",
    "{{ l|join }} {{ l|join(', ') }} {{ users|join(', ', attribute='name') }} {{ zz|join(',') }} {{ d|join('|') }}",
    "{{ zz|default('D') }} {{ ''|default('D') }} {{ ''|default('D', true) }} {{ none|default('D') }} {{ none|d('D', true) }} {{ zz|d }}",
    "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} {{ d|first }} {{ d|last }} [{{ empty|first }}] [{{ empty|last }}] [{{ zz|first }}]",
    "{{ (l|map('string'))|first }}",
    "{{ (l|map('string'))|last }}",
    "{{ s|list }} {{ d|list }} {{ zz|list }} {{ (1, 2)|list }} {{ d.items()|list }}",
    "{{ n|list }}",
    "{{ d|items|list }} {% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {{ zz|items|list }}",
    "{{ l|items }}",
    "{{ n|string }} {{ none|string }} {{ l|string }} {{ s|string }} {{ n|string|length }}",
    "{{ '42'|int }} {{ '42.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ -3.9|int }} {{ true|int }} {{ none|int }} {{ '0x1F'|int(0, 16) }} {{ '0b11'|int(0, 0) }} {{ ' 12 '|int }} {{ '1_000'|int }} {{ 'ff'|int(base=16) }}",
    "{{ '3.5'|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ 2|float }} {{ '1e3'|float }} {{ ' inf '|float }} {{ '-nan'|float }} {{ '1_0.5'|float }}",
    "{{ zz|int }}",
    "{{ 'a<b>&\"c\\''|escape }} {{ 'x'|e }} {{ '<b>'|safe }} {{ 5|safe }}",
    "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }}",
    "{{ users|selectattr('age', 'equalto', 30)|map(attribute='name')|join(',') }} {{ users|selectattr('age', '>', 26)|list|length }}",
    "{{ messages|selectattr('role', 'eq', 'user')|list|length }} {{ messages|rejectattr('role', 'in', ['system', 'user'])|map(attribute='role')|first }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ l|select('gt', 1)|list }} {{ l|select('divisibleby', 3)|list }}",
    "{{ strs|map('upper')|list }} {{ l|map('string')|join('-') }} {{ users|map(attribute='missing', default='?')|list }} {{ messages|map(attribute='tool_calls.0.function.name')|list }}",
    "{{ messages|selectattr('role', 'equalto', 'x') }}",
    "{% if messages|selectattr('role', 'equalto', 'x') %}always true{% endif %}",
    "{% set g = l|map('string') %}{{ g|list }}{{ g|list }}",
    "{{ l|map('nosuchfilter')|list }}",
    "{{ l|select('nosuchtest')|list }}",
    "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort(true) }} {{ {'x': 2, 'y': 1}|dictsort(false, 'value') }}",
    "{{ l|sort }} {{ l|sort(reverse=true) }} {{ strs|sort }} {{ strs|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|list }} {{ users|sort(attribute='age,name')|map(attribute='name')|list }}",
    "{{ [1, 'a']|sort }}",
    "{{ [3, 1, 3, 2, 1]|unique|list }} {{ strs|unique|list }} {{ strs|unique(case_sensitive=true)|list }} {{ users|unique(attribute='age')|map(attribute='name')|list }}",
    "{{ l|min }} {{ l|max }} {{ strs|min }} {{ strs|max(case_sensitive=true) }} {{ users|max(attribute='age') }} [{{ empty|max }}]",
    "{{ l|sum }} {{ users|sum(attribute='age') }} {{ [1.5, 2]|sum }} {{ l|sum(start=10) }} {{ empty|sum }}",
    "{{ l|reverse }}",
    "{{ l|reverse|list }} {{ s|reverse }} {{ (l|map('string'))|reverse }} {{ d|reverse|list }}",
    "{{ -3|abs }} {{ (-3)|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 42|round }} {{ 42.55|round(1, 'floor') }} {{ 42.51|round(1, 'ceil') }} {{ 1234.5|round(-2) }}",
    "{{ 'x'|abs }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|{{ ''|indent(first=true) }}",
    "{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, true) }}|{{ 'foo bar baz qux'|truncate(11) }}|{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}",
    "{{ 'x'|center(5) }}|{{ 'a b  c'|wordcount }}|{{ d|attr('items') is defined }}|{{ d|attr('b') is defined }}",
    "{{ l|batch(2)|list }} {{ l|batch(2, 'x')|list }} {{ l|slice(2)|list }} {{ [1, 2, 3, 4]|slice(3, 0)|list }}",
    "{{ '%s, %s!'|format('Hello', 'World') }}",
    "{{ n|nosuchfilter }}",
    "{% if false %}{{ n|nosuchfilter }}{% endif %}fine",
    "{{ n|nosuchfilter if false else 'fine' }}",
    "{% if true %}{{ n|nosuchfilter }}{% endif %}",
    "{% if false %}{% for i in l %}{{ i|nosuchfilter }}{% endfor %}{% endif %}",
    "{% if false %}{% set x = 1|nosuchfilter %}{% endif %}fine",
    "{% macro m() %}{{ 1|nosuchfilter }}{% endmacro %}",
    # tojson
    "{{ d|tojson }} {{ l|tojson }} {{ s|tojson }} {{ u|tojson }} {{ none|tojson }} {{ yes|tojson }} {{ f|tojson }} {{ 3.0|tojson }} {{ (1, 2)|tojson }}",
    "{{ d|tojson(indent=2) }}",
    "{{ {'a': [], 'b': {}, 'c': [1, [2, {'d': none}]]}|tojson(indent=4) }}",
    "{{ d|tojson(indent='\\t') }} {{ {'é': 'ü\\n\"<>&\\'\\x01\\x7f\\u2028🎉'}|tojson }} {{ {'é': 'ü🎉\\x7f'}|tojson(ensure_ascii=true) }}",
    "{{ d|tojson(sort_keys=true) }} {{ d|tojson(separators=(',', ':')) }} {{ d|tojson(indent=2, separators=(', ', ' = ')) }} {{ {1: 'a', none: 'b', true: 'c', 2.5: 'd'}|tojson }}",
    "{{ d|tojson(true) }} {{ [1, []]|tojson(indent=0) }} {{ l|tojson(indent=-1) }}",
    "{{ zz|tojson }}",
    "{{ namespace(a=1)|tojson }}",
    "{{ (l|map('string'))|tojson }}",
    "{{ {(1, 2): 'x'}|tojson }}",
    "{{ 1e400|tojson }} {{ -1e400|tojson }}",
    "{{ messages|tojson }}",
    # statements: set, for, if, namespace, macro, call, filter, with, break/continue
    "{% set x = 1 %}{% set y, z = 2, 3 %}{{ x }}{{ y }}{{ z }}{% set a, b = 'xy' %}{{ a }}{{ b }}",
    "{% set a, b = 1, 2, 3 %}",
    "{% set a, b, c = 1, 2 %}",
    "{% set a, b = 5 %}",
    "{% set x %}block {{ n }}{% endset %}[{{ x }}]{% set y | upper | trim %} up {% endset %}[{{ y }}]",
    "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i > 0 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}]",
    "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }} {{ ns }}",
    "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }} [{{ ns.b }}] {{ ns['a'] }}",
    "{% set ns = namespace({'x': 1}, y=2) %}{{ ns.x }}{{ ns.y }}",
    "{% set ns = namespace() %}{% set ns._secret = 1 %}",
    "{% set notns = 1 %}{% set notns.x = 2 %}",
    "{% set ns.x = 1 %}",
    "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}",
    "{{ ns.foo.bar }}{% set ns = namespace() %}",
    "{% set ns = namespace() %}{{ ns.foo.bar }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.depth }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }} {{ loop.changed(x > 1) }} {% endfor %}",
    "{% for x in l if x > 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% else %}none{% endfor %}",
    "{% for x in empty %}{{ x }}{% else %}empty!{% endfor %}|{% for x in l if x > 10 %}{{ x }}{% else %}filtered out{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %} {% for c in 'abc' %}{{ c }}.{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}{% for x in zz %}never{% endfor %}",
    "{% for k, v in d %}{{ k }}{% endfor %}",
    "{% for x in n %}{% endfor %}",
    "{% for x in nothing %}{% endfor %}",
    "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ loop.depth }}{% endfor %}{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}",
    "{% for x in [1, [2, [3]]] recursive %}{% if x is iterable %}[{{ loop(x) }}]{% else %}{{ x }}@{{ loop.depth }}{% endif %}{% endfor %}",
    "{{ loop }}",
    "{% for x in l %}{{ loop }}{% endfor %}",
    "{% break %}",
    "{% if n > 10 %}big{% elif n > 3 %}medium{% elif n > 0 %}small{% else %}none{% endif %}",
    "{% if empty %}a{% elif d %}b{% endif %}{% if 0 %}x{% endif %}",
    "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }} {{ greet('Ann', greeting='Hi') }} {{ greet(greeting='Yo', name='Z') }} [{{ greet() }}]",
    "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}",
    "{% macro m(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ m(3) }}",
    "{% set top = 'T' %}{% macro m() %}{{ top }}{{ later }}{% endmacro %}{% set later = 'L' %}{{ m() }}{% set top = 'U' %}{{ m() }}",
    "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(10) }}",
    "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside {{ n }}{% endcall %}",
    "{% macro list_items(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) list_items(l) %}[{{ item }}]{% endcall %}",
    "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}",
    "{{ m }}{% macro m() %}x{% endmacro %}{{ m }} {{ m.name }}",
    "{% macro m() %}{% set inner = 1 %}{% endmacro %}{{ m() }}[{{ inner }}]",
    "{% filter upper %}shout {{ s }}{% endfilter %} {% filter trim|replace('a', 'b') %}  aaa  {% endfilter %}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% print 'printed', n %}",
    "{% generation %}gen {{ n }}{% endgeneration %}",
    # globals
    "{{ range(5)|list }} {{ range(2, 5)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(3)|length }}",
    "{{ range(100001)|length }}",
    "{{ range(1, 2, 0) }}",
    "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict({'k': 'v'}, z=0) }}",
    "{{ raise_exception('Custom failure: ' ~ n) }}",
    "{% if n > 3 %}{{ raise_exception('n is too big') }}{% endif %}after",
    "{{ raise_exception('multi\\nline \"quoted\" message') }}",
    "{{ strftime_now is defined }} {{ raise_exception is defined }} {{ namespace is defined }} {{ range is defined }}",
    "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}",
    "{% set j = joiner('|') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    "{{ nosuchfunction() }}",
    "{{ s() }}",
    "{{ tools is none }} {{ tools is defined }} {{ messages is defined }}",
    # more whitespace control
    "{%- if true %}\n  a\n{%- endif %}\n",
    "a {#- c -#} b {#+ d +#}\nc",
    "\n{% if true %}\nx\n{% endif %}\n",
    "\t{% if true %}x{% endif %}\n\t{{ 'y' }}",
    "\u3000 {% if true %}x{% endif %}",
    "{% if true %}\r\n x{% endif %}",
    "x\n\n",
    "{{ 'a' }}\n{#- c #}\n{{ 'b' -}}\n\n  {{+ 'c' }}",
    "{%- raw -%}\n  {{ x }}\n{%- endraw -%}  tail",
    "{% for i in l %}{{ i }}{% if not loop.last %},\n{% endif %}{% endfor %}",
    "  {%- for i in l %}\n    {{- i }}\n  {%- endfor %}",
    # more literals and numbers
    "{{ 1.0e-4 }} {{ 1.0e-5 }} {{ 12345678901234567890.0 }} {{ 1.5e300 * 1e10 }} {{ 100.0 / 3 }} {{ 2 ** 0.5 }} {{ 1/7 }} {{ 1e22 }} {{ 0.5e-6 }} {{ 1e-400 }}",
    "{{ 1E3 }} {{ 0X1f }} {{ 1_0.5 }} {{ 5 // 2.0 }} {{ -5 // 2.0 }} {{ 5 % 2.5 }} {{ -0.5 % 1 }} {{ 1 == 1 == 1 }} {{ 3 * (1, 2) }} {{ 'a' * true }}",
    "{{ ['\u00a0', '\u200b', '\ufeff', '\U0001F600', '\x85', '\xad', 'ü', '\ue000'] }}",
    "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ (1, 2)[0] }} {{ [1, 2, 3][1:][0] }} {{ 'abc'|list|reverse|join }} {{ d|dictsort|first }}",
    # more undefined behaviour
    "[{{ zz|string }}] [{{ zz ~ 'x' }}] [{% for x in zz %}{{ x }}{% endfor %}] [{{ zz|length }}] [{{ [zz] }}] [{{ {'a': zz} }}] [{{ zz in [zz] }}] [{{ not zz }}] [{{ zz if zz else 'e' }}] [{{ zz|default(none) is none }}]",
    "{{ (zz) }}|{{ zz is none }}|{{ zz is iterable }}|{{ zz is mapping }}|{{ zz|list }}|{{ zz|first is defined }}",
    "{{ d.zz|default('D') }} {{ d.c.zz|default('D') }}",
    "{{ zz.x|default('D') }}",
    "{{ zz() }}",
    "{{ zz[0] }}",
    "{{ zz[1:] }}",
    "{{ n[1:] }}",
    "{{ d[1:] }}",
    "{{ nothing[1:] }}",
    # more filters
    "{{ d.values()|join(',') }} {{ ' -12 '|int }} {{ 'nan'|float }} {{ (-2.5)|round }} {{ true|abs }} {{ ''|capitalize }} {{ \"o'neil mc-donald\"|title }}",
    "{{ ['a']|sum }}",
    "{{ (l|map('string'))|length }}",
    "{{ (l|map('string'))|last }}",
    "{% set g = l|select('odd') %}{{ g|list }}|{{ g|list }}|{{ g|first is defined }}",
    "{{ 'aaa'|replace('a', 'b', 0) }} {{ 'foo bar baz'|truncate(7, true, '..', 0) }} {{ 'foo bar'|truncate(3, false, '', 0) }} {{ 'xyxhixyx'|trim('xy') }}",
    "{{ {'b': 1, 'a': 'x'}|tojson(sort_keys=true) }}",
    "{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}",
    "{{ users|selectattr('admin', 'defined')|map(attribute='name')|list }} {{ ['1', '2']|map('int')|sum }} {{ [zz, 1]|map('default', 'D')|list }} {{ l|batch(2)|map('length')|list }}",
    "{{ {'x': 2, 'y': 1, 'z': 3}|dictsort(by='value', reverse=true) }} {{ users|sort(attribute='name')|map(attribute='name')|list }} {{ users|unique(attribute='name', case_sensitive=false)|list|length }} {{ users|min(attribute='age') }}",
    "{{ [1, 2]|tojson(indent=true) }}",
    "{{ 'x'.center(4) }}|{{ 'ab'.center(5) }}|{{ 'ab'.center(6, '-') }}|{{ 'a b'.split(none) }}|{{ 'a,b'.split(',', -1) }}|{{ 'abc'.split('b', 0) }}|{{ 'aXbXc'.rsplit('X', 1) }}|{{ '  x  '.strip(none) }}|{{ 'abc'.startswith('') }}",
    "{{ '{0} {0}'.format('x') }} {{ '%s'|format(1) }} {{ '%d' % 3.7 }} {{ '%s|%r' % (none, none) }}",
    "{{ 'abc'.format_map is defined }} {{ 1.5.is_integer() }} {{ 2.0.is_integer() }} {{ (5).bit_length() }} {{ 1.5.real }} {{ true.real }}",
    # more statements
    "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3] %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{% for x in [1] %}{% endfor %}[{{ x }}]{% if true %}{% set v = 1 %}{% endif %}{{ v }}",
    "{% for x in [1, 2, 3] %}{% if loop.changed(x is odd) %}c{% endif %}{{ x }}{% endfor %}",
    "{% macro m() %}{{ kwargs }}{{ varargs }}{% endmacro %}{{ m(1, a=1) }}",
    "{% macro m(x) %}{{ x }}{{ caller(x * 2) }}{% endmacro %}{% call(y) m(3) %}<{{ y }}>{% endcall %}",
    "{% macro m() %}{% for i in l %}{{ i }}{% endfor %}{% endmacro %}{% set ns = namespace(v=m()) %}{{ ns.v }}",
    "{% set ns = namespace(a=1) %}{% macro m() %}{% set ns.a = ns.a + 1 %}{% endmacro %}{{ m() }}{{ m() }}{{ ns.a }}",
    "{{ ns|length }}{% set ns = namespace() %}",
    "{% set ns = namespace() %}{{ ns|length }}",
    "{{ namespace(_x=1) }}",
    "{{ namespace(a=1).a }} {{ namespace(a=1) is mapping }} {{ messages[0] == messages[0] }} {{ dict(d, z=1) }}",
    "{% set x = 1 %}{% with %}{% set x = 2 %}{{ x }}{% endwith %}{{ x }}",
    "{% filter upper %}{% for i in l %}{{ i }}a{% endfor %}{% endfilter %}",
    "{% for i in l %}{% set x %}{{ i }}{{ loop.index }}{% endset %}{{ x }}{% endfor %}",
    "{{ messages|selectattr('content')|map(attribute='content')|map('trim')|join('|') }}",
    "{% if messages[0].role == 'system' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}{{ rest|length }}",
    # syntax errors (line numbers)
    "{% if %}",
    "{% if true %}\nunclosed",
    "{% for x in l %}\n{% endif %}",
    "line1\n{{ 1 + }}",
    "{{ 1",
    "{{ 'unterminated }}",
    "{% endfor %}",
    "{% nosuchtag %}",
    "{% include 'other.jinja' %}",
    "{# never closed",
    "{{ x | }}",
    "{{ (1 }}",
    "{{ 1 ] }}",
    "{% set 1 = 2 %}",
    "{% macro m(a=1, b) %}{% endmacro %}",
    "{{ x is is defined }}",
    "{{ 'a' 'b' 1 }}",
    "{{ @ }}",
    "{% for %}{% endfor %}",
]


def engine_cases():
    cases = []
    for template in ENGINE_CASES:
        case = {"template": template}
        try:
            # Python prints objects with their address; ft prints them without.
            case["expected"] = re.sub(r" at 0x[0-9a-f]+", "", _compile_jinja_template(template).render(**CONTEXT))
        except Exception as e:  # noqa: BLE001 - every failure is a fixture
            case.update(exception_record(e))
        cases.append(case)
    return {"context": CONTEXT, "cases": cases}


# ---------------------------------------------------------------------------
# Saved tokenizers, for loading templates from a model directory.

def saved_tokenizers():
    tokenizer = make_tokenizer("qwen2_5", TEMPLATES["qwen2_5"])
    tokenizer.chat_template = {"default": TEMPLATES["chatml"], "tool_use": TEMPLATES["qwen2_5"]}
    for name in ("tokenizer", "legacy_config"):
        shutil.rmtree(OUT / name, ignore_errors=True)
    tokenizer.save_pretrained(OUT / "tokenizer")
    tokenizer.save_pretrained(OUT / "legacy_config", save_jinja_files=False)
    # Only what ft reads is kept.
    for name in ("tokenizer", "legacy_config"):
        for path in (OUT / name).iterdir():
            if path.name not in ("tokenizer_config.json", "chat_template.jinja", "additional_chat_templates"):
                path.unlink()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    expected = {
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "special_tokens": SPECIAL,
        "conversations": {**CONVERSATIONS, **TOOL_CONVERSATIONS},
        "cases": template_cases(),
    }
    with open(OUT / "expected.json", "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(OUT / "engine_cases.json", "w", encoding="utf-8") as f:
        json.dump(engine_cases(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    saved_tokenizers()
    print(f"wrote {len(expected['cases'])} template cases and {len(ENGINE_CASES)} engine cases to {OUT}")


if __name__ == "__main__":
    main()
