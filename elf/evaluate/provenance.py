"""The provenance chain of a reported number, verified link by link (``elf audit``).

Every artifact names its inputs and records their hashes; ``audit(path, cell, root)`` starts from a
figure/table file (through its sidecar ``<id>.json``), an aggregate, a score or a samples file, loads
each link, re-hashes it on disk against the hash its parent recorded and returns the chain as a tree
of ``Link`` s. No printing here: ``elf/stages/audit.py`` prints the tree.

Links, the record that names each, and what is checked:

=================  ==========================================  =============================================
link               named and hashed by                         checked against
=================  ==========================================  =============================================
figure / table     sidecar ``files[].sha256``                  sha256 of the file asked about
aggregate          sidecar ``aggregates[].sha256``             sha256 of the aggregate JSON; run and sampler
scores             aggregate ``provenance.scores[].sha256``    sha256 of the score JSON; its metrics equal
                                                               the aggregate's ``per_seed`` values
samples            score ``provenance.samples_sha256``         sha256 of the samples JSONL; its header equals
                                                               the score's ``samples_provenance``
scorer             score ``provenance.scorer_sha256``          the scorer folder's files (as ``elf score``)
checkpoint         samples header ``checkpoint_sha256``        sha256 of ``<checkpoint>/ema.safetensors``
run config         samples header ``run_config_sha256``        ``sha256_json`` of ``config.json["run"]``
embedding store    checkpoint ``store_identity`` and           the store's ``identity_sha256``,
                   ``normalization_stats``                     ``normalization_stats``, completion marker
dataset            store ``identity.source`` fingerprint       the packed-token split on disk
                   (embedded on the fly: checkpoint config
                   ``tokens`` + ``tokens_fingerprint``)
tokenizer          store ``identity.tokenizer``                sha256 of ``tokenizer.json``
encoder            store ``identity.encoder.weights_sha256``   sha256 of the encoder weights
reference texts    reference score ``texts_sha256``            the texts re-read from the dataset
paper values       sidecar ``paper_values.sha256``             sha256 of the file
=================  ==========================================  =============================================

Hub revisions are shown where they were recorded: a dataset's (and its raw test split's) from its
``provenance.json``, a pinned tokenizer / encoder as ``hub:name@revision``, the scorer's from its folder's
``provenance.json``, a released checkpoint's repo, revision, resolved commit and file from its
``config.json`` (``released``).

Recorded relative paths are resolved against ``root`` (the directory the pipeline ran in; default
the current directory). A link met again (the same checkpoint behind every samples file) is verified
again but expanded once (``repeated``). ``cell`` (e.g. ``base/sde8``, ``base/sde8/gen_ppl``,
``gen_ppl``, ``seed1``) restricts the chain to one run/sampler pair, metric or seed, and shows the
selected metric's number at the aggregate and score links.

    chain = audit("reports/figures/F4.png", cell="base/sde8/gen_ppl")
    chain.complete, [(l.kind, l.path, l.status, l.problem) for l in chain.broken()]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from elf.io import read_json, sha256_file, sha256_json

OK = "ok"
MISSING = "MISSING"
CHANGED = "HASH CHANGED"
NOT_RECORDED = "NOT RECORDED"  # the parent records no hash for it: the link cannot be verified
BROKEN = "BROKEN"              # present but unreadable, incomplete or contradicting its parent
NAMED = "named"                # a hub model named without local files: nothing to hash, not a failure
OK_STATUSES = (OK, NAMED)

REPORT_SUFFIXES = (".png", ".pdf", ".svg", ".csv", ".md", ".tex", ".html")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class AuditError(ValueError):
    """The starting point cannot be traced at all (not found, no sidecar, unknown file, bad CELL)."""


@dataclass
class Link:
    """One artifact of the chain: where it is, its hash now, what its parent recorded, its status."""
    kind: str
    path: str
    status: str = OK
    sha256: str | None = None      # the hash now: file sha256, config hash, store identity, fingerprint
    recorded: str | None = None    # the hash the parent recorded
    named_by: str | None = None    # the parent's path
    info: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    repeated: bool = False         # verified again, expanded above
    children: list["Link"] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    def fail(self, status: str, problem: str) -> None:
        """Record a problem; the first failing status stays the link's status."""
        if self.ok:
            self.status = status
        self.problems.append(problem)

    def walk(self) -> Iterator["Link"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def broken(self) -> list["Link"]:
        """The failing links, each artifact once, in tree order."""
        seen, out = set(), []
        for link in self.walk():
            key = (link.kind, link.path, link.status, tuple(link.problems))
            if not link.ok and key not in seen:
                seen.add(key)
                out.append(link)
        return out

    @property
    def complete(self) -> bool:
        return not self.broken()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "status": self.status, "sha256": self.sha256,
                "recorded_sha256": self.recorded, "named_by": self.named_by, "info": self.info,
                "problems": self.problems, "repeated": self.repeated,
                "children": [c.to_dict() for c in self.children]}


# --------------------------------------------------------------------------------------------------
# CELL: which run/sampler pair, metric or seed to follow
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    runs: frozenset = frozenset()
    samplers: frozenset = frozenset()
    metrics: frozenset = frozenset()
    seeds: frozenset = frozenset()

    @property
    def narrows_pairs(self) -> bool:
        return bool(self.runs or self.samplers)

    def wants_pair(self, run: Any, sampler: Any) -> bool:
        return ((not self.runs or str(run) in self.runs)
                and (not self.samplers or str(sampler) in self.samplers))

    def wants_seed(self, seed: Any) -> bool:
        return not self.seeds or seed is None or str(seed) in self.seeds


def _seed_token(token: str) -> str | None:
    for prefix in ("seed=", "seed:", "seed"):
        if token.startswith(prefix) and token[len(prefix):].isdigit():
            return token[len(prefix):]
    return token if token.isdigit() else None


def parse_cell(cell: str | None, names: dict[str, set]) -> Selection:
    """Split ``cell`` on "/" and classify each part as a run, sampler, metric or seed among ``names``
    (keys runs, samplers, metrics, seeds: what the starting file refers to)."""
    if not cell:
        return Selection()
    picked: dict[str, set] = {"runs": set(), "samplers": set(), "metrics": set(), "seeds": set()}
    for token in filter(None, cell.split("/")):
        seed = _seed_token(token)
        matched = [key for key in ("runs", "samplers", "metrics") if token in names.get(key, ())]
        if seed is not None and seed in names.get("seeds", ()):
            matched.append("seeds")
            token = seed
        if not matched:
            known = "; ".join(f"{k}: {', '.join(sorted(map(str, v))) or '-'}" for k, v in names.items())
            raise AuditError(f"CELL part {token!r} names no run, sampler, metric or seed here ({known})")
        for key in matched:
            picked[key].add(token)
    return Selection(**{k: frozenset(v) for k, v in picked.items()})


# --------------------------------------------------------------------------------------------------
# Reading records
# --------------------------------------------------------------------------------------------------

def samples_header(path: Path) -> dict:
    """The provenance header (first line) of a samples file, without reading the samples."""
    with open(path, encoding="utf-8") as fh:
        first = json.loads(fh.readline())
    if not isinstance(first, dict) or not isinstance(first.get("provenance"), dict):
        raise ValueError("first line is not {\"provenance\": {...}}")
    return first["provenance"]


def artifact_kind(path: Path) -> str:
    """report | aggregate | scores | samples | checkpoint, from the file's name and contents."""
    if path.is_dir():
        if (path / "config.json").is_file():
            return "checkpoint"
        raise AuditError(f"{path}: a directory that is not a checkpoint (no config.json)")
    if path.suffix == ".jsonl":
        return "samples"
    if path.suffix in REPORT_SUFFIXES:
        return "report"
    if path.suffix == ".json":
        try:
            record = read_json(path)
        except (OSError, json.JSONDecodeError) as err:
            raise AuditError(f"{path}: cannot read ({err})") from err
        if isinstance(record, dict):
            if "aggregates" in record and "files" in record:
                return "report"
            if "samples_provenance" in record:
                return "scores"
            if "metrics" in record and "scores" in record.get("provenance", {}):
                return "aggregate"
    raise AuditError(f"{path}: not a figure/table (or its sidecar), aggregate, score, samples file "
                     "or checkpoint directory; cannot trace it")


def _metric_entry(entry: Any) -> Any:
    if isinstance(entry, dict):
        return {k: entry.get(k) for k in ("mean", "se", "n")}
    return entry


def _same_number(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


# --------------------------------------------------------------------------------------------------
# Walking the chain
# --------------------------------------------------------------------------------------------------

class Tracer:
    """Walks the chain from one starting file; caches file hashes and expands each link once."""

    def __init__(self, root: str | Path | None = None, selection: Selection = Selection()):
        self.root = Path(root) if root is not None else Path.cwd()
        self.selection = selection
        self._hashes: dict[Path, str] = {}
        self._expanded: set = set()

    def resolve(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.root / path

    def file_sha256(self, path: Path) -> str:
        key = path.resolve()
        if key not in self._hashes:
            self._hashes[key] = sha256_file(path)
        return self._hashes[key]

    def first_time(self, link: Link, *key: Any) -> bool:
        """True the first time a link is met; later meetings are marked ``repeated``."""
        key = (link.kind, link.path, link.recorded, *key)
        if key in self._expanded:
            link.repeated = True
            return False
        self._expanded.add(key)
        return True

    def file_link(self, kind: str, path: str | Path, recorded: str | None, named_by: str | None,
                  is_root: bool = False) -> Link:
        """A link to one file: MISSING, HASH CHANGED, NOT RECORDED or ok."""
        resolved = self.resolve(path)
        link = Link(kind, str(resolved), recorded=recorded, named_by=named_by)
        if not resolved.is_file():
            link.fail(MISSING, f"{kind} file not found" + (f" (named by {named_by})" if named_by else ""))
            return link
        link.sha256 = self.file_sha256(resolved)
        self.compare(link, link.sha256, recorded, is_root)
        return link

    @staticmethod
    def compare(link: Link, now: str | None, recorded: str | None, is_root: bool = False) -> None:
        if is_root:
            return
        if recorded is None:
            link.fail(NOT_RECORDED, f"{link.named_by or 'its parent'} records no hash for this "
                      f"{link.kind}: it cannot be verified")
        elif now != recorded:
            link.fail(CHANGED, f"recorded sha256 {recorded[:16]}…, now {str(now)[:16]}…: the {link.kind} "
                      f"changed after {link.named_by or 'its parent'} was made from it; rerun the "
                      f"stages from here on")

    def read(self, link: Link, reader) -> Any:
        """``reader(path)`` for a present link; a failure marks the link BROKEN and returns None."""
        if link.status == MISSING:
            return None
        try:
            return reader(Path(link.path))
        except (OSError, ValueError, KeyError, TypeError) as err:
            link.fail(BROKEN, f"cannot read {link.kind}: {err}")
            return None

    # ---- report level -----------------------------------------------------------------------------

    def report_item(self, path: Path) -> Link:
        sidecar = path if path.suffix == ".json" else path.with_suffix(".json")
        if not sidecar.is_file():
            raise AuditError(f"{path}: no sidecar {sidecar.name} beside it, so nothing records where "
                             f"its numbers came from (not written by `elf report`, or the sidecar "
                             f"was deleted: rerun the report rule)")
        try:
            record = read_json(sidecar)
        except (OSError, ValueError) as err:
            raise AuditError(f"{sidecar}: cannot read the sidecar ({err})") from err
        out_dir = sidecar.parent.parent
        if path == sidecar:
            link = self.file_link(record.get("kind", "report"), path, None, None, is_root=True)
        else:
            entry = next((f for f in record.get("files", [])
                          if (out_dir / f["path"]).resolve() == path.resolve()), None)
            link = self.file_link(record.get("kind", "report"), path, entry and entry.get("sha256"),
                                  str(sidecar))
        link.info.update(id=record.get("id"), title=record.get("title"), sidecar=str(sidecar),
                         code_version=record.get("provenance", {}).get("code_version"))
        for agg in record.get("aggregates", []):
            if self.selection.wants_pair(agg.get("run"), agg.get("sampler")):
                link.children.append(self.aggregate(agg["path"], agg.get("sha256"), str(sidecar),
                                                    agg.get("run"), agg.get("sampler")))
        if self.selection.narrows_pairs:
            if not link.children:
                raise AuditError(f"{path}: CELL selects none of its aggregates")
            return link
        for ref in record.get("dataset_scores", []):
            ref_link = self.scores(ref["path"], ref.get("sha256"), str(sidecar))
            ref_link.info.setdefault("dataset", ref.get("dataset"))
            link.children.append(ref_link)
        paper = record.get("paper_values")
        if paper:
            link.children.append(self.file_link("paper values", paper["path"], paper.get("sha256"),
                                                str(sidecar)))
        return link

    def aggregate(self, path: str | Path, recorded: str | None, named_by: str | None,
                  run: str | None = None, sampler: str | None = None, is_root: bool = False) -> Link:
        link = self.file_link("aggregate", path, recorded, named_by, is_root)
        data = self.read(link, read_json)
        if data is None:
            link.info.update(run=run, sampler=sampler)
            return link
        link.info.update(run=data.get("run"), sampler=data.get("sampler"),
                         code_version=data.get("provenance", {}).get("code_version"))
        for key, expected in (("run", run), ("sampler", sampler)):
            if expected is not None and data.get(key) != expected:
                link.fail(BROKEN, f"the aggregate is of {key} {data.get(key)!r}, "
                          f"{named_by} says {expected!r}")
        metrics = data.get("metrics", {})
        for name in sorted(self.selection.metrics):
            link.info[name] = _metric_entry(metrics.get(name))
        if not self.first_time(link):
            return link
        sources = data.get("provenance", {}).get("scores") or []
        if not sources:
            link.fail(BROKEN, "the aggregate lists no score files")
        for source in sources:
            if self.selection.wants_seed(self.seed_of(source.get("path"))):
                link.children.append(self.scores(source.get("path"), source.get("sha256"), link.path,
                                                 metrics))
        return link

    def seed_of(self, score_path: str | None) -> Any:
        """The evaluation seed a score file's samples header names (None if unreadable)."""
        try:
            return read_json(self.resolve(score_path or "")).get("samples_provenance", {}).get("seed")
        except (OSError, ValueError, AttributeError):
            return None

    def scores(self, path: str | Path, recorded: str | None, named_by: str | None,
               aggregate_metrics: dict | None = None, is_root: bool = False) -> Link:
        link = self.file_link("scores", path, recorded, named_by, is_root)
        data = self.read(link, read_json)
        if data is None:
            link.info["seed"] = None
            return link
        prov, header = data.get("provenance", {}), data.get("samples_provenance", {})
        metrics = data.get("metrics", {})
        seed = header.get("seed")
        label = str(seed) if seed is not None else Path(link.path).stem  # as `elf aggregate` labels it
        link.info.update(seed=seed, task=prov.get("task"), code_version=prov.get("code_version"))
        for name in sorted(self.selection.metrics):
            link.info[name] = metrics.get(name)
        for name, entry in (aggregate_metrics or {}).items():
            per_seed = entry.get("per_seed", {}) if isinstance(entry, dict) else {}
            if label in per_seed and name in metrics and not _same_number(per_seed[label], metrics[name]):
                link.fail(BROKEN, f"{name} is {metrics[name]} here but {per_seed[label]} for seed "
                          f"{label} in {named_by}")
        if not self.first_time(link):
            return link
        if header.get("kind") == "reference_texts":
            link.children.append(self.reference_texts(header, link.path))
        elif "samples" in prov:
            link.children.append(self.samples(prov["samples"], prov.get("samples_sha256"), link.path,
                                              header))
        else:
            link.fail(BROKEN, "the score file names no samples file")
        if "scorer" in prov:
            link.children.append(self.scorer(prov, link.path))
        return link

    def scorer(self, prov: dict, named_by: str) -> Link:
        from elf.stages.score import scorer_fingerprint  # the hash `elf score` recorded

        folder = self.resolve(prov["scorer"])
        link = Link("scorer", str(folder), recorded=prov.get("scorer_sha256"), named_by=named_by)
        if "scorer_sha256" not in prov and not folder.exists():
            link.status = NAMED
            link.sha256 = prov.get("scorer_config_sha256")
            link.info["note"] = "hub model: its config hash is recorded, nothing local to re-hash"
            return link
        if not folder.is_dir():
            link.fail(MISSING, f"scorer folder not found (named by {named_by})")
            return link
        link.sha256 = scorer_fingerprint(str(folder), None)["scorer_sha256"]
        self.compare(link, link.sha256, link.recorded)
        record = folder / "provenance.json"
        if record.is_file():
            settings = read_json(record).get("settings") or {}
            if settings.get("source") == "pretrained":
                link.info.update(name=settings.get("name_or_path"), revision=settings.get("revision"))
        return link

    def reference_texts(self, data: dict, named_by: str) -> Link:
        from elf.data.tokenizer import load_tokenizer
        from elf.evaluate.samples import SamplesFormatError, reference_texts, texts_sha256

        source = self.resolve(data.get("dataset", ""))
        link = Link("reference texts", str(source), recorded=data.get("texts_sha256"), named_by=named_by,
                    info={"split": data.get("split"), "n": data.get("n")})
        if not source.exists():
            link.fail(MISSING, f"reference dataset not found (named by {named_by})")
            return link
        try:  # rebuilt as the score stage built them: the text column, or rows cut like samples
            ref = data.get("tokenizer")
            tokenizer = None if not ref else load_tokenizer(ref if ref.startswith("hub:")
                                                            else str(self.resolve(ref)))
            texts, _, _ = reference_texts(source, data.get("split") or "test", data.get("n"), tokenizer)
        except (SamplesFormatError, OSError, ValueError) as err:
            link.fail(BROKEN, f"cannot read the reference texts: {err}")
            return link
        link.sha256 = texts_sha256(texts)
        self.compare(link, link.sha256, link.recorded)
        return link

    # ---- samples and checkpoint -----------------------------------------------------------------

    def samples(self, path: str | Path, recorded: str | None, named_by: str | None,
                expected_header: dict | None = None, is_root: bool = False) -> Link:
        link = self.file_link("samples", path, recorded, named_by, is_root)
        header = self.read(link, samples_header)
        if header is None:
            return link
        link.info.update(run=header.get("run"), sampler=header.get("sampler"), seed=header.get("seed"),
                         n=header.get("n"), sampler_settings=header.get("sampler_settings"),
                         code_version=header.get("code_version"))
        if expected_header is not None and header != expected_header:
            link.fail(BROKEN, f"its header differs from the samples header embedded in {named_by}")
        if not self.first_time(link):
            return link
        if "checkpoint" not in header:
            link.fail(BROKEN, "the samples header names no checkpoint")
            return link
        link.children.append(self.checkpoint(header["checkpoint"], header.get("checkpoint_sha256"),
                                             link.path, header.get("run_config_sha256")))
        return link

    def checkpoint(self, directory: str | Path, recorded: str | None, named_by: str | None,
                   run_config_recorded: str | None, is_root: bool = False) -> Link:
        folder = self.resolve(directory)
        link = self.file_link("checkpoint", folder / "ema.safetensors", recorded, named_by, is_root)
        if not folder.is_dir() and link.problems:
            link.problems[-1] = f"checkpoint directory {folder} is gone (named by {named_by})"
        if not self.first_time(link, run_config_recorded):
            return link
        # the samples header, not the weights, records the run config's hash
        link.children.append(self.run_config(folder, run_config_recorded, named_by, is_root))
        return link

    def run_config(self, folder: Path, recorded: str | None, named_by: str | None,
                   is_root: bool = False) -> Link:
        path = folder / "config.json"
        link = Link("run config", str(path), recorded=recorded, named_by=named_by)
        if not path.is_file():
            link.fail(MISSING, f"checkpoint config not found (named by {named_by})")
            return link
        meta = self.read(link, read_json)
        if meta is None:
            return link
        if "run" not in meta:
            link.fail(BROKEN, "config.json has no 'run' settings")
            return link
        run = meta["run"]
        link.sha256 = sha256_json(run)
        self.compare(link, link.sha256, recorded, is_root)
        link.info.update(kind=run.get("kind"), paper_run=run.get("paper_run"), dataset=run.get("dataset"),
                         embedding=run.get("embedding"), size=run.get("model", {}).get("size"),
                         steps=run.get("budget", {}).get("steps"), seed=run.get("budget", {}).get("seed"),
                         file_sha256=self.file_sha256(path))
        if meta.get("store"):
            link.children.append(self.store(meta["store"], meta.get("store_identity"),
                                            meta.get("normalization_stats"), link.path))
        elif meta.get("tokens"):  # embedded on the fly (cache: false): no store between run and data
            source = {"tokens": meta["tokens"], "split": "train", **(meta.get("tokens_fingerprint") or {})}
            link.children.append(self.dataset(source, link.path))
        elif run.get("kind", "train") == "train":
            link.fail(BROKEN, "a trained run's config.json names neither an embedding store nor tokens")
        else:
            link.info["note"] = f"run kind {run.get('kind')}: no embedding store of ours behind it"
            link.info.update(released_info(meta.get("released") or {}))
        return link

    # ---- embeddings and data --------------------------------------------------------------------

    def store(self, path: str, recorded_identity: str | None, recorded_stats: dict | None,
              named_by: str) -> Link:
        import zarr  # only when a chain reaches a store

        folder = self.resolve(path)
        link = Link("embedding store", str(folder), recorded=recorded_identity, named_by=named_by)
        if not (folder / "zarr.json").is_file():
            link.fail(MISSING, f"embedding store not found (named by {named_by})")
            return link
        attrs = self.read(link, lambda p: zarr.open_group(str(p), mode="r").attrs.asdict())
        if attrs is None:
            return link
        link.sha256 = attrs.get("identity_sha256")
        identity, layout = attrs.get("identity", {}), attrs.get("layout", {})
        link.info.update({**identity.get("settings", {}),
                          "shape": f"{layout.get('num_sequences')} x {layout.get('seq_len')} x "
                                   f"{layout.get('dim')}",
                          "token_ids_sha256": attrs.get("token_ids_sha256"),
                          "code_version": attrs.get("code_version")})
        if not attrs.get("complete"):
            link.fail(BROKEN, "the store is incomplete (no completion marker)")
        if recorded_identity is not None:
            self.compare(link, link.sha256, recorded_identity)
        elif recorded_stats is None:
            link.fail(NOT_RECORDED, f"{named_by} records neither the store's identity nor its "
                      "normalisation statistics: it cannot be verified")
        else:
            link.info["verified_by"] = "normalization_stats (the checkpoint records no store identity)"
        if recorded_stats is not None and attrs.get("normalization_stats") != recorded_stats:
            link.fail(CHANGED, "its normalisation statistics differ from those the checkpoint was "
                      "trained with: the store was re-embedded after training; retrain or restore it")
        if not self.first_time(link, json.dumps(recorded_stats, sort_keys=True)):
            return link
        if "source" in identity:
            link.children.append(self.dataset(identity["source"], link.path))
        else:
            link.fail(BROKEN, "the store's identity names no source data")
        if identity.get("tokenizer"):
            link.children.append(self.tokenizer(identity["tokenizer"], link.path))
        if identity.get("encoder"):
            link.children.append(self.encoder(identity["encoder"], link.path))
        return link

    def dataset(self, source: dict, named_by: str) -> Link:
        from elf.embed.store import StoreError, TokenArrays

        recorded = {k: v for k, v in source.items() if k not in ("tokens", "split")}
        tokens = self.resolve(source.get("tokens", ""))
        fingerprint = recorded.get("datasets_fingerprint") or recorded.get("tokens_sha256")
        link = Link("dataset", str(tokens), recorded=fingerprint, named_by=named_by,
                    info={"split": source.get("split"), "rows": recorded.get("num_rows")})
        if not tokens.is_dir():
            link.fail(MISSING, f"packed-token dataset not found (named by {named_by})")
            return link
        try:
            current = TokenArrays.from_disk(tokens, source.get("split")).fingerprint()
        except (StoreError, OSError, ValueError) as err:
            link.fail(BROKEN, f"cannot open split {source.get('split')!r}: {err}")
            return link
        link.sha256 = current.get("datasets_fingerprint") or current.get("tokens_sha256")
        if fingerprint is None:
            link.fail(NOT_RECORDED, f"{named_by} records no fingerprint of the tokens it was made from: "
                      "they cannot be verified")
        elif current != recorded:
            link.fail(CHANGED, f"fingerprint {current} now, {recorded} when {named_by} was embedded: "
                      "the tokens were re-prepared; re-embed and retrain")
        record = tokens / "provenance.json"
        if record.is_file():
            prepared = read_json(record)
            settings = prepared.get("settings", {})
            test = settings.get("test") or {}
            link.info.update(name=settings.get("name"), source=settings.get("source"),
                             revision=settings.get("revision"),
                             test_split=f"{test.get('name')}@{test.get('revision') or 'default'}"
                             if test else None,
                             raw_root=prepared.get("raw_root"), code_version=prepared.get("code_version"))
        return link

    def tokenizer(self, identity: dict, named_by: str) -> Link:
        return self._model_files("tokenizer", identity.get("name_or_path"), identity.get("tokenizer_sha256"),
                                 ("tokenizer.json",), named_by)

    def encoder(self, identity: dict, named_by: str) -> Link:
        return self._model_files("encoder", identity.get("name_or_path"), identity.get("weights_sha256"),
                                 WEIGHT_FILES, named_by)

    def _model_files(self, kind: str, name: str | None, recorded: str | None, files: tuple,
                     named_by: str) -> Link:
        """A local model folder's file, re-hashed; a hub name with no recorded hash is ``named``."""
        from elf.hub import split_ref

        folder = self.resolve(name or "")
        if recorded is None and not folder.is_dir():
            hub_name, revision = split_ref(str(name))
            return Link(kind, str(name), status=NAMED, named_by=named_by,
                        info={"note": "hub name: nothing local to re-hash", "name": hub_name,
                              "revision": revision or "default branch"})
        target = next((folder / f for f in files if (folder / f).is_file()), folder / files[0])
        return self.file_link(kind, target, recorded, named_by)


def released_info(released: dict) -> dict:
    """What a released checkpoint's config.json says about its origin, for the run config link."""
    keys = ("source", "revision", "commit", "filename", "step", "sha256", "ema_weights")
    info = {f"released_{key}": released.get(key) for key in keys}
    if released and released.get("revision") is None:
        info["released_revision"] = "default branch"
    return info


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------

def cell_names(path: Path, kind: str, root: Path) -> dict[str, set]:
    """Runs, samplers, metrics and seeds the starting file refers to (what CELL may name)."""
    names: dict[str, set] = {"runs": set(), "samplers": set(), "metrics": set(), "seeds": set()}

    def from_aggregate(agg_path: Path) -> None:
        if agg_path.is_file():
            data = read_json(agg_path)
            names["runs"].add(str(data.get("run")))
            names["samplers"].add(str(data.get("sampler")))
            for metric, entry in data.get("metrics", {}).items():
                names["metrics"].add(metric)
                names["seeds"].update(map(str, entry.get("per_seed", {})))

    if kind == "report":
        sidecar = path if path.suffix == ".json" else path.with_suffix(".json")
        if sidecar.is_file():
            for agg in read_json(sidecar).get("aggregates", []):
                names["runs"].add(str(agg.get("run")))
                names["samplers"].add(str(agg.get("sampler")))
                agg_path = Path(agg["path"])
                from_aggregate(agg_path if agg_path.is_absolute() else root / agg_path)
    elif kind == "aggregate":
        from_aggregate(path)
    elif kind in ("scores", "samples"):
        data = read_json(path) if kind == "scores" else {"samples_provenance": samples_header(path)}
        header = data.get("samples_provenance", {})
        names["runs"].add(str(header.get("run")))
        names["samplers"].add(str(header.get("sampler")))
        names["seeds"].add(str(header.get("seed")))
        names["metrics"].update(data.get("metrics", {}))
    return names


def audit(path: str | Path, cell: str | None = None, root: str | Path | None = None) -> Link:
    """The verified chain behind ``path`` (figure/table file or sidecar, aggregate, score, samples
    file or checkpoint directory), restricted to ``cell``; raises ``AuditError`` if ``path`` cannot
    be traced at all. Broken links are reported in the returned tree (``Link.broken()``)."""
    path = Path(path)
    if not path.exists():
        raise AuditError(f"{path} not found")
    kind = artifact_kind(path)
    tracer = Tracer(root)
    try:
        tracer.selection = parse_cell(cell, cell_names(path, kind, tracer.root))
    except AuditError:
        raise
    except (OSError, ValueError) as err:
        raise AuditError(f"{path}: cannot read ({err})") from err
    if kind == "report":
        return tracer.report_item(path)
    if kind == "aggregate":
        return tracer.aggregate(path, None, None, is_root=True)
    if kind == "scores":
        return tracer.scores(path, None, None, is_root=True)
    if kind == "samples":
        return tracer.samples(path, None, None, is_root=True)
    return tracer.checkpoint(path, None, None, None, is_root=True)
