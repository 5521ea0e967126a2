#!/usr/bin/env python3
"""ftrun's dashboard in a real headless Chromium, driven by Playwright.

A finished run and a live one of 2 ranks (`ftrun train --dashboard 0`) are overlaid by
`ftrun dashboard`: the page loads with no console error, its loss curve has
exactly the finished run's points and the live run's grow as they arrive, the
page fits a phone's width, and the Stop button stops the live run, which
exits with code 5 after writing its checkpoint. docs/dashboard.png must have
been taken of the current page (it records page.html's hash);
FT_UPDATE_SCREENSHOT=1 takes it again.

Usage: test_dashboard.py FTRUN SOURCE_DIR. Exits 77 (skipped) with one line
when Playwright or Chromium is missing: `bash tools/setup.sh --tests`.
"""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib

FTRUN, SOURCE = sys.argv[1], sys.argv[2]
PAGE = os.path.join(SOURCE, "runner", "dashboard", "page.html")
SCREENSHOT = os.path.join(SOURCE, "docs", "dashboard.png")
KEY = b"ft-page-sha256"


def page_hash():
    with open(PAGE, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def png_text(path):
    """The PNG's tEXt entries."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = {}, 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key] = value.decode()
        at += 12 + length
    return out


def with_text(png, key, value):
    """The PNG with a tEXt entry added after its header chunk."""
    body = key + b"\0" + value.encode()
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body) & 0xFFFFFFFF)
    return png[:33] + chunk + png[33:]


def check(condition, what):
    if not condition:
        raise AssertionError(what)


updating = os.environ.get("FT_UPDATE_SCREENSHOT") == "1"
if not updating:
    check(os.path.exists(SCREENSHOT), SCREENSHOT + " is missing: run this test with FT_UPDATE_SCREENSHOT=1")
    check(png_text(SCREENSHOT).get(KEY) == page_hash(),
          "docs/dashboard.png was taken of an older page.html: run this test with FT_UPDATE_SCREENSHOT=1")

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    print("SKIP: Playwright is not in tools/.venv (bash tools/setup.sh --tests installs it and Chromium)")
    sys.exit(77)
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    print("SKIP: no chromium on PATH (bash tools/setup.sh --tests installs Debian's)")
    sys.exit(77)

scratch = tempfile.mkdtemp(prefix="ft_dashboard_")
recipe = os.path.join("recipes", "ft_tiny_llama", "lora.toml")  # from the source root, as its paths are written
finished, live = os.path.join(scratch, "finished"), os.path.join(scratch, "live")


def train(output_dir, steps, *extra, **popen):
    return subprocess.Popen(
        [FTRUN, "train", recipe, "--set", "output_dir=" + output_dir, "--set", "train.max_steps=%d" % steps,
         "--set", "train.logging_steps=1", "--set", "checkpoint.save_steps=100000", *extra],
        cwd=SOURCE, **popen)


def records(output_dir, split):
    with open(os.path.join(output_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("split") == split]


def url_from(stream, pattern, lines):
    """Reads `stream` until a line matches; the rest is kept in `lines` by a thread."""
    for line in stream:
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
            return match.group(1)
    raise AssertionError("no URL in: " + "".join(lines))


processes = []
try:
    check(train(finished, 6, stdout=subprocess.DEVNULL).wait(timeout=120) == 0, "the finished run failed")
    # The live run has 2 ranks: ftrun's launcher serves its dashboard, rank 0 answers the Stop button.
    run = train(live, 5000, "--set", "launch.nproc=2", "--set", "strategy.parallelism=ddp", "--dashboard", "0",
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    processes.append(run)
    run_err = []
    own = url_from(run.stderr, r"dashboard at (http://\S+)", run_err)
    # The run's own dashboard serves its run.
    with urllib.request.urlopen(own + "api/runs", timeout=10) as r:
        served = json.load(r)
    check(len(served) == 1 and served[0]["dir"] == os.path.abspath(live), "train --dashboard serves: %s" % served)

    board = subprocess.Popen([FTRUN, "dashboard", finished, live, "--port", "0"], stdout=subprocess.PIPE, text=True)
    processes.append(board)
    board_out = []
    url = url_from(board.stdout, r"(http://\S+/)", board_out)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)

        # The finished run's loss curve has exactly its logged steps.
        expected = len(records(finished, "train"))
        page.wait_for_function("n => window.ftDashboard.points(0, 'loss') === n", arg=expected, timeout=20000)
        # The live run's grows as its steps arrive.
        page.wait_for_function("() => window.ftDashboard.points(1, 'loss') >= 3", timeout=60000)
        before = page.evaluate("() => window.ftDashboard.points(1, 'loss')")
        page.wait_for_function("n => window.ftDashboard.points(1, 'loss') > n + 2", arg=before, timeout=60000)
        for chart in ["learning_rate", "tokens_per_second", "seconds_per_step", "memory", "communication"]:
            check(page.evaluate("c => window.ftDashboard.points(1, c)", chart) > 0, chart + " has no points")
        # Each rank's memory and traffic: as many points as the run logged for its ranks.
        page.wait_for_function("() => window.ftDashboard.points(1, 'memory') >= 4", timeout=20000)
        # A legend names each rank's line, and the plan's.
        legend = page.get_attribute("#chart-memory", "data-legend").split("|")
        for rank in ["rank 0", "rank 1", "plan rank 1"]:
            check(any(name.endswith(": " + rank) for name in legend), "the memory legend lacks %s: %s" % (rank, legend))
        check(int(page.get_attribute("#chart-loss", "data-points")) > expected, "the loss chart draws both runs")
        page.wait_for_function(
            "() => (document.querySelectorAll('#runs .run')[1].dataset.state || '') === 'training'", timeout=20000)
        check(page.get_attribute("#runs .run:nth-child(1)", "data-state") == "finished", "the finished run's state")

        if updating:
            page.wait_for_timeout(1500)
            with open(SCREENSHOT, "wb") as f:
                f.write(with_text(page.screenshot(full_page=True), KEY, page_hash()))
            print("wrote", SCREENSHOT)

        # Readable on a phone: nothing wider than its screen.
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_timeout(300)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        check(width <= 390, "the page is %d px wide on a 390 px screen" % width)
        page.set_viewport_size({"width": 1280, "height": 900})

        # Stop: the live run saves and exits with code 5; the page says so.
        page.click("#runs .run:nth-child(2) button[data-request=stop]")
        page.wait_for_function(
            "() => document.querySelectorAll('#runs .run')[1].querySelector('.answer').textContent.startsWith('stop: ')",
            timeout=20000)
        answer = page.inner_text("#runs .run:nth-child(2) .answer")
        check("stops after the step in flight" in answer, "the stop answer: " + answer)
        code = run.wait(timeout=120)
        check(code == 5, "the stopped run exited with %d: %s" % (code, "".join(run_err)))
        stop = records(live, "stop")
        check(len(stop) == 1 and stop[0]["saved"], "the stop record: %s" % stop)
        checkpoint = os.path.join(live, "checkpoint-%d" % stop[0]["step"])
        check(os.path.isdir(checkpoint), checkpoint + " was not written")
        page.wait_for_function(
            "() => (document.querySelectorAll('#runs .run')[1].dataset.state || '').startsWith('stopped by SIGUSR1')",
            timeout=20000)
        check(not errors, "console errors: %s" % errors)
        browser.close()
    print("dashboard: %d + %d loss points, stopped at step %d, no console error" %
          (expected, before, stop[0]["step"]))
finally:
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(scratch, ignore_errors=True)
