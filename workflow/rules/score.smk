# Samples → metrics (Gen. PPL + entropy, BLEU, ROUGE) → mean ± SE over evaluation seeds.


# Seconds of CPU each: run where Snakemake runs rather than as cluster jobs.
localrules:
    aggregate,


rule score:
    """Score one samples file with the task's metrics."""
    conda:
        ENV
    input:
        code("evaluate", "stages/score.py"),
        samples=f"{R}/samples/{{run}}/{{sampler}}/seed{{seed}}.jsonl",
        scorer=SCORER,
    output:
        f"{R}/scores/{{run}}/{{sampler}}/seed{{seed}}.json",
    params:
        task=lambda w: task_of(w.run),
        batch=EXP.evaluation.score_batch_size,
    log:
        f"{R}/logs/score/{{run}}/{{sampler}}/seed{{seed}}.log",
    shell:
        "elf score --samples {input.samples} --task {params.task} --scorer {input.scorer} "
        "--batch-size {params.batch} --out {output} 2> {log}"


rule aggregate:
    """Mean ± standard error across the evaluation seeds a figure or table needs."""
    conda:
        ENV
    input:
        code("evaluate/aggregate.py", "stages/aggregate.py"),
        scores=lambda w: expand(f"{R}/scores/{w.run}/{w.sampler}/seed{{seed}}.json",
                                seed=seeds_of(w.run, w.sampler)),
    output:
        f"{R}/aggregates/{{run}}/{{sampler}}.json",
    log:
        f"{R}/logs/aggregate/{{run}}/{{sampler}}.log",
    shell:
        "elf aggregate --scores {input.scores} --run {wildcards.run} --sampler {wildcards.sampler} "
        "--out {output} 2> {log}"


rule score_dataset:
    """The figures' "Dataset" line: the same Gen. PPL and entropy on real held-out text."""
    conda:
        ENV
    input:
        code("evaluate", "stages/score.py"),
        tokens=f"{R}/data/{{dataset}}/tokens",
        scorer=SCORER,
    output:
        f"{R}/scores/_dataset/{{dataset}}.json",
    params:
        n=EXP.evaluation.n_samples,
    log:
        f"{R}/logs/score/_dataset/{{dataset}}.log",
    shell:
        "elf score --reference-texts {input.tokens} --split test --n {params.n} "
        "--scorer {input.scorer} --out {output} 2> {log}"
