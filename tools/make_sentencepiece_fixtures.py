#!/usr/bin/env python3
"""Builds the SentencePiece fixtures: tests/fixtures/tokenizers/<kind>/{tokenizer.model,
tokenizer_config.json, expected.json}.

Some models ship only SentencePiece's tokenizer.model (OpenLLaMA, the first Llama
conversions, many Llama 2 fine-tunes). transformers 5 has no slow tokenizer: it reads
the model's protobuf and builds a `tokenizers` pipeline from it at load time. ft does the
same in C++ (src/text/sentencepiece.cpp), and must give the ids transformers gives.

Each kind is a BPE model with byte fallback trained by `sentencepiece` on the Jargon File
and the test corpus (as tools/make_tokenizer_fixtures.py's kinds are), with a
tokenizer_config.json in one of the forms such repositories carry. transformers'
AutoTokenizer loads the directory; expected.json keeps the pipeline it built
("hf_tokenizer_json") and, as for the other kinds, its ids and decoded text for every
corpus line, the whole corpus and seeded random strings. The kinds in CHAT_TEMPLATES also
carry a chat template in tokenizer_config.json, and expected.json's "chat" holds
conversations with the ids of transformers' apply_chat_template(tokenize=True).

Deterministic and idempotent (sentencepiece trains on one thread):

    tools/.venv/bin/python tools/make_sentencepiece_fixtures.py [KIND ...]

Naming kinds writes only those.
"""
import io
import json
import sys

import sentencepiece
from tokenizers import Tokenizer
from transformers import AutoTokenizer

import make_tokenizer_fixtures as fixtures

OUT = fixtures.OUT

# The tokenizer_config.json of each kind: what transformers reads beside tokenizer.model.
KINDS = {
    # OpenLLaMA's form: LlamaTokenizer, BOS added, transformers 5's defaults for the rest.
    "spm_llama": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                  "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 2048,
                  "added_tokens_decoder": {
                      str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                               "single_word": False, "special": True}
                      for i, t in enumerate(["<unk>", "<s>", "</s>"])}},
    # The legacy Metaspace (a ▁ before every stretch between added tokens), EOS appended too,
    # special tokens written as AddedToken dictionaries, and a pad token the model lacks.
    "spm_legacy": {"tokenizer_class": "LlamaTokenizer", "legacy": True, "add_bos_token": True,
                   "add_eos_token": True,
                   "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                                 "rstrip": False, "single_word": False},
                   "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False,
                                 "normalized": False, "rstrip": False, "single_word": False},
                   "unk_token": "<unk>", "pad_token": "<pad>"},
    # No prefix space and no BOS.
    "spm_no_prefix": {"tokenizer_class": "LlamaTokenizer", "add_prefix_space": False, "add_bos_token": False,
                      "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    # Gemma's form, over a model trained as Gemma's is (no dummy prefix; <pad>, <eos>, <bos>, <unk> first).
    "spm_gemma": {"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": False,
                  "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
}

# The kinds whose tokenizer.model is trained with Gemma's special pieces; the others share Llama's.
GEMMA_KINDS = {"spm_gemma"}

# A chat template from tests/fixtures/chat_templates/ for the kinds whose models carry one.
CHAT_TEMPLATES = {"spm_llama": "llama2.jinja", "spm_gemma": "gemma.jinja"}
CONVERSATIONS = [
    [{"role": "user", "content": "What is a hack?"},
     {"role": "assistant", "content": "A quick job that produces what is needed."},
     {"role": "user", "content": "And a kludge?  «bricolage» 42"},
     {"role": "assistant", "content": "A clumsy but working fix."}],
    [{"role": "user", "content": "Define foo."}, {"role": "assistant", "content": "A placeholder\nname. 🙂"}],
]
GEMMA_PIECES = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
                    unk_piece="<unk>", add_dummy_prefix=False)


def train_model(**special):
    """A 1000-piece BPE with byte fallback, a control and a user-defined symbol, as the
    model file's bytes, written to memory: a file would record its temporary path.
    `special`: sentencepiece's options for the special pieces."""
    lines = [line for line in fixtures.training_text(max_char=0x500) if line.strip()]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=1000, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, split_digits=True, num_threads=1, minloglevel=2,
        control_symbols=["<ctrl>"], user_defined_symbols=["jargonify"], normalization_rule_name="identity",
        **special)
    return model.getvalue()


def main():
    corpus = (OUT / "corpus.txt").read_bytes().decode("utf-8")
    lines = corpus.split("\n")[:-1]  # the file ends with a newline
    model_bytes = {False: train_model(), True: train_model(**GEMMA_PIECES)}
    wanted = sys.argv[1:] or list(KINDS)
    unknown = sorted(set(wanted) - set(KINDS))
    assert not unknown, f"unknown kinds {unknown}; known: {list(KINDS)}"
    for kind, config in ((k, KINDS[k]) for k in wanted):
        folder = OUT / kind
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer.model").write_bytes(model_bytes[kind in GEMMA_KINDS])
        if kind in CHAT_TEMPLATES:
            config = dict(config, chat_template=(OUT.parent / "chat_templates" / CHAT_TEMPLATES[kind]).read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        hf = AutoTokenizer.from_pretrained(str(folder))
        tok = Tokenizer.from_str(hf.backend_tokenizer.to_str())
        expected = {
            "kind": kind,
            "hf_tokenizer_json": json.loads(hf.backend_tokenizer.to_str()),
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "eos_id": hf.eos_token_id,
            "lines": [fixtures.case(tok, line) for line in lines],
            "whole": fixtures.case(tok, corpus),
            "random": [fixtures.case(tok, s) for s in fixtures.random_strings()],
        }
        if kind in CHAT_TEMPLATES:
            expected["chat"] = [{"messages": m, "input_ids": list(hf.apply_chat_template(m, tokenize=True)["input_ids"])}
                                for m in CONVERSATIONS]
        (folder / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=None) + "\n",
                                              encoding="utf-8")
        print(f"{kind}: vocab {expected['vocab_size']}, {len(expected['whole']['ids'])} ids for the whole corpus")


if __name__ == "__main__":
    main()
