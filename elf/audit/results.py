"""The links from a figure or table down to the samples: sidecar → aggregate → scores (and their
scorer or reference texts) → samples file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from elf.artifacts.names import (HEADER_CHECKPOINT, HEADER_CHECKPOINT_SHA256, HEADER_RUN_CONFIG_SHA256,
                                 METRICS, PER_SEED, PROVENANCE, PROVENANCE_FILE, REFERENCE_KIND,
                                 REFERENCE_TOKENIZER, SAMPLES_HEADER, SAMPLES_SHA256, SCORED_SAMPLES,
                                 SCORER, SCORER_CONFIG_SHA256, SCORER_SHA256, SCORES, SIDECAR_AGGREGATES,
                                 SIDECAR_DATASET_SCORES, SIDECAR_FILES, SIDECAR_PAPER_VALUES,
                                 TEXTS_SHA256)
from elf.artifacts.records import read_samples_header, scorer_fingerprint, texts_sha256
from elf.audit.base import TracerBase
from elf.audit.links import BROKEN, MISSING, NAMED, AuditError, Link
from elf.artifacts import ArtifactError, read_json


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


def sidecar_of(path: Path) -> Path:
    """The provenance sidecar of a rendered figure or table file (a sidecar is its own)."""
    return path if path.suffix == ".json" else path.with_suffix(".json")


class ResultLinks(TracerBase):
    """Report, aggregate, score and samples links (the samples link hands over to ``checkpoint``)."""

    def report_item(self, path: Path) -> Link:
        sidecar = sidecar_of(path)
        if not sidecar.is_file():
            raise AuditError(f"{path}: no sidecar {sidecar.name} beside it, so nothing records where "
                             f"its numbers came from (not written by `elf report`, or the sidecar "
                             f"was deleted: rerun the report rule)")
        try:
            record = read_json(sidecar)
        except (OSError, ArtifactError) as err:
            raise AuditError(f"{sidecar}: cannot read the sidecar ({err})") from err
        out_dir = sidecar.parent.parent
        if path == sidecar:
            link = self.file_link(record.get("kind", "report"), path, None, None, is_root=True)
        else:
            entry = next((f for f in record.get(SIDECAR_FILES, [])
                          if (out_dir / f["path"]).resolve() == path.resolve()), None)
            link = self.file_link(record.get("kind", "report"), path, entry and entry.get("sha256"),
                                  str(sidecar))
        link.info.update(id=record.get("id"), title=record.get("title"), sidecar=str(sidecar),
                         code_version=record.get(PROVENANCE, {}).get("code_version"))
        for agg in record.get(SIDECAR_AGGREGATES, []):
            if self.selection.wants_pair(agg.get("run"), agg.get("sampler")):
                link.children.append(self.aggregate(agg["path"], agg.get("sha256"), str(sidecar),
                                                    agg.get("run"), agg.get("sampler")))
        if self.selection.narrows_pairs:
            if not link.children:
                raise AuditError(f"{path}: CELL selects none of its aggregates")
            return link
        for ref in record.get(SIDECAR_DATASET_SCORES, []):
            ref_link = self.scores(ref["path"], ref.get("sha256"), str(sidecar))
            ref_link.info.setdefault("dataset", ref.get("dataset"))
            link.children.append(ref_link)
        paper = record.get(SIDECAR_PAPER_VALUES)
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
                         code_version=data.get(PROVENANCE, {}).get("code_version"))
        for key, expected in (("run", run), ("sampler", sampler)):
            if expected is not None and data.get(key) != expected:
                link.fail(BROKEN, f"the aggregate is of {key} {data.get(key)!r}, "
                          f"{named_by} says {expected!r}")
        metrics = data.get(METRICS, {})
        for name in sorted(self.selection.metrics):
            link.info[name] = _metric_entry(metrics.get(name))
        if not self.first_time(link):
            return link
        sources = data.get(PROVENANCE, {}).get(SCORES) or []
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
            return read_json(self.resolve(score_path or "")).get(SAMPLES_HEADER, {}).get("seed")
        except (OSError, ArtifactError, AttributeError):
            return None

    def scores(self, path: str | Path, recorded: str | None, named_by: str | None,
               aggregate_metrics: dict | None = None, is_root: bool = False) -> Link:
        link = self.file_link("scores", path, recorded, named_by, is_root)
        data = self.read(link, read_json)
        if data is None:
            link.info["seed"] = None
            return link
        prov, header = data.get(PROVENANCE, {}), data.get(SAMPLES_HEADER, {})
        metrics = data.get(METRICS, {})
        seed = header.get("seed")
        label = str(seed) if seed is not None else Path(link.path).stem  # as `elf aggregate` labels it
        link.info.update(seed=seed, task=prov.get("task"), code_version=prov.get("code_version"))
        for name in sorted(self.selection.metrics):
            link.info[name] = metrics.get(name)
        for name, entry in (aggregate_metrics or {}).items():
            per_seed = entry.get(PER_SEED, {}) if isinstance(entry, dict) else {}
            if label in per_seed and name in metrics and not _same_number(per_seed[label], metrics[name]):
                link.fail(BROKEN, f"{name} is {metrics[name]} here but {per_seed[label]} for seed "
                          f"{label} in {named_by}")
        if not self.first_time(link):
            return link
        if header.get("kind") == REFERENCE_KIND:
            link.children.append(self.reference_texts(header, link.path))
        elif SCORED_SAMPLES in prov:
            link.children.append(self.samples(prov[SCORED_SAMPLES], prov.get(SAMPLES_SHA256), link.path,
                                              header))
        else:
            link.fail(BROKEN, "the score file names no samples file")
        if SCORER in prov:
            link.children.append(self.scorer(prov, link.path))
        return link

    def scorer(self, prov: dict, named_by: str) -> Link:
        folder = self.resolve(prov[SCORER])
        link = Link("scorer", str(folder), recorded=prov.get(SCORER_SHA256), named_by=named_by)
        if SCORER_SHA256 not in prov and not folder.exists():
            link.status = NAMED
            link.sha256 = prov.get(SCORER_CONFIG_SHA256)
            link.info["note"] = "hub model: its config hash is recorded, nothing local to re-hash"
            return link
        if not folder.is_dir():
            link.fail(MISSING, f"scorer folder not found (named by {named_by})")
            return link
        link.sha256 = scorer_fingerprint(str(folder), None)[SCORER_SHA256]
        self.compare(link, link.sha256, link.recorded)
        record = folder / PROVENANCE_FILE
        if record.is_file():
            settings = read_json(record).get("settings") or {}
            if settings.get("source") == "pretrained":
                link.info.update(name=settings.get("name_or_path"), revision=settings.get("revision"))
        return link

    def reference_texts(self, data: dict, named_by: str) -> Link:
        from elf.evaluate.samples import SamplesFormatError, reference_texts

        source = self.resolve(data.get("dataset", ""))
        link = Link("reference texts", str(source), recorded=data.get(TEXTS_SHA256), named_by=named_by,
                    info={"split": data.get("split"), "n": data.get("n")})
        if not source.exists():
            link.fail(MISSING, f"reference dataset not found (named by {named_by})")
            return link
        try:
            texts, _, _ = reference_texts(source, data.get("split") or "test", data.get("n"),
                                          self.tokenizer_of(data.get(REFERENCE_TOKENIZER)))
        except (SamplesFormatError, OSError, ValueError) as err:
            link.fail(BROKEN, f"cannot read the reference texts: {err}")
            return link
        link.sha256 = texts_sha256(texts)
        self.compare(link, link.sha256, link.recorded)
        return link

    def tokenizer_of(self, ref: str | None):
        """The tokenizer that decoded reference rows (None: they were a text column)."""
        if not ref:
            return None
        from elf.data.tokenizer import load_tokenizer
        from elf.hub import is_hub_ref

        return load_tokenizer(ref if is_hub_ref(ref) else str(self.resolve(ref)))

    def samples(self, path: str | Path, recorded: str | None, named_by: str | None,
                expected_header: dict | None = None, is_root: bool = False) -> Link:
        link = self.file_link("samples", path, recorded, named_by, is_root)
        header = self.read(link, read_samples_header)
        if header is None:
            return link
        link.info.update(run=header.get("run"), sampler=header.get("sampler"), seed=header.get("seed"),
                         n=header.get("n"), sampler_settings=header.get("sampler_settings"),
                         code_version=header.get("code_version"))
        if expected_header is not None and header != expected_header:
            link.fail(BROKEN, f"its header differs from the samples header embedded in {named_by}")
        if not self.first_time(link):
            return link
        if HEADER_CHECKPOINT not in header:
            link.fail(BROKEN, "the samples header names no checkpoint")
            return link
        link.children.append(self.checkpoint(header[HEADER_CHECKPOINT], header.get(HEADER_CHECKPOINT_SHA256),
                                             link.path, header.get(HEADER_RUN_CONFIG_SHA256)))
        return link
