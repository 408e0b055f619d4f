"""The provenance chain of a reported number, verified link by link (``elf audit``).

Every artifact names its inputs and records their hashes; ``audit(path, cell, root)`` starts from a
figure/table file (through its sidecar ``<id>.json``), an aggregate, a score or a samples file, loads
each link, re-hashes it on disk against the hash its parent recorded and returns the chain as a tree
of ``Link`` s. No printing here: ``elf/stages/audit.py`` prints the tree. The record formats are
``elf.artifacts``'; the links live in ``results`` (report → samples) and ``inputs`` (checkpoint →
data).

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

from pathlib import Path

from elf.artifacts.layout import SAMPLES_SUFFIX
from elf.artifacts.names import (METRICS, PER_SEED, RUN_CONFIG, SAMPLES_HEADER, SIDECAR_AGGREGATES,
                                 SIDECAR_FILES, PROVENANCE, SCORES)
from elf.artifacts.records import read_samples_header
from elf.audit.inputs import InputLinks
from elf.audit.links import (BROKEN, CHANGED, MISSING, NAMED, NOT_RECORDED, OK, OK_STATUSES, AuditError,
                             Link, Selection, parse_cell)
from elf.audit.results import ResultLinks, sidecar_of
from elf.artifacts import ArtifactError, read_json

__all__ = ["BROKEN", "CHANGED", "MISSING", "NAMED", "NOT_RECORDED", "OK", "OK_STATUSES", "AuditError",
           "Link", "Selection", "Tracer", "artifact_kind", "audit", "cell_names", "parse_cell"]

REPORT_SUFFIXES = (".png", ".pdf", ".svg", ".csv", ".md", ".tex", ".html")


class Tracer(ResultLinks, InputLinks):
    """Walks the chain from one starting file (see the module docstring)."""


def artifact_kind(path: Path) -> str:
    """report | aggregate | scores | samples | checkpoint, from the file's name and contents."""
    if path.is_dir():
        if (path / RUN_CONFIG).is_file():
            return "checkpoint"
        raise AuditError(f"{path}: a directory that is not a checkpoint (no {RUN_CONFIG})")
    if path.suffix == SAMPLES_SUFFIX:
        return "samples"
    if path.suffix in REPORT_SUFFIXES:
        return "report"
    if path.suffix == ".json":
        try:
            record = read_json(path)
        except (OSError, ArtifactError) as err:
            raise AuditError(f"{path}: cannot read ({err})") from err
        if isinstance(record, dict):
            if SIDECAR_AGGREGATES in record and SIDECAR_FILES in record:
                return "report"
            if SAMPLES_HEADER in record:
                return "scores"
            if METRICS in record and SCORES in record.get(PROVENANCE, {}):
                return "aggregate"
    raise AuditError(f"{path}: not a figure/table (or its sidecar), aggregate, score, samples file "
                     "or checkpoint directory; cannot trace it")


def cell_names(path: Path, kind: str, root: Path) -> dict[str, set]:
    """Runs, samplers, metrics and seeds the starting file refers to (what CELL may name)."""
    names: dict[str, set] = {"runs": set(), "samplers": set(), "metrics": set(), "seeds": set()}

    def from_aggregate(agg_path: Path) -> None:
        if agg_path.is_file():
            data = read_json(agg_path)
            names["runs"].add(str(data.get("run")))
            names["samplers"].add(str(data.get("sampler")))
            for metric, entry in data.get(METRICS, {}).items():
                names["metrics"].add(metric)
                names["seeds"].update(map(str, entry.get(PER_SEED, {})))

    if kind == "report":
        sidecar = sidecar_of(path)
        if sidecar.is_file():
            for agg in read_json(sidecar).get(SIDECAR_AGGREGATES, []):
                names["runs"].add(str(agg.get("run")))
                names["samplers"].add(str(agg.get("sampler")))
                agg_path = Path(agg["path"])
                from_aggregate(agg_path if agg_path.is_absolute() else root / agg_path)
    elif kind == "aggregate":
        from_aggregate(path)
    elif kind in ("scores", "samples"):
        data = read_json(path) if kind == "scores" else {SAMPLES_HEADER: read_samples_header(path)}
        header = data.get(SAMPLES_HEADER, {})
        names["runs"].add(str(header.get("run")))
        names["samplers"].add(str(header.get("sampler")))
        names["seeds"].add(str(header.get("seed")))
        names["metrics"].update(data.get(METRICS, {}))
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
