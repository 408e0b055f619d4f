# Embedding store → trained checkpoint (EMA + raw weights, config.json). Resumes from resume/.


rule train:
    """Train one run of the experiment matrix."""
    conda:
        ENV
    priority: PLAN.train_priority
    input:
        unpack(PLAN.train_data),
        code("train"),
    output:
        PLAN.run_weights_pattern,
    wildcard_constraints:
        run=PLAN.runs_of_kind("train"),
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.train_settings_json(w.run),
        data=PLAN.train_data_args,
        tokenizer=PLAN.tokenizer,  # no input of its own: the store or checkpoint waits for it
        out=PLAN.run_dir_pattern,
        # the job's GPUs (profile resource `gpu`, slurm/config.yaml): N > 1 → DDP, one process per GPU
        launch=lambda w, resources: launcher(resources),
    log:
        f"{R}/logs/train/{{run}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} {params.launch} train --settings {params.settings:q} {params.data} --tokenizer {params.tokenizer} "
        "--out {params.out} --no-progress 2> {log}"
