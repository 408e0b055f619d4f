# Checkpoint × named sampler setting × evaluation seed → samples JSONL with provenance.



rule sample:
    """Sample one seed of one run with one sampler setting."""
    conda:
        ENV
    input:
        unpack(conditional_inputs),
        code("model.py", "flow/__init__.py", "flow/paths.py", "flow/samplers.py", "decoder.py",
             "train/checkpoint.py", "stages/sample.py"),
        tok=tokenizer_input,
        ckpt=f"{R}/runs/{{run}}/ema.safetensors",
        decoder=decoder_input,
    output:
        f"{R}/samples/{{run}}/{{sampler}}/seed{{seed}}.jsonl",
    params:
        sampler=lambda w: as_json(EXP.samplers[w.sampler]),
        n=lambda w: EXP.evaluation.n_samples if task_of(w.run) == "unconditional" else EXP.evaluation.n_examples,
        cond=lambda w, input: f"--store {input.store} --tokens {input.tokens} --split {EXP.evaluation.split}"
        if "store" in input.keys() else "",
        tokenizer=TOKENIZER,
        ckpt_dir=lambda w: f"{R}/runs/{w.run}",
        batch=EXP.evaluation.sample_batch_size,
        decoder=decoder_arg,
    log:
        f"{R}/logs/sample/{{run}}/{{sampler}}/seed{{seed}}.log",
    shell:
        "elf sample --checkpoint {params.ckpt_dir} --sampler {params.sampler:q} "
        "--sampler-name {wildcards.sampler} --run-name {wildcards.run} --seed {wildcards.seed} "
        "--n {params.n} --batch-size {params.batch} --tokenizer {params.tokenizer} {params.cond} {params.decoder} "
        "--out {output} --no-progress 2> {log}"
