#!/usr/bin/env python3
"""Builds ft's default instruction dataset from the Jargon File.

The Jargon File (public domain) ships in Debian's `jargon-text` package. Each
entry becomes one alpaca-format row: the instruction asks what a term means,
the output is the entry's first paragraph of definition. Every 50th entry goes
to the validation file. Each entry also becomes a preference pair in TRL's
conversational format (pairs_train.jsonl, pairs_validation.jsonl): the user
asks what the term means, the entry's definition is chosen and the next
entry's rejected. Deterministic: the same package gives the same files.

    python3 tools/make_jargon_dataset.py [--source jargon.txt.gz] [--out data/jargon]
"""
import argparse
import gzip
import json
import pathlib
import re
import sys

ENTRY = re.compile(r"^   :(?P<term>[^:]+):(?P<rest>.*)$")


def entries(lines):
    """Yields (term, [paragraph, ...]) for every glossary entry."""
    term, paragraphs, current = None, [], []
    for line in lines:
        m = ENTRY.match(line)
        if m:
            if term:
                yield term, paragraphs + ([" ".join(current)] if current else [])
            term, paragraphs, current = m.group("term").strip(), [], []
        elif term is not None:
            text = line.strip()
            if text:
                current.append(text)
            elif current:
                paragraphs.append(" ".join(current))
                current = []
    if term:
        yield term, paragraphs + ([" ".join(current)] if current else [])


def clean(text):
    text = re.sub(r"\{([^}]*)\}", r"\1", text)  # cross-references
    return re.sub(r"\s+", " ", text).strip()


def definition(paragraphs):
    """The first paragraph that defines rather than annotates the term."""
    for p in paragraphs:
        p = clean(p)
        if p.startswith("[") and p.endswith("]"):  # origin notes such as [Usenet]
            continue
        p = re.sub(r"^1\. ", "", p)
        if len(p) >= 20:
            return p
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="/usr/share/doc/jargon-text/jargon.txt.gz")
    ap.add_argument("--out", default="data/jargon")
    args = ap.parse_args()

    source = pathlib.Path(args.source)
    if not source.exists():
        sys.exit(f"{source}: not found; install Debian's jargon-text package")
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()

    rows = []
    for term, paragraphs in entries(lines):
        answer = definition(paragraphs)
        if answer:
            rows.append({"instruction": f'In hacker jargon, what does "{term}" mean?', "input": "", "output": answer})

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train = [r for i, r in enumerate(rows) if i % 50 != 49]
    valid = [r for i, r in enumerate(rows) if i % 50 == 49]
    pairs = [{"prompt": [{"role": "user", "content": r["instruction"]}],
              "chosen": [{"role": "assistant", "content": r["output"]}],
              "rejected": [{"role": "assistant", "content": rows[(i + 1) % len(rows)]["output"]}]}
             for i, r in enumerate(rows)]
    pairs_train = [p for i, p in enumerate(pairs) if i % 50 != 49]
    pairs_valid = [p for i, p in enumerate(pairs) if i % 50 == 49]
    for name, part in (("train.jsonl", train), ("validation.jsonl", valid), ("pairs_train.jsonl", pairs_train),
                       ("pairs_validation.jsonl", pairs_valid)):
        tmp = out / (name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in part:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp.replace(out / name)
    print(f"jargon dataset: {len(train)} training and {len(valid)} validation rows, as many preference pairs, in {out}")


if __name__ == "__main__":
    main()
