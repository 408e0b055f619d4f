# Raw text → tokenizer → packed token ids; the encoder and the Gen. PPL scorer built on them.


rule corpora:
    """Generate the embedded corpora (owt, wmt, xsum) deterministically from a seed."""
    conda:
        ENV
    input:
        code("corpora"),
    output:
        directory(PLAN.corpora_dir),
    params:
        settings=PLAN.as_json(EXP.corpora),
    log:
        f"{R}/logs/corpora.log",
    shell:
        "elf corpora --settings {params.settings:q} --out {output} 2> {log}"


rule tokenizer:
    """Train the T5-style tokenizer on the embedded corpora (paper config: t5-small by name)."""
    conda:
        ENV
    input:
        code("tokenizer"),
        corpora=rules.corpora.output,
    output:
        directory(PLAN.tokenizer_dir),
    params:
        settings=PLAN.as_json(EXP.tokenizer),
    log:
        f"{R}/logs/tokenizer.log",
    shell:
        "elf tokenizer --settings {params.settings:q} --corpora {input.corpora} --out {output} 2> {log}"


rule prepare:
    """Tokenise (no added special tokens) and pack one dataset into fixed-length sequences, the train
    split in `prepare_shards` shards packed by up to that many processes (resumable: finished shards
    are kept in <tokens>.parts and skipped by a retry)."""
    priority: PLAN.data_priority
    conda:
        ENV
    input:
        code("prepare"),
        tok=PLAN.tokenizer_input,
        corpora=lambda w: PLAN.corpora_input(w.dataset),
    output:
        directory(PLAN.tokens_pattern),
    threads: lambda w: EXP.datasets[w.dataset].prepare_shards
    params:
        settings=lambda w: PLAN.as_json(PLAN.dataset_settings(w.dataset)),
        raw=lambda w: f"--raw-root {R}/data/corpora" if EXP.datasets[w.dataset].source == "embedded" else "",
        tokenizer=PLAN.tokenizer,
    log:
        f"{R}/logs/prepare/{{dataset}}.log",
    shell:
        "elf prepare --settings {params.settings:q} --tokenizer {params.tokenizer} {params.raw} "
        "--num-proc {threads} --out {output} 2> {log}"


rule encoder:
    """Train a small T5 encoder from scratch with span corruption (paper R06; embedded: every encoder)
    on the job's GPU when it holds one, resuming from <out>.partial/ after a kill."""
    conda:
        ENV
    input:
        code("encoder"),
        tok=PLAN.tokenizer_input,
        tokens=PLAN.encoder_tokens,
    output:
        directory(PLAN.encoder_pattern),
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.as_json(EXP.encoders[w.encoder]),
        tokenizer=PLAN.tokenizer,
        precision=EXP.precision,
        device=lambda w, resources: gpu_or_cpu(resources),
    log:
        f"{R}/logs/encoder/{{encoder}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf encoder --settings {params.settings:q} --tokenizer {params.tokenizer} "
        "--tokens {input.tokens} --out {output} --device {params.device} --precision {params.precision} "
        "--no-progress 2> {log}"


rule scorer:
    """Train the small GPT-2 Gen. PPL scorer on held-out text (or save GPT-2 Large by name)."""
    conda:
        ENV
    input:
        code("scorer"),
        corpora=f"{R}/data/corpora" if EXP.scorer.source == "build" else [],
    output:
        directory(PLAN.scorer),
    params:
        threads=torch_threads,
        settings=PLAN.as_json(EXP.scorer),
        corpus=f"--corpus {R}/data/corpora/owt" if EXP.scorer.source == "build" else "",
    log:
        f"{R}/logs/scorer.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf scorer --settings {params.settings:q} {params.corpus} --out {output} 2> {log}"
