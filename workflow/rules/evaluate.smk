# Checkpoint × named sampler settings → samples of every evaluation seed, their scores and the mean ± SE
# over seeds (one `elf evaluate` job per evaluation group); the decoded trajectory a figure shows.


rule evaluate:
    """Sample, score and aggregate the samplers of one evaluation group of a run (elf/plan.py): every
    sampler of the run in one process (evaluation.group_by: run) or one (group_by: sampler); all
    their seeds. Resumes from <folder>.partial/ after a kill."""
    conda:
        ENV
    input:
        unpack(PLAN.eval_inputs),
        code("evaluate"),
        ckpt=PLAN.run_weights_pattern,
    output:
        directory(PLAN.eval_dir_pattern),
    wildcard_constraints:
        run=PLAN.any_run,
        group=r"[^/]+",
    params:
        threads=torch_threads,
        plan=lambda w: PLAN.eval_plan_json(w.run, w.group),
        inputs=PLAN.eval_input_args,
        tokenizer=PLAN.tokenizer,  # no input of its own: the store or checkpoint waits for it
        ckpt_dir=lambda w: PLAN.run_dir_pattern.format(run=w.run),
    log:
        f"{R}/logs/evaluate/{{run}}/{{group}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf evaluate --plan {params.plan:q} --checkpoint {params.ckpt_dir} --tokenizer {params.tokenizer} "
        "{params.inputs} --out-dir {output} --no-progress 2> {log}"


rule trajectory:
    """Decode the network's clean estimate along one sampling rollout (a trajectory figure), first
    evaluation seed."""
    conda:
        ENV
    input:
        code("trajectory"),
        ckpt=PLAN.run_weights_pattern,
    output:
        PLAN.trajectory_pattern,
    wildcard_constraints:
        run=PLAN.any_run,
    params:
        threads=torch_threads,
        sampler=lambda w: PLAN.as_json(EXP.samplers[w.sampler]),
        seed=EXP.evaluation.seeds[0],
        tokenizer=PLAN.tokenizer,  # no input of its own: the store or checkpoint waits for it
        precision=EXP.precision,
        ckpt_dir=lambda w: PLAN.run_dir_pattern.format(run=w.run),
    log:
        f"{R}/logs/trajectory/{{run}}/{{sampler}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf trajectory --checkpoint {params.ckpt_dir} --sampler {params.sampler:q} "
        "--sampler-name {wildcards.sampler} --seed {params.seed} --n 2 --tokenizer {params.tokenizer} "
        "--at 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --precision {params.precision} --out {output} 2> {log}"
