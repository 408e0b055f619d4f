"""Bad input never becomes a number: a table of bad configurations and damaged artifacts, each with
the exit status it must give and the words its one-line message must contain (issues 16 and 26:
also the settings of a stage run by hand, which the same rules refuse, and full disks).

Configuration rows are planned through ``elf.validate.validate_workflow_config``, the entry point
``workflow/rules/common.smk`` calls (a refusal there is ``snakemake``'s exit status 1); the rows
marked ``SNAKEMAKE`` also go through a real ``snakemake -n``, which must write nothing. Artifact rows
damage a copy of real tiny artifacts (checkpoint, store, tokenizer, samples) and run the stage that
reads them (exit status 2, ``elf.cli.ElfError``).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

import tests.artifact_world as aw
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
    ("sampler-below-trained-range", put("run_defaults", "objective", value={"sc_cfg_min": 1.0}),
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
     ["tokenizer.name_or_path", "'./tok'", "no local folder", "Hugging Face id"], None),
    ("pretrained-encoder-bad-id", put("encoders", "main", value={"source": "pretrained",
                                                                 "name_or_path": "a/b/c"}),
     ["encoders.main.name_or_path", "'a/b/c'", "Hugging Face id"], None),
    ("local-dataset-missing", put("datasets", "owt", value={"task": "unconditional", "source": "local",
                                                            "name": "/nonexistent/owt", "max_length": 48}),
     ["datasets.owt.name", "/nonexistent/owt", "does not exist"], None),
    ("authors-dataset-path-missing", put("datasets", "owt", value={
        "task": "unconditional", "source": "authors", "name": "./missing_{split}", "max_length": 48}),
     ["datasets.owt.name", "./missing_train", "never sent to the Hub"], None),
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
    # issue 26: accepted silently or a traceback before
    ("batch-over-capped-split", lambda cfg, tmp: cfg["datasets"]["owt"].update(max_train_sequences=4),
     ["runs.base.budget.batch_size", "got 8", "4 training sequences", "at most 4"], SNAKEMAKE),
    ("batch-over-generated-pairs", put("runs", "wmt", "budget", value={"batch_size": 400}),
     ["runs.wmt.budget.batch_size", "400", "300 training pairs", "corpora.train_docs"], None),
    ("gamma-on-ode", put("samplers", "ode16_w1", "gamma", value=1.5),
     ["samplers.ode16_w1.gamma", "1.5", "ODE sampler", "method: sde"], SNAKEMAKE),
    ("distill-settings-on-train-run", put("runs", "wmt", "distill", value={"student_steps": 4}),
     ["runs.wmt.distill", "kind 'train'", "only on kind 'distill'"], SNAKEMAKE),
    ("teacher-on-train-run", put("runs", "xsum", "teacher", value="wmt"),
     ["runs.xsum.teacher", "kind 'train'"], None),
    ("init-chain-out-of-order", put("runs", "pd_r2", "distill", "student_steps", value=32),
     ["runs.pd_r2.init_from", "'pd_r1'", "16 student steps", "32", "at least as many"], SNAKEMAKE),
    ("run-name-too-long", rename("runs", "wmt", "w" * 300), ["'" + "w" * 20, "runs", "300 characters",
                                                            "at most 100"], SNAKEMAKE),
    ("sampler-name-too-long", rename("samplers", "sde8", "s" * 101), ["samplers", "101 characters"], None),
    ("embedding-unknown-encoder", put("embeddings", "encoder", "encoder", value="nope"),
     ["embeddings.encoder.encoder", "'nope'", "encoders", "main"], SNAKEMAKE),
    ("no-owt-dataset", lambda cfg, tmp: (
        cfg["datasets"].update(web=cfg["datasets"].pop("owt")), cfg["run_defaults"].update(dataset="web")),
     ["encoders.main.dataset", "'owt'", "wmt, xsum, web"], SNAKEMAKE),
    ("trend-sampler-outside-trained-range", lambda cfg, tmp: (
        cfg["samplers"].update(far={"method": "ode", "steps": 4, "sc_cfg": 7.0}),
        cfg["trends"]["more_steps"]["lower"].update(sampler="far")),
     ["samplers.far.sc_cfg", "7.0", "trend more_steps", "[0.5, 5.0]"], None),
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


@pytest.mark.parametrize("content, words", [
    (b"results: r\nreports: p\nscale: \xff\xfe\n", ["bad.yaml:3", "not UTF-8", "0xff", "offset"]),
    (b"results: r\nruns:\n\tbase: {}\n", ["bad.yaml:3:1", "invalid YAML", "tab", "spaces"]),
], ids=["not-utf8", "tab-indented"])
def test_encoding_and_tab_errors_name_file_and_line(content, words, tmp_path, capsys):
    """Issue 26: through ``snakemake --configfile`` Snakemake's own loader reads the file before the
    workflow runs (a UnicodeDecodeError traceback, or "not valid JSON or YAML" without a line): a
    limit of Snakemake, documented in the README; it still exits non-zero and writes nothing. ``elf
    check`` (the same validation as the workflow) names the file and line in one line."""
    from elf.cli import main

    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    capsys.readouterr()
    assert main(["check", "--configfile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    for word in words:
        assert word in err, (word, err)
    proc = subprocess.run(["snakemake", "-n", "--configfile", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and sorted(tmp_path.iterdir()) == [path]


# --------------------------------------------------------------------------------------------------
# Damaged and mismatched artifacts
# --------------------------------------------------------------------------------------------------

ARTIFACT_REFUSED = 2  # elf.cli: an ElfError is one line on stderr and exit status 2


def flip_bytes(path: Path, n: int = 32, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    start = len(data) // 2 if at is None else at
    for i in range(start, start + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[:int(path.stat().st_size * keep)])


def rewrite_checksums(folder: Path) -> None:
    """As if the writer itself had produced the (damaged) file: its checksums match it."""
    from elf.artifacts import write_checksums

    write_checksums(folder, [p.name for p in folder.glob("*.safetensors")])


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        node, *keys = key.split("__")
        target = data
        for part in [node, *keys][:-1]:
            target = target[part]
        target[[node, *keys][-1]] = value
    path.write_text(json.dumps(data))


def edit_store_attrs(store: Path, **changes) -> None:
    meta = json.loads((store / "zarr.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta["attributes"].pop(key)
        else:
            meta["attributes"][key] = value
    (store / "zarr.json").write_text(json.dumps(meta))


def a_chunk(store: Path, array: str) -> Path:
    return sorted(p for p in (store / array).rglob("*") if p.is_file() and p.name != "zarr.json")[0]


def edit_header(path: Path, **changes) -> None:
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["provenance"].update(changes)
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")


HELD: list = []  # output locks a row holds as "the first writer"; released after the row


def hold_lock(path: Path) -> None:
    from elf.io import output_lock

    lock = output_lock(path)
    lock.__enter__()
    HELD.append(lock)


def row_flipped_ema(w):
    flip_bytes(w / "run" / "ema.safetensors")
    return aw.sample_args(w, w / "o.jsonl")


def row_truncated_ema(w):
    truncate(w / "run" / "ema.safetensors")
    return aw.sample_args(w, w / "o.jsonl")


def row_zero_header_ema(w):
    (w / "run" / "ema.safetensors").write_bytes(b"\0" * 8)
    rewrite_checksums(w / "run")
    return aw.sample_args(w, w / "o.jsonl")


def row_truncated_ema_rehashed(w):
    truncate(w / "run" / "ema.safetensors")
    rewrite_checksums(w / "run")
    return aw.sample_args(w, w / "o.jsonl")


def row_no_checksums(w):
    (w / "run" / "checksums.json").unlink()
    return aw.sample_args(w, w / "o.jsonl")


def row_config_not_json(w):
    (w / "run" / "config.json").write_text("{model: oops")
    return aw.sample_args(w, w / "o.jsonl")


def row_config_missing(w):
    (w / "run" / "config.json").unlink()
    return aw.sample_args(w, w / "o.jsonl")


def row_config_other_network(w):
    edit_json(w / "run" / "config.json", model__depth=3)
    return aw.sample_args(w, w / "o.jsonl")


def row_config_other_network_rehashed(w):
    """As if the writer had recorded the edited config.json: the weights do not fit it."""
    from elf.artifacts import write_checksums

    edit_json(w / "run" / "config.json", model__depth=3)
    write_checksums(w / "run", ["ema.safetensors", "model.safetensors", "config.json"])
    return aw.sample_args(w, w / "o.jsonl")


def row_config_not_utf8(w):
    (w / "run" / "config.json").write_bytes(b"\xff\xfe{}")
    return aw.sample_args(w, w / "o.jsonl")


def row_tokenizer_missing(w):
    return aw.sample_args(w, w / "o.jsonl", tokenizer="no_such_tokenizer")


def row_other_tokenizer(w):
    return aw.sample_args(w, w / "o.jsonl", tokenizer="tok2")


def row_batch_size_zero(w):
    return aw.sample_args(w, w / "o.jsonl", extra=("--batch-size", "0"))


def row_output_under_a_file(w):
    (w / "afile").write_text("x")
    return aw.sample_args(w, w / "afile" / "o.jsonl")


def row_second_sampler(w):
    hold_lock(w / "o.jsonl")
    return aw.sample_args(w, w / "o.jsonl")


def row_split_of_another_store(w):
    args = aw.sample_args(w, w / "o.jsonl", conditional=True, extra=("--split", "test"))
    args[args.index(str(w / "test.zarr"))] = str(w / "train.zarr")
    return args


def row_tokens_of_another_dataset(w):
    args = aw.sample_args(w, w / "o.jsonl", conditional=True)
    args[args.index(str(w / "tokens"))] = str(w / "other_tokens")
    return args


def row_store_other_tokenizer(w):
    from elf.artifacts import write_checksums

    edit_json(w / "cond" / "config.json", tokenizer_sha256=None, tokenizer=None)
    write_checksums(w / "cond", ["ema.safetensors", "model.safetensors", "config.json"])  # as written
    return aw.sample_args(w, w / "o.jsonl", conditional=True, tokenizer="tok2")


def row_store_deleted_embeddings_chunk(w):
    a_chunk(w / "test.zarr", "embeddings").unlink()
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_deleted_input_ids_chunk(w):
    a_chunk(w / "test.zarr", "input_ids").unlink()
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_truncated_chunk(w):
    truncate(a_chunk(w / "test.zarr", "embeddings_nosource"))
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_truncated_chunk_records_rewritten(w):
    """Issue 26: a chunk cut mid-way and the file counts rewritten to match it: zarr's own check
    (a crc32c or a short buffer) fails, in one line."""
    from elf.artifacts import store_files

    truncate(a_chunk(w / "test.zarr", "embeddings"), keep=0.6)
    edit_store_attrs(w / "test.zarr", data_files=store_files(w / "test.zarr"))
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_train_store_truncated_chunk_records_rewritten(w):
    from elf.artifacts import store_files

    truncate(a_chunk(w / "train.zarr", "embeddings"), keep=0.6)
    edit_store_attrs(w / "train.zarr", data_files=store_files(w / "train.zarr"))
    return aw.train_args(w)


def row_store_without_statistics(w):
    edit_store_attrs(w / "test.zarr", normalization_stats=None)
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_flipped_token_ids(w):
    from elf.artifacts import store_files

    chunk = a_chunk(w / "test.zarr", "input_ids")
    flip_bytes(chunk, n=4, at=0)
    edit_store_attrs(w / "test.zarr", data_files=store_files(w / "test.zarr"))
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_incomplete(w):
    edit_store_attrs(w / "test.zarr", complete=False)
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_metadata_not_json(w):
    (w / "test.zarr" / "zarr.json").write_text("{not json")
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_store_without_file_counts(w):
    edit_store_attrs(w / "test.zarr", data_files=None)
    return aw.sample_args(w, w / "o.jsonl", conditional=True)


def row_train_on_a_damaged_store(w):
    a_chunk(w / "train.zarr", "embeddings").unlink()
    return aw.train_args(w)


def row_train_other_tokenizer(w):
    return aw.train_args(w, tokenizer="tok2")


def row_second_trainer(w):
    hold_lock(w / "runs" / "new")
    return aw.train_args(w)


def row_distill_damaged_teacher(w):
    flip_bytes(w / "cond" / "ema.safetensors")
    return aw.distill_args(w)


def row_samples_not_utf8(w):
    path = w / "cond_samples" / "seed0.jsonl"
    path.write_bytes(path.read_bytes() + b"\xff\xfe\n")
    return aw.score_args(w)


def row_samples_of_another_run(w):
    return aw.score_args(w, extra=("--run", "base"))


def row_samples_seed_not_its_name(w):
    edit_header(w / "cond_samples" / "seed0.jsonl", seed=3)
    return aw.score_args(w)


def row_samples_other_task(w):
    return aw.score_args(w, task="summarization")


def row_samples_checkpoint_changed(w):
    edit_json(w / "cond" / "checksums.json", **{"ema.safetensors__sha256": "0" * 64})
    return aw.score_args(w)


def row_samples_cut(w):
    path = w / "cond_samples" / "seed0.jsonl"
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    return aw.score_args(w)


def row_samples_header_not_json(w):
    path = w / "cond_samples" / "seed0.jsonl"
    path.write_text("{provenance\n" + "\n".join(path.read_text().splitlines()[1:]) + "\n")
    return aw.score_args(w)


def row_scorer_path_missing(w):
    return aw.score_args(w, samples="samples/seed0.jsonl", task="unconditional",
                         extra=("--scorer", str(w / "models" / "scorr")))


def row_score_with_nan(w):
    path = w / "scores" / "seed0.json"
    path.write_text(path.read_text().replace('"bleu": ', '"bleu": NaN, "was": ', 1))
    return aw.aggregate_args(w)


def row_score_of_another_run(w):
    return aw.aggregate_args(w, run="other")


def row_score_not_json(w):
    (w / "scores" / "seed0.json").write_text("[1, 2")
    return aw.aggregate_args(w)


def row_release_missing_path(w):
    return ["release", "--source", "./no/such/checkpoint_5", "--settings", aw.train_settings("released"),
            "--tokenizer", str(w / "tok"), "--out", str(w / "runs" / "rel")]


# ---- issue 26: a stage run by hand refuses what the DAG refuses (elf/settings_checks.py) ----

def train_with(w, **changes):
    """``elf train`` on the world with its --settings edited (``run__budget__grad_accum=3``, ...)."""
    args = aw.train_args(w)
    settings = json.loads(args[args.index("--settings") + 1])
    for key, value in changes.items():
        node, *keys = key.split("__")
        target = settings
        for part in [node, *keys][:-1]:
            target = target.setdefault(part, {})
        target[[node, *keys][-1]] = value
    args[args.index("--settings") + 1] = json.dumps(settings)
    return args


def sample_with(w, conditional=False, extra=(), **sampler):
    args = aw.sample_args(w, w / "o.jsonl", conditional=conditional, extra=extra)
    args[args.index("--sampler") + 1] = json.dumps({**aw.SAMPLER, **sampler})
    return args


def row_train_unknown_size_key(w):
    return train_with(w, sizes__t__layers=2)


def row_train_heads_not_dividing(w):
    return train_with(w, sizes__t__heads=3)


def row_train_depth_zero(w):
    return train_with(w, sizes__t__depth=0)


def row_train_grad_accum_not_dividing(w):
    return train_with(w, run__budget__grad_accum=3)


def row_train_batch_larger_than_data(w):
    return train_with(w, run__budget__batch_size=64)


def row_train_sc_cfg_min_above_max(w):
    return train_with(w, run__objective__sc_cfg_min=4.0, run__objective__sc_cfg_max=2.0)


def row_train_distill_settings(w):
    return train_with(w, run__distill={"student_steps": 2, "teacher_substeps": 2})


def row_train_unconditional_run_on_conditional_store(w):
    return train_with(w, dataset__task="unconditional", dataset__name="owt",
                      dataset__max_input_length=None)


def row_sample_sc_cfg_outside_trained(w):
    return sample_with(w, sc_cfg=50.0)


def row_sample_input_cfg_unconditional(w):
    return sample_with(w, input_cfg=2.0)


def row_sample_gamma_on_ode(w):
    return sample_with(w, method="ode", gamma=1.0)


def row_sample_n_zero_unconditional(w):
    args = aw.sample_args(w, w / "o.jsonl")
    args[args.index("--n") + 1] = "0"
    return args


def row_distill_teacher_of_another_task(w):
    args = aw.distill_args(w)
    args[args.index("--teacher") + 1] = str(w / "run")
    return args


def evaluate_args(w, **plan_changes):
    plan = {"run": "cond", "task": "translation", "n": 6, "batch_size": 3, "score_batch_size": 3,
            "precision": "fp32", "samplers": {"sde2": {"settings": aw.SAMPLER, "seeds": [0], "split": "test"}}}
    for key, value in plan_changes.items():
        if key == "seeds":
            plan["samplers"]["sde2"]["seeds"] = value
        else:
            plan[key] = value
    return ["evaluate", "--plan", json.dumps(plan), "--checkpoint", str(w / "cond"), "--tokenizer",
            str(w / "tok"), "--eval-data", str(w), "--tokens", str(w / "tokens"), "--out-dir",
            str(w / "o.jsonl"), "--no-progress"]


def row_evaluate_no_seeds(w):
    return evaluate_args(w, seeds=[])


def row_evaluate_repeated_seeds(w):
    return evaluate_args(w, seeds=[0, 0])


def row_evaluate_unconditional_n_zero(w):
    return evaluate_args(w, task="unconditional", n=0) + ["--scorer", str(w / "tok")]


def row_samples_row_too_long(w):
    path = w / "cond_samples" / "seed0.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[2])
    row["token_ids"] = row["token_ids"] + [5] * 40
    path.write_text("\n".join([*lines[:2], json.dumps(row), *lines[3:]]) + "\n")
    return aw.score_args(w)


def row_score_negative_gen_ppl(w):
    edit_json(w / "scores" / "seed0.json", metrics__gen_ppl=-209.0)
    return aw.aggregate_args(w)


def row_score_bleu_above_100(w):
    edit_json(w / "scores" / "seed0.json", metrics__bleu=250.0)
    return aw.aggregate_args(w)


def row_config_of_another_run(w):
    import shutil

    shutil.copyfile(w / "cond" / "config.json", w / "run" / "config.json")
    return aw.sample_args(w, w / "o.jsonl")


ARTIFACT_ROWS = [
    (row_flipped_ema, ["run/ema.safetensors", "sha256", "checksums.json", "damaged"]),
    (row_truncated_ema, ["run/ema.safetensors", "bytes", "checksums.json"]),
    (row_zero_header_ema, ["ema.safetensors", "not a readable safetensors file"]),
    (row_truncated_ema_rehashed, ["ema.safetensors", "not a readable safetensors file"]),
    (row_no_checksums, ["ema.safetensors", "no checksums.json"]),
    (row_config_not_json, ["run/config.json", "not valid JSON"]),
    (row_config_missing, ["run/config.json", "not a finished ELF checkpoint"]),
    (row_config_other_network, ["run/config.json", "not this checkpoint's"]),
    (row_config_other_network_rehashed, ["ema.safetensors", "does not fit the network"]),
    (row_config_not_utf8, ["run/config.json", "not UTF-8"]),
    (row_tokenizer_missing, ["no_such_tokenizer", "no such local file or folder"]),
    (row_other_tokenizer, ["--tokenizer", "tok2", "checkpoint", "sha256"]),
    (row_batch_size_zero, ["--batch-size 0", ">= 1"]),
    (row_output_under_a_file, ["cannot create the folder", "afile"]),
    (row_second_sampler, ["o.jsonl is being written by pid", "on host"]),
    (row_split_of_another_store, ["--split 'test'", "holds split 'train'"]),
    (row_tokens_of_another_dataset, ["other_tokens", "is not the token data of --store"]),
    (row_store_other_tokenizer, ["--tokenizer", "tok2", "store", "test.zarr"]),
    (row_store_deleted_embeddings_chunk, ["test.zarr", "array embeddings", "missing or truncated"]),
    (row_store_deleted_input_ids_chunk, ["test.zarr", "array input_ids", "missing or truncated"]),
    (row_store_truncated_chunk, ["test.zarr", "array embeddings_nosource", "bytes"]),
    (row_store_without_statistics, ["test.zarr", "lacks normalization_stats"]),
    (row_store_flipped_token_ids, ["test.zarr", "input_ids", "sha256", "damaged"]),
    (row_store_incomplete, ["test.zarr", "incomplete"]),
    (row_store_metadata_not_json, ["test.zarr", "unreadable metadata"]),
    (row_store_without_file_counts, ["test.zarr", "no 'data_files' record", "--finalize"]),
    (row_train_on_a_damaged_store, ["train.zarr", "array embeddings", "missing"]),
    (row_train_other_tokenizer, ["--tokenizer", "tok2", "store", "train.zarr"]),
    (row_second_trainer, ["runs/new is being written by pid"]),
    (row_distill_damaged_teacher, ["--teacher", "cond/ema.safetensors", "sha256"]),
    (row_samples_not_utf8, ["seed0.jsonl", "not UTF-8"]),
    (row_samples_of_another_run, ["seed0.jsonl", "run 'cond'", "run 'base' by --run"]),
    (row_samples_seed_not_its_name, ["seed 3 in its header", "seed0.jsonl"]),
    (row_samples_other_task, ["task 'translation'", "--task"]),
    (row_samples_checkpoint_changed, ["checkpoint changed since sampling", "cond/ema.safetensors"]),
    (row_samples_cut, ["seed0.jsonl", "n=6", "holds 5"]),
    (row_samples_header_not_json, ["seed0.jsonl:1", "not JSON"]),
    (row_scorer_path_missing, ["scorr", "no such local file or folder"]),
    (row_score_with_nan, ["seed0.json", "non-finite number NaN"]),
    (row_score_of_another_run, ["seed0.json", "run 'cond', not 'other'"]),
    (row_score_not_json, ["seed0.json", "not valid JSON"]),
    (row_release_missing_path, ["./no/such/checkpoint_5", "no such file or folder"]),
    # issue 26
    (row_train_unknown_size_key, ["--settings", "config key 'sizes.t'", "layers", "depth, width, heads"]),
    (row_train_heads_not_dividing, ["--settings", "sizes.t.heads", "3", "width 32", "divisor"]),
    (row_train_depth_zero, ["--settings", "sizes.t.depth", "0", ">= 1"]),
    (row_train_grad_accum_not_dividing, ["--settings", "run.budget.grad_accum", "3", "batch_size 4"]),
    (row_train_batch_larger_than_data, ["run.budget.batch_size", "64", "8 training sequences", "train.zarr"]),
    (row_train_sc_cfg_min_above_max, ["run.objective.sc_cfg_min", "4.0", "sc_cfg_max 2.0"]),
    (row_train_distill_settings, ["run.distill", "kind 'train'"]),
    (row_train_unconditional_run_on_conditional_store, ["--store", "train.zarr", "conditional rows",
                                                        "'unconditional'"]),
    (row_sample_sc_cfg_outside_trained, ["--sampler", "sampler.sc_cfg", "50.0", "[0.5, 5.0]"]),
    (row_sample_input_cfg_unconditional, ["--sampler", "sampler.input_cfg", "2.0", "unconditional"]),
    (row_sample_gamma_on_ode, ["--sampler", "sampler.gamma", "ODE sampler"]),
    (row_sample_n_zero_unconditional, ["--n 0", "unconditional", ">= 1"]),
    (row_distill_teacher_of_another_task, ["--teacher", "dataset", "'owt'", "'wmt'", "unconditional"]),
    (row_evaluate_no_seeds, ["--plan", "samplers.sde2.seeds", "[]"]),
    (row_evaluate_repeated_seeds, ["--plan", "samplers.sde2.seeds", "repeated"]),
    (row_evaluate_unconditional_n_zero, ["--plan", "'n'", "0", ">= 1"]),
    (row_samples_row_too_long, ["seed0.jsonl:3", "token ids", "max_tokens"]),
    (row_score_negative_gen_ppl, ["seed0.json", "gen_ppl", "-209.0", ">= 1.0"]),
    (row_score_bleu_above_100, ["seed0.json", "bleu", "250.0", "[0.0, 100.0]"]),
    (row_config_of_another_run, ["run/config.json", "not this checkpoint's", "checksums.json"]),
    (row_store_truncated_chunk_records_rewritten, ["test.zarr", "embeddings", "cannot be read", "re-embed"]),
    (row_train_store_truncated_chunk_records_rewritten, ["train.zarr", "embeddings", "cannot be read"]),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return aw.build_world(tmp_path_factory.mktemp("world"))


def run_elf(args, capsys) -> tuple[int, str]:
    from elf.cli import main

    capsys.readouterr()
    status = main(args)
    return status, capsys.readouterr().err


def test_the_world_reads_cleanly(world, tmp_path, capsys):
    """Every command of the table succeeds on the undamaged copy."""
    w = aw.copy_world(world, tmp_path / "w")
    for args in (aw.sample_args(w, w / "o.jsonl"), aw.sample_args(w, w / "c.jsonl", conditional=True),
                 aw.score_args(w, extra=("--run", "cond", "--sampler", "sde2")), aw.aggregate_args(w),
                 aw.train_args(w)):
        assert run_elf(args, capsys) == (0, "")  # argv[0] is the stage
    header = json.loads((w / "c.jsonl").read_text().splitlines()[0])["provenance"]
    assert header["eval_split"] == "test"


@pytest.mark.parametrize("damage, words", ARTIFACT_ROWS, ids=[row[0].__name__[4:] for row in ARTIFACT_ROWS])
def test_damaged_artifact_is_refused_in_one_line(damage, words, world, tmp_path, capsys):
    w = aw.copy_world(world, tmp_path / "w")
    try:
        status, err = run_elf(damage(w), capsys)
    finally:
        while HELD:
            HELD.pop().__exit__(None, None, None)
    assert status == ARTIFACT_REFUSED, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("elf "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not (w / "o.jsonl").exists() and not (w / "aggregate.json").exists()
    assert not (w / "runs" / "new" / "ema.safetensors").exists()


def test_the_table_holds_its_bad_inputs_none_accepted():
    """The counts README.md's "What is checked" states."""
    assert (len(CONFIG_ROWS), len(ARTIFACT_ROWS)) == (72, 64)
    assert len(REAL) >= 20


# --------------------------------------------------------------------------------------------------
# A failed write (issue 26): one clear line, the previous state kept
# --------------------------------------------------------------------------------------------------

def test_a_full_disk_at_a_resume_checkpoint_keeps_the_previous_one(world, tmp_path, capsys, monkeypatch):
    """torch.save failing as a full disk makes it fail (a RuntimeError of its zip writer) on the
    second resume checkpoint: one line naming the file and the cause, exit 2, and the first resume
    state still loads (a rerun continues from it)."""
    import torch

    import elf.train.checkpoint as checkpoint

    w = aw.copy_world(world, tmp_path / "w")
    real, calls = torch.save, []

    def full_disk(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) == 2:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    status, err = run_elf(train_with(w, run__budget__steps=3, run__budget__checkpoint_every=1), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == ARTIFACT_REFUSED and len(lines) == 1, err
    assert "cannot write" in lines[0] and "state.pt" in lines[0] and "previous state.pt" in lines[0]
    run_dir = w / "runs" / "new"
    state = checkpoint.load_resume(run_dir)
    assert state is not None and state["step"] == 1  # the last good state
    assert not (run_dir / "ema.safetensors").exists()


def test_a_full_disk_at_the_final_checkpoint_replaces_nothing(world, tmp_path, capsys, monkeypatch):
    """ENOSPC while writing the final weights: one line (ENOSPC named), no final weight file, the
    resume state kept and loadable; a previous final checkpoint would stay whole (none is renamed
    before all three files are written)."""
    import errno

    import elf.train.checkpoint as checkpoint

    w = aw.copy_world(world, tmp_path / "w")
    real, calls = checkpoint.save_file, []

    def full_disk(state, filename, *args, **kwargs):
        calls.append(filename)
        if len(calls) == 2:  # the EMA weights, after the raw ones were written to their temp file
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        return real(state, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", full_disk)
    status, err = run_elf(train_with(w, run__budget__steps=3, run__budget__checkpoint_every=1), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == ARTIFACT_REFUSED and len(lines) == 1, err
    assert "ema.safetensors" in lines[0] and "ENOSPC" in lines[0] and "nothing was replaced" in lines[0]
    run_dir = w / "runs" / "new"
    assert sorted(p.name for p in run_dir.iterdir() if p.suffix == ".safetensors") == []
    assert not list(run_dir.glob(".*.tmp"))  # no temporary file left behind
    assert checkpoint.load_resume(run_dir)["step"] == 2
