# Real held-out text → the figures' reference lines (samples are scored by `evaluate`).


rule score_dataset:
    """The figures' "Dataset" line: the same Gen. PPL and entropy on real held-out rows, cut at their
    first EOS as samples are, and the calibration lines of the same rows shuffled and of unigram
    draws (order learned or not)."""
    conda:
        ENV
    input:
        code("score"),
        tok=PLAN.tokenizer_input,
        tokens=PLAN.tokens_pattern,
        scorer=PLAN.scorer,
    output:
        PLAN.dataset_scores_pattern,
    params:
        threads=torch_threads,
        n=EXP.evaluation.n_samples,
        precision=EXP.precision,
        tokenizer=PLAN.tokenizer,
    log:
        f"{R}/logs/score/_dataset/{{dataset}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf score --reference-texts {input.tokens} --split test --n {params.n} "
        "--scorer {input.scorer} --precision {params.precision} --tokenizer {params.tokenizer} "
        "--out {output} 2> {log}"
