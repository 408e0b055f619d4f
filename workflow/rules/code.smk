# elf/ files → one digest per stage: the code input of every job that runs `elf <stage>`.


localrules:
    code_digest,


rule code_digest:
    """R/code/{stage}.sha256: the sha256 of each elf/ file the stage runs (elf/deps.py). Rewritten when
    one of them changes, which reruns the stage's jobs."""
    input:
        code_files,
    output:
        PLAN.code_digest_pattern,
    wildcard_constraints:
        stage="|".join(STAGES),
    log:
        f"{R}/logs/code/{{stage}}.log",
    run:
        Path(output[0]).write_text(deps.digest_text(input))
