"""The replication review: every paper value the configuration can reproduce, beside ours.

``compare(frame, points, ids_of_pair)`` pairs each paper value with each of our (run, sampler) rows
that it matches (rule: ``elf.report.paper`` docstring, repeated in the review) and judges it
consistent, inconsistent or not resolved (``elf.report.verdict``: our SE from the samples' own
spread even for one seed, the paper's printed SE or a stated assumption, and a noise limit).
``build_review`` lays out the document: a summary (verdict counts per table and per source), a banner when ``scale == "embedded"`` (a small-scale run on generated corpora, not a replication),
the comparisons with their aggregate files, the configuration and arithmetic checks of T6/T7/T8
(``configuration_checks``: model sizes, epochs, D0 hyperparameters and training tokens from the
runs' config.json / tokens.json — settings, not measurements, kept apart from the comparisons), the
paper values no configured run matches, observed qualitative trends (SC-CFG, steps, SDE against
ODE), and the settings the paper does not state.
``write_review(doc, out_dir)`` writes ``replication.md`` and ``replication.html`` atomically.
Run through the stage: ``elf report --review ...`` (see ``elf/stages/report.py``).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from elf import methods
from elf.artifacts.layout import review_paths
from elf.io import atomic_path
from elf.report import cells, config_tables, verdict
from elf.report.cells import DASH, fmt_pm, paper_pm
from elf.report.paper import match_paper
from elf.report.results import verdict_se
from elf.report.runs import BILLION, our_token_bars, paper_pd_tokens, paper_tokens
from elf.report.trends import TREND_RULE

MATCHING_RULE = [
    "the paper's model maps to the run's `paper_run` (T1 ELF-B De-En → R04, XSum → R05; T9 ELF-B → "
    "R01; T10 ELF-B/M/L → R01/R02/R03; T4 ELF-B+PD → R34; T5 round k → R(29+k));",
    "the sampler method (ODE/SDE) and the number of steps are equal;",
    "the SC-CFG scale is equal;",
    "γ is equal when the paper value is from the SDE sampler and states γ;",
    "the input-CFG scale is equal when the paper states one (T1);",
    "our sampler uses the logit-normal time grid (every tabulated paper value does);",
    "our aggregate reports that metric;",
    "the split is equal where the value states one: the paper's T1 is on the test split, the "
    "authors' README (README rows: their released checkpoints, ELF-B De-En → R04, XSum → R05) on "
    "the validation split of their sets.",
]
EMBEDDED_BANNER = ("This is a small-scale run of the pipeline on generated corpora (the embedded "
                   "default: tiny models, a tokenizer, encoder and Gen. PPL scorer trained here on "
                   "generated text), not a replication of the paper. Differences from the paper's "
                   "numbers are expected and say nothing about the method; the comparison shows that "
                   "every number is produced, matched and traced.")

DEVIATION = "Deviation"   # an `unstated` entry that differs from what the paper states

COMPARISON_COLUMNS = ["src", "point", "model", "paper_run", "run", "sampler", "setting", "split",
                      "metric", "paper", "paper_se", "paper_se_used", "paper_se_basis", "ours", "ours_se", "diff",
                      "combined_se", "band", "verdict", "reason", "used_by", "aggregate_path"]


def split_text(value: Any) -> str:
    """A row's split, or '–' (unconditional rows have none; pandas may hold it as NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return DASH
    return str(value)


def _steps_text(steps: Any) -> str:
    return f"{int(steps)} step{'s' * (int(steps) != 1)}"


def setting_text(row: pd.Series | dict) -> str:
    parts = [methods.label(row["method"]), _steps_text(row["steps"])]
    if methods.uses_gamma(row["method"]):
        parts.append(f"γ={float(row['gamma']):g}")
    parts.append(f"SC-CFG {float(row['sc_cfg']):g}")
    if row.get("task") in ("translation", "summarization"):
        parts.append(f"input CFG {float(row['input_cfg']):g}")
        if int(row.get("n_examples") or 0):
            parts.append(f"first {int(row['n_examples'])} examples")
    return ", ".join(parts)


def compare(frame: pd.DataFrame, points: pd.DataFrame,
            ids_of_pair: dict[tuple[str, str], list[str]] | None = None) -> pd.DataFrame:
    """One row per (paper value, matching row of ours) with its verdict (``elf.report.verdict``)."""
    out = []
    for _, match in match_paper(frame, points).iterrows():
        row = frame.loc[match["row_index"]]
        ours_se = verdict_se(row, match["metric"])
        judged = verdict.judge(float(row[match["metric"]]), float(match["value"]), ours_se,
                               float(match["se"]), str(match["src"]), str(match["metric"]))
        out.append({
            "src": match["src"], "point": match["point"], "model": match["model"],
            "paper_run": match["paper_run"], "run": row["run"], "sampler": row["sampler"],
            "setting": setting_text(row), "split": split_text(row.get("split")),
            "metric": match["metric"], "paper": match["value"],
            "paper_se": match["se"], "paper_se_used": judged["se_paper"],
            "paper_se_basis": judged["basis"],
            "ours": float(row[match["metric"]]), "ours_se": ours_se,
            "diff": judged["diff"], "combined_se": judged["combined_se"], "band": judged["band"],
            "verdict": judged["verdict"], "reason": judged["reason"],
            "used_by": ", ".join((ids_of_pair or {}).get((row["run"], row["sampler"]), [])),
            "aggregate_path": row["aggregate_path"],
        })
    return pd.DataFrame(out, columns=COMPARISON_COLUMNS)


def unmatched(points: pd.DataFrame, comparisons: pd.DataFrame) -> pd.DataFrame:
    """Paper values of our paper runs that no configured (run, sampler) matches."""
    if points.empty:
        return points
    ours = points[points["paper_run"].notna()]
    return ours[~ours["point"].isin(set(comparisons["point"]))]


# --------------------------------------------------------------------------------------------------
# Configuration and arithmetic checks (T6, T7, T8): settings and token counts, not measurements
# --------------------------------------------------------------------------------------------------

CHECKED_IDS = ("T6", "T7", "T8")
CHECK_COLUMNS = ["src", "kind", "item", "run", "paper", "ours", "same", "source"]
CHECKS_TEXT = ("The paper's configuration tables beside ours: model sizes and epochs (T6), default "
               "hyperparameters (T7) and training tokens (T8), from each run's config.json / "
               "tokens.json. These are settings and arithmetic, not measurements: 'same' means equal "
               "(parameter counts and epochs within 1%, tokens within the paper's rounding to 0.1B), "
               "and they are not counted with the comparisons above.")
PARAMS_TOLERANCE = 0.01    # relative: the paper prints whole millions (342M for our 342.55M)
TOKENS_TOLERANCE = 0.05e9  # absolute: the paper prints tokens to 0.1B


def _check(src: str, kind: str, item: str, run: str, paper: Any, ours: Any, same: str,
           source: str) -> dict:
    return dict(zip(CHECK_COLUMNS, (src, kind, item, run, str(paper), str(ours), same, source)))


def _t6_checks(runs_meta: dict[str, dict], paper_values: dict) -> list[dict]:
    entries = {e["model"]: e for e in config_tables.t6_entries(paper_values)}
    out = []
    for model, entry in entries.items():
        params = config_tables.paper_dims_params(model)
        same = cells.same_setting(entry["params"], params, PARAMS_TOLERANCE)
        out.append(_check("T6", "arithmetic", f"{model} parameters, our network at the paper's dims",
                          DASH, entry["params"], cells.count_text(params), same, "elf.model"))
    for run, meta in runs_meta.items():
        record = config_tables.run_model_record(run, meta)
        entry = entries.get(record["paper_model"])
        if entry is None:
            continue
        out.append(_check("T6", "configuration", f"{entry['model']} parameters", run,
                          entry["params"], cells.count_text(record["params"]),
                          cells.same_setting(entry["params"], record["params"], PARAMS_TOLERANCE),
                          record["path"]))
        epochs = record["epochs"]
        out.append(_check("T6", "configuration", f"{entry['model']} training epochs", run,
                          entry["owt_epochs"], DASH if epochs is None else f"{epochs:.2f}",
                          cells.same_setting(entry["owt_epochs"], epochs, 0.01), record["path"]))
    return out


def _t7_checks(runs_meta: dict[str, dict], paper_values: dict) -> list[dict]:
    table_7 = paper_values.get("table_7") or {}
    out = []
    for run, meta in runs_meta.items():
        for item in config_tables.d0_items(meta["config"], table_7):
            if item["same"] != DASH:
                out.append(_check("T7", "configuration", item["name"], run,
                                  cells.setting_cell(item["paper"]),
                                  cells.setting_cell(item["ours"]), item["same"],
                                  meta["config_path"]))
    return out


def _t8_checks(runs_meta: dict[str, dict], paper_values: dict) -> list[dict]:
    elf_tokens = paper_tokens(paper_values).get("ELF-B")
    pd_tokens = paper_pd_tokens(paper_values)
    out = []
    for bar in our_token_bars(runs_meta):
        paper = pd_tokens if bar.rounds else elf_tokens
        if paper is None or bar.total is None:
            continue
        name = "ELF-B+PD (v2 Fig. 9b)" if bar.rounds else "ELF-B"
        out.append(_check("T8", "arithmetic", f"{name} training tokens (B)", bar.run,
                          f"{paper / BILLION:.1f}", cells.tokens_b(bar.total),
                          cells.same_setting(paper, bar.total, TOKENS_TOLERANCE), bar.path))
    return out


def configuration_checks(runs_meta_by_id: dict[str, dict[str, dict]],
                         paper_values: dict) -> pd.DataFrame:
    """One row per paper setting of T6/T7/T8 with a counterpart here (``CHECK_COLUMNS``), for the
    ids present in ``runs_meta_by_id`` (id → ``load_runs_meta`` of its runs)."""
    builders = {"T6": _t6_checks, "T7": _t7_checks, "T8": _t8_checks}
    rows = []
    for figure_id, runs_meta in runs_meta_by_id.items():
        if figure_id in builders:
            rows += builders[figure_id](runs_meta, paper_values)
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


# --------------------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------------------

@dataclass
class Document:
    """A review as blocks: ("h1"|"h2"|"p"|"banner"|"md", text), ("ul", [items]), ("table", header,
    rows); "md" is Markdown written as it is (the HTML shows it preformatted)."""
    blocks: list[tuple] = field(default_factory=list)

    def add(self, *block: Any) -> None:
        self.blocks.append(block)


def _num(value: Any, digits: int = 2) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "–"
    return f"{value:.{digits}f}" if math.isfinite(value) else "–"


def summary_rows(comparisons: pd.DataFrame) -> list[list[str]]:
    """Verdict counts per table (``src``) and per source (the paper, the authors' README)."""
    rows = []
    for src, group in comparisons.groupby("src", sort=False):
        c = verdict.counts(group["verdict"])
        rows.append(["table", str(src), str(len(group)), *(str(c[v]) for v in verdict.VERDICTS)])
    source = comparisons["src"].map(lambda s: "authors' README" if s == verdict.README_SOURCE
                                    else "paper")
    for name, group in comparisons.groupby(source, sort=False):
        c = verdict.counts(group["verdict"])
        rows.append(["source", name, str(len(group)), *(str(c[v]) for v in verdict.VERDICTS)])
    return rows


def build_review(comparisons: pd.DataFrame, not_matched: pd.DataFrame, trends: str,
                 scale: str, unstated_settings: Iterable[str] = (),
                 baseline_count: int = 0, config_checks: pd.DataFrame | None = None,
                 data: Iterable[str] = ()) -> Document:
    """Lay out the replication review (see module docstring); ``config_checks``: the rows of
    ``configuration_checks`` (a section of their own, apart from the measured comparisons);
    ``data``: a line per dataset (``results.dataset_layout``): origin, revisions, layout;
    ``trends``: the trend checks and training-seed spread as Markdown (``elf.report.trends``)."""
    checks = config_checks if config_checks is not None else pd.DataFrame(columns=CHECK_COLUMNS)
    same = int((checks["same"] == "yes").sum())
    doc = Document()
    doc.add("h1", "Replication review: ELF (arXiv 2605.10938)")
    if scale == "embedded":
        doc.add("banner", EMBEDDED_BANNER)
    n = len(comparisons)
    doc.add("h2", "Summary")
    doc.add("ul", [f"Scale: {scale}.",
                   f"Paper values compared: {n}: {verdict.counts_text(comparisons['verdict'])} "
                   f"(rule below).",
                   f"Paper values of our paper runs with no matching run/sampler in this "
                   f"configuration: {len(not_matched)}.",
                   f"Paper values of baselines and literature (no run of ours): {baseline_count}.",
                   f"Configuration and arithmetic checks (T6/T7/T8; not measurements): "
                   f"{len(checks)}; same: {same}; different: {len(checks) - same}."])
    if n:
        doc.add("table", ["Counted by", "Group", "Compared", *verdict.VERDICTS], summary_rows(comparisons))
    doc.add("h2", "Data and splits")
    doc.add("ul", (list(data) or ["(no datasets supplied)"]) +
            ["Each comparison below names the split its number is on (conditional runs; "
             "'–' for unconditional ones)."])
    doc.add("h2", "Matching rule")
    doc.add("p", "A paper value is compared with one of our (run, sampler) results when:")
    doc.add("ul", MATCHING_RULE)
    doc.add("h2", "Verdict rule")
    doc.add("p", verdict.VERDICT_RULE)
    doc.add("h2", "Comparisons")
    header = ["Paper", "Model", "Run / sampler", "Setting", "Split", "Metric", "Paper value",
              "Paper SE used", "Ours", "Diff", "Comb. SE", "Band", "Verdict", "Why", "Used by",
              "Provenance"]
    rows = [[c["src"], str(c["model"]), f"{c['run']} / {c['sampler']}", c["setting"], c["split"],
             c["metric"], paper_pm(c["paper"], c["paper_se"]),
             f"{_num(c['paper_se_used'], 3)} ({c['paper_se_basis']})",
             fmt_pm(c["ours"], c["ours_se"]), f"{c['diff']:+.2f}", _num(c["combined_se"], 3),
             _num(c["band"], 3), c["verdict"], c["reason"], c["used_by"], c["aggregate_path"]]
            for _, c in comparisons.iterrows()]
    if rows:
        doc.add("table", header, rows)
    else:
        doc.add("p", "No paper value matches this configuration's runs and samplers.")
    doc.add("h2", "Configuration and arithmetic checks (not measurements)")
    doc.add("p", CHECKS_TEXT)
    if checks.empty:
        doc.add("p", "None: the configuration lists no T6/T7/T8 runs.")
    else:
        doc.add("table", ["Paper", "Kind", "Item", "Run", "Paper value", "Ours", "Same",
                          "Provenance"],
                [[c["src"], c["kind"], c["item"], c["run"], c["paper"], c["ours"], c["same"],
                  c["source"]] for _, c in checks.iterrows()])
    doc.add("h2", "Paper values not matched by this configuration")
    if not_matched.empty:
        doc.add("p", "None.")
    else:
        counts = not_matched.groupby(["src", "paper_run"], sort=False).size()
        doc.add("ul", [f"{src} / {run}: {count} values" for (src, run), count in counts.items()])
    doc.add("h2", "Trend checks: the paper's claims on our numbers")
    doc.add("p", TREND_RULE)
    doc.add("md", trends)
    unstated_settings = list(unstated_settings)
    deviations = [u for u in unstated_settings if u.startswith(DEVIATION)]
    doc.add("h2", "Deviations from what the paper states")
    doc.add("ul", deviations or ["None listed (`unstated` entries that begin with 'Deviation')."])
    doc.add("h2", "Settings not stated in the paper")
    doc.add("ul", [u for u in unstated_settings if not u.startswith(DEVIATION)] or
            ["(none supplied)"])
    return doc


def to_markdown(doc: Document) -> str:
    out = []
    for kind, *body in doc.blocks:
        if kind == "h1":
            out += [f"# {body[0]}", ""]
        elif kind == "h2":
            out += [f"## {body[0]}", ""]
        elif kind == "p":
            out += [body[0], ""]
        elif kind == "banner":
            out += [f"> **⚠ NOT A REPLICATION.** {body[0]}", ""]
        elif kind == "md":
            out += [body[0].rstrip(), ""]
        elif kind == "ul":
            out += [item if item.startswith("  - ") else f"- {item}" for item in body[0]] + [""]
        elif kind == "table":
            header, rows = body
            cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


HTML_STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;line-height:1.4}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px}
tr.out td{background:#fdecea}tr.in td{background:#edf7ed}tr.open td{background:#fff8e1}
.banner{border:3px solid #c62828;background:#fff3f3;padding:1em;font-size:1.1em;margin:1em 0}"""


ROW_CSS = {"yes": " class='in'", "no": " class='out'", verdict.CONSISTENT: " class='in'",
           verdict.INCONSISTENT: " class='out'", verdict.UNRESOLVED: " class='open'"}


def to_html(doc: Document) -> str:
    esc = html.escape
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>ELF replication review"
           f"</title><style>{HTML_STYLE}</style></head><body>"]
    for kind, *body in doc.blocks:
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{esc(body[0])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(body[0])}</p>")
        elif kind == "banner":
            out.append(f"<div class='banner'><strong>⚠ NOT A REPLICATION.</strong> "
                       f"{esc(body[0])}</div>")
        elif kind == "md":
            out.append(f"<pre>{esc(body[0])}</pre>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{esc(i.strip().removeprefix('- '))}</li>"
                                        for i in body[0]) + "</ul>")
        elif kind == "table":
            header, rows = body
            out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
            judged = [h for h in ("Verdict", "Same") if h in header]
            column = header.index(judged[0]) if judged else None
            for row in rows:
                css = "" if column is None else ROW_CSS.get(row[column], "")
                out.append(f"<tr{css}>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
            out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_review(doc: Document, out_dir: str | Path) -> list[Path]:
    """Write ``replication.md`` and ``replication.html`` atomically."""
    md_path, html_path = review_paths(out_dir)
    with atomic_path(md_path) as tmp:
        tmp.write_text(to_markdown(doc))
    with atomic_path(html_path) as tmp:
        tmp.write_text(to_html(doc))
    return [md_path, html_path]
