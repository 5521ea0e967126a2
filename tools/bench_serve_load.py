#!/usr/bin/env python3
"""A load run against an OpenAI-compatible server (ftrun serve): CLIENTS
concurrent clients, each sending streaming completions one after another
for SECONDS, with the real openai client. Prints requests/s, generated
tokens/s, time to first token (median, p95), and errors (must be 0).

    build/release/bin/ftrun serve /tmp/smol --port 8000 --max-num-seqs 16 &
    tools/.venv/bin/python tools/bench_serve_load.py http://127.0.0.1:8000 --clients 16 --seconds 60
"""
import argparse
import statistics
import threading
import time

import openai

WORDS = ["hacker", "kernel", "compiler", "daemon", "wizard", "bug", "feature", "cookie", "magic", "bit"]


def client_loop(url, model, index, deadline, max_tokens, out):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=300)
    n = 0
    while time.time() < deadline:
        prompt = f"Tell me about the {WORDS[(index + n) % len(WORDS)]} number {index * 1000 + n}."
        start = time.time()
        first = None
        tokens = 0
        try:
            stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                                    max_tokens=max_tokens, temperature=0.7, seed=index * 1000 + n,
                                                    stream=True, stream_options={"include_usage": True})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content and first is None:
                    first = time.time() - start
                if chunk.usage:
                    tokens = chunk.usage.completion_tokens
            out.append((first, tokens, None))
        except Exception as e:  # counted, not raised: the run reports every error
            out.append((None, 0, repr(e)))
        n += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()
    model = openai.OpenAI(base_url=a.url + "/v1", api_key="none").models.list().data[0].id
    results = []
    deadline = time.time() + a.seconds
    start = time.time()
    threads = [threading.Thread(target=client_loop, args=(a.url, model, i, deadline, a.max_tokens, results))
               for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    errors = [r[2] for r in results if r[2]]
    ttft = sorted(r[0] for r in results if r[0] is not None)
    tokens = sum(r[1] for r in results)
    print(f"{a.clients} clients, {elapsed:.1f} s, model {model}")
    print(f"requests {len(results)} ({len(results) / elapsed:.2f}/s), errors {len(errors)}")
    print(f"generated tokens {tokens} ({tokens / elapsed:.1f}/s)")
    if ttft:
        print(f"time to first token: median {1e3 * statistics.median(ttft):.0f} ms, "
              f"p95 {1e3 * ttft[int(0.95 * (len(ttft) - 1))]:.0f} ms")
    for e in errors[:5]:
        print("error:", e)
    raise SystemExit(1 if errors else 0)


if __name__ == "__main__":
    main()
