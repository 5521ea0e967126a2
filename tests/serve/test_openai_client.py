#!/usr/bin/env python3
"""ftrun serve driven by the real `openai` client (from PyPI, in tools/.venv).

Trains a LoRA adapter on ft's tiny Llama for a few steps (ftrun train), serves
the base model with the adapter by name, and checks: chat and completions,
streamed and not (the streamed text equals the non-streamed text), n = 2,
stop strings, logprobs, echo with logprobs as lm-evaluation-harness asks for a
loglikelihood, the adapter by name (equal to ftrun generate on the
run's newest checkpoint, -c latest), 32 concurrent streaming clients getting
what each gets alone, the refusals (malformed JSON, wrong types, unknown
model, over-long prompt, max_tokens < 1, a full queue, a missing API key), a
client that disconnects mid-stream freeing its slot, /health and /metrics,
and SIGTERM finishing the request in flight before a clean exit; ftrun control
listing, reading and stopping a server. Then a tiny
mixture of experts: LoRA trained with its experts split over 2 ranks
(strategy.expert_parallel), served with the adapter by name. Then QLoRA: two
adapters trained over the tiny Llama quantized to nf4 as it loads, served
over that 4-bit base (--quantize nf4) and chosen per request, each answering
as ftrun generate does on its run, mixed in one batch.

Usage: test_openai_client.py FTRUN   (run from the repository root)
"""
import concurrent.futures
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

FTRUN = sys.argv[1]
BASE = "models/ft-tiny-llama"
PROMPTS = [f"The {word} of the hacker" for word in
           ("story", "jargon", "kernel", "bug", "hack", "wizard", "guru", "daemon")]


class Server:
    """ftrun serve on a free port, stopped at the end."""

    def __init__(self, *args, env=None):
        self.process = subprocess.Popen([FTRUN, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        match = re.search(r"listening on (http://\S+)", line)
        if not match:
            raise AssertionError(f"ftrun serve did not start: {line!r} {self.process.stderr.read()}")
        self.url = match.group(1)

    def client(self, api_key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120)

    def raw(self, path, body=None, headers=None):
        """(status, parsed JSON or text) of a request made by hand."""
        data = body.encode() if isinstance(body, str) else body
        request = urllib.request.Request(self.url + path, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def metric(self, name):
        _, text = self.raw("/metrics")
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(match.group(1))

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def check(condition, message):
    if not condition:
        raise AssertionError(message)
    print("ok:", message)


def train_adapter(out):
    subprocess.run([FTRUN, "train", "recipes/ft_tiny_llama/lora.toml", "--set", "train.max_steps=12",
                    "--set", f"output_dir={out}", "--set", "checkpoint.save_steps=12", "--set", "train.eval_steps=0",
                    "--set", "train.learning_rate=0.02"], check=True, capture_output=True)


def check_adapter(client, run, base, tuned, prompt, max_tokens, what):
    """The adapter served by name answers what ftrun generate gives on its run's newest checkpoint, and
    changes the base model's probabilities."""
    answer = client.completions.create(model=tuned, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=0)
    plain = client.completions.create(model=base, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=0)
    local = subprocess.run([FTRUN, "generate", run, "-c", "latest", "--raw", "-p", prompt, "--max-tokens",
                            str(max_tokens), "--json"], check=True, capture_output=True, text=True)
    check(answer.choices[0].text == json.loads(local.stdout)["text"],
          f"{what} answers as ftrun generate -c latest on its run")
    check(answer.choices[0].logprobs.token_logprobs != plain.choices[0].logprobs.token_logprobs,
          f"{what} changes the answer's probabilities")


def streamed_chat(client, **kwargs):
    pieces, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    return "".join(pieces), finish


def streamed_completion(client, **kwargs):
    texts, finish = {}, {}
    for chunk in client.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return texts, finish


def main():
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        train_adapter(run)
        server = Server(BASE, "--served-model-name", "base", "--adapter", f"tuned={run}/adapter",
                        "--max-num-seqs", "4", "--max-queue", "60")
        client = server.client()
        try:
            exercise(server, client, run)
        finally:
            code = server.stop()
        check(code == 0, "SIGTERM stops an idle server with exit 0")
        graceful_shutdown()
        controlled(tmp)
        limits()
        mixture_of_experts(tmp)
        quantized_base(tmp)
    print("all checks passed")


def mixture_of_experts(tmp):
    """A Mixtral of ft's tiny Llama's shape (4 experts, top 2, the load-balancing loss), its LoRA adapter
    trained on 2 ranks that split the experts, served beside the base and answering as ftrun generate."""
    moe = os.path.join(tmp, "moe")
    os.makedirs(moe)
    with open(os.path.join(BASE, "config.json")) as f:
        config = json.load(f)
    config.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4,
                  num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.02)
    with open(os.path.join(moe, "config.json"), "w") as f:
        json.dump(config, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(BASE, name), moe)
    subprocess.run([FTRUN, "init", moe], check=True, capture_output=True)
    run = os.path.join(tmp, "moe_run")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    trained = subprocess.run([FTRUN, "train", "recipes/ft_tiny_llama/lora.toml", "--set", f"model.path={moe}",
                              "--set", f"output_dir={run}", "--set", "train.max_steps=8", "--set", "train.eval_steps=0",
                              "--set", "checkpoint.save_steps=8", "--set", "train.learning_rate=0.02",
                              "--set", "strategy.parallelism=ddp", "--set", "strategy.expert_parallel=2",
                              "--set", "launch.nproc=2"], capture_output=True, text=True, env=env)
    check(trained.returncode == 0, f"LoRA on a mixture of experts trains on 2 ranks that split its experts: {trained.stderr}")
    check("aux_loss" in trained.stdout, "the run logs the load-balancing loss")
    server = Server(moe, "--served-model-name", "moe", "--adapter", f"moe-tuned={run}/adapter")
    try:
        client = server.client()
        check_adapter(client, run, "moe", "moe-tuned", PROMPTS[1], 12, "the mixture of experts' adapter")
        chat = client.chat.completions.create(model="moe-tuned", max_tokens=8, temperature=0,
                                              messages=[{"role": "user", "content": "What is a hacker?"}])
        check(chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens > 0,
              "the mixture of experts answers a chat through its template")
    finally:
        server.stop()


def quantized_base(tmp):
    """Two LoRA adapters trained over a 4-bit base (model.quantize = "nf4"), served unmerged over the same
    4-bit base and picked per request."""
    runs = {}
    for name, rate in (("q-fast", "0.02"), ("q-slow", "0.005")):
        runs[name] = os.path.join(tmp, name)
        subprocess.run([FTRUN, "train", "recipes/ft_tiny_llama/lora.toml", "--set", "model.quantize=nf4",
                        "--set", "train.max_steps=12", "--set", f"output_dir={runs[name]}",
                        "--set", "checkpoint.save_steps=12", "--set", "train.eval_steps=0",
                        "--set", f"train.learning_rate={rate}"], check=True, capture_output=True)
        check(os.path.exists(os.path.join(runs[name], "adapter", "base_quantization.json")),
              f"{name}: the run records the 4-bit base beside its adapter")
    server = Server(BASE, "--quantize", "nf4", "--served-model-name", "base-nf4",
                    "--adapter", f"q-fast={runs['q-fast']}/adapter", "--adapter", f"q-slow={runs['q-slow']}/adapter")
    try:
        client = server.client()
        models = sorted(m.id for m in client.models.list().data)
        check(models == ["base-nf4", "q-fast", "q-slow"], f"/v1/models lists the 4-bit base and both adapters: {models}")
        for name, run in runs.items():
            check_adapter(client, run, "base-nf4", name, PROMPTS[2], 12, f"QLoRA adapter {name} over the 4-bit base")
        prompt = PROMPTS[3]
        plain = client.completions.create(model="base-nf4", prompt=prompt, max_tokens=12, temperature=0, logprobs=0)
        local = subprocess.run([FTRUN, "generate", BASE, "--quantize", "nf4", "--raw", "-p", prompt, "--max-tokens",
                                "12", "--json"], check=True, capture_output=True, text=True)
        check(plain.choices[0].text == json.loads(local.stdout)["text"],
              "the served 4-bit base answers as ftrun generate --quantize nf4")
        whole = Server(BASE, "--served-model-name", "base")
        try:
            full = whole.client().completions.create(model="base", prompt=prompt, max_tokens=12, temperature=0,
                                                     logprobs=0)
        finally:
            whole.stop()
        check(full.choices[0].logprobs.token_logprobs != plain.choices[0].logprobs.token_logprobs,
              "the 4-bit base's probabilities are not the whole-precision base's")
        # Requests for the base and both adapters, at once: each gets what it gets alone.
        jobs = [(["base-nf4", "q-fast", "q-slow"][i % 3], PROMPTS[i % len(PROMPTS)]) for i in range(12)]
        alone = [client.completions.create(model=m, prompt=p, max_tokens=12, temperature=0).choices[0].text
                 for m, p in jobs]
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            together = list(pool.map(lambda job: streamed_completion(client, model=job[0], prompt=job[1],
                                                                     max_tokens=12, temperature=0)[0][0], jobs))
        check(together == alone, "the 4-bit base and its two adapters, requested at once, answer as each alone")
    finally:
        server.stop()


def exercise(server, client, run):
    models = sorted(m.id for m in client.models.list().data)
    check(models == ["base", "tuned"], f"/v1/models lists the base model and the adapter: {models}")
    status, health = server.raw("/health")
    check(status == 200 and health["status"] == "ok", "/health answers 200")

    # Chat, streamed and not: the same text.
    messages = [{"role": "system", "content": "You explain jargon."}, {"role": "user", "content": "What is a hack?"}]
    whole = client.chat.completions.create(model="base", messages=messages, max_tokens=24, temperature=0)
    text = whole.choices[0].message.content
    check(whole.object == "chat.completion" and whole.choices[0].message.role == "assistant" and len(text) > 0,
          "chat completion answers as the assistant")
    check(whole.usage.completion_tokens == 24 and whole.usage.total_tokens ==
          whole.usage.prompt_tokens + 24 and whole.choices[0].finish_reason == "length",
          "usage counts the prompt and the 24 tokens; finish_reason length")
    streamed, finish = streamed_chat(client, model="base", messages=messages, max_tokens=24, temperature=0)
    check(streamed == text and finish == "length", "streamed chat text equals the non-streamed text")

    # Completions, streamed and not.
    prompt = PROMPTS[0]
    whole = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=0)
    text = whole.choices[0].text
    texts, finish = streamed_completion(client, model="base", prompt=prompt, max_tokens=20, temperature=0)
    check(whole.object == "text_completion" and texts == {0: text} and finish == {0: "length"},
          "streamed completion text equals the non-streamed text")

    # n = 2: greedy choices are equal; seeded sampling is reproducible.
    two = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=0, n=2)
    check([c.text for c in two.choices] == [text, text] and [c.index for c in two.choices] == [0, 1],
          "n = 2 greedy gives two equal choices")
    a = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=1.0, n=2, seed=5)
    b = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=1.0, n=2, seed=5)
    check([c.text for c in a.choices] == [c.text for c in b.choices], "n = 2 sampling with a seed is reproducible")
    texts, _ = streamed_completion(client, model="base", prompt=prompt, max_tokens=20, temperature=1.0, n=2, seed=5)
    check(texts == {0: a.choices[0].text, 1: a.choices[1].text}, "streamed n = 2 gives the same two choices")

    # Stop strings: the answer ends before the first one, streamed or not.
    stop = text[len(text) // 2: len(text) // 2 + 3]
    cut = text[:text.find(stop)]
    stopped = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=0, stop=[stop])
    check(stopped.choices[0].text == cut and stopped.choices[0].finish_reason == "stop",
          f"stop string {stop!r} ends the answer before it")
    texts, finish = streamed_completion(client, model="base", prompt=prompt, max_tokens=20, temperature=0, stop=stop)
    check(texts == {0: cut} and finish == {0: "stop"}, "streamed, the stop string is cut the same way")

    # Logprobs: one per token, each <= 0.
    chat = client.chat.completions.create(model="base", messages=messages, max_tokens=8, temperature=0, logprobs=True)
    values = [t.logprob for t in chat.choices[0].logprobs.content]
    check(len(values) == 8 and all(v <= 0 for v in values), "chat logprobs: one per token")
    done = client.completions.create(model="base", prompt=prompt, max_tokens=8, temperature=0, logprobs=0)
    check(len(done.choices[0].logprobs.token_logprobs) == 8, "completion logprobs: one per token")

    # Alternatives: greedy picks the most likely, which heads its token's list, most likely first.
    chat = client.chat.completions.create(model="base", messages=messages, max_tokens=8, temperature=0, logprobs=True,
                                          top_logprobs=3)
    content = chat.choices[0].logprobs.content
    check(all(len(t.top_logprobs) == 3 for t in content), "chat top_logprobs: three alternatives per token")
    check(all(t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6 and
              t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
              for t in content), "chat top_logprobs: the chosen token first, in order")
    check(all(sum(math.exp(a.logprob) for a in t.top_logprobs) <= 1 + 1e-5 for t in content),
          "chat top_logprobs: probabilities of distinct tokens")
    streamed = [t for chunk in client.chat.completions.create(model="base", messages=messages, max_tokens=8,
                                                              temperature=0, logprobs=True, top_logprobs=3, stream=True)
                if chunk.choices and chunk.choices[0].logprobs for t in chunk.choices[0].logprobs.content]
    check([(t.token, [a.token for a in t.top_logprobs]) for t in streamed] ==
          [(t.token, [a.token for a in t.top_logprobs]) for t in content], "streamed top_logprobs are the same")
    done = client.completions.create(model="base", prompt=prompt, max_tokens=8, temperature=0, logprobs=2)
    tops = done.choices[0].logprobs.top_logprobs
    check(len(tops) == 8 and all(1 <= len(t) <= 3 for t in tops) and
          all(max(t, key=t.get) == token for t, token in zip(tops, done.choices[0].logprobs.tokens)),
          "completion logprobs = 2: the alternatives of each token, the chosen one the most likely")

    echoed(client, prompt)

    check_adapter(client, run, "base", "tuned", prompt, 16, "the adapter by name")

    # 32 concurrent streaming clients get what each gets alone.
    jobs = [("base" if i % 2 else "tuned", PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS))) for i in range(32)]
    alone = [client.completions.create(model=m, prompt=p, max_tokens=16, temperature=0).choices[0].text for m, p in jobs]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda job: streamed_completion(client, model=job[0], prompt=job[1], max_tokens=16,
                                                                 temperature=0)[0][0], jobs))
    check(together == alone, "32 concurrent streaming clients get exactly what each gets alone")

    refusals(server, client)

    # A client that goes away mid-stream: its slot is freed long before its 900 tokens, the server goes on.
    before = server.metric("ft_generation_tokens_total")
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
        body = json.dumps({"model": "base", "prompt": prompt, "max_tokens": 900, "stream": True})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        s.recv(4096)  # the first event
    deadline = time.time() + 20
    while server.metric("ft_generation_tokens_total") == before and time.time() < deadline:
        time.sleep(0.01)  # until it runs
    while server.metric("ft_requests_running") > 0 and time.time() < deadline:
        time.sleep(0.01)  # until it is dropped
    generated = server.metric("ft_generation_tokens_total") - before
    check(server.metric("ft_requests_running") == 0 and generated < 900,
          f"a client that disconnects mid-stream is dropped after {generated:.0f} of its 900 tokens")
    again = client.completions.create(model="base", prompt=prompt, max_tokens=20, temperature=0)
    check(again.choices[0].text == text, "after every refusal and the disconnect, a good request is answered")

    _, metrics = server.raw("/metrics")
    check('ft_requests_total{endpoint="/v1/completions",status="200"}' in metrics and
          "ft_time_to_first_token_seconds_count" in metrics and server.metric("ft_generation_tokens_total") > 0,
          "/metrics reports requests, tokens and latency")


def echoed(client, prompt):
    """echo with logprobs, as lm-evaluation-harness's local-completions model asks for a loglikelihood (max_tokens 1,
    logprobs 1, temperature 0) and as it reads the answer; and max_tokens 0, the prompt alone."""
    alone = client.completions.create(model="base", prompt=prompt, max_tokens=0, temperature=0, logprobs=1, echo=True)
    ids = alone.choices[0].logprobs
    context = len(ids.tokens)
    check(alone.choices[0].text == prompt and alone.usage.completion_tokens == 0 and
          context == alone.usage.prompt_tokens and ids.token_logprobs[0] is None and ids.top_logprobs[0] is None,
          "echo with max_tokens 0: the prompt alone, a token per prompt token, the first unscored")
    check(all(v <= 0 for v in ids.token_logprobs[1:]) and
          ids.text_offset == [sum(len(t) for t in ids.tokens[:i]) for i in range(context)],
          "echo: a log-probability per prompt token after the first, offsets over the echoed tokens")

    # The continuation lm-eval would score: a greedy answer, every token of it the most likely in its place.
    greedy = client.completions.create(model="base", prompt=prompt, max_tokens=6, temperature=0, logprobs=1)
    answer = greedy.choices[0].logprobs
    scored = client.completions.create(model="base", prompt=prompt + greedy.choices[0].text, max_tokens=1,
                                       temperature=0, logprobs=1, echo=True, seed=1234)
    lp = scored.choices[0].logprobs
    continuation = lp.token_logprobs[context:-1]
    check(scored.choices[0].text.startswith(prompt + greedy.choices[0].text) and
          lp.tokens[:context] == ids.tokens and lp.tokens[context:-1] == answer.tokens,
          "echo with max_tokens 1: the prompt's tokens, the continuation's, and one more")
    check(all(abs(a - b) < 1e-4 for a, b in zip(continuation, answer.token_logprobs)),
          "the continuation's log-probabilities scored in the prompt equal those it was generated with")
    check(all(abs(tok - max(top.values())) < 1e-6 for tok, top in zip(continuation, lp.top_logprobs[context:-1])),
          "each continuation token is the most likely at its place (lm-eval's is_greedy)")
    check(all(abs(a - b) < 1e-4 for a, b in zip(lp.token_logprobs[1:context], ids.token_logprobs[1:])),
          "the prompt's log-probabilities do not depend on what follows it")

    # Several prompts in one call, as token ids (lm-eval's tokenized requests).
    many = client.completions.create(model="base", prompt=[[1, 2, 3, 4], [5, 6, 7]], max_tokens=0, logprobs=0,
                                     echo=True)
    check([len(c.logprobs.tokens) for c in many.choices] == [4, 3], "echo of token-id prompts, one choice each")

    # Streamed, echo sends the prompt first; with logprobs it is answered whole.
    texts, _ = streamed_completion(client, model="base", prompt=prompt, max_tokens=6, temperature=0, echo=True)
    check(texts == {0: prompt + greedy.choices[0].text}, "streamed echo: the prompt, then the answer")
    try:
        client.completions.create(model="base", prompt=prompt, max_tokens=1, logprobs=1, echo=True, stream=True)
        check(False, "echo with logprobs, streamed, is refused")
    except openai.BadRequestError as e:
        check("stream" in str(e), "echo with logprobs, streamed: 400 naming stream")


def refusals(server, client):
    def expect(status, code_or_text, body):
        got, answer = server.raw("/v1/completions", body, {"Content-Type": "application/json"})
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        check(got == status and (code_or_text in (error.get("code") or "") or code_or_text in error.get("message", "")),
              f"HTTP {status} ({code_or_text}) for {body[:60]!r}: {error.get('message')}")

    expect(400, "invalid_json", '{"model": "base", "prompt": ')
    expect(400, "invalid_type", json.dumps({"model": "base", "prompt": "a", "temperature": "hot"}))
    expect(400, "invalid_type", json.dumps({"model": "base", "prompt": 5}))
    expect(404, "model_not_found", json.dumps({"model": "gpt-4", "prompt": "a"}))
    expect(400, "context_length_exceeded", json.dumps({"model": "base", "prompt": "jargon " * 3000}))
    expect(400, "0 only with 'echo'", json.dumps({"model": "base", "prompt": "a", "max_tokens": 0}))
    expect(400, "logprobs", json.dumps({"model": "base", "prompt": "a", "logprobs": 6}))
    try:
        client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}], top_logprobs=2)
        check(False, "top_logprobs without logprobs is refused")
    except openai.BadRequestError as e:
        check("top_logprobs" in str(e), "top_logprobs without logprobs: 400 naming the field")
    try:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "the openai client raises NotFoundError for an unknown model")
    try:
        client.chat.completions.create(model="base", messages=[{"role": "user", "content": "hi"}], max_tokens=0)
        check(False, "max_tokens = 0 is refused")
    except openai.BadRequestError:
        check(True, "the openai client raises BadRequestError for max_tokens = 0")


def graceful_shutdown():
    """SIGTERM while a request streams: it finishes, then the server exits 0."""
    server = Server(BASE, "--shutdown-timeout", "60")
    client = server.client()
    stream = client.completions.create(model=BASE, prompt=PROMPTS[1], max_tokens=600, temperature=0, stream=True)
    first = next(iter(stream))
    server.process.send_signal(signal.SIGTERM)
    rest = list(stream)
    finish = [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason]
    code = server.process.wait(timeout=60)
    check(first.choices[0].text is not None and finish == ["length"] and code == 0,
          "SIGTERM lets the streaming request finish all 600 tokens, then exits 0")


def controlled(tmp):
    """ftrun control lists a server, reads its status, refuses save, and stops it as SIGTERM does."""
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(tmp, "runtime"))
    os.makedirs(env["XDG_RUNTIME_DIR"])
    server = Server(BASE, env=env)

    def control(*args):
        return subprocess.run([FTRUN, "control", *args], capture_output=True, text=True, env=env)

    listed = control("list")
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    check(listed.returncode == 0 and len(rows) == 1 and rows[0][1:3] == ["serve", "serving"]
          and rows[0][-1] == server.url, "ftrun control list shows the server, serving, at its address")
    job = rows[0][0]
    status = json.loads(control("status", job, "--json").stdout)
    check(status["kind"] == "serve" and status["state"] == "serving" and status["pid"] == server.process.pid,
          "ftrun control status answers for the server")
    refused = control("save", job)
    check(refused.returncode == 2 and "it has nothing to save" in refused.stderr, "a server refuses save in one line")
    check(control("stop", job).returncode == 0 and server.process.wait(timeout=60) == 0,
          "ftrun control stop ends the server as SIGTERM does, exit 0")
    check(control("list").stdout.startswith("no jobs"), "a stopped server leaves no record")


def limits():
    """A full queue answers 429; an API key is required when set."""
    server = Server(BASE, "--max-num-seqs", "1", "--max-queue", "1", "--api-key", "secret")
    try:
        try:
            server.client("wrong").models.list()
            check(False, "a wrong API key is refused")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, "a wrong API key gets 401")
        client = server.client("secret")
        long_ones = [client.completions.create(model=BASE, prompt=p, max_tokens=900, temperature=0, stream=True)
                     for p in PROMPTS[:2]]  # one running, one waiting
        try:
            client.completions.create(model=BASE, prompt=PROMPTS[2], max_tokens=4)
            check(False, "a request beyond the queue is refused")
        except openai.RateLimitError as e:
            check(e.status_code == 429, "a request beyond --max-queue gets 429")
        for s in long_ones:
            s.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
