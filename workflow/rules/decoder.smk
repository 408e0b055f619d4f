# Frozen embeddings (train split) → a separately trained decoder (Fig. 5b, paper R11), used by the
# runs that name it (`runs.<run>.decoder`) to decode their samples.


rule decoder:
    """Train one separate decoder on its dataset's frozen train-split embeddings."""
    conda:
        ENV
    input:
        code("decoder"),
        store=lambda w: PLAN.decoder_store(w.name),
        tok=PLAN.tokenizer_input,
    output:
        PLAN.decoder_pattern,
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.decoder_settings_json(w.name),
        tokenizer=PLAN.tokenizer,
        out=lambda w: PLAN.decoder_dir_pattern.format(name=w.name),
    log:
        f"{R}/logs/decoder/{{name}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf decoder --settings {params.settings:q} --store {input.store} --tokenizer {params.tokenizer} "
        "--out {params.out} --no-progress 2> {log}"
