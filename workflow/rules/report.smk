# Aggregates → every figure and table (with captions), the replication review and the manifest.


def report_args():
    return (f"--config {EXPERIMENT_FILE} --aggregates-root {R}/aggregates "
            f"--dataset-scores-root {R}/scores/_dataset --paper-values config/paper_values.yaml "
            f"--out {P}")


def captioned(fid, path):
    fig = EXP.figures[fid]
    return report(path, caption=f"report/{fid}.rst" if Path(workflow.basedir, "report",
                  f"{fid}.rst").exists() else "report/generic.rst", category=fig.section,
                  labels={"id": fid, "file": Path(path).name})


rule figure:
    """Render one figure or table of the paper from its aggregates."""
    input:
        code("report"),
        EXPERIMENT_FILE,
        "config/paper_values.yaml",
        aggregates=lambda w: aggregates_for(w.fid),
        dataset=lambda w: dataset_scores_for(w.fid),
    output:
        f"{P}/.done/{{fid}}",
    params:
        args=report_args(),
    log:
        f"{R}/logs/report/{{fid}}.log",
    shell:
        "elf report {params.args} --figure {wildcards.fid} 2> {log} && touch {output}"


rule review:
    """The replication review: every paper value beside ours, with provenance."""
    input:
        code("report"),
        EXPERIMENT_FILE,
        "config/paper_values.yaml",
        [aggregates_for(fid) for fid in EXP.figures],
        [f"{P}/.done/{fid}" for fid in EXP.figures],
    output:
        f"{P}/replication.md",
        f"{P}/replication.html",
    params:
        args=report_args(),
    log:
        f"{R}/logs/report/review.log",
    shell:
        "elf report {params.args} --review 2> {log}"


rule manifest:
    """reports/all: every figure and table produced, with hashes and provenance."""
    input:
        code("report"),
        [f"{P}/.done/{fid}" for fid in EXP.figures],
        rules.review.output,
    output:
        f"{P}/all",
    params:
        args=report_args(),
    log:
        f"{R}/logs/report/manifest.log",
    shell:
        "elf report {params.args} --manifest 2> {log}"
