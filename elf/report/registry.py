"""Which template draws each figure and table id of the config, with which options, and what it reads
(``elf.plan.Needs``: aggregates, the "Dataset" line, run metadata, samples, a trajectory).

The config names the ids (``figures``: each with its ``kind``, runs and samplers); this registry says
how to render one. An id it does not list is rendered by the fallback of its kind (``generic_figure``,
``generic_table``), so a new id in the config never stops the report. The workflow reads ``needs``
to declare each figure's inputs (``elf.plan.Dag.figure_files``), so no figure id is spelled in a rule.

Light on purpose (data only): the workflow imports it while parsing, so a template is named here as
``module.function`` under ``elf.report`` and imported only when drawn (``elf.report.render.template``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elf.plan import Needs


@dataclass(frozen=True)
class Entry:
    """A figure or table: its template, the template's options, and what it reads."""
    template: str                     # "module.function" under elf.report
    needs: Needs = Needs()
    options: dict = field(default_factory=dict)


DATASET_LINE = Needs(dataset_line=True)
RUN_METADATA = Needs(run_metadata=True)


def _frontier(needs: Needs = Needs(), **options) -> Entry:
    return Entry("templates.frontier", needs, options)


def _steps(needs: Needs = Needs(), **options) -> Entry:
    return Entry("templates.steps_curve", needs, options)


def _table(name: str, needs: Needs = Needs()) -> Entry:
    module = "config_tables" if name in ("T2", "T6", "T7", "T8", "T11") else "tables"
    return Entry(f"{module}.table_{name}", needs)


# Forms and legends from the inventory (figures_and_tables.md §1); paper points from its tables.
# Every frontier reads the Dataset line: its poor-quality shading is relative to it
# (``plotting.poor_quality``).
FIGURES: dict[str, Entry] = {
    "F1": Entry("templates.teaser_bars"),                              # T9's 32-step value
    "F4": _frontier(DATASET_LINE, label_by="model_size", sweep_note=True),  # T10 ODE ELF-B
    "F5a": _frontier(DATASET_LINE, label_by="embedding"),
    "F5b": _frontier(DATASET_LINE, label_by="decode_head"),
    "F5c": _steps(DATASET_LINE, label_by="run"),
    "F6": _frontier(DATASET_LINE, label_by="model_size"),              # T10
    "F7a": _steps(DATASET_LINE, label_by="run"),                       # T9
    "F7b": _steps(DATASET_LINE, label_by="run", baselines="T4", baseline_steps=(8, 16, 32)),
    "F7c": Entry("templates.token_bars", RUN_METADATA, {"paper": "F7c"}),  # T8
    "F8": Entry("qualitative.examples_panels", Needs(samples=True)),
    "F9a": _steps(label_by="run", baselines="T4", log_y=True),
    "F9b": Entry("templates.token_bars", RUN_METADATA, {"paper": "F9b"}),
    "F9c": _frontier(DATASET_LINE, label_by="run", good_entropy_only=True),  # the paper: entropy > 5
    "F11": _frontier(DATASET_LINE, label_by="prediction", panel_by="embedding_width"),
    "F12": _frontier(DATASET_LINE, label_by="bottleneck", panel_by="method"),
    "F13": _frontier(DATASET_LINE, label_by="denoise_prob", panel_by="method"),
    "F14": _frontier(DATASET_LINE, label_by="conditioning", panel_by="method"),
    "F15": _frontier(DATASET_LINE, label_by="optim", panel_by="method"),
    "F16a": _steps(DATASET_LINE, label_by="grid"),
    "F16b": _frontier(DATASET_LINE, label_by="run", sweep="gamma"),
    "F17": Entry("templates.input_cfg_panels"),                        # T1 points hollow
    "F18": Entry("qualitative.trajectory_text", Needs(trajectory=True)),
}
TABLES: dict[str, Entry] = {
    "T1": _table("T1"), "T2": _table("T2"), "T3": _table("T3"), "T4": _table("T4"),
    "T5": _table("T5"), "T6": _table("T6", RUN_METADATA), "T7": _table("T7", RUN_METADATA),
    "T8": _table("T8", RUN_METADATA), "T9": _table("T9"), "T10": _table("T10"),
    "T11": _table("T11"),
}
FALLBACK = {"figure": Entry("templates.generic_figure"), "table": Entry("tables.generic_table")}


def entry(figure_id: str, kind: str) -> Entry:
    """The registry entry of an id of ``kind`` (figure / table), else its kind's fallback."""
    return (FIGURES if kind == "figure" else TABLES).get(figure_id, FALLBACK[kind])


def needs(figure_id: str, kind: str) -> Needs:
    return entry(figure_id, kind).needs



