"""``elf.report.explore`` and ``reports/explore.ipynb``: aggregates in the format of ``elf aggregate``
load into one tidy table whose numbers match hand-computed means and SEs; the notebook runs top to
bottom on a synthetic results folder (results root injected after its ``parameters`` cell, as
papermill does) and shows those numbers."""

import json
import math
from pathlib import Path

import pytest

from elf.evaluate.aggregate import aggregate_metrics
from elf.report.explore import (frontier, load_aggregates, per_seed, pivot_metrics, plot_frontier,
                                sampler_settings, select)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "reports" / "explore.ipynb"

# (run, sampler) → seed → metrics. base/ode: Gen. PPL mean (120.5 + 126) / 2 = 123.25,
# SE = sample std / sqrt(2) = |126 − 120.5| / 2 = 2.75; entropy mean 5.25, SE 0.05.
SCORES = {
    ("base", "ode"): {"0": {"gen_ppl": 120.5, "entropy": 5.2}, "1": {"gen_ppl": 126.0, "entropy": 5.3}},
    ("base", "sde"): {"0": {"gen_ppl": 80.0, "entropy": 5.0}, "1": {"gen_ppl": 90.0, "entropy": 5.1}},
    ("wmt", "ode"): {"0": {"bleu": 21.5, "bleu_signature": "nrefs:1|case:mixed"}},
}


def write_results(root: Path) -> Path:
    """Aggregate JSONs as ``elf aggregate`` writes them (same ``aggregate_metrics``), and the
    experiment.json the DAG leaves beside them."""
    for (run, sampler), by_seed in SCORES.items():
        record = {"provenance": {"command": "test"}, "run": run, "sampler": sampler,
                  "metrics": aggregate_metrics(by_seed)}
        path = root / "evals" / run / "all" / "aggregates" / f"{sampler}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    experiment = {"samplers": {"ode": {"method": "ode", "steps": 4, "sc_cfg": 2.0},
                               "sde": {"method": "sde", "steps": 4, "gamma": 1.5}}}
    (root / "experiment.json").write_text(json.dumps(experiment))
    return root


@pytest.fixture
def results(tmp_path):
    return write_results(tmp_path / "results")


def test_rows_carry_mean_se_n_and_seeds(results):
    frame = load_aggregates(results)
    assert len(frame) == 5  # 2 + 2 metrics of base, bleu of wmt (its signature is no metric)
    row = select(frame, run="base", sampler="ode", metric="gen_ppl").iloc[0]
    assert row["mean"] == pytest.approx(123.25) and row["se"] == pytest.approx(2.75)
    assert row["n"] == 2 and row["per_seed"] == {"0": 120.5, "1": 126.0}
    assert row["path"].endswith("evals/base/all/aggregates/ode.json")
    one_seed = select(frame, run="wmt", metric="bleu").iloc[0]
    assert (one_seed["mean"], one_seed["se"], one_seed["n"]) == (21.5, 0.0, 1)


def test_pivot_per_seed_and_settings(results):
    frame = load_aggregates(results)
    means = pivot_metrics(frame, run="base")
    assert list(means.index) == ["ode", "sde"] and list(means.columns) == ["entropy", "gen_ppl"]
    assert means.loc["sde", "gen_ppl"] == pytest.approx(85.0)
    assert pivot_metrics(frame, run="base", value="se").loc["ode", "entropy"] == pytest.approx(0.05)
    everything = pivot_metrics(frame)
    assert everything.loc[("wmt", "ode"), "bleu"] == 21.5 and math.isnan(
        everything.loc[("base", "ode"), "bleu"])
    seeds = per_seed(select(frame, metric="gen_ppl"))
    assert sorted(seeds["value"]) == [80.0, 90.0, 120.5, 126.0]
    settings = sampler_settings(results).set_index("sampler")
    assert settings.loc["sde", "gamma"] == 1.5 and settings.loc["ode", "grid"] == "logit_normal"


def test_frontier_and_plot(results):
    frame = load_aggregates(results)
    points = frontier(frame, "base")
    assert list(points["sampler"]) == ["ode", "sde"]
    assert points.set_index("sampler").loc["ode", "gen_ppl_se"] == pytest.approx(2.75)
    assert frontier(frame, "wmt").empty  # no Gen. PPL / entropy there
    ax = plot_frontier(frame, "base")
    assert [t.get_text() for t in ax.texts] == ["ode", "sde"]


def test_missing_folder_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no evaluations folder .*evals"):
        load_aggregates(tmp_path)


def test_notebook_runs_on_a_results_folder(results):
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "../results" in nb.cells[tagged[0]].source
    nb.cells.insert(tagged[0] + 1, nbformat.v4.new_code_cell(f"results = {str(results)!r}"))
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    shown = json.dumps([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"])
    assert "123.25" in shown  # the base/ode Gen. PPL mean, in the pivot
    assert "2.75" in shown  # and its SE
    assert "image/png" in shown  # the frontier was drawn
