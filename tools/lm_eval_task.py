"""A multiple-choice task over a local JSONL file, run by
lm-evaluation-harness: what tools/check_lm_eval.py and
tools/make_eval_task_fixtures.py share. Needs lm-eval (and for its hf
model torch and transformers); nothing from the network but PyPI.
"""
import glob
import json
import os
import subprocess
import sys

TASK = "ft_choice"


def write_task(folder, data, text="context", choices="choices", target="gold"):
    """Writes TASK's YAML into `folder`: rows of `data` give the context,
    the choices and the right one's index in the named fields."""
    with open(os.path.join(folder, TASK + ".yaml"), "w") as f:
        f.write(f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {os.path.abspath(data)}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{{text}}}}}"
doc_to_choice: "{{{{{choices}}}}}"
doc_to_target: "{{{{{target}}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
  - metric: acc_norm
""")


def run(folder, out, model, model_args):
    """Runs TASK with lm-eval's `model`; returns its results (metric ->
    value) and its samples in document order, each response as
    (log-likelihood, is_greedy)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    subprocess.run([sys.executable, "-m", "lm_eval", "--model", model, "--model_args", model_args,
                    "--tasks", TASK, "--include_path", folder, "--batch_size", "1", "--log_samples",
                    "--device", "cpu", "--output_path", out], check=True, env=env, capture_output=True)
    results = json.load(open(glob.glob(os.path.join(out, "*", "results_*.json"))[0]))["results"][TASK]
    samples = [json.loads(line) for line in open(glob.glob(os.path.join(out, "*", "samples_*.jsonl"))[0])]
    samples.sort(key=lambda row: row["doc_id"])
    for row in samples:
        # The samples file holds each response as text: ["-12.5", "False"].
        row["responses"] = [(float(r[0][0]), str(r[0][1]) == "True") for r in row["resps"]]
    return results, samples
