"""Bad input never becomes a number: a table of bad configurations and damaged artifacts, each with
the exit status it must give and the words its one-line message must contain (issue 16).

Configuration rows are planned through ``elf.validate.validate_workflow_config``, the entry point
``workflow/rules/common.smk`` calls (a refusal there is ``snakemake``'s exit status 1); the rows
marked ``SNAKEMAKE`` also go through a real ``snakemake -n``, which must write nothing. Artifact rows
damage a copy of real tiny artifacts (checkpoint, store, tokenizer, samples) and run the stage that
reads them (exit status 2, ``elf.cli.ElfError``).
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from elf.config import ConfigError
from elf.validate import validate_workflow_config

ROOT = Path(__file__).resolve().parents[1]
PLAN_REFUSED = 1  # snakemake's status when common.smk exits with the message
SNAKEMAKE = "snakemake"


def ci_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())


def put(*keys, value):
    """An edit: set ``cfg[k0][k1]...`` (creating mappings on the way)."""
    def edit(cfg, tmp):
        node = cfg
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value(tmp) if callable(value) else value
    return edit


def rename(table, old, new):
    def edit(cfg, tmp):
        cfg[table][new] = cfg[table].pop(old)
        for fig in cfg["figures"].values():
            fig[table] = [new if name == old else name for name in fig[table]]
    return edit


def add_run(name, **settings):
    return put("runs", name, value=settings)


def a_file(path):
    path.write_text("x")
    return str(path)


def under_a_file(tmp):
    (tmp / "afile").write_text("x")
    return str(tmp / "afile" / "results")


DUPLICATE_TOP = "results: {r}\nreports: {p}\nresults: {r}\n"
DUPLICATE_NESTED = "runs:\n  base:\n    paper_run: R01\n    paper_run: R02\n"
SYNTAX = "results: {r}\nruns: [base, wmt\nreports: {p}\n"
NOT_A_MAPPING = "- results\n- reports\n"

# id, edit (or raw YAML text), words the message must contain, also through real snakemake -n
CONFIG_ROWS = [
    ("nan-blr", put("run_defaults", "optim", "blr", value=float("nan")),
     ["optim.blr", "nan", "finite"], SNAKEMAKE),
    ("inf-gamma", put("samplers", "sde8", "gamma", value=float("inf")),
     ["samplers.sde8.gamma", "inf", "finite"], None),
    ("nan-sc-cfg", put("samplers", "sde8", "sc_cfg", value=float("nan")),
     ["samplers.sde8.sc_cfg", "nan", "finite"], None),
    ("-inf-t-mean", put("runs", "base", "objective", "t_mean", value=float("-inf")),
     ["runs.base.objective.t_mean", "-inf", "finite"], None),
    ("nan-ema", put("run_defaults", "optim", "ema_decay", value=float("nan")),
     ["optim.ema_decay", "nan", "finite"], None),
    ("nan-encoder-lr", put("encoders", "main", "lr", value=float("nan")),
     ["encoders.main.lr", "nan", "finite"], None),
    ("nan-std", put("embeddings", "encoder", "std", value=float("nan")),
     ["embeddings.encoder.std", "nan", "finite"], None),
    ("nan-as-int", put("evaluation", "n_samples", value=float("nan")),
     ["evaluation.n_samples", "nan", "integer"], None),
    ("size-unknown-key", put("sizes", "tiny", "layers", value=2),
     ["sizes.tiny", "layers", "depth, width, heads"], None),
    ("size-missing-key", put("sizes", "tiny", value={"depth": 1, "width": 32}),
     ["sizes.tiny", "depth, width, heads"], None),
    ("size-depth-0", put("sizes", "tiny", "depth", value=0),
     ["sizes.tiny.depth", "0", ">= 1"], SNAKEMAKE),
    ("size-heads-not-dividing", put("sizes", "tiny", "heads", value=3),
     ["sizes.tiny.heads", "3", "width 32", "divisor"], SNAKEMAKE),
    ("size-odd-head-width", put("sizes", "tiny", value={"depth": 1, "width": 34, "heads": 2}),
     ["sizes.tiny.heads", "even head width"], None),
    ("unknown-model-size", put("runs", "base", "model", "size", value="huge"),
     ["runs.base.model.size", "'huge'", "tiny"], None),
    ("grad-accum-not-dividing", put("run_defaults", "budget", "grad_accum", value=3),
     ["budget.grad_accum", "3", "batch_size 8"], SNAKEMAKE),
    ("sc-cfg-min-above-max", put("run_defaults", "objective", value={"sc_cfg_min": 4.0, "sc_cfg_max": 2.0}),
     ["sc_cfg_min", "4.0", "sc_cfg_max 2.0"], None),
    ("sampler-outside-trained-range", put("samplers", "ode16_w3", "sc_cfg", value=6.0),
     ["samplers.ode16_w3.sc_cfg", "6.0", "F4", "[0.5, 5.0]"], SNAKEMAKE),
    ("sampler-below-trained-range", put("runs", "base", "objective", value={"sc_cfg_min": 1.0}),
     ["samplers.ode16_w0.5.sc_cfg", "0.5", "[1.0, 5.0]"], None),
    ("input-cfg-unconditional", put("samplers", "ode16_w1", "input_cfg", value=2.0),
     ["samplers.ode16_w1.input_cfg", "2.0", "unconditional"], None),
    ("label-drop-unconditional", put("runs", "base", "objective", value={"label_drop_prob": 0.1}),
     ["runs.base.objective.label_drop_prob", "0.1", "unconditional", "'owt'"], None),
    ("source-cap-not-below-length", put("datasets", "wmt", "max_input_length", value=48),
     ["datasets.wmt.max_input_length", "48", "max_length 48"], None),
    ("source-cap-unconditional", put("datasets", "owt", "max_input_length", value=12),
     ["datasets.owt.max_input_length", "12", "unconditional"], None),
    ("teacher-other-dataset", put("runs", "pd_r1", "teacher", value="wmt"),
     ["runs.pd_r1.teacher", "'wmt'", "dataset", "'owt'"], SNAKEMAKE),
    ("init-other-embedding", lambda cfg, tmp: (
        cfg["embeddings"].update(enc2={**cfg["embeddings"]["encoder"], "dtype": "float32"}),
        cfg["runs"].update(base2={"embedding": "enc2"}),
        cfg["runs"]["pd_r1"].update(init_from="base2")),
     ["runs.pd_r1.init_from", "base2", "embedding", "'enc2'"], None),
    ("teacher-itself", put("runs", "pd_r1", "teacher", value="pd_r1"),
     ["runs.pd_r1.teacher", "the run itself"], None),
    ("distillation-cycle", put("runs", "pd_r1", "init_from", value="pd_r3"),
     ["distillation cycle", "pd_r1 -> pd_r3 -> pd_r2 -> pd_r1"], SNAKEMAKE),
    ("bleu-table-unconditional-run", put("figures", "T1", "runs", value=["wmt", "xsum", "base"]),
     ["figures.T1.runs", "base", "BLEU"], SNAKEMAKE),
    ("repeated-seeds", put("evaluation", "seeds", value=[0, 1, 0]),
     ["evaluation.seeds", "[0, 1, 0]", "repeated"], SNAKEMAKE),
    ("negative-seed", put("evaluation", "seeds", value=[0, -1]),
     ["evaluation.seeds", "-1", "negative"], None),
    ("no-seeds", put("evaluation", "seeds", value=[]),
     ["evaluation.seeds", "[]"], None),
    ("negative-train-seed", put("run_defaults", "budget", "seed", value=-1),
     ["budget.seed", "-1", ">= 0"], None),
    ("run-name-slash", rename("runs", "wmt", "wmt/v2"),
     ["'wmt/v2'", "runs", "letters"], SNAKEMAKE),
    ("run-name-space", rename("runs", "wmt", "wmt run"), ["'wmt run'", "runs"], None),
    ("sampler-name-space", rename("samplers", "sde8", "sde 8"), ["'sde 8'", "samplers"], None),
    ("sampler-name-brace", rename("samplers", "sde16", "sde{16}"), ["'sde{16}'", "samplers"], None),
    ("run-name-underscore-first", rename("runs", "xsum", "_dataset"), ["'_dataset'", "runs"], None),
    ("dataset-name-quote", lambda cfg, tmp: cfg["datasets"].update({"o'wt": cfg["datasets"]["owt"]}),
     ["\"o'wt\"", "datasets"], None),
    ("results-empty", put("results", value=""), ["'results'", "''", "non-empty"], SNAKEMAKE),
    ("results-root", put("results", value="/"), ["'results'", "'/'", "root"], None),
    ("results-space", put("results", value=lambda tmp: str(tmp / "my results")),
     ["'results'", "my results", "no spaces"], SNAKEMAKE),
    ("reports-dollar", put("reports", value="$HOME/reports"), ["'reports'", "$HOME"], None),
    ("results-tilde", put("results", value="~/results"), ["'results'", "~/results"], None),
    ("results-under-a-file", put("results", value=under_a_file),
     ["'results'", "under the file", "afile"], SNAKEMAKE),
    ("results-is-a-file", put("results", value=lambda tmp: a_file(tmp / "f")),
     ["'results'", "is a file"], None),
    ("results-unwritable", put("results", value="/proc/elf-results"),
     ["'results'", "/proc/elf-results", "cannot be written"], SNAKEMAKE),
    ("pretrained-tokenizer-path", put("tokenizer", value={"source": "pretrained", "name_or_path": "./tok"}),
     ["tokenizer.name_or_path", "'./tok'", "Hugging Face id"], None),
    ("local-dataset-missing", put("datasets", "owt", value={"task": "unconditional", "source": "local",
                                                            "name": "/nonexistent/owt", "max_length": 48}),
     ["datasets.owt.name", "/nonexistent/owt", "does not exist"], None),
    ("authors-dataset-path-missing", put("datasets", "owt", value={
        "task": "unconditional", "source": "authors", "name": "./missing_{split}", "max_length": 48}),
     ["datasets.owt.name", "./missing_{split}", "never sent to the Hub"], None),
    ("released-path-missing", add_run("rel", kind="released", released="./ckpts/checkpoint_5"),
     ["runs.rel.released", "./ckpts/checkpoint_5", "does not exist"], None),
    ("encoder-heads", put("encoders", "main", "heads", value=3),
     ["encoders.main.heads", "3", "d_model 32"], None),
    ("scorer-heads", put("scorer", "heads", value=5), ["scorer.heads", "5", "width 32"], None),
    ("betas-out-of-range", put("runs", "base", "optim", value={"betas": [0.9, 1.5]}),
     ["runs.base.optim.betas", "1.5", "[0, 1)"], None),
    ("unknown-key", put("run_defaults", "budget", "stepz", value=3),
     ["budget.stepz", "unknown", "allowed keys"], None),
    ("wrong-type", put("run_defaults", "budget", "steps", value="ten"),
     ["budget.steps", "'ten'", "integer"], None),
    ("unknown-precision", put("precision", value="fp16"), ["precision", "'fp16'", "'bf16'"], None),
    ("figure-unknown-sampler", put("figures", "F4", "samplers", value=["nope"]),
     ["figures.F4.samplers", "'nope'"], None),
    ("duplicate-top-key", DUPLICATE_TOP, ["duplicate key 'results'", ".yaml:3", "line 1"], SNAKEMAKE),
    ("duplicate-nested-key", DUPLICATE_NESTED, ["duplicate key 'paper_run'", ".yaml:4", "line 3"], None),
    ("yaml-syntax", SYNTAX, ["bad.yaml:3", "invalid YAML"], None),
    ("yaml-not-a-mapping", NOT_A_MAPPING, ["bad.yaml", "expected a mapping"], None),
]


def write_bad_config(edit, tmp: Path) -> Path:
    """The CI config with its roots under ``tmp`` and ``edit`` applied (or raw YAML text)."""
    path = tmp / "bad.yaml"
    roots = {"r": str(tmp / "results"), "p": str(tmp / "reports")}
    if isinstance(edit, str):
        path.write_text(edit.format(**roots))
        return path
    cfg = copy.deepcopy(ci_config())
    cfg["results"], cfg["reports"] = roots["r"], roots["p"]
    edit(cfg, tmp)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def plan(path: Path) -> tuple[int, str]:
    """What ``snakemake -n`` does with a config file up to the first rule: Snakemake's own lenient
    load, then ``common.smk``'s validation entry point."""
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        config = {}
    try:
        validate_workflow_config(config if isinstance(config, dict) else {}, [path])
    except ConfigError as err:
        return PLAN_REFUSED, f"Invalid configuration: {err}"
    return 0, ""


def test_the_ci_config_plans(tmp_path):
    assert plan(write_bad_config(lambda cfg, tmp: None, tmp_path)) == (0, "")


@pytest.mark.parametrize("edit, words", [row[1:3] for row in CONFIG_ROWS],
                         ids=[row[0] for row in CONFIG_ROWS])
def test_bad_config_is_refused_at_plan_time(edit, words, tmp_path):
    status, message = plan(write_bad_config(edit, tmp_path))
    assert status == PLAN_REFUSED, f"accepted: {edit}"
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)
    assert not (tmp_path / "results").exists() and not (tmp_path / "reports").exists()


REAL = [row for row in CONFIG_ROWS if row[3] == SNAKEMAKE]


@pytest.mark.parametrize("edit, words", [row[1:3] for row in REAL], ids=[row[0] for row in REAL])
def test_bad_config_stops_snakemake_n_writing_nothing(edit, words, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    configfile = write_bad_config(edit, work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    proc = subprocess.run(["snakemake", "-n", "--configfile", str(configfile)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == PLAN_REFUSED, proc.stdout[-2000:] + proc.stderr[-2000:]
    message = next(line for line in proc.stderr.splitlines() if "Invalid configuration" in line)
    for word in words:
        assert word in message, (word, message)
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before  # no experiment.json
    assert not Path("/experiment.json").exists() and not Path("/proc/elf-results").exists()


def test_yaml_syntax_error_through_elf_check_names_file_and_line(tmp_path, capsys):
    """Snakemake's command line loads a --configfile itself and reports a syntax error without a
    line; ``elf check`` (the same validation) gives it."""
    from elf.cli import main

    path = write_bad_config(SYNTAX, tmp_path)
    assert main(["check", "--configfile", str(path)]) == 2
    assert f"{path}:3:" in capsys.readouterr().err
    assert main(["check", "--configfile", str(ROOT / "config" / "ci.yaml")]) == 0
