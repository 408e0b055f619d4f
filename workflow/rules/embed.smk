# Packed token ids → cached clean embeddings with normalisation statistics (a Zarr store per split).
# The cache assumes a deterministic frozen encoder and the dataset's fixed sequence length.


rule embed:
    """Encode one split of one dataset with one embedding kind into a Zarr store."""
    conda:
        ENV
    input:
        code("embed", "stages/embed.py"),
        tokens=f"{R}/data/{{dataset}}/tokens",
        encoder=lambda w: [embedding_encoder(w.embedding)]
        if EXP.encoders[EXP.embeddings[w.embedding].encoder].source == "build" else [],
    output:
        directory(f"{R}/embeddings/{{dataset}}/{{embedding}}/{{split}}.zarr"),
    params:
        settings=lambda w: as_json(EXP.embeddings[w.embedding]),
        encoder=lambda w: embedding_encoder(w.embedding),
        # the job's GPUs (profile resource `gpu`, slurm/config.yaml): one shard process per GPU (@k@ =
        # shard index = GPU index; CPU where no CUDA device is visible), then --finalize; none: one on CPU
        shards=lambda w, resources: max(1, resources.get("gpu", 0)),
        device=lambda w, resources: "$(nvidia-smi -L > /dev/null 2>&1 && echo cuda:@k@ || echo cpu)"
        if resources.get("gpu", 0) else "cpu",
    log:
        f"{R}/logs/embed/{{dataset}}-{{embedding}}-{{split}}.log",
    shell:
        "seq 0 $(({params.shards} - 1)) | xargs -P {params.shards} -I @k@ "
        "elf embed --settings {params.settings:q} --encoder {params.encoder} --tokens {input.tokens} "
        "--split {wildcards.split} --out {output} --shard @k@ --num-shards {params.shards} "
        "--device {params.device} 2> {log} && elf embed --finalize --out {output} 2>> {log}"
