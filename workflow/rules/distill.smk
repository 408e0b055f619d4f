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
        unpack(PLAN.distill_inputs),
        code("distill"),
    output:
        ema=PLAN.run_weights_pattern,
        tokens=PLAN.run_tokens_pattern,
    wildcard_constraints:
        run=PLAN.runs_of_kind("distill"),
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.train_settings_json(w.run),
        tokenizer=PLAN.tokenizer,  # no input of its own: the store or checkpoint waits for it
        teacher=lambda w, input: str(Path(input.teacher).parent),
        init=lambda w, input: str(Path(input.init).parent),
        out=PLAN.run_dir_pattern,
        # the job's GPUs (profile resource `gpu`, slurm/config.yaml): N > 1 → DDP, one process per GPU
        launch=lambda w, resources: launcher(resources),
    log:
        f"{R}/logs/distill/{{run}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} {params.launch} distill --settings {params.settings:q} --teacher {params.teacher} --init {params.init} "
        "--store {input.store} --tokenizer {params.tokenizer} --out {params.out} --no-progress 2> {log}"
