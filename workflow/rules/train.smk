# Embedding store → trained checkpoint (EMA + raw weights, config.json). Resumes from resume/.


rule train:
    """Train one run of the experiment matrix."""
    input:
        code("model.py", "flow", "train", "embed/reader.py", "stages/train.py"),
        tok=tokenizer_input,
        store=lambda w: f"{R}/embeddings/{run_settings(w.run).dataset}/{run_settings(w.run).embedding}/train.zarr",
    output:
        f"{R}/runs/{{run}}/ema.safetensors",
    wildcard_constraints:
        run=runs_of_kind("train"),
    params:
        settings=lambda w: train_settings_json(w.run),
        tokenizer=TOKENIZER,
        out=lambda w: f"{R}/runs/{w.run}",
    log:
        f"{R}/logs/train/{{run}}.log",
    shell:
        "elf train --settings {params.settings:q} --store {input.store} --tokenizer {params.tokenizer} "
        "--out {params.out} --no-progress 2> {log}"
