#!/usr/bin/env python3
"""deploy/: its manifests against their schemas, and its scripts run for real.

- deploy/kubernetes/*.yaml and deploy/argo/workflow.yaml: Kubernetes' own
  objects (the ConfigMap, the volume claim, every pod template and container)
  checked strictly against Kubernetes' schema by kubernetes-validate; the
  MPIJob and the Workflow against deploy/schemas/ (jsonschema); the MPIJob
  the workflow creates is deploy/kubernetes/mpijob.yaml; the launcher starts
  as many ranks as the workers hold; the DAG runs prepare, train when not
  done, then merge.
- ft-wait-for-hosts: waits for a port that opens later, and fails in one line
  for a host that does not resolve or does not listen.
- The workflow's steps without a container (deploy/ft-step over ftrun on ft's
  tiny Llama): a train stopped by SIGTERM is not done, runs again from its
  checkpoint, then every step is skipped as complete.
- ft-sshd, in a PID namespace of its own: SIGTERM to it stops the run in its
  pod after a checkpoint (exit 5) before it exits.
- deploy/slurm/train.sbatch parses, asks for the signal and requeue, and on a
  one-machine Slurm cluster (as root): a SIGUSR1 stops the job after a
  checkpoint, the job requeues itself, and the next start resumes to the end.

Usage: test_deploy.py FTRUN   (from the repository root); exits 77 (skipped)
without PyYAML, jsonschema or kubernetes-validate (tools/setup.sh --tests).
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import jsonschema
    import kubernetes_validate
    import yaml
except ImportError as e:
    print(f"skipped: {e.name} is not installed (tools/setup.sh --tests installs it)")
    sys.exit(77)

FTRUN = os.path.abspath(sys.argv[1])
DEPLOY = os.path.abspath("deploy")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def validate_core(resource, what):
    """Kubernetes' own schema, strictly (unknown fields refused)."""
    try:
        kubernetes_validate.validate(resource, kubernetes_validate.latest_version(), strict=True)
        check(True, f"{what}: valid against Kubernetes' schema")
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
        check(False, f"{what}: {e}")


def validate_pod_template(template, what):
    validate_core({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template},
                  what)


def validate_schema(resource, schema_file, what):
    with open(os.path.join(DEPLOY, "schemas", schema_file)) as f:
        schema = json.load(f)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(resource), key=str)
    check(not errors, f"{what}: valid against deploy/schemas/{schema_file}" +
          "".join(f"\n     {'/'.join(map(str, e.path))}: {e.message}" for e in errors))


def manifests():
    for resource in documents(os.path.join(DEPLOY, "kubernetes", "storage.yaml")):
        validate_core(resource, f"storage.yaml {resource['kind']}")

    (mpijob,) = documents(os.path.join(DEPLOY, "kubernetes", "mpijob.yaml"))
    validate_schema(mpijob, "mpijob-v2beta1.schema.json", "mpijob.yaml")
    replicas = mpijob["spec"]["mpiReplicaSpecs"]
    for role, replica in replicas.items():
        validate_pod_template(replica["template"], f"mpijob.yaml {role} pod template")
    launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]["command"]
    nproc = [a for a in launcher if a.startswith("launch.nproc=")]
    ranks = replicas["Worker"]["replicas"] * mpijob["spec"]["slotsPerWorker"]
    check(nproc == [f"launch.nproc={ranks}"], f"the launcher starts workers x slots = {ranks} ranks: {nproc}")
    check(launcher[0] == "ft-wait-for-hosts" and "/etc/mpi/hostfile" in launcher and "launch.hostfile=/etc/mpi/hostfile" in launcher,
          "the launcher waits for the operator's hostfile, and ftrun launches from it")
    check(mpijob["spec"].get("launcherCreationPolicy") == "WaitForWorkersReady", "the launcher is created when workers are Ready")
    worker = replicas["Worker"]["template"]["spec"]["containers"][0]
    check(worker.get("readinessProbe", {}).get("tcpSocket", {}).get("port") == 22,
          "a worker is Ready when its sshd listens")
    check(worker["command"] == ["ft-sshd"], "workers run ft-sshd")

    (workflow,) = documents(os.path.join(DEPLOY, "argo", "workflow.yaml"))
    validate_schema(workflow, "argo-workflow-v1alpha1.schema.json", "workflow.yaml")
    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    volumes = workflow["spec"]["volumes"]
    for name, t in templates.items():
        if "container" in t:
            validate_pod_template({"spec": {"containers": [dict(t["container"], name=name)], "volumes": volumes}},
                                  f"workflow.yaml template {name}'s container")
    created = yaml.safe_load(templates["train"]["resource"]["manifest"])
    validate_schema(created, "mpijob-v2beta1.schema.json", "the MPIJob workflow.yaml creates")
    same = dict(created, metadata=mpijob["metadata"]) == mpijob
    check(same and created["metadata"] == {"generateName": mpijob["metadata"]["name"] + "-"},
          "the MPIJob workflow.yaml creates is deploy/kubernetes/mpijob.yaml, with a generated name")
    tasks = {t["name"]: t for t in templates[workflow["spec"]["entrypoint"]]["dag"]["tasks"]}
    check(list(tasks) == ["prepare", "train-done", "train", "merge"], f"the DAG's tasks: {list(tasks)}")
    check(tasks["train-done"]["depends"] == "prepare" and tasks["train"]["depends"] == "train-done" and
          tasks["train"]["when"] == "{{tasks.train-done.outputs.result}} == false" and
          tasks["merge"]["depends"] == "train.Succeeded || train.Skipped",
          "prepare, then train unless done, then merge whether train ran or was skipped")
    for name, task in tasks.items():
        check(task["template"] in templates, f"task {name} names a template of the workflow")

    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        dockerfile = f.read()
    with open(".dockerignore") as f:
        sent = [line[1:] for line in f.read().split() if line.startswith("!")]
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):
        for path in source.split():
            check(os.path.exists(path) and any(path == s or path.startswith(s + "/") for s in sent),
                  f"the Dockerfile copies {path}, which exists and .dockerignore sends")
    for script in ("ft-step", "ft-wait-for-hosts", "ft-sshd"):
        check(f"deploy/{script}" in dockerfile and os.access(os.path.join(DEPLOY, script), os.X_OK),
              f"{script} is executable and in the image")

    sbatch = os.path.join(DEPLOY, "slurm", "train.sbatch")
    check(subprocess.run(["bash", "-n", sbatch]).returncode == 0, "train.sbatch parses")
    with open(sbatch) as f:
        options = re.findall(r"^#SBATCH (\S+)", f.read(), re.M)
    check(any(o.startswith("--signal=USR1@") for o in options) and "--requeue" in options,
          f"train.sbatch asks for SIGUSR1 before the limit and may be requeued: {options}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_hosts(work):
    wait = os.path.join(DEPLOY, "ft-wait-for-hosts")
    hostfile = os.path.join(work, "hostfile")
    with open(hostfile, "w") as f:
        f.write("# the operator's hostfile\nlocalhost slots=2\n127.0.0.1 slots=2\n")
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later():
        time.sleep(2)
        listener.bind(("0.0.0.0", port))
        listener.listen(8)

    threading.Thread(target=listen_later, daemon=True).start()
    start = time.monotonic()
    r = subprocess.run([wait, "--port", str(port), "--timeout", "60", hostfile, "--", "echo", "ran"],
                       capture_output=True, text=True)
    waited = time.monotonic() - start
    check(r.returncode == 0 and r.stdout.splitlines()[-1:] == ["ran"] and "2 host(s) reachable" in r.stdout
          and 1.5 < waited < 30, f"ft-wait-for-hosts waits for a port opened 2 s later ({waited:.1f} s): {r.stdout!r} {r.stderr!r}")
    listener.close()

    r = subprocess.run([wait, "--port", str(free_port()), "--timeout", "2", hostfile], capture_output=True, text=True)
    check(r.returncode == 1 and len(r.stderr.splitlines()) == 1 and
          re.match(r"ft-wait-for-hosts: (localhost|127\.0\.0\.1) does not accept connections on port \d+ after 2 s", r.stderr),
          f"a host that does not listen: one line, exit 1: {r.stderr!r}")
    with open(hostfile, "w") as f:
        f.write("no-such-host.invalid slots=1\n")
    r = subprocess.run([wait, "--timeout", "1", hostfile], capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.strip() ==
          f"ft-wait-for-hosts: no-such-host.invalid does not resolve after 1 s (hostfile {hostfile})",
          f"a host that does not resolve: one line, exit 1: {r.stderr!r}")
    r = subprocess.run([wait, os.path.join(work, "missing")], capture_output=True, text=True)
    check(r.returncode == 2 and "cannot read the hostfile" in r.stderr, f"a missing hostfile: exit 2: {r.stderr!r}")


def write_recipe(work, name, max_steps):
    recipe = os.path.join(work, name + ".toml")
    with open(recipe, "w") as f:
        f.write(f'output_dir = "{work}/{name}"\n[model]\npath = "models/ft-tiny-llama"\n'
                '[data]\ntrain = "tests/fixtures/data/tiny.jsonl"\n[strategy]\nadapter = "lora"\n'
                f'[train]\nmax_steps = {max_steps}\nlogging_steps = 1\n[checkpoint]\nsave_steps = 3\n')
    return recipe, os.path.join(work, name)


def until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def steps(work):
    env = dict(os.environ, FTRUN=FTRUN, OMP_NUM_THREADS="1")
    step = os.path.join(DEPLOY, "ft-step")
    recipe, out = write_recipe(work, "steps", 400)

    def ft_step(*args):
        return subprocess.run([step, *args, recipe], capture_output=True, text=True, env=env)

    check(ft_step("done", "train").stdout == "false\n", "train is not done before it ran")
    r = ft_step("run", "prepare")
    check(r.returncode == 0 and os.path.exists(os.path.join(out, "data-cache", "metadata.json")),
          f"prepare writes the token cache: {r.stderr[-300:]}")
    r = ft_step("run", "prepare")
    check(r.returncode == 0 and "up to date" in r.stdout, "prepare again keeps the cache")

    # Train, stopped by SIGTERM after its first checkpoint, as Kubernetes stops a pod.
    run = subprocess.Popen([step, "run", "train", recipe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    until(lambda: os.path.exists(os.path.join(out, "checkpoint-3")), 120, "checkpoint-3")
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    stopped = re.search(r"stopped by SIGTERM after step (\d+)", err)
    check(run.returncode == 5 and stopped, f"train stopped by SIGTERM exits 5 after saving: {err[-300:]!r}")
    check(ft_step("done", "train").stdout == "false\n", "a stopped train is not done")

    # The retry continues from the checkpoint; shortened so that the test ends soon.
    r = subprocess.run([step, "run", "train", recipe, "--set", "train.max_steps=" + str(int(stopped.group(1)) + 2)],
                       capture_output=True, text=True, env=env)
    check(r.returncode == 0 and f"resuming after step {stopped.group(1)}" in r.stdout + r.stderr,
          f"train again resumes after step {stopped.group(1)}: {(r.stdout + r.stderr)[-400:]!r}")
    check(ft_step("done", "train").stdout == "true\n", "train is done after it ends")
    r = ft_step("run", "train")
    check(r.returncode == 0 and r.stdout == f"ft-step: train is complete in {out}: skipped\n", f"train is skipped: {r.stdout!r}")

    check(ft_step("done", "merge").stdout == "false\n", "merge is not done before it ran")
    r = ft_step("run", "merge")
    check(r.returncode == 0 and os.path.exists(os.path.join(out, "merged", "model.safetensors")),
          f"merge writes the merged model: {r.stderr[-300:]!r}")
    check(ft_step("done", "merge").stdout == "true\n", "merge is done after it ran")
    r = ft_step("run", "merge")
    check(r.returncode == 0 and r.stdout == f"ft-step: merge is complete in {out}: skipped\n", f"merge is skipped: {r.stdout!r}")
    r = subprocess.run([FTRUN, "generate", os.path.join(out, "merged"), "--raw", "-p", "Red", "--max-tokens", "2"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"the merged model generates: {r.stderr[-200:]!r}")

    r = subprocess.run([step, "run", "deploy", recipe], capture_output=True, text=True, env=env)
    check(r.returncode == 2 and r.stderr.startswith("usage: ft-step"), "an unknown step: usage, exit 2")


def sshd_stop(work):
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"]).returncode:
        print("skip ft-sshd: no PID namespace here (unshare)")
        return
    recipe, out = write_recipe(work, "sshd", 400)
    stand_in = os.path.join(work, "sshd-stand-in")  # what ft-sshd does is the ranks' stop; sshd itself is not under test
    with open(stand_in, "w") as f:
        f.write("#!/bin/sh\nexec sleep 600\n")
    os.chmod(stand_in, 0o755)
    # In a PID namespace, as in a pod: ft-sshd is the pod's main process and the run one of its ranks.
    script = f"""
        FT_SSHD={shlex.quote(stand_in)} {shlex.quote(os.path.join(DEPLOY, 'ft-sshd'))} & sshd=$!
        OMP_NUM_THREADS=1 {shlex.quote(FTRUN)} train {shlex.quote(recipe)} >{shlex.quote(work)}/sshd.log 2>&1 & run=$!
        until [ -d {shlex.quote(out)}/checkpoint-3 ]; do kill -0 $run || exit 1; sleep 0.05; done
        kill -TERM $sshd
        wait $run; echo "run $?"
        wait $sshd; echo "sshd $?"
    """
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script],
                       capture_output=True, text=True, timeout=300)
    with open(os.path.join(work, "sshd.log")) as f:
        log = f.read()
    check("run 5" in r.stdout.split("\n") and "stopped by SIGUSR1" in log and "sshd 0" in r.stdout.split("\n"),
          f"SIGTERM to ft-sshd stops its pod's rank after a checkpoint, then ends sshd: {r.stdout!r} {log[-300:]!r}")


def slurm_requeue(work):
    """deploy/slurm/train.sbatch on a one-machine Slurm cluster (tests/train/slurm_cluster.sh)."""
    if os.geteuid() != 0 or not all(shutil.which(p) for p in ("sbatch", "scontrol", "slurmctld", "slurmd", "munged")):
        print("skip train.sbatch: a Slurm cluster cannot be started here (needs root, slurm-wlm and munge)")
        return
    cluster = os.path.join(os.getcwd(), "tests", "train", "slurm_cluster.sh")
    state = os.path.join(work, "slurm")
    r = subprocess.run(["sh", cluster, "start", state], capture_output=True, text=True)
    if r.returncode:
        check(False, f"the Slurm cluster starts: {r.stderr}")
        return
    try:
        env = dict(os.environ, SLURM_CONF=os.path.join(state, "slurm.conf"), OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PATH=os.path.dirname(FTRUN) + ":" + os.environ["PATH"])
        recipe, out = write_recipe(work, "sbatch", 300)
        log = os.path.join(work, "sbatch.out")
        # The script's own options, made to fit one machine without GPUs.
        r = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0",
                            "--cpus-per-task=1", f"--output={log}", os.path.join(DEPLOY, "slurm", "train.sbatch"),
                            recipe, "--set", "strategy.parallelism=ddp"], capture_output=True, text=True, env=env)
        check(r.returncode == 0, f"sbatch takes train.sbatch: {r.stderr!r}")
        job = r.stdout.strip().split(";")[0]

        def job_field(name):
            shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env).stdout
            match = re.search(rf"\b{name}=(\S+)", shown)
            return match.group(1) if match else ""

        def log_text():
            return open(log).read() if os.path.exists(log) else ""

        until(lambda: os.path.exists(os.path.join(out, "checkpoint-3")), 120, "the batch job's checkpoint-3")
        # Slurm's warning before the time limit (--signal=USR1@300), sent now.
        subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)
        until(lambda: "requeued job" in log_text(), 120, "the job to requeue itself")
        # A requeued job waits two minutes before it may start again; the test
        # does not: it moves the start to now while the job is pending again.
        def started_again():
            state = job_field("JobState")
            if state == "PENDING":
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, capture_output=True)
                time.sleep(0.5)
            # Between its stop and its return to the queue the job is
            # COMPLETING or REQUEUED, already counting the restart.
            return state in ("RUNNING", "COMPLETED", "FAILED", "CANCELLED") and job_field("Restarts") == "1"

        until(started_again, 120, "the requeued job to start again")
        until(lambda: job_field("JobState") in ("COMPLETED", "FAILED", "CANCELLED"), 240, "the requeued job to end")
        text = log_text()
        stopped = re.search(r"stopped by SIGUSR1 after step (\d+) of 300", text)
        check(stopped and f"requeued job {job} to continue" in text and
              f"resuming after step {stopped.group(1)}" in text,
              f"SIGUSR1 stops the batch job after a checkpoint, it requeues itself and resumes: {text[-600:]!r}")
        check(job_field("JobState") == "COMPLETED" and job_field("Restarts") == "1" and job_field("ExitCode") == "0:0",
              f"the job completes after one restart: {job_field('JobState')} {job_field('Restarts')} {job_field('ExitCode')}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            check('"what":"final"' in f.read(), "the requeued run reaches its final save")
    finally:
        pids = []
        for daemon in ("slurmd", "slurmctld", "munged"):
            try:
                with open(os.path.join(state, daemon + ".pid")) as f:
                    pids.append(int(f.read()))
            except (OSError, ValueError):
                pass
        subprocess.run(["sh", cluster, "stop", state])
        until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), 30, "Slurm's daemons to stop")


def main():
    manifests()
    with tempfile.TemporaryDirectory() as work:
        wait_for_hosts(work)
        steps(work)
        sshd_stop(work)
        slurm_requeue(work)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("deploy: passed")


main()
