#!/usr/bin/env python3
"""Builds the dataset fixtures in tests/fixtures/data/ for tests/data/test_examples.cpp.

ft turns alpaca and text rows into token ids and labels itself
(include/ft/data/examples.hpp); the ids must be the ones transformers gives, and
the labels must leave out exactly the prompt. This script asks transformers for
both, on tokenizer fixtures from tests/fixtures/tokenizers/ and chat templates
from tests/fixtures/chat_templates/, wrapped in a PreTrainedTokenizerFast with
the family's bos/eos tokens:

  with a chat template   the ids of apply_chat_template(messages, tokenize=True)
                         (no post-processor tokens: the template writes its own);
                         the prompt is apply_chat_template([user],
                         add_generation_prompt=True, tokenize=True)
  without a template     the ids of tokenizer(text), as Stanford Alpaca's
                         train.py tokenises prompt and prompt + output + eos
  text rows              tokenizer(text) + eos (unless it already ends in eos)
  chat rows              multi-turn messages through a chat template; each
                         assistant turn is scored from the end of the prompt
                         transformers renders for the turns before it
                         (add_generation_prompt) to the end of the rendering
                         through it, in token ids; with generation marks,
                         transformers' assistant mask
  response templates     text rows (guanaco's "### Human:" / "### Assistant:"
                         turns, and the "\n### Response:" of ado's SFTTrainer actuator in an
                         "output" field): the scored characters are found in
                         Python, and a token is scored when its offsets
                         (return_offsets_mapping) overlap them; an independent
                         route to what ft does by token prefixes
  generation marks       a template whose generation prompt is not a prefix of
                         the rendered conversation; labels come from
                         transformers' own assistant mask
                         (return_assistant_tokens_mask=True), independent of
                         the prefix rule ft uses elsewhere

Labels are -100 over the longest common prefix of the prompt's ids and the full
ids (the prompt's ids themselves unless the tokenizer merges across the
boundary; `merged` records the rows where it does, so the test can check that
path is covered), and the ids themselves after it.

Written:
  alpaca_rows.jsonl      alpaca rows (inputs of the test)
  merge_rows.jsonl       alpaca rows whose output continues the prompt's last
                         word under merge_boundary.jinja (a template with no
                         separator before the response)
  text_rows.jsonl        text rows
  chat_rows.jsonl        multi-turn chat rows (system, user, assistant, ...)
  guanaco_rows.jsonl     openassistant-guanaco style text rows
  response_rows.jsonl    rows with the text in "output" and an Alpaca-style
                         "\n### Response:" marker
  think_generation.jinja the template with generation marks
  merge_boundary.jinja   the template without a separator
  examples_expected.json per case: tokenizer, template, bos/eos, rows file and,
                         per row, input_ids, labels, prompt_tokens, merged
  shuffle_expected.json  SplitMix64's first outputs and epoch orders, from a
                         Python rewrite of the algorithm batches.hpp documents

Deterministic and idempotent:

    tools/.venv/bin/python tools/make_example_fixtures.py
"""
import json
import pathlib

from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/data"
TOKENIZERS = ROOT / "tests/fixtures/tokenizers"
TEMPLATES = ROOT / "tests/fixtures/chat_templates"

ALPACA_ROWS = [
    {"instruction": "In hacker jargon, what does \"hack\" mean?", "input": "",
     "output": "Originally, a quick job that produces what is needed, but not well."},
    {"instruction": "Summarise the entry in one sentence.",
     "input": "foo: Used very generally as a sample name for absolutely anything, esp. programs and files.",
     "output": "A placeholder name for anything, especially programs and files."},
    {"instruction": "Translate ‘kludge’ into French, with the quotes.", "input": "",
     "output": "« bricolage » — un kludge, naïvement."},
    {"instruction": "What emoticon means a smile?", "input": "",
     "output": ":-) is the classic smiley; :) is the short form."},
    {"instruction": "Write a shell one-liner that counts lines.", "input": "file.txt",
     "output": "wc -l file.txt\n\nIt prints the count and the name."},
    {"instruction": "Reply with a leading space.", "input": "",
     "output": " Yes, and then some   trailing spaces.  "},
    {"instruction": "Quote the {{ template }} syntax {% literally %}.", "input": "{# not a comment #}",
     "output": "{{ x }} and {% if %} are Jinja; \"quotes\" and \\backslashes\\ stay."},
]

# Outputs that continue the last word of MERGE_TEMPLATE's prompt (" t"), so that
# the tokenizer merges across the prompt/response boundary.
MERGE_ROWS = [
    {"instruction": "Is the boundary merged?", "input": "", "output": "he answer is yes: \" t\" and \"he\" become one word."},
    {"instruction": "Which hacker term is this?", "input": "", "output": "hat one, the (TM) sign."},
    {"instruction": "What does ASCII stand for?", "input": "", "output": "! American Standard Code (no merge here)."},
]

CHAT_ROWS = [
    {"messages": [{"role": "user", "content": "What is a hack?"},
                  {"role": "assistant", "content": "A quick job that produces what is needed."},
                  {"role": "user", "content": "And a kludge?"},
                  {"role": "assistant", "content": "A clumsy but working fix: « bricolage »."}]},
    {"messages": [{"role": "system", "content": "You explain hacker jargon briefly."},
                  {"role": "user", "content": "Define foo."},
                  {"role": "assistant", "content": "A placeholder name for anything."}]},
    {"messages": [{"role": "user", "content": "Say nothing after this."},
                  {"role": "assistant", "content": "Understood."},
                  {"role": "user", "content": "Good."},
                  {"role": "assistant", "content": " Leading space, and a newline\nhere."}]},
]

GUANACO_ROWS = [
    {"text": "### Human: What is a hack?### Assistant: A quick job that produces what is needed."},
    {"text": "### Human: Define foo.### Assistant: A placeholder name.### Human: And bar?"
             "### Assistant: Its usual partner, as in foobar."},
    {"text": "Preamble that is not a turn.\n### Human: Café?### Assistant: Ünïcödé answer: 中文 too."},
]

# ado's artificial rows: --dataset_text_field output --response_template "\n### Response:".
RESPONSE_TEMPLATE = "\n### Response:"
RESPONSE_ROWS = [
    {"output": "### Input:\nSummarise the news.\n### Response: Markets rose on Tuesday.", "id": 1},
    {"output": "Some context first.\n\n### Response:\nA multi-line\nanswer.", "id": 2},
    {"output": "### Response: at the very start does not count, only after a newline.\n### Response: this does.",
     "id": 3},
]

TEXT_ROWS = [
    {"text": "The Jargon File is a glossary of hacker slang."},
    {"text": "Line one.\nLine two, with ünïcödé and 中文."},
    {"text": "  leading and trailing spaces  "},
]

# Stanford Alpaca's prompt (train.py): no newline after "### Response:".
PROMPT_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                "Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:")
PROMPT_NO_INPUT = ("Below is an instruction that describes a task. "
                   "Write a response that appropriately completes the request.\n\n"
                   "### Instruction:\n{instruction}\n\n### Response:")

# A ChatML template in the style of reasoning models that drop the thinking
# block from history: the generation prompt opens an empty <think> block that a
# rendered assistant turn does not have, so the prompt is not a prefix of the
# conversation and only the {% generation %} marks locate the response.
THINK_GENERATION = (
    "{%- for message in messages %}\n"
    "    {%- if message['role'] == 'assistant' %}\n"
    "        {{- '<|im_start|>assistant\\n' }}\n"
    "        {%- generation %}\n"
    "            {{- message['content'] + '<|im_end|>' }}\n"
    "        {%- endgeneration %}\n"
    "        {{- '\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}\n"
    "{%- endif %}\n")

# A template whose prompt ends in the middle of a word, with no separator
# before the response.
MERGE_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ 'Q: ' + m['content'] + '\\nA: t' }}"
                  "{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}")

SPECIALS = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "smollm2_base": {"eos_token": "<|endoftext|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
}


def hf_tokenizer(kind, specials, template=None):
    kwargs = dict(specials)
    if template is not None:
        kwargs["chat_template"] = template
    return PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZERS / kind / "tokenizer.json"), **kwargs)


def common_prefix(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def labelled(prompt_ids, full_ids):
    n = common_prefix(prompt_ids, full_ids)
    assert n > 0, "prompt and conversation share no token"
    return {"input_ids": full_ids, "labels": [-100] * n + full_ids[n:], "prompt_tokens": n,
            "merged": n != len(prompt_ids)}


def messages_of(row):
    user = row["instruction"] + ("\n\n" + row["input"] if row["input"] else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]


def ids(encoding):
    return list(encoding["input_ids"])


def chat_case(kind, specials_name, template_file, template_dir=TEMPLATES, rows=None, rows_file="alpaca_rows.jsonl"):
    template = (template_dir / template_file).read_text()
    tok = hf_tokenizer(kind, SPECIALS[specials_name], template)
    expected = []
    for row in rows or ALPACA_ROWS:
        messages = messages_of(row)
        full_text = tok.apply_chat_template(messages, tokenize=False)
        prompt_text = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
        assert full_text.startswith(prompt_text), template_file
        full = ids(tok.apply_chat_template(messages, tokenize=True))
        prompt = ids(tok.apply_chat_template(messages[:1], tokenize=True, add_generation_prompt=True))
        expected.append(labelled(prompt, full))
    return {"tokenizer": kind, "template": str((template_dir / template_file).relative_to(ROOT)), "format": "alpaca",
            "rows": rows_file, **SPECIALS[specials_name], "expected": expected}


def generation_case(kind, specials_name):
    tok = hf_tokenizer(kind, SPECIALS[specials_name], THINK_GENERATION)
    expected = []
    for row in ALPACA_ROWS:
        messages = messages_of(row)
        full_text = tok.apply_chat_template(messages, tokenize=False)
        prompt_text = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
        assert not full_text.startswith(prompt_text)
        out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        full = ids(out)
        mask = list(out["assistant_masks"])
        assert any(mask)
        expected.append({"input_ids": full, "labels": [t if m else -100 for t, m in zip(full, mask)],
                         "prompt_tokens": mask.index(1), "merged": False})
    return {"tokenizer": kind, "template": "tests/fixtures/data/think_generation.jinja", "format": "alpaca",
            "rows": "alpaca_rows.jsonl", **SPECIALS[specials_name], "expected": expected}


def multi_turn_case(kind, specials_name, template_file, template_text=None, template_path=None):
    template = template_text if template_text is not None else (TEMPLATES / template_file).read_text()
    tok = hf_tokenizer(kind, SPECIALS[specials_name], template)
    expected = []
    for row in CHAT_ROWS:
        messages = row["messages"]
        if template_text is not None:  # generation marks: transformers' own mask
            out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            full, mask = ids(out), list(out["assistant_masks"])
            labels = [t if m else -100 for t, m in zip(full, mask)]
        else:
            full = ids(tok.apply_chat_template(messages, tokenize=True))
            labels = [-100] * len(full)
            for k, m in enumerate(messages):
                if m["role"] != "assistant":
                    continue
                prompt = ids(tok.apply_chat_template(messages[:k], tokenize=True, add_generation_prompt=True))
                first, last = common_prefix(prompt, full), len(full)
                if k + 1 < len(messages):
                    done = ids(tok.apply_chat_template(messages[:k + 1], tokenize=True))
                    last = common_prefix(done, full)
                    last += last < len(done)
                labels[first:last] = full[first:last]
        first = next(i for i, l in enumerate(labels) if l != -100)
        expected.append({"input_ids": full, "labels": labels, "prompt_tokens": first, "merged": False})
    return {"tokenizer": kind, "template": template_path or str((TEMPLATES / template_file).relative_to(ROOT)),
            "format": "chat", "rows": "chat_rows.jsonl", **SPECIALS[specials_name], "expected": expected}


def response_spans(text, response, instruction):
    """The scored character spans, as examples.hpp documents them."""
    at = text.find(response)
    assert at >= 0
    spans = []
    while at >= 0:
        begin = at + len(response)
        if not instruction:
            return [(begin, len(text))]
        end = text.find(instruction, begin)
        end = len(text) if end < 0 else end
        spans.append((begin, end))
        at = -1 if end == len(text) else text.find(response, end)
    return spans


def template_case(kind, specials_name, rows, rows_file, field, response, instruction, fmt):
    tok = hf_tokenizer(kind, SPECIALS[specials_name])
    eos_id = tok.convert_tokens_to_ids(SPECIALS[specials_name]["eos_token"])
    expected = []
    for row in rows:
        text = row[field]
        enc = tok(text, return_offsets_mapping=True)
        full, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        if full[-1] != eos_id:
            full.append(eos_id)
            offsets.append((len(text), len(text)))
        spans = response_spans(text, response, instruction)
        labels = []
        for t, (a, b) in zip(full, offsets):
            if a == b:  # added tokens: scored only after a span that reaches the end of the text
                scored = b == len(text) and any(e == len(text) for _, e in spans) and t == eos_id
            else:
                scored = any(a < e and b > s for s, e in spans)
            labels.append(t if scored else -100)
        first = next(i for i, l in enumerate(labels) if l != -100)
        expected.append({"input_ids": full, "labels": labels, "prompt_tokens": first, "merged": False})
    case = {"tokenizer": kind, "template": None, "format": fmt, "rows": rows_file, **SPECIALS[specials_name],
            "expected": expected}
    if fmt == "text":
        case.update({"text_field": field, "response_template": response, "instruction_template": instruction})
    return case


def alpaca_case(kind, specials_name):
    tok = hf_tokenizer(kind, SPECIALS[specials_name])
    eos = SPECIALS[specials_name]["eos_token"]
    expected = []
    for row in ALPACA_ROWS:
        prompt = (PROMPT_INPUT if row["input"] else PROMPT_NO_INPUT).format_map(row)
        expected.append(labelled(ids(tok(prompt)), ids(tok(prompt + row["output"] + eos))))
    return {"tokenizer": kind, "template": None, "format": "alpaca", "rows": "alpaca_rows.jsonl",
            **SPECIALS[specials_name], "expected": expected}


def text_case(kind, specials_name):
    tok = hf_tokenizer(kind, SPECIALS[specials_name])
    eos_id = tok.convert_tokens_to_ids(SPECIALS[specials_name]["eos_token"])
    expected = []
    for row in TEXT_ROWS:
        full = ids(tok(row["text"]))
        if full[-1] != eos_id:
            full.append(eos_id)
        expected.append({"input_ids": full, "labels": full, "prompt_tokens": 0, "merged": False})
    return {"tokenizer": kind, "template": None, "format": "text", "rows": "text_rows.jsonl",
            **SPECIALS[specials_name], "expected": expected}


# ft's batch order (include/ft/data/batches.hpp with ft::Rng and derive_key of
# include/ft/core/random.hpp), written again from its description, so that the
# C++ test pins the exact sequence on every machine: SplitMix64, draws at or
# above the largest multiple of n below 2^64 - 1 rejected, Fisher-Yates from the top.
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def derive_key(parent, label):
    return mix64(parent ^ mix64((label + GOLDEN) & MASK))


class Rng:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + GOLDEN) & MASK
        return mix64(self.state)

    def below(self, n):
        limit = MASK - MASK % n
        while True:
            x = self.next()
            if x < limit:
                return x % n


def epoch_order(n, seed, epoch):
    order = list(range(n))
    rng = Rng(derive_key(seed, epoch & MASK))
    for i in range(n, 1, -1):
        j = rng.below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def shuffle_fixture():
    rng = Rng(1234567)
    return {
        "splitmix64": {"seed": 1234567, "outputs": [str(rng.next()) for _ in range(5)]},
        "orders": [{"n": n, "seed": seed, "epoch": epoch, "order": epoch_order(n, seed, epoch)}
                   for n, seed, epoch in [(10, 0, 0), (10, 0, 1), (10, 42, 0), (37, 2**64 - 1, 3), (1000, 7, 12)]],
    }


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT / "alpaca_rows.jsonl", ALPACA_ROWS)
    write_jsonl(OUT / "merge_rows.jsonl", MERGE_ROWS)
    write_jsonl(OUT / "text_rows.jsonl", TEXT_ROWS)
    write_jsonl(OUT / "chat_rows.jsonl", CHAT_ROWS)
    write_jsonl(OUT / "guanaco_rows.jsonl", GUANACO_ROWS)
    write_jsonl(OUT / "response_rows.jsonl", RESPONSE_ROWS)
    (OUT / "think_generation.jinja").write_text(THINK_GENERATION)
    (OUT / "merge_boundary.jinja").write_text(MERGE_TEMPLATE)
    cases = {
        "smollm2_chat": chat_case("smollm2", "smollm2", "smollm2.jinja"),
        "llama2_chat": chat_case("llama2", "llama2", "llama2.jinja"),
        "smollm2_think_generation": generation_case("smollm2", "smollm2"),
        "smollm2_merge_boundary": chat_case("smollm2", "smollm2", "merge_boundary.jinja", OUT, MERGE_ROWS,
                                            "merge_rows.jsonl"),
        "smollm2_alpaca": alpaca_case("smollm2", "smollm2_base"),
        "llama2_alpaca": alpaca_case("llama2", "llama2"),
        "smollm2_text": text_case("smollm2", "smollm2_base"),
        "llama2_text": text_case("llama2", "llama2"),
        "smollm2_chat_multi_turn": multi_turn_case("smollm2", "smollm2", "smollm2.jinja"),
        "llama3_chat_multi_turn": multi_turn_case("llama3", "llama3", "llama3.jinja"),
        "smollm2_chat_generation_marks": multi_turn_case("smollm2", "smollm2", None, THINK_GENERATION,
                                                         "tests/fixtures/data/think_generation.jinja"),
        "smollm2_guanaco": template_case("smollm2", "smollm2_base", GUANACO_ROWS, "guanaco_rows.jsonl", "text",
                                         "### Assistant:", "### Human:", "guanaco"),
        "llama2_guanaco": template_case("llama2", "llama2", GUANACO_ROWS, "guanaco_rows.jsonl", "text",
                                        "### Assistant:", "### Human:", "guanaco"),
        "smollm2_response_template": template_case("smollm2", "smollm2_base", RESPONSE_ROWS, "response_rows.jsonl",
                                                   "output", RESPONSE_TEMPLATE, "", "text"),
        "llama2_response_template": template_case("llama2", "llama2", RESPONSE_ROWS, "response_rows.jsonl",
                                                  "output", RESPONSE_TEMPLATE, "", "text"),
    }
    with open(OUT / "examples_expected.json", "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    with open(OUT / "shuffle_expected.json", "w", encoding="utf-8") as f:
        json.dump(shuffle_fixture(), f, separators=(",", ":"))
        f.write("\n")
    for name, case in cases.items():
        merged = sum(e["merged"] for e in case["expected"])
        print(f"{name}: {len(case['expected'])} rows, {merged} merged across the prompt boundary")


if __name__ == "__main__":
    main()
