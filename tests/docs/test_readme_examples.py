"""The README's examples, run in order as a newcomer would after the two
set-up commands, on the build's tiny Llama instead of SmolLM2 (which the
test command does not fetch): each block marked `<!-- readme-example: NAME -->`
is run as written but for

  - `--set model.path=models/ft-tiny-llama` after the default recipe,
  - output directories under a temporary directory instead of runs/,
  - a free port instead of 8000,
  - the ftrun under test instead of build/release/bin/ftrun.

A shell block ending in `&` is a server: it is started, waited for on
/health, and stopped at the end. A python block runs in this interpreter
(the venv that has the openai client).

usage: test_readme_examples.py FTRUN REPOSITORY
"""
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

EXAMPLE = re.compile(r"<!-- readme-example: (\S+) -->\n```(\w+)\n(.*?)```", re.S)
EXPECTED = ["lora", "zero3", "serve", "client", "estimate"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def adapt(text, ftrun, workdir, port):
    text = text.replace("build/release/bin/ftrun", ftrun)
    text = text.replace("recipes/smollm2/135m_lora.toml",
                        "recipes/smollm2/135m_lora.toml --set model.path=models/ft-tiny-llama")
    text = re.sub(r"\bruns/", workdir + "/", text)
    return text.replace("8000", str(port))


def wait_for_health(port, server, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with {server.returncode} before answering /health")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the server did not answer /health within {seconds} s")


def main():
    ftrun, repository = sys.argv[1], pathlib.Path(sys.argv[2])
    readme = (repository / "README.md").read_text()
    examples = EXAMPLE.findall(readme)
    names = [name for name, _, _ in examples]
    if names != EXPECTED:
        sys.exit(f"README.md's examples are {names}; this test runs {EXPECTED} (update both together)")
    port = free_port()
    servers = []
    with tempfile.TemporaryDirectory() as workdir:
        try:
            for name, language, body in examples:
                code = adapt(body, ftrun, workdir, port)
                print(f"--- {name} ({language})\n{code}", flush=True)
                if language == "python":
                    run = subprocess.run([sys.executable, "-c", code], cwd=repository)
                elif code.rstrip().endswith("&"):
                    server = subprocess.Popen(["bash", "-c", "exec " + code.rstrip()[:-1]], cwd=repository)
                    servers.append(server)
                    wait_for_health(port, server)
                    continue
                else:
                    run = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=repository)
                if run.returncode != 0:
                    sys.exit(f"README example '{name}' failed with exit code {run.returncode}")
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=60)
    print(f"README: {len(examples)} examples ran")


if __name__ == "__main__":
    main()
