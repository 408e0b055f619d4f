# Samples → metrics (Gen. PPL + entropy, BLEU, ROUGE) per seed → mean ± SE over evaluation seeds.


rule score:
    """Score every seed's samples of one run and sampler (one scorer load), then their mean ± SE
    across seeds (`elf aggregate`, seconds): the aggregate is what figures and tables read."""
    conda:
        ENV
    input:
        code("evaluate", "precision.py", "stages/score.py", "stages/aggregate.py"),
        samples=f"{R}/samples/{{run}}/{{sampler}}",
        scorer=SCORER,
    output:
        scores=directory(f"{R}/scores/{{run}}/{{sampler}}"),
        aggregate=f"{R}/aggregates/{{run}}/{{sampler}}.json",
    wildcard_constraints:
        run=ANY_RUN,
    params:
        task=lambda w: task_of(w.run),
        batch=EXP.evaluation.score_batch_size,
        precision=EXP.precision,
        samples=lambda w, input: seed_files(input.samples, w, "jsonl"),
        scores=lambda w, output: seed_files(output.scores, w, "json"),
    log:
        f"{R}/logs/score/{{run}}/{{sampler}}.log",
    shell:
        "(elf score --samples {params.samples} --task {params.task} --scorer {input.scorer} "
        "--batch-size {params.batch} --precision {params.precision} --out-dir {output.scores} && "
        "elf aggregate --scores {params.scores} --run {wildcards.run} --sampler {wildcards.sampler} "
        "--out {output.aggregate}) 2> {log}"


rule score_dataset:
    """The figures' "Dataset" line: the same Gen. PPL and entropy on real held-out text."""
    conda:
        ENV
    input:
        code("evaluate", "precision.py", "stages/score.py"),
        tokens=f"{R}/data/{{dataset}}/tokens",
        scorer=SCORER,
    output:
        f"{R}/scores/_dataset/{{dataset}}.json",
    params:
        n=EXP.evaluation.n_samples,
        precision=EXP.precision,
    log:
        f"{R}/logs/score/_dataset/{{dataset}}.log",
    shell:
        "elf score --reference-texts {input.tokens} --split test --n {params.n} "
        "--scorer {input.scorer} --precision {params.precision} --out {output} 2> {log}"
