# Packed token ids → cached clean embeddings with normalisation statistics (a Zarr store per split).
# The cache assumes a deterministic frozen encoder and the dataset's fixed sequence length.


def embedding_encoder(embedding):
    settings = EXP.embeddings[embedding]
    return encoder_path(settings.encoder) if EXP.encoders[settings.encoder].source == "build" \
        else EXP.encoders[settings.encoder].name_or_path


rule embed:
    """Encode one split of one dataset with one embedding kind into a Zarr store."""
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
    log:
        f"{R}/logs/embed/{{dataset}}-{{embedding}}-{{split}}.log",
    shell:
        "elf embed --settings {params.settings:q} --encoder {params.encoder} --tokens {input.tokens} "
        "--split {wildcards.split} --out {output} 2> {log}"
