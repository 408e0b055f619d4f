# Released checkpoints as runs: the authors' weights instead of a training rule (runs of kind
# `released`, e.g. `R01_released: {kind: released, released: embedded-language-flows/ELF-B-owt-torch}`:
# its highest checkpoint_<step> and config.yml, at `released_revision`). A Hugging Face id is
# downloaded here, on the machine that runs Snakemake (localrule: cluster compute nodes are often
# offline); a local file or folder is an input, so replacing it reruns the conversion.


localrules:
    released,


rule released:
    """Fetch one released checkpoint and convert it into this pipeline's checkpoint format."""
    conda:
        ENV
    input:
        code("release"),
        tok=PLAN.tokenizer_input,
        source=PLAN.released_source,
    output:
        PLAN.run_weights_pattern,
    wildcard_constraints:
        run=PLAN.runs_of_kind("released"),
    params:
        settings=lambda w: PLAN.train_settings_json(w.run),
        source=lambda w: EXP.run(w.run).released,
        revision=lambda w: PLAN.released_revision_arg(w.run),
        tokenizer=PLAN.tokenizer,
        out=PLAN.run_dir_pattern,
    log:
        f"{R}/logs/released/{{run}}.log",
    shell:
        "elf release --source {params.source:q} {params.revision} --settings {params.settings:q} "
        "--tokenizer {params.tokenizer} --out {params.out} 2> {log}"
