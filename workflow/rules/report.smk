# Aggregates (and, where the registry says so, the "Dataset" line, the runs' config.json /
# tokens.json, samples or a trajectory: elf/report/registry.py) → every figure and table (with
# captions), the replication review and the manifest. A figure's job gets its slice of the config
# (--settings, elf.plan.figure_config): editing another run, sampler or figure re-renders nothing here.
# Figures and tables are registered for Snakemake's HTML report (`snakemake --report report.html`):
# one category per paper section (the figure's `section` setting), the caption from
# workflow/report/<id>.rst (generic.rst where an id has none).


# Seconds of CPU each: run where Snakemake runs rather than as cluster jobs.
localrules:
    experiment,
    review_evals,
    figure,
    table,
    review,
    manifest,


rule experiment:
    """results/experiment.json: the configuration the review, the manifest and explore.ipynb read;
    rewritten when the config changes (Snakemake's params trigger). Written by Snakemake itself: as
    one shell argument, the config of some 1,400 runs and more exceeds the kernel's 128 KiB limit."""
    output:
        PLAN.experiment_file,
    params:
        text=lambda w: json.dumps(config, indent=1, sort_keys=True),
    log:
        f"{R}/logs/report/experiment.log",
    run:
        Path(output[0]).write_text(params.text)


rule review_evals:
    """The evaluation folders the review reads, one per line (the review's --evals-from): in a large
    config, too many for one shell command line. Rewritten when the list changes."""
    output:
        PLAN.review_evals_file,
    params:
        text=lambda w: "".join(f"{folder}\n" for folder in PLAN.review_evals()),
    log:
        f"{R}/logs/report/review_evals.log",
    run:
        Path(output[0]).write_text(params.text)


rule figure:
    """Render one figure of the paper from its aggregates: PNG, plotted numbers (CSV), provenance."""
    conda:
        ENV
    input:
        code("report"),
        "config/paper_values.yaml",
        evals=lambda w: PLAN.evals_for(w.fid),
        dataset=lambda w: PLAN.dataset_scores_for(w.fid),
        runs=lambda w: PLAN.run_metadata_for(w.fid),
        shown=lambda w: PLAN.shown_for(w.fid),
    output:
        png=in_report(PLAN.rendered_pattern("figure", ".png"), "PNG"),
        csv=PLAN.rendered_pattern("figure", ".csv"),
        provenance=PLAN.rendered_pattern("figure", ".json"),
    wildcard_constraints:
        fid=PLAN.ids_of_kind("figure"),
    params:
        args=PLAN.report_args(),
        settings=lambda w: PLAN.figure_settings_json(config, w.fid),
        caption=lambda w: caption_text(w.fid),
    log:
        f"{R}/logs/report/{{fid}}.log",
    shell:
        "elf report {params.args} --evals {input.evals} --settings {params.settings:q} "
        "--figure {wildcards.fid} 2> {log}"


rule table:
    """Render one table of the paper from its aggregates: Markdown, CSV, LaTeX, provenance."""
    conda:
        ENV
    input:
        code("report"),
        "config/paper_values.yaml",
        evals=lambda w: PLAN.evals_for(w.fid),
        runs=lambda w: PLAN.run_metadata_for(w.fid),
    output:
        md=in_report(PLAN.rendered_pattern("table", ".md"), "Markdown"),
        csv=in_report(PLAN.rendered_pattern("table", ".csv"), "CSV"),
        tex=in_report(PLAN.rendered_pattern("table", ".tex"), "LaTeX"),
        provenance=PLAN.rendered_pattern("table", ".json"),
    wildcard_constraints:
        fid=PLAN.ids_of_kind("table"),
    params:
        args=PLAN.report_args(),
        settings=lambda w: PLAN.figure_settings_json(config, w.fid),
        caption=lambda w: caption_text(w.fid),
    log:
        f"{R}/logs/report/{{fid}}.log",
    shell:
        "elf report {params.args} --evals {input.evals} --settings {params.settings:q} "
        "--figure {wildcards.fid} 2> {log}"


rule review:
    """The replication review: every paper value beside ours, with provenance; the trend checks on
    the run and its training-seed replicates."""
    conda:
        ENV
    input:
        code("report"),
        "config/paper_values.yaml",
        PLAN.review_inputs(),
        PLAN.review_evals(),
        experiment=rules.experiment.output,
        evals=rules.review_evals.output,
    output:
        PLAN.review_md,
        PLAN.trends_file,
        report(
            PLAN.review_html,
            caption="../report/replication.rst",
            category="Replication review",
            labels={"file": "replication review"},
        ),
    params:
        args=PLAN.report_args(),
    log:
        f"{R}/logs/report/review.log",
    shell:
        "elf report {params.args} --config {input.experiment} --review --evals-from {input.evals} 2> {log}"


rule manifest:
    """reports/all: every figure and table produced, with hashes and provenance."""
    conda:
        ENV
    input:
        code("report"),
        [PLAN.figure_files(fid) for fid in EXP.figures],
        rules.review.output,
        experiment=rules.experiment.output,
    output:
        PLAN.manifest_file,
    params:
        args=PLAN.report_args(),
    log:
        f"{R}/logs/report/manifest.log",
    shell:
        "elf report {params.args} --config {input.experiment} --manifest 2> {log}"
