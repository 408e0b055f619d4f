"""``elf release``: the authors' released checkpoint → a run directory, as if this pipeline trained it.

Reads a ``torch.save`` dict with ``ema_params1`` (EMA weights, required) and ``params`` (raw weights)
in the parameter layout of spec §3 — the Hugging Face repos ``embedded-language-flows/ELF-B-owt-torch``,
``…/ELF-B-PD-owt-torch``, … — from a local file, a local folder or the Hub; infers the network shape
from the weights, checks it against the run's model settings, and writes ``--out``/
``{ema,model}.safetensors`` and ``config.json`` (the train stage's keys, plus ``released``: source,
file name, sha256). ``elf sample`` then treats the run like any trained one.

``--source`` (default: the run's ``released`` setting) is one of
- a local file: used as is;
- a local folder, or a Hub id ``owner/name``: the file ``--filename``; without it, the one file named
  ``*.pt``, ``*.pth``, ``*.bin`` or ``*.ckpt`` in it (several or none: an error listing them);
- ``owner/name/path/in/repo.pt``: a Hub id with the file name inside the repo.
Hub files are fetched with ``huggingface_hub.hf_hub_download`` (cached under ``~/.cache/huggingface``).

    elf release --source embedded-language-flows/ELF-B-owt-torch --tokenizer t5-small \\
        --settings '{"run": {"dataset": "owt", "kind": "released", ...}, "dataset": {...},
                     "embedding": {...}}' --out results/runs/R01_released

(the ``released`` rule of ``workflow/rules/released.smk`` passes the resolved settings).
"""

from __future__ import annotations

import argparse
import pickle
import re
import sys
from pathlib import Path
from typing import Callable

from elf.cli import ElfError
from elf.config import to_dict

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
EMA_KEY, RAW_KEY = "ema_params1", "params"
# The released configs normalise embeddings with a fixed mean 0.0 and std 0.2 (spec §2).
RELEASED_MEAN, RELEASED_STD = 0.0, 0.2
HUB_ID = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(?:/(?P<file>.+))?$")


def register(sub) -> None:
    p = sub.add_parser("release", help="convert the authors' released checkpoint into a run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", help="local file or folder, or Hugging Face id owner/name[/file] "
                   "(default: the run's `released` setting)")
    p.add_argument("--filename", help="file inside a Hub repo or folder (default: its one "
                   f"{'/'.join('*' + s for s in CHECKPOINT_SUFFIXES)} file)")
    p.add_argument("--settings", required=True,
                   help="JSON with keys run, dataset, embedding[, sizes] (as `elf train` takes)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary check)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------------------------------
# Finding the file
# --------------------------------------------------------------------------------------------------

def pick_checkpoint_file(names: list[str], where: str) -> str:
    """The one checkpoint-like file among ``names``; none or several is an error naming them."""
    found = sorted(n for n in names if n.endswith(CHECKPOINT_SUFFIXES))
    if len(found) != 1:
        listed = ", ".join(found or sorted(names)) or "nothing"
        raise ElfError(f"{where}: expected exactly one {'/'.join(CHECKPOINT_SUFFIXES)} file, found "
                       f"{listed}; name it with --filename")
    return found[0]


def _hub_download(repo_id: str, filename: str) -> str:
    from huggingface_hub import hf_hub_download
    return hf_hub_download(repo_id=repo_id, filename=filename)


def _hub_list(repo_id: str) -> list[str]:
    from huggingface_hub import list_repo_files
    return list_repo_files(repo_id)


def resolve_source(source: str, filename: str | None = None,
                   download: Callable[[str, str], str] = _hub_download,
                   list_files: Callable[[str], list[str]] = _hub_list) -> tuple[Path, dict]:
    """The local path of the checkpoint file and where it came from (``download``/``list_files``:
    the Hub calls, replaceable in tests)."""
    path = Path(source)
    if path.is_file():
        return path, {"source": source, "repo_id": None, "filename": path.name}
    if path.is_dir():
        name = filename or pick_checkpoint_file([p.name for p in path.iterdir() if p.is_file()],
                                                f"--source {source}")
        if not (path / name).is_file():
            raise ElfError(f"--source {source}: no file {name} in this folder")
        return path / name, {"source": source, "repo_id": None, "filename": name}
    match = HUB_ID.match(source)
    if not match:
        raise ElfError(f"--source {source}: no such file or folder, and not a Hugging Face id "
                       "owner/name[/file]")
    repo_id = match["repo"]
    name = filename or match["file"]
    try:
        name = name or pick_checkpoint_file(list_files(repo_id), f"Hugging Face repo {repo_id}")
        local = download(repo_id, name)
    except ElfError:
        raise
    except Exception as err:  # the Hub's errors (offline, not found, gated) have many types
        raise ElfError(f"--source {source}: not a local file or folder, and the Hugging Face "
                       f"download of {repo_id}/{name or '?'} failed: {err}") from err
    return Path(local), {"source": source, "repo_id": repo_id, "filename": name}


# --------------------------------------------------------------------------------------------------
# Reading and checking the weights
# --------------------------------------------------------------------------------------------------

def read_released(path: Path) -> tuple[dict, dict | None]:
    """The EMA and raw state dicts (float32) of a released file; raw is None when absent."""
    import torch

    try:
        blob = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
        raise ElfError(f"{path}: not a checkpoint torch.load can read safely "
                       f"(weights_only=True): {str(err).splitlines()[0]}") from err
    if not isinstance(blob, dict) or EMA_KEY not in blob:
        found = ", ".join(map(str, blob)) if isinstance(blob, dict) else type(blob).__name__
        raise ElfError(f"{path}: no '{EMA_KEY}' entry (the EMA weights of a released checkpoint); "
                       f"found {found}")

    def as_float(state):
        return {k: v.float() for k, v in state.items()}

    raw = blob.get(RAW_KEY)
    return as_float(blob[EMA_KEY]), (as_float(raw) if raw is not None else None)


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
    if emb_s.normalization != "fixed":
        raise ElfError(f"the embedding's normalization is {emb_s.normalization!r}; released "
                       f"checkpoints were trained with the fixed mean {RELEASED_MEAN} / std "
                       f"{RELEASED_STD} of the released configs (spec §2): use normalization: fixed")
    if (emb_s.mean, emb_s.std) != (RELEASED_MEAN, RELEASED_STD):
        print(f"elf release: warning: fixed normalisation mean {emb_s.mean} / std {emb_s.std}, "
              f"not the released configs' {RELEASED_MEAN} / {RELEASED_STD}", file=sys.stderr)


def run(args) -> None:
    from elf.data.tokenizer import load_tokenizer
    from elf.io import provenance, sha256_file
    from elf.stages.train import parse_train_settings
    from elf.train.checkpoint import model_meta, save_final

    run_s, data_s, emb_s, sizes = parse_train_settings(args.settings)
    if run_s.kind != "released":
        raise ElfError(f"run kind is {run_s.kind!r}; `elf release` converts kind 'released' runs")
    check_embedding(emb_s)
    source = args.source or run_s.released
    if not source:
        raise ElfError("no --source, and the run has no `released` setting")
    path, origin = resolve_source(source, args.filename)
    ema_state, raw_state = read_released(path)
    vocab = len(load_tokenizer(args.tokenizer))
    cfg = infer_config(ema_state, data_s.max_length, vocab, f"{path} ({EMA_KEY})")
    problems = model_mismatches(cfg, run_s, sizes)
    if problems:
        raise ElfError(f"{path} does not match the run's model settings: " + "; ".join(problems))
    if vocab > cfg.vocab_size:
        raise ElfError(f"tokenizer {args.tokenizer} has {vocab} ids, the checkpoint's decode head "
                       f"only {cfg.vocab_size}: not the tokenizer it was trained with")
    ema = build_network(ema_state, cfg, f"{path} ({EMA_KEY})")
    raw = build_network(raw_state, cfg, f"{path} ({RAW_KEY})") if raw_state is not None else ema
    meta = model_meta(
        cfg, run=to_dict(run_s), dataset=to_dict(data_s), embedding=to_dict(emb_s), store=None,
        tokenizer=str(args.tokenizer), store_identity=None,
        normalization_stats={"normalization": "fixed", "mean": emb_s.mean, "std": emb_s.std},
        num_parameters=sum(p.numel() for p in ema.parameters()),
        released=provenance(**origin, sha256=sha256_file(path), ema_weights=EMA_KEY,
                            raw_weights=RAW_KEY if raw_state is not None else
                            f"{EMA_KEY} (the file has no '{RAW_KEY}')"))
    save_final(Path(args.out), raw.state_dict(), ema.state_dict(), meta)
