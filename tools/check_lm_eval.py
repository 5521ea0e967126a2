#!/usr/bin/env python3
"""lm-evaluation-harness against ftrun serve, checked against its own hf model.

Writes a small multiple-choice task over a local JSONL file (jargon terms,
four choices each), runs lm-eval on it twice, with its `hf` model (torch,
transformers) on MODEL and with its `local-completions` model against
`ftrun serve MODEL` (echo with logprobs, as lm-eval asks for every
loglikelihood), and checks that both give the same accuracies and every
request's log-likelihood within 1e-4 and the same is_greedy.

Needs lm-eval with its API extras, torch, transformers and accelerate
(pip install "lm-eval[api]" torch transformers accelerate), nothing from
the network but PyPI. Run from the repository root:

    python tools/check_lm_eval.py build/release/bin/ftrun models/ft-tiny-llama
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import lm_eval_task

ROWS = [
    ("A hack is", ["a quick job that produces what is needed", "a kind of fish", "a color of the sky", "a loud noise"]),
    ("A kludge is", ["a clumsy but working solution", "a famous painting", "a type of bread", "an ocean current"]),
    ("A guru is", ["an expert others consult", "a small bird", "a wooden chair", "a rainy day"]),
    ("A daemon is", ["a program that runs in the background", "a mountain lake", "a sour fruit", "a winter coat"]),
    ("A wizard is", ["a person who knows a system deeply", "a blue stone", "a tall tree", "a dry river"]),
    ("A bug is", ["an unwanted behaviour of a program", "a music festival", "a warm drink", "a paper boat"]),
]


def write_task(folder):
    data = os.path.join(folder, "data.jsonl")
    with open(data, "w") as f:
        for question, choices in ROWS:
            f.write(json.dumps({"question": question, "choices": choices, "answer": 0}) + "\n")
    lm_eval_task.write_task(folder, data, text="question", target="answer")


def lm_eval(folder, out, model, model_args):
    _, samples = lm_eval_task.run(folder, out, model, model_args)
    return {row["doc_id"]: (row["responses"], row["acc"], row["acc_norm"]) for row in samples}


def main():
    ftrun, model = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory() as folder:
        write_task(folder)
        hf = lm_eval(folder, os.path.join(folder, "hf"), "hf", f"pretrained={model},dtype=float32")
        server = subprocess.Popen([ftrun, "serve", model, "--served-model-name", "base", "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = None
            for line in server.stdout:
                if match := re.search(r"listening on (http://\S+)", line):
                    url = match.group(1)
                    break
            assert url, f"ftrun serve did not start: {server.stderr.read()}"
            ft = lm_eval(folder, os.path.join(folder, "ft"), "local-completions",
                         f"model=base,base_url={url}/v1/completions,tokenizer={model},"
                         "tokenizer_backend=huggingface,num_concurrent=1,max_retries=1")
        finally:
            server.terminate()
            server.wait()
    worst, requests = 0.0, 0
    for doc, (answers, acc, acc_norm) in hf.items():
        theirs, ft_acc, ft_acc_norm = ft[doc]
        assert (acc, acc_norm) == (ft_acc, ft_acc_norm), f"item {doc}: accuracy {acc, acc_norm} vs {ft_acc, ft_acc_norm}"
        for (a, greedy_a), (b, greedy_b) in zip(answers, theirs):
            assert greedy_a == greedy_b, f"item {doc}: is_greedy differs"
            worst = max(worst, abs(a - b))
            requests += 1
    print(f"{requests} loglikelihood requests over {len(hf)} items: accuracies equal, "
          f"largest log-likelihood difference {worst:.3g}")
    assert worst < 1e-4


if __name__ == "__main__":
    main()
