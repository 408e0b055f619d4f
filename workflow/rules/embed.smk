# Packed token ids → cached clean embeddings with normalisation statistics (a Zarr store per split).
# The cache assumes a deterministic frozen encoder and the dataset's fixed sequence length.
#
# A split is embedded by one job (`embed`), or — the train split of a dataset with `embed_shards: n`
# > 1 — scattered over n jobs (`embed_shard`, one GPU each, writing disjoint blocks of one store)
# and gathered by `embed_gather` (CPU: checks every block, merges the statistics, hashes the token
# ids, moves the store into place). Every job builds the store at <store>.partial and the last one
# renames it: Snakemake deletes a failed job's output but not that work store, so a retry resumes.


rule embed:
    """Encode one split of one dataset with one embedding kind into a Zarr store (one job)."""
    priority: PLAN.data_priority
    conda:
        ENV
    input:
        code("embed"),
        tokens=PLAN.tokens_pattern,
        encoder=lambda w: PLAN.embed_encoder_input(w.embedding),
    output:
        directory(PLAN.store_pattern),
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.as_json(EXP.embeddings[w.embedding]),
        encoder=lambda w: PLAN.embedding_encoder(w.embedding),
        work=lambda w, output: f"{output}.partial",
        # the job's GPU (profile resource `gpu`, slurm/config.yaml); the CPU where none is visible
        device=lambda w, resources: embed_device(resources),
    log:
        f"{R}/logs/embed/{{dataset}}-{{embedding}}-{{split}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf embed --settings {params.settings:q} --encoder {params.encoder} --tokens {input.tokens} "
        "--split {wildcards.split} --work {params.work} --out {output} --device {params.device} 2> {log}"


rule embed_shard:
    """Scatter: shard job k of n writes the blocks k, k+n, ... of the train split's work store."""
    priority: PLAN.data_priority
    conda:
        ENV
    input:
        code("embed"),
        tokens=PLAN.tokens_pattern,
        encoder=lambda w: PLAN.embed_encoder_input(w.embedding),
    output:
        temp(touch(PLAN.shard_marker_pattern)),
    wildcard_constraints:
        dataset=PLAN.sharded_datasets(),
        split="train",
        k=r"\d+",
        n=r"\d+",
    params:
        threads=torch_threads,
        settings=lambda w: PLAN.as_json(EXP.embeddings[w.embedding]),
        encoder=lambda w: PLAN.embedding_encoder(w.embedding),
        store=lambda w: PLAN.embed_store(w),
        device=lambda w, resources: embed_device(resources),
    log:
        f"{R}/logs/embed/{{dataset}}-{{embedding}}-{{split}}-{{k}}of{{n}}.log",
    shell:
        "OMP_NUM_THREADS={params.threads} elf embed --settings {params.settings:q} --encoder {params.encoder} --tokens {input.tokens} "
        "--split {wildcards.split} --work {params.store}.partial --out {params.store} "
        "--shard {wildcards.k} --num-shards {wildcards.n} --device {params.device} 2> {log}"


rule embed_gather:
    """Gather: once every shard job is done, finalize the work store and move it into place."""
    priority: PLAN.data_priority
    conda:
        ENV
    input:
        code("embed"),
        shards=PLAN.embed_shard_markers,
    output:
        directory(PLAN.store_pattern),
    wildcard_constraints:
        dataset=PLAN.sharded_datasets(),
        split="train",
    params:
        work=lambda w, output: f"{output}.partial",
        shards=lambda w: EXP.datasets[w.dataset].embed_shards,
    log:
        f"{R}/logs/embed/{{dataset}}-{{embedding}}-{{split}}-gather.log",
    shell:
        "elf embed --finalize --work {params.work} --out {output} --num-shards {params.shards} 2> {log}"


# A sharded train split could be made by either rule: the scatter/gather wins.
ruleorder: embed_gather > embed
