"""Which template draws each figure and table id of the config, with which options, and what it reads
(``elf.pairs.Needs``: aggregates, the "Dataset" line, run metadata, samples, a trajectory).

The config names the ids (``figures``: each with its ``kind``, runs and samplers); this registry says
how to render one. An id it does not list is rendered by the fallback of its kind (``generic_figure``,
``generic_table``), so a new id in the config never stops the report. The workflow reads ``needs``
to declare each figure's inputs (``elf.plan.Dag.figure_files``), so no figure id is spelled in a rule.

Light on purpose (data only): the workflow imports it while parsing, so a template is named here as
``module.function`` under ``elf.report`` and imported only when drawn (``elf.report.render.template``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elf.pairs import Needs


@dataclass(frozen=True)
class Entry:
    """A figure or table: its template, the template's options, what it reads, and the paper's
    tables whose values it shows besides its own (source → the fields a value must have)."""
    template: str                     # "module.function" under elf.report
    needs: Needs = Needs()
    options: dict = field(default_factory=dict)
    points_from: dict = field(default_factory=dict)


DATASET_LINE = Needs(dataset_line=True)
RUN_METADATA = Needs(run_metadata=True)


def _frontier(needs: Needs = Needs(), points_from: dict | None = None, **options) -> Entry:
    return Entry("templates.frontier", needs, options, points_from or {})


def _steps(needs: Needs = Needs(), points_from: dict | None = None, **options) -> Entry:
    return Entry("templates.steps_curve", needs, options, points_from or {})


def _table(name: str, needs: Needs = Needs(), points_from: dict | None = None) -> Entry:
    module = "config_tables" if name in ("T2", "T6", "T7", "T8", "T11") else "tables"
    return Entry(f"{module}.table_{name}", needs, points_from=points_from or {})


# The paper's legend words for runs whose role a figure names (inventory §3), by paper run.
F5A_LEGEND = {"R01": "Pretrained encoder", "R07": "Scratch encoder", "R08": "Pretrained emb. layer",
              "R09": "Gaussian emb. layer", "R10": "Learnable emb. layer"}
F5B_LEGEND = {"R01": "Shared-weight denoiser & decoder", "R12": "Separate denoiser & decoder"}

# The paper's bars beside ours (label, the Table 8 model of its base, the model whose total it is
# topped up to); ``PD_TOTAL``: ELF+PD's total as the paper states it (v2 Fig. 9b: 90B, 2.0× base).
PD_TOTAL = "stated ELF+PD total"
F7C_BARS = (("ELF", "ELF-B", None), ("MDLM (+SDTT)", "MDLM", "MDLM+SDTT"),
            ("Duo (+DCD)", "Duo", "Duo+DCD"), ("FLM (FMLM)", "FLM", "FMLM"))
F9B_BARS = (("ELF+PD", "ELF-B", PD_TOTAL), ("MDLM+SDTT", "MDLM", "MDLM+SDTT"),
            ("Duo+DCD", "Duo", "Duo+DCD"), ("FMLM", "FLM", "FMLM"))
# What a steps figure says of the paper's baselines it cannot draw (their values are not tabulated)
# or draws on an assumption.
F7A_NOT_DRAWN = ("Baselines not drawn: the paper's MDLM, Duo and FLM curves (and LangFlow, named in "
                 "its text) are not tabulated in the paper, so only ELF and the Dataset line are shown.")
F7B_ASSUMED = ("The paper does not tabulate F7b's baseline curves; they are assumed to be Table 4's "
               "8/16/32-step rows.")

# Forms and legends from the inventory (figures_and_tables.md §1); paper points from its tables.
# Every frontier reads the Dataset line: its poor-quality shading is relative to it
# (``plotting.poor_quality``).
FIGURES: dict[str, Entry] = {
    "F1": Entry("templates.teaser_bars", points_from={"T9": {}}),      # T9's 32-step value
    "F4": _frontier(DATASET_LINE, {"T10": {"model": "ELF-B", "sampler": "ode"}}, label_by="model_size",
                    sweep_note=True, sweep_paper={"src": "T10", "model": "ELF-B", "method": "ode"}),
    "F5a": _frontier(DATASET_LINE, label_by="embedding", legend=F5A_LEGEND),
    "F5b": _frontier(DATASET_LINE, label_by="decode_head", legend=F5B_LEGEND),
    "F5c": _steps(DATASET_LINE, label_by="run"),
    "F6": _frontier(DATASET_LINE, {"T10": {}}, label_by="model_size"),
    "F7a": _steps(DATASET_LINE, {"T9": {}}, label_by="run", baselines_not_drawn=F7A_NOT_DRAWN),
    "F7b": _steps(DATASET_LINE, {"T9": {}}, label_by="run", baselines="T4", baseline_steps=(8, 16, 32),
                  baselines_assumed=F7B_ASSUMED),
    "F7c": Entry("templates.token_bars", RUN_METADATA, {"paper_bars": F7C_BARS}),  # T8
    "F8": Entry("qualitative.examples_panels", Needs(samples=True)),
    "F9a": _steps(points_from={"T4": {}}, label_by="run", baselines="T4", log_y=True),
    "F9b": Entry("templates.token_bars", RUN_METADATA, {"paper_bars": F9B_BARS}),
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
    "T1": _table("T1", points_from={"README": {}}), "T2": _table("T2"), "T3": _table("T3"), "T4": _table("T4"),
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


def shown_in(src: str, value: dict) -> tuple[str, ...]:
    """The ids that show a paper value of table ``src`` besides ``src`` itself (F6 shows Table 10's;
    F4 its ELF-B ODE rows)."""
    return tuple(fid for fid, e in {**FIGURES, **TABLES}.items() if src in e.points_from
                 and all(value.get(key) == want for key, want in e.points_from[src].items()))



