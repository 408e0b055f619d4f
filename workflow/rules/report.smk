# Aggregates (and, for T6/T7/T8/F7c/F9b, the runs' config.json / tokens.json) → every figure and
# table (with captions), the replication review and the manifest.
# Figures and tables are registered for Snakemake's HTML report (`snakemake --report report.html`):
# one category per paper section (the figure's `section` setting), the caption from
# workflow/report/<id>.rst (generic.rst where an id has none).


# Seconds of CPU each: run where Snakemake runs rather than as cluster jobs.
localrules:
    figure,
    table,
    review,
    manifest,


rule figure:
    """Render one figure of the paper from its aggregates: PNG, plotted numbers (CSV), provenance."""
    conda:
        ENV
    input:
        code("report", "plan.py", "model.py", "stages/report.py"),  # parameter counts at paper dims
        EXPERIMENT_FILE,
        "config/paper_values.yaml",
        evals=lambda w: evals_for(w.fid),
        # token bars (F7c, F9b) draw no Dataset line
        dataset=lambda w: [] if reads_run_metadata(w.fid) else dataset_scores_for(w.fid),
        runs=lambda w: run_metadata_for(w.fid),
        shown=lambda w: qualitative_inputs(w.fid),
    output:
        png=in_report(f"{P}/figures/{{fid}}.png", "PNG"),
        csv=f"{P}/figures/{{fid}}.csv",
        provenance=f"{P}/figures/{{fid}}.json",
    wildcard_constraints:
        fid=ids_of_kind("figure"),
    params:
        args=report_args(),
        caption=lambda w: caption_text(w.fid),
    log:
        f"{R}/logs/report/{{fid}}.log",
    shell:
        "elf report {params.args} --figure {wildcards.fid} 2> {log}"


rule table:
    """Render one table of the paper from its aggregates: Markdown, CSV, LaTeX, provenance."""
    conda:
        ENV
    input:
        code("report", "plan.py", "model.py", "stages/report.py"),  # parameter counts at paper dims
        EXPERIMENT_FILE,
        "config/paper_values.yaml",
        evals=lambda w: evals_for(w.fid),
        runs=lambda w: run_metadata_for(w.fid),
    output:
        md=in_report(f"{P}/tables/{{fid}}.md", "Markdown"),
        csv=in_report(f"{P}/tables/{{fid}}.csv", "CSV"),
        tex=in_report(f"{P}/tables/{{fid}}.tex", "LaTeX"),
        provenance=f"{P}/tables/{{fid}}.json",
    wildcard_constraints:
        fid=ids_of_kind("table"),
    params:
        args=report_args(),
        caption=lambda w: caption_text(w.fid),
    log:
        f"{R}/logs/report/{{fid}}.log",
    shell:
        "elf report {params.args} --figure {wildcards.fid} 2> {log}"


rule review:
    """The replication review: every paper value beside ours, with provenance; the trend checks on
    the run and its training-seed replicates."""
    conda:
        ENV
    input:
        code("report", "plan.py", "model.py", "stages/report.py"),
        EXPERIMENT_FILE,
        "config/paper_values.yaml",
        plan.eval_dirs_of(f"{R}/evals", EXP, plan.review_pairs(EXP)),
        [run_metadata_for(fid) for fid in EXP.figures],
        [rendered(fid) for fid in EXP.figures],
    output:
        f"{P}/replication.md",
        f"{P}/trends.md",
        report(f"{P}/replication.html", caption="../report/replication.rst",
               category="Replication review", labels={"file": "replication review"}),
    params:
        args=report_args(),
    log:
        f"{R}/logs/report/review.log",
    shell:
        "elf report {params.args} --review 2> {log}"


rule manifest:
    """reports/all: every figure and table produced, with hashes and provenance."""
    conda:
        ENV
    input:
        code("report"),
        [rendered(fid) for fid in EXP.figures],
        rules.review.output,
    output:
        f"{P}/all",
    params:
        args=report_args(),
    log:
        f"{R}/logs/report/manifest.log",
    shell:
        "elf report {params.args} --manifest 2> {log}"
