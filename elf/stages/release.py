r"""``elf release``: the authors' released checkpoint → a run directory, as if this pipeline trained it.

The authors' layout (their ``save_checkpoint``; Hugging Face repos ``embedded-language-flows/ELF-B-owt-torch``,
``…/ELF-M-owt-torch``, ``…/ELF-L-owt-torch``, ``…/ELF-B-de-en-torch``, ``…/ELF-B-xsum-torch``,
``…/ELF-B-PD-owt-torch``): a file ``checkpoint_<step>`` (no extension; ``torch.save`` of a dict with
``params``, ``ema_params1``, ``opt_state``, ``lr_scheduler``, ``step``, ``epoch``, ``dropout_rng``,
``grad_accum_buffers``) next to the ``config.yml`` it was trained with. The network takes the EMA
weights ``ema_params1``, or ``params`` when a file has none (the authors' loader falls back the same
way); which one is said in ``config.json``. The weights are in the parameter layout of spec §3; the
network shape is inferred from them and checked against the run's model settings, and ``config.yml``
(when present) against the run's size, bottleneck, sequence layout, padding and normalisation
(``config_mismatches``). Writes ``--out``/``{ema,model}.safetensors`` and ``config.json`` (the train
stage's keys, plus ``released``: source, revision, commit, file, sha256, step, which weights, the
checked ``config.yml`` entries). ``elf sample`` then treats the run like any trained one.

``--source`` (default: the run's ``released`` setting) is one of
- a local file: used as is (its folder's ``config.yml`` is read when there is one);
- a local folder, or a Hub id ``owner/name``: the file ``--filename``; without it, the highest
  ``checkpoint_<step>``, else the one file named ``*.pt``, ``*.pth``, ``*.bin`` or ``*.ckpt`` (several
  or none: an error listing them), and the ``config.yml`` beside it;
- ``owner/name/path/in/repo``: a Hub id with the file name inside the repo.
Hub files are fetched with ``huggingface_hub.hf_hub_download`` at ``--revision`` (default: the run's
``released_revision``; cached under ``$HF_HOME``, see docs/cluster.md).

    elf release --source embedded-language-flows/ELF-B-owt-torch --tokenizer hub:t5-small \
        --settings '{"run": {"dataset": "owt", "kind": "released", ...}, "dataset": {...},
                     "embedding": {...}}' --out results/runs/R01_released

(the ``released`` rule of ``workflow/rules/released.smk`` passes the resolved settings).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path, PurePosixPath
from typing import Callable

from elf.errors import ElfError
from elf.config import to_dict
from elf.stages.args import TrainSettings, parse_train_settings

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
CHECKPOINT_STEP = re.compile(r"checkpoint_(\d+)")   # the authors' save_checkpoint names
CONFIG_YML = "config.yml"
# The released configs normalise embeddings with a fixed mean 0.0 and std 0.2 (spec §2).
RELEASED_MEAN, RELEASED_STD = 0.0, 0.2
HUB_ID = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(?:/(?P<file>.+))?$")


def register(sub) -> None:
    p = sub.add_parser("release", help="convert the authors' released checkpoint into a run",
                       description=__doc__)
    p.add_argument("--source", help="local file or folder, or Hugging Face id owner/name[/file] "
                   "(default: the run's `released` setting)")
    p.add_argument("--filename", help="file inside a Hub repo or folder (default: its highest "
                   f"checkpoint_<step>, else its one {'/'.join('*' + s for s in CHECKPOINT_SUFFIXES)} file)")
    p.add_argument("--revision", help="Hub revision of the repo (default: the run's "
                   "`released_revision`; none: its default branch)")
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding[, sizes] (as `elf train` takes)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary check)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------------------------------
# Finding the files
# --------------------------------------------------------------------------------------------------

def pick_checkpoint_file(names: list[str], where: str) -> str:
    """The highest ``checkpoint_<step>`` among ``names``, else the one checkpoint-like file; none or
    several is an error naming them."""
    steps = {int(m[1]): n for n in names if (m := CHECKPOINT_STEP.fullmatch(PurePosixPath(n).name))}
    if steps:
        return steps[max(steps)]
    found = sorted(n for n in names if n.endswith(CHECKPOINT_SUFFIXES))
    if len(found) != 1:
        listed = ", ".join(found or sorted(names)) or "nothing"
        raise ElfError(f"{where}: expected a checkpoint_<step> file or exactly one "
                       f"{'/'.join(CHECKPOINT_SUFFIXES)} file, found {listed}; name it with --filename")
    return found[0]


def config_beside(name: str) -> str:
    """The repo path of the ``config.yml`` next to a checkpoint file."""
    return str(PurePosixPath(name).parent / CONFIG_YML).removeprefix("./")


def _hub_download(repo_id: str, filename: str, revision: str | None = None) -> str:
    from huggingface_hub import hf_hub_download
    return hf_hub_download(repo_id=repo_id, filename=filename, revision=revision)


def _hub_list(repo_id: str, revision: str | None = None) -> list[str]:
    from huggingface_hub import list_repo_files
    return list_repo_files(repo_id, revision=revision)


def resolve_source(source: str, filename: str | None = None, revision: str | None = None,
                   download: Callable[..., str] = _hub_download,
                   list_files: Callable[..., list[str]] = _hub_list) -> tuple[Path, Path | None, dict]:
    """The local checkpoint file, its ``config.yml`` (None when there is none) and where they came
    from (``download``/``list_files``: the Hub calls, replaceable in tests)."""
    path = Path(source)
    if path.is_file():
        config = path.parent / CONFIG_YML
        return path, (config if config.is_file() else None), \
            {"source": source, "repo_id": None, "filename": path.name}
    if path.is_dir():
        name = filename or pick_checkpoint_file([p.name for p in path.iterdir() if p.is_file()],
                                                f"--source {source}")
        if not (path / name).is_file():
            raise ElfError(f"--source {source}: no file {name} in this folder")
        config = path / config_beside(name)
        return path / name, (config if config.is_file() else None), \
            {"source": source, "repo_id": None, "filename": name}
    match = HUB_ID.match(source)
    if not match or source.startswith(("/", "./", "../", "~")):  # a path is never sent to the Hub
        raise ElfError(f"--source {source}: no such file or folder, and not a Hugging Face id "
                       "owner/name[/file]")
    return _from_hub(source, match["repo"], filename or match["file"], revision, download, list_files)


def _from_hub(source: str, repo_id: str, name: str | None, revision: str | None,
              download: Callable[..., str], list_files: Callable[..., list[str]]
              ) -> tuple[Path, Path | None, dict]:
    from elf.hub import snapshot_commit

    at = f"{repo_id}" + (f"@{revision}" if revision else "")
    try:
        listing = list_files(repo_id, revision)
        name = name or pick_checkpoint_file(listing, f"Hugging Face repo {at}")
        local = download(repo_id, name, revision)
        config = download(repo_id, config_beside(name), revision) \
            if config_beside(name) in listing else None
    except ElfError:
        raise
    except Exception as err:  # the Hub's errors (offline, not found, gated) have many types
        raise ElfError(f"--source {source}: not a local file or folder, and the Hugging Face "
                       f"download of {at}/{name or '?'} failed: {err}") from err
    return Path(local), (Path(config) if config else None), \
        {"source": source, "repo_id": repo_id, "filename": name, "commit": snapshot_commit(local)}


# --------------------------------------------------------------------------------------------------
# Reading and checking the weights
# --------------------------------------------------------------------------------------------------

def model_mismatches(cfg, run_s, sizes: dict) -> list[str]:
    """Where the checkpoint's shape disagrees with the run's model settings (the report labels the
    run by its settings, so they must describe the released network)."""
    from elf.model import model_config

    model = run_s.model
    try:
        preset = model_config(model.size, sizes)
    except KeyError as err:
        return [str(err).strip("'\"")]
    wanted = {"depth": preset.depth, "width": preset.width, "heads": preset.heads,
              "bottleneck": model.bottleneck, "conditioning": model.conditioning,
              "decode_head": model.decode_head}
    if model.conditioning == "in_context":
        wanted.update(num_time_tokens=model.control_tokens, num_cfg_tokens=model.control_tokens,
                      num_mode_tokens=model.control_tokens)
    problems = [f"{key}: settings {value!r}, checkpoint {getattr(cfg, key)!r}"
                for key, value in wanted.items() if getattr(cfg, key) != value]
    if model.prediction != "x":
        problems.append(f"prediction: settings {model.prediction!r}, released networks predict 'x'")
    return problems


def build_network(state: dict, cfg, what: str):
    """An ELF network holding ``state`` (strict: every parameter present, nothing extra)."""
    from elf.model import ELF

    model = ELF(cfg)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ElfError(f"{what} does not fit the spec §3 layout: {err}") from err
    return model


def infer_config(state: dict, max_length: int, vocab_size: int, what: str):
    from elf.train.checkpoint import config_from_state_dict

    try:
        cfg = config_from_state_dict(state, max_length=max_length)
    except (KeyError, ValueError, IndexError) as err:
        raise ElfError(f"{what}: not the spec §3 parameter layout ({type(err).__name__}: "
                       f"{err})") from err
    if not cfg.decode_head:
        from dataclasses import replace
        cfg = replace(cfg, vocab_size=vocab_size)
    return cfg


# --------------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------------

def check_embedding(emb_s) -> None:
    """Without a config.yml: the normalisation must at least be fixed (released: 0.0 / 0.2)."""
    if emb_s.normalization != "fixed":
        raise ElfError(f"the embedding's normalization is {emb_s.normalization!r}; released "
                       f"checkpoints were trained with the fixed mean {RELEASED_MEAN} / std "
                       f"{RELEASED_STD} of the released configs (spec §2): use normalization: fixed")
    if (emb_s.mean, emb_s.std) != (RELEASED_MEAN, RELEASED_STD):
        print(f"elf release: warning: fixed normalisation mean {emb_s.mean} / std {emb_s.std}, "
              f"not the released configs' {RELEASED_MEAN} / {RELEASED_STD}", file=sys.stderr)


def check_training_config(config_path: Path | None, run_s, data_s, emb_s) -> dict | None:
    """``config.yml`` checked against the run's settings: its checked entries, its hash and path
    (None, with the embedding's normalisation checked alone, when the release has none)."""
    from elf.artifacts import file_sha256
    from elf.train.released import checked_settings, config_mismatches, read_config_yml

    if config_path is None:
        print(f"elf release: warning: no {CONFIG_YML} beside the checkpoint; its training "
              "settings cannot be checked against the run's", file=sys.stderr)
        check_embedding(emb_s)
        return None
    yml = read_config_yml(config_path)
    problems = config_mismatches(yml, run_s, data_s, emb_s)
    if problems:
        raise ElfError(f"{config_path} (the release's training settings) does not match the run: "
                       + "; ".join(problems))
    return {"path": str(config_path), "sha256": file_sha256(config_path),
            "checked": checked_settings(yml)}


def run(args) -> None:
    settings = parse_train_settings(args.settings)
    release_run(settings, source=args.source or settings.run.released, filename=args.filename,
                revision=args.revision or settings.run.released_revision, tokenizer_ref=args.tokenizer,
                out=Path(args.out))


def release_run(settings: TrainSettings, *, source: str | None, filename: str | None,
                revision: str | None, tokenizer_ref: str, out: Path) -> None:
    """Fetch the released checkpoint, check it against the run's settings, write the run directory."""
    from elf.artifacts.names import (RUN_DATASET, RUN_EMBEDDING, RUN_PARAMETERS, RUN_RELEASED,
                                     RUN_SETTINGS, RUN_STATS, RUN_STORE, RUN_STORE_IDENTITY, RUN_TOKENIZER)
    from elf.data.tokenizer import load_tokenizer
    from elf.io import provenance
    from elf.artifacts import file_sha256
    from elf.train.checkpoint import model_meta, save_final
    from elf.train.released import ReleasedCheckpointError, read_checkpoint

    run_s, data_s, emb_s = settings.run, settings.dataset, settings.embedding
    if run_s.kind != "released":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf release` converts kind 'released' runs")
    if not source:
        raise ElfError("no --source, and the run has no `released` setting")
    path, config_path, origin = resolve_source(source, filename, revision)
    try:
        training_config = check_training_config(config_path, run_s, data_s, emb_s)
        weights = read_checkpoint(path)
    except ReleasedCheckpointError as err:
        raise ElfError(str(err)) from err
    vocab = len(load_tokenizer(tokenizer_ref))
    cfg = infer_config(weights.ema, data_s.max_length, vocab, f"{path} ({weights.ema_from})")
    problems = model_mismatches(cfg, run_s, settings.sizes)
    if problems:
        raise ElfError(f"{path} does not match the run's model settings: " + "; ".join(problems))
    if vocab > cfg.vocab_size:
        raise ElfError(f"tokenizer {tokenizer_ref} has {vocab} ids, the checkpoint's decode head "
                       f"only {cfg.vocab_size}: not the tokenizer it was trained with")
    ema = build_network(weights.ema, cfg, f"{path} ({weights.ema_from})")
    raw = build_network(weights.raw, cfg, f"{path} ({weights.raw_from})")
    meta = model_meta(cfg, **{
        RUN_SETTINGS: to_dict(run_s), RUN_DATASET: to_dict(data_s), RUN_EMBEDDING: to_dict(emb_s),
        RUN_STORE: None, RUN_TOKENIZER: str(tokenizer_ref), RUN_STORE_IDENTITY: None,
        RUN_STATS: {"normalization": "fixed", "mean": emb_s.mean, "std": emb_s.std},
        RUN_PARAMETERS: ema.num_parameters(),
        RUN_RELEASED: provenance(**origin, revision=revision, sha256=file_sha256(path),
                                 step=weights.step, epoch=weights.epoch, entries=weights.keys,
                                 ema_weights=weights.ema_from, raw_weights=weights.raw_from,
                                 training_config=training_config)})
    save_final(out, raw.state_dict(), ema.state_dict(), meta)
