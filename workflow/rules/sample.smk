# Checkpoint × named sampler setting → one samples JSONL per evaluation seed, with provenance.


rule sample:
    """Sample one run with one sampler setting for every evaluation seed it needs (one process: the
    checkpoint loads once); resumes from <folder>.partial/ after a kill."""
    conda:
        ENV
    input:
        unpack(conditional_inputs),
        code("model.py", "precision.py", "flow/__init__.py", "flow/paths.py", "flow/samplers.py", "decoder.py",
             "train/checkpoint.py", "stages/sample.py"),
        tok=tokenizer_input,
        ckpt=f"{R}/runs/{{run}}/ema.safetensors",
        decoder=decoder_input,
    output:
        directory(f"{R}/samples/{{run}}/{{sampler}}"),
    wildcard_constraints:
        run=ANY_RUN,
    params:
        sampler=lambda w: as_json(EXP.samplers[w.sampler]),
        seeds=lambda w: " ".join(str(s) for s in seeds_of(w.run, w.sampler)),
        n=lambda w: EXP.evaluation.n_samples if task_of(w.run) == "unconditional" else EXP.evaluation.n_examples,
        cond=lambda w, input: f"--store {input.store} --tokens {input.tokens} --split {eval_split(w.sampler)}"
        if "store" in input.keys() else "",
        tokenizer=TOKENIZER,
        ckpt_dir=lambda w: f"{R}/runs/{w.run}",
        batch=EXP.evaluation.sample_batch_size,
        decoder=decoder_arg,
        precision=EXP.precision,
    log:
        f"{R}/logs/sample/{{run}}/{{sampler}}.log",
    shell:
        "elf sample --checkpoint {params.ckpt_dir} --sampler {params.sampler:q} "
        "--sampler-name {wildcards.sampler} --run-name {wildcards.run} --seed {params.seeds} "
        "--n {params.n} --batch-size {params.batch} --tokenizer {params.tokenizer} {params.cond} {params.decoder} "
        "--precision {params.precision} --out-dir {output} --no-progress 2> {log}"


rule trajectory:
    """Decode the network's clean estimate along one sampling rollout (F18), first evaluation seed."""
    conda:
        ENV
    input:
        code("model.py", "precision.py", "flow/__init__.py", "flow/paths.py", "flow/samplers.py", "train/checkpoint.py",
             "stages/sample.py", "stages/trajectory.py"),
        tok=tokenizer_input,
        ckpt=f"{R}/runs/{{run}}/ema.safetensors",
    output:
        f"{R}/trajectories/{{run}}/{{sampler}}.json",
    wildcard_constraints:
        run=ANY_RUN,
    params:
        sampler=lambda w: as_json(EXP.samplers[w.sampler]),
        seed=EXP.evaluation.seeds[0],
        tokenizer=TOKENIZER,
        precision=EXP.precision,
        ckpt_dir=lambda w: f"{R}/runs/{w.run}",
    log:
        f"{R}/logs/trajectory/{{run}}/{{sampler}}.log",
    shell:
        "elf trajectory --checkpoint {params.ckpt_dir} --sampler {params.sampler:q} "
        "--sampler-name {wildcards.sampler} --seed {params.seed} --n 2 --tokenizer {params.tokenizer} "
        "--at 0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1 --precision {params.precision} --out {output} 2> {log}"
