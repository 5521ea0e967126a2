#!/usr/bin/env python3
"""Builds the tokenizer fixtures: tests/fixtures/tokenizers/<kind>/{tokenizer,expected}.json.

ft's tokenizers must give the ids HF `tokenizers` gives. There is no model hub
here, so each kind is a small BPE trained with `tokenizers` on the Jargon File
(Debian's jargon-text, installed by tools/setup.sh) plus the test corpus, wired
with the pipeline its model family's tokenizer.json uses (GPT-2, GPT-NeoX,
Llama 3, Qwen2, SmolLM2, Llama 2/TinyLlama, Mistral, an older Metaspace-style
conversion, and a kind that exercises the remaining components). HF then encodes
tests/fixtures/tokenizers/corpus.txt line by line and whole, plus seeded random
strings, with and without special tokens, and decodes the results;
expected.json keeps all of it for tests/data/test_tokenizer.cpp.

Deterministic and idempotent:

    tools/.venv/bin/python tools/make_tokenizer_fixtures.py
"""
import collections
import gzip
import json
import pathlib
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/tokenizers"
JARGON = pathlib.Path("/usr/share/doc/jargon-text/jargon.txt.gz")

# The split patterns of the real tokenizer.json files.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_text(max_char=None):
    """The Jargon File and the corpus, the latter repeated so that its scripts earn merges too.

    Characters from max_char on are left out, so that they stay outside the alphabet and the
    byte-fallback and unknown-token paths get exercised (the trainer's own limit_alphabet breaks
    ties at random, which would make the fixtures change from run to run)."""
    if not JARGON.exists():
        raise SystemExit(f"{JARGON} is missing: run tools/setup.sh (Debian package jargon-text)")
    text = gzip.decompress(JARGON.read_bytes()).decode("latin-1")
    corpus = (OUT / "corpus.txt").read_bytes().decode("utf-8")
    lines = text.splitlines() + corpus.split("\n") * 20
    if max_char is not None:
        lines = ["".join(c for c in line if ord(c) < max_char) for line in lines]
    return lines


def train(pre_tokenizer, vocab_size, special_tokens=(), normalizer=None, max_char=None, **trainer_args):
    tok = Tokenizer(models.BPE(**{k: trainer_args[k] for k in ("continuing_subword_prefix", "end_of_word_suffix")
                                  if k in trainer_args}))
    tok.pre_tokenizer = pre_tokenizer
    if normalizer:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(special_tokens), show_progress=False,
                                  **trainer_args)
    tok.train_from_iterator(training_text(max_char), trainer)
    return tok


def special(content, **flags):
    return AddedToken(content, special=True, normalized=False, **flags)


def plain(content, **flags):
    return AddedToken(content, special=False, **flags)


def byte_level(special_tokens, pre_tokenizer, normalizer=None, vocab_size=1000):
    return train(pre_tokenizer, vocab_size, special_tokens, normalizer,
                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def gpt2():
    tok = byte_level([], pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # GPT-2's <|endoftext|> is special but normalized; "jargonify" is a plain word that must stand alone.
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
    tok.add_tokens([plain("jargonify", single_word=True)])
    return tok


def gpt_neox():
    tok = byte_level(["<|endoftext|>", "<|padding|>"],
                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), normalizers.NFC())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    # GPT-NeoX adds runs of spaces as plain, normalized tokens.
    tok.add_tokens([plain(" " * n) for n in (24, 16, 8, 4, 3, 2)])
    return tok


def llama3():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = byte_level([], pre)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_2|>", "<|eot_id|>"]
    tok.add_special_tokens([special(n) for n in names])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def qwen2():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok = byte_level([], pre, normalizers.NFC())
    tok.add_special_tokens([special("<|endoftext|>"), special("<|im_start|>"), special("<|im_end|>")])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    plain("jargonify"),
                    AddedToken("<|fim_middle|>", special=True, normalized=False, lstrip=True, rstrip=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def smollm2():
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>",
                "<filename>", "<gh_stars>", "<issue_start>"]
    tok = byte_level(specials, pre)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def sentencepiece_model(vocab_size=1200, byte_fallback=True, fuse_unk=True):
    """A Llama-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then merges of ▁-prefixed words."""
    tok = train(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True), vocab_size,
                ["<unk>", "<s>", "</s>"] + BYTE_TOKENS, max_char=0x500)  # Latin, Greek, Cyrillic
    j = json.loads(tok.to_str())
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in BYTE_TOKENS]
    j["model"].update(unk_token="<unk>", byte_fallback=byte_fallback, fuse_unk=fuse_unk)
    j["pre_tokenizer"] = None
    return Tokenizer.from_str(json.dumps(j))


def sentencepiece_decoder():
    return decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(content=" ", left=1, right=0)])


def bos_template(tok, suffix=""):
    tokens = [("<s>", tok.token_to_id("<s>"))] + ([("</s>", tok.token_to_id("</s>"))] if suffix else [])
    return processors.TemplateProcessing(single="<s> $A" + suffix, pair="<s> $A" + suffix + " <s> $B:1" + suffix,
                                         special_tokens=tokens)


def llama2():
    tok = sentencepiece_model()
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = sentencepiece_decoder()
    tok.post_processor = bos_template(tok)
    tok.add_tokens([plain("jargonify")])
    return tok


def mistral():
    tok = sentencepiece_model()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = sentencepiece_decoder()
    tok.post_processor = bos_template(tok)
    tok.add_special_tokens([special("[INST]"), special("[/INST]")])
    return tok


def sp_metaspace():
    """Older SentencePiece conversions: a splitting Metaspace, no byte fallback, a Metaspace decoder."""
    tok = sentencepiece_model(byte_fallback=False, fuse_unk=False)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = bos_template(tok, suffix=" </s>")
    return tok


def train_with_affixes(words, merge_count, prefix, suffix):
    """BPE training with a continuing-subword prefix and an end-of-word suffix, written out here
    because HF's trainer breaks ties between equally frequent pairs differently on every run when
    these are set. Ties go to the lexicographically first pair."""
    def symbols(word):
        return [("" if i == 0 else prefix) + c + (suffix if i == len(word) - 1 else "") for i, c in enumerate(word)]

    seqs = {w: symbols(w) for w in words}
    vocab = sorted({t for s in seqs.values() for t in s})
    pair_counts, holders = collections.Counter(), collections.defaultdict(set)
    for w, n in words.items():
        for pair in zip(seqs[w], seqs[w][1:]):
            pair_counts[pair] += n
            holders[pair].add(w)
    merges = []
    for _ in range(merge_count):
        candidates = [(-n, pair) for pair, n in pair_counts.items() if n > 0]
        if not candidates:
            break
        a, b = min(candidates)[1]
        merged = a + b[len(prefix):]
        merges.append((a, b))
        if merged not in vocab:
            vocab.append(merged)
        for w in list(holders[(a, b)]):
            old, n = seqs[w], words[w]
            new, i = [], 0
            while i < len(old):
                if i + 1 < len(old) and (old[i], old[i + 1]) == (a, b):
                    new.append(merged)
                    i += 2
                else:
                    new.append(old[i])
                    i += 1
            for pair in zip(old, old[1:]):
                pair_counts[pair] -= n
            for pair in zip(new, new[1:]):
                pair_counts[pair] += n
                holders[pair].add(w)
            seqs[w] = new
    return vocab, merges


def misc():
    """The components no family above uses: Strip and regex Replace, Removed / merged / contiguous splits,
    grouped digits, subword prefix and word suffix, unknown tokens, lstrip/rstrip, no decoder, RoBERTa's
    post-processor."""
    normalizer = normalizers.Sequence([normalizers.Strip(left=True, right=True),
                                       normalizers.Replace(Regex(r" {2,}"), " ")])
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[.,;:!?]"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{Lu}"), behavior="contiguous", invert=True)])
    words = collections.Counter()
    for line in training_text(max_char=0x80)[:3000]:
        words.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(line)))
    vocab, merges = train_with_affixes(words, 500, "##", "</w>")
    tokens = ["[UNK]", "[CLS]", "[SEP]"] + vocab
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, unk_token="[UNK]", fuse_unk=True,
                               continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.post_processor = processors.RobertaProcessing(("[SEP]", 2), ("[CLS]", 1))
    tok.add_special_tokens([special("[UNK]"), special("[CLS]"), special("[SEP]"),
                            special("[MASK]", lstrip=True, rstrip=True)])
    # A raw run of tabs, which [MASK]'s rstrip can swallow the start of.
    tok.add_tokens([plain("<word>", single_word=True), plain("Jargon"), AddedToken("\t\t", normalized=False)])
    return tok


KINDS = {"gpt2": gpt2, "gpt_neox": gpt_neox, "llama3": llama3, "qwen2": qwen2, "smollm2": smollm2,
         "llama2": llama2, "mistral": mistral, "sp_metaspace": sp_metaspace, "misc": misc}

# Pieces for the random strings: every script of the corpus, marks, emoji parts,
# whitespace of all kinds, digits, apostrophes, and the added tokens of all kinds.
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + list(" \t\n\r\x0b\x0c\u00a0\u2009\u3000\u200b\u0085\u2028")
        + list("'\".,;:!?-_()[]{}<>|/\\@#$%^&*+=~`")
        + list("éèêëçñøåßœÉÅÖ") + ["e\u0301", "a\u030a", "o\u0308\u0304", "\u0301", "\u0323", "\u0307"]
        + list("абвгдеёжзийклмнопрстуфхцчшщъыьэюяЖЩ") + list("αβγδεζηθικλμνξοπρστυφχψωΩ")
        + list("ابتثجحخدذرزسشصضطظعغفقكلمنهوي") + list("אבגדהוזחטיכלמנסעפצקרשת")
        + list("कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह") + ["\u093f", "\u094d", "\u0902"]
        + list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年") + list("あいうえおかきくけこアイウエオ")
        + list("가나다라마바사아자차카타파하한글") + ["\u1100", "\u1161", "\u11a8"] + list("กขคงจฉชซเแโใไ\u0e31\u0e34")
        + list("٠١٢٣४५६①½²𝟙") + ["😀", "👍", "🏽", "\u200d", "💻", "👩", "🇫", "🇷", "️", "⃣", "🫠", "𝄞", "𠜎"]
        + ["'s", "'t", "'re", "'ll", "'S", " ", "  ", "    ", "\n\n", "\t\t", "123456", "3.14", "-"]
        + ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]",
           "<|begin_of_text|>", "<|eot_id|>", "<tool_call>", "<|fim_middle|>", "jargonify", "[MASK]", "[UNK]",
           "<word>", "Jargon", "<|padding|>", "<repo_name>", "<0x41>", "▁", "▁▁", "Ġ"])


def random_strings(count=150, seed=1234):
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(0, 24))) for _ in range(count)]


def case(tok, text):
    ids = tok.encode(text, add_special_tokens=True).ids
    return {"text": text,
            "ids": ids,
            "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}


ADD_TEXT = "A brandnewword, the <|brand_new|> token, and brandnewword<|brand_new|>the end."


def after_add_tokens(tok):
    """What --add-tokens relies on: ids HF gives to new tokens, and encoding with them."""
    new_plain = tok.add_tokens(["brandnewword", "the"])
    new_special = tok.add_special_tokens(["<|brand_new|>"])
    return {"plain": ["brandnewword", "the"], "special": ["<|brand_new|>"],
            "hf_added": [new_plain, new_special],
            "ids": {t: tok.token_to_id(t) for t in ["brandnewword", "the", "<|brand_new|>"]},
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "case": case(tok, ADD_TEXT)}


def main():
    corpus = (OUT / "corpus.txt").read_bytes().decode("utf-8")
    lines = corpus.split("\n")[:-1]  # the file ends with a newline
    for kind, build in KINDS.items():
        tok = build()
        folder = OUT / kind
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))  # what the tests will read
        expected = {
            "kind": kind,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "added_tokens": [{"id": i, "content": t.content, "special": t.special}
                             for i, t in sorted(tok.get_added_tokens_decoder().items())],
            "lines": [case(tok, line) for line in lines],
            "whole": case(tok, corpus),
            "random": [case(tok, s) for s in random_strings()],
            "after_add_tokens": after_add_tokens(tok),
        }
        (folder / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=None) + "\n",
                                              encoding="utf-8")
        print(f"{kind}: vocab {expected['vocab_size']}, {len(expected['whole']['ids'])} ids for the whole corpus")


if __name__ == "__main__":
    main()
