"""The Slurm profile (slurm/config.yaml) and the launchers in the rules, without a Slurm cluster.

Runs `snakemake --profile slurm -n` from the repository root (the users' command, dry) on the paper
configuration and checks every job's resources and shell command; parses the profile with
Snakemake's own profile parser under other cluster shapes; checks the CI profile adds no resources of
its own. The real cluster run is .ci/slurm.sh.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GPU_RULES = {"embed", "embed_shard", "encoder", "train", "distill", "decoder", "evaluate", "trajectory",
             "score_dataset"}
CPU_RULES = {"code_digest", "corpora", "tokenizer", "prepare", "embed_gather", "scorer", "experiment",
             "review_evals", "figure", "table", "review", "manifest", "released"}
DEFAULT_SHAPE = dict(gpus=4, cpus=32, mem_mb=256000)   # slurm/config.yaml's defaults


def parse_profile(env: dict | None = None) -> dict:
    """slurm/config.yaml as Snakemake reads it (YTE evaluated), under the given ELF_SLURM_* values."""
    from snakemake.profiles import ProfileConfigFileParser

    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        with open(ROOT / "slurm" / "config.yaml") as stream:
            return dict(ProfileConfigFileParser().parse(stream))
    finally:
        os.environ.clear()
        os.environ.update(old)


def rule_resources(parsed: dict) -> dict[str, dict[str, str]]:
    """{rule: {resource: value}} from the parsed profile's set-resources entries."""
    out: dict[str, dict[str, str]] = {}
    for entry in parsed["set-resources"]:
        rule, assign = entry.split(":", 1)
        name, value = assign.split("=", 1)
        out.setdefault(rule, {})[name] = value
    return out


def dry_run_jobs(text: str) -> list[dict]:
    """One dict per job of a `snakemake -n -p` printout: rule, wildcards, resources, shell."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if not head:
            continue
        job = dict(rule=head.group(1), wildcards={}, resources={}, shell="")
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("wildcards:"):
                job["wildcards"] = dict(kv.split("=", 1) for kv in line[10:].strip().split(", "))
            elif line.startswith("resources:"):
                job["resources"] = dict(kv.split("=", 1) for kv in line[10:].strip().split(", "))
            elif line.startswith("Shell command:"):
                job["shell"] = line[len("Shell command:"):].strip()
        jobs.append(job)
    return jobs


@pytest.fixture(scope="module")
def dry_run_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("slurm_dry")


@pytest.fixture(scope="module")
def paper_dry_run(dry_run_dir):
    """The users' command, dry: `snakemake --profile slurm -n -p reports/all` from the repo root
    (results and reports redirected to a temporary folder), offline (tests/conftest.py) with an empty
    Hugging Face cache: planning must download nothing."""
    tmp = dry_run_dir
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELF_SLURM_")}
    env["HF_HOME"] = str(tmp / "hf_home")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "slurm", "-n", "-p",
         "--config", f"results={tmp}/results", f"reports={tmp}/reports", "--", f"{tmp}/reports/all"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_profile_is_found_from_the_repo_root_and_runs_the_paper_config_on_slurm(paper_dry_run):
    assert "Using profiles slurm" in paper_dry_run
    assert re.search(r"Config file\(s\):.*config/paper\.yaml", paper_dry_run)
    parsed = parse_profile()
    assert parsed["executor"] == "slurm"
    assert parsed["configfile"] == "config/paper.yaml"
    assert int(parsed["retries"]) >= 1, "a killed or timed-out job must be resubmitted to resume"


def test_the_dry_run_prints_the_paper_matrix(paper_dry_run):
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    jobs = dry_run_jobs(paper_dry_run)
    trained = {j["wildcards"]["run"] for j in jobs if j["rule"] in ("train", "distill")}
    wanted = {name for name, run in paper["runs"].items() if run.get("kind", "train") in ("train", "distill")}
    assert wanted <= trained
    rendered = {j["wildcards"].get("fid") for j in jobs if j["rule"] in ("figure", "table")}
    assert set(paper["figures"]) <= rendered
    assert any(j["rule"] == "manifest" for j in jobs)


RELEASED = {"R01_released": "ELF-B-owt-torch", "R02_released": "ELF-M-owt-torch",
            "R03_released": "ELF-L-owt-torch", "R04_released": "ELF-B-de-en-torch",
            "R05_released": "ELF-B-xsum-torch", "R34_released": "ELF-B-PD-owt-torch"}
RELEASED_IN = {"T9": {"R01_released"}, "T10": {"R01_released", "R02_released", "R03_released"},
               "T1": {"R04_released", "R05_released"}, "T4": {"R34_released"}}


def test_the_paper_plan_has_the_six_released_runs_in_their_tables(paper_dry_run):
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    jobs = dry_run_jobs(paper_dry_run)
    released = {j["wildcards"]["run"]: j for j in jobs if j["rule"] == "released"}
    assert set(released) == set(RELEASED)
    for run, repo in RELEASED.items():
        assert f"elf release --source embedded-language-flows/{repo} " in released[run]["shell"]
    for table, runs in RELEASED_IN.items():
        assert runs <= set(paper["figures"][table]["runs"]), table
    # the paper config evaluates one (run, sampler) per job (evaluation.group_by: sampler)
    sampled = {(j["wildcards"]["run"], j["wildcards"]["group"]): j for j in jobs if j["rule"] == "evaluate"}
    for table, runs in RELEASED_IN.items():
        for run in runs:
            assert {s for r, s in sampled if r == run} >= set(paper["figures"][table]["samplers"]), run
    # conditional runs are sampled on the validation split of the authors' sets as well as on test
    for split, sampler in (("validation", "cond_cfg2_val"), ("test", "cond_cfg2")):
        shell = sampled[("R05_released", sampler)]["shell"]
        assert f'"split":"{split}"' in shell and "--eval-data" in shell and "embeddings/xsum/encoder" in shell


def test_the_paper_plan_reads_the_authors_datasets_and_downloads_nothing(paper_dry_run, dry_run_dir):
    jobs = dry_run_jobs(paper_dry_run)
    prepared = {j["wildcards"]["dataset"]: j["shell"] for j in jobs if j["rule"] == "prepare"}
    assert set(prepared) == {"owt", "wmt", "xsum"}
    settings = {name: json.loads(shlex.split(shell)[3]) for name, shell in prepared.items()}
    assert settings["owt"]["name"] == "embedded-language-flows/openwebtext-t5"
    assert settings["wmt"]["name"] == "embedded-language-flows/wmt14_de-en_{split}_t5"
    assert settings["xsum"]["name"] == "embedded-language-flows/xsum_{split}_t5"
    assert all(s["source"] == "authors" for s in settings.values())
    xsum = settings["xsum"]
    assert (xsum["max_length"], xsum["max_input_length"], xsum["target_length"]) == (1088, 1024, 64)
    assert xsum["test"]["name"] == "EdinburghNLP/xsum" and xsum["test"]["revision"]
    assert "corpora" not in {j["rule"] for j in jobs}          # nothing generated in its place
    # planned offline with an empty cache: nothing fetched, nothing prepared
    hf_home = dry_run_dir / "hf_home"
    assert not hf_home.exists() or not any(hf_home.rglob("*"))
    assert not (dry_run_dir / "results" / "data").exists()


def test_every_job_has_cpus_memory_and_runtime_and_only_gpu_rules_ask_for_gpus(paper_dry_run):
    jobs = [j for j in dry_run_jobs(paper_dry_run) if j["rule"] != "all"]
    assert jobs
    unknown = {j["rule"] for j in jobs} - GPU_RULES - CPU_RULES
    assert not unknown, f"rules missing from this test's GPU/CPU lists (and the profile?): {unknown}"
    for job in jobs:
        res = job["resources"]
        for key in ("cpus_per_task", "mem_mb", "runtime"):
            assert int(res[key]) > 0, (job["rule"], key, res)
        gpus = int(res.get("gpu", 0) or 0)
        if job["rule"] in GPU_RULES:
            assert gpus >= 1, (job["rule"], res)
        else:
            assert gpus == 0 and "gres" not in res, (job["rule"], res)


def test_training_uses_every_gpu_of_a_node_through_torchrun(paper_dry_run):
    gpus = DEFAULT_SHAPE["gpus"]
    per_gpu_mem = DEFAULT_SHAPE["mem_mb"] * 9 // 10 // gpus
    trains = [j for j in dry_run_jobs(paper_dry_run) if j["rule"] == "train"]
    assert trains
    for job in trains:
        assert int(job["resources"]["gpu"]) == gpus
        assert int(job["resources"]["cpus_per_task"]) == DEFAULT_SHAPE["cpus"]
        assert int(job["resources"]["mem_mb"]) == per_gpu_mem * gpus
        # each torchrun process gets its GPU's share of the node's cores as torch threads
        threads = DEFAULT_SHAPE["cpus"] // gpus
        assert job["shell"].startswith(f"OMP_NUM_THREADS={threads} torchrun --standalone "
                                       f"--nproc_per_node={gpus} -m elf train ")


def test_big_train_splits_are_scattered_over_one_gpu_jobs_then_gathered(paper_dry_run):
    """Each dataset with embed_shards n > 1: n one-GPU `embed_shard` jobs per embedding of its train
    split writing one work store, then a CPU `embed_gather` job; every other split: one `embed` job."""
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    shards = {name: d.get("embed_shards", 1) for name, d in paper["datasets"].items()}
    assert shards["owt"] > 1
    jobs = dry_run_jobs(paper_dry_run)
    scattered = [j for j in jobs if j["rule"] == "embed_shard"]
    gathers = [j for j in jobs if j["rule"] == "embed_gather"]
    gathered = {g["wildcards"]["dataset"] for g in gathers}
    assert "owt" in gathered and all(shards[d] > 1 for d in gathered)
    for gather in gathers:
        w = gather["wildcards"]
        n = shards[w["dataset"]]
        mine = [j for j in scattered if all(j["wildcards"][k] == w[k] for k in ("dataset", "embedding", "split"))]
        assert sorted(int(j["wildcards"]["k"]) for j in mine) == list(range(n))
        store = re.search(r"--out (\S+\.zarr) ", gather["shell"]).group(1)
        for job in mine:
            k = job["wildcards"]["k"]
            assert int(job["resources"]["gpu"]) == 1
            assert f"--work {store}.partial --out {store} --shard {k} --num-shards {n} " in job["shell"]
            assert "echo cuda || echo cpu" in job["shell"]
        assert "gpu" not in gather["resources"]
        assert gather["shell"].startswith(f"elf embed --finalize --work {store}.partial --out {store} "
                                          f"--num-shards {n} ")
    singles = [j for j in jobs if j["rule"] == "embed"]
    assert singles and all(shards[j["wildcards"]["dataset"]] == 1 or j["wildcards"]["split"] != "train"
                           for j in singles)
    for job in singles:
        assert int(job["resources"]["gpu"]) == 1 and "--shard" not in job["shell"]
        assert re.search(r"--work (\S+\.zarr)\.partial --out \1 ", job["shell"])


def test_the_scratch_encoder_trains_on_one_gpu_in_bf16_and_resumes_across_attempts(paper_dry_run):
    jobs = [j for j in dry_run_jobs(paper_dry_run) if j["rule"] == "encoder"]
    assert [j["wildcards"]["encoder"] for j in jobs] == ["scratch"]  # t5-small etc. load by name
    res = jobs[0]["resources"]
    assert int(res["gpu"]) == 1 and int(res["runtime"]) == 1440
    assert int(res["mem_mb"]) == min(16000, DEFAULT_SHAPE["mem_mb"] * 9 // 10 // DEFAULT_SHAPE["gpus"])
    shell = jobs[0]["shell"]
    assert "--device $(nvidia-smi -L > /dev/null 2>&1 && echo cuda || echo cpu)" in shell
    assert "--precision bf16" in shell and '"warmup_steps":7600' in shell


def test_evaluation_takes_one_gpu_per_job(paper_dry_run):
    jobs = dry_run_jobs(paper_dry_run)
    selected = [j for j in jobs if j["rule"] == "evaluate"]
    assert selected and all(int(j["resources"]["gpu"]) == 1 for j in selected)
    assert all(j["shell"].startswith(f"OMP_NUM_THREADS={DEFAULT_SHAPE['cpus'] // DEFAULT_SHAPE['gpus']} "
                                     "elf evaluate ") for j in selected)


def test_cluster_values_come_from_one_place():
    shape = dict(ELF_SLURM_ACCOUNT="proj42", ELF_SLURM_GPU_PARTITION="gpuq",
                 ELF_SLURM_CPU_PARTITION="cpuq", ELF_SLURM_GPUS_PER_NODE="8",
                 ELF_SLURM_CPUS_PER_NODE="96", ELF_SLURM_MEM_PER_NODE_MB="1000000",
                 ELF_SLURM_GPU_MODEL="h100")
    parsed = parse_profile(shape)
    defaults = dict(entry.split("=", 1) for entry in parsed["default-resources"])
    assert defaults["slurm_account"] == "proj42" and defaults["slurm_partition"] == "cpuq"
    rules = rule_resources(parsed)
    for rule in GPU_RULES:
        assert rules[rule]["slurm_partition"] == "gpuq" and rules[rule]["gpu_model"] == "h100", rule
    assert rules["train"]["gpu"] == "8" and rules["distill"]["gpu"] == "8"
    assert rules["train"]["cpus_per_task"] == str(96 // 8 * 8)
    assert rules["train"]["mem_mb"] == str(1000000 * 9 // 10 // 8 * 8)
    assert rules["evaluate"]["cpus_per_task"] == "12"
    assert rules["embed"]["gpu"] == "1" and rules["embed_shard"]["gpu"] == "1"
    assert rules["embed_shard"]["cpus_per_task"] == "12"
    for rule in CPU_RULES & rules.keys():
        assert "gpu" not in rules[rule] and "slurm_partition" not in rules[rule], rule


def test_ci_profile_keeps_the_users_resources():
    ci = yaml.safe_load((ROOT / ".ci" / "profile" / "config.yaml").read_text())
    assert not {"default-resources", "set-resources", "executor", "__use_yte__"} & ci.keys()
    assert ci["slurm-status-command"] == "squeue"
    assert ci["configfile"] == "config/ci.yaml"


def test_without_a_profile_the_same_rules_run_one_process(tmp_path):
    """Locally (no profile, no `gpu` resource): plain `elf train` on one torch thread (jobs run side
    by side, a core each); one embedding shard on the CPU."""
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--configfile", "config/ci.yaml",
         "--config", f"results={tmp_path}/results", f"reports={tmp_path}/reports",
         "--", f"{tmp_path}/results/runs/base/ema.safetensors"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    jobs = {j["rule"]: j for j in dry_run_jobs(run.stdout + run.stderr)}
    assert jobs["train"]["shell"].startswith("OMP_NUM_THREADS=1 elf train ")
    assert jobs["embed"]["shell"].startswith("OMP_NUM_THREADS=1 elf embed ")
    assert "--device cpu " in jobs["embed"]["shell"]
    assert "embed_shard" not in jobs and "embed_gather" not in jobs   # embed_shards 1: one job per store
