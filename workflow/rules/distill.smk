# Progressive distillation rounds (spec §7): teacher + previous student → student checkpoint.
# The round chain is explicit in the config: each distill run names its `teacher` and `init_from`
# (round 1: the teacher, which is also the fallback); the rule's inputs are those runs' EMA weights,
# so round k waits for round k−1. tokens.json records the training tokens per round (Fig. 9b).



rule distill:
    """One distillation round of the experiment matrix."""
    conda:
        ENV
    priority: 50  # the rounds are a chain: the critical path
    input:
        code("model.py", "precision.py", "flow/paths.py", "flow/objective.py", "flow/distill.py", "train",
             "embed/reader.py", "stages/train.py", "stages/distill.py"),
        tok=tokenizer_input,
        store=lambda w: f"{R}/embeddings/{run_settings(w.run).dataset}/{run_settings(w.run).embedding}/train.zarr",
        teacher=lambda w: f"{R}/runs/{run_settings(w.run).teacher}/ema.safetensors",
        init=lambda w: f"{R}/runs/{distill_init(w.run)}/ema.safetensors",
    output:
        ema=f"{R}/runs/{{run}}/ema.safetensors",
        tokens=f"{R}/runs/{{run}}/tokens.json",
    wildcard_constraints:
        run=runs_of_kind("distill"),
    params:
        threads=torch_threads,
        settings=lambda w: train_settings_json(w.run),
        tokenizer=TOKENIZER,
        teacher=lambda w: f"{R}/runs/{run_settings(w.run).teacher}",
        init=lambda w: f"{R}/runs/{distill_init(w.run)}",
        out=lambda w: f"{R}/runs/{w.run}",
        # the job's GPUs (profile resource `gpu`, slurm/config.yaml): N > 1 → DDP, one process per GPU
        launch=lambda w, resources: launcher(resources),
    log:
        f"{R}/logs/distill/{{run}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} {params.launch} distill --settings {params.settings:q} --teacher {params.teacher} --init {params.init} "
        "--store {input.store} --tokenizer {params.tokenizer} --out {params.out} --no-progress 2> {log}"
