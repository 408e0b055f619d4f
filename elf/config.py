"""Typed, validated configuration: the one place that knows every setting, its default and its range.

The settings' types, defaults and ranges; ``elf.validate.parse_experiment(dict)`` turns a loaded
``config/*.yaml`` into an ``Experiment`` of these frozen dataclasses, or raises ``ConfigError`` naming
the key, the bad value and what is allowed (every rule across keys lives there). Snakemake calls it
before any rule runs (``workflow/rules/common.smk``); every ``elf`` stage receives the
already-resolved section it needs as JSON (``--settings``) and rebuilds the same dataclass.
``workflow/schemas/config.schema.yaml`` is generated from these dataclasses (``elf schema``), so the
schema and the code cannot drift (a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from elf.typed import ConfigError, deep_merge, from_dict, to_dict
from elf.typed import setting as _f


# The built-in presets of elf.model.SIZES (a test keeps the two equal; config must not import torch).
BUILTIN_SIZES = ("ELF-B", "ELF-M", "ELF-L")
PRECISIONS = ("fp32", "bf16")  # the network precision policies, applied by elf/precision.py
Precision = Literal["fp32", "bf16"]


# --------------------------------------------------------------------------------------------------
# Training-time settings (spec §3–4)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSettings:
    """Network shape and variant (spec §3); sizes name presets in ``elf.model.SIZES``."""
    size: str = _f("ELF-B", help="named size: ELF-B, ELF-M, ELF-L or a preset from `sizes`")
    bottleneck: int = _f(128, help="input bottleneck width (paper ablation: 32/128/512)", lo=1)
    conditioning: Literal["in_context", "adaln"] = _f("in_context", help="control tokens or adaLN-Zero")
    prediction: Literal["x", "v", "eps"] = _f("x", help="network output parameterisation")
    decode_head: bool = _f(True, help="shared decoder head (false: denoiser only, separate decoder)")
    control_tokens: int = _f(4, help="in-context tokens per control (time, SC-CFG scale, denoising "
                             "mode), prepended to the sequence; the released code: 4 each", lo=1)


@dataclass(frozen=True)
class ObjectiveSettings:
    """The per-step draws and loss of spec §4 (defaults: released code, unconditional OWT)."""
    t_mean: float = _f(-1.5, help="logit-normal mean of training t")
    t_std: float = _f(0.8, help="logit-normal std of training t", lo=0, lo_open=True)
    noise_scale: float = _f(2.0, help="denoiser noise scale sigma_n", lo=0, lo_open=True)
    t_eps: float = _f(0.05, help="clamp of 1-t in velocities", lo=0, hi=1, lo_open=True)
    decode_prob: float = _f(0.2, help="probability of the decode branch per example", lo=0, hi=1)
    decode_noise_scale: float = _f(5.0, help="decoder noise scale sigma_d (1.0 conditional)", lo=0)
    decode_lambda_mean: float = _f(0.8, help="logit-normal mean of the decode mixing weight")
    decode_lambda_std: float = _f(0.8, help="logit-normal std of the decode mixing weight", lo=0)
    self_cond_prob: float = _f(0.5, help="probability of self-conditioning per example", lo=0, hi=1)
    sc_cfg_min: float = _f(0.5, help="smallest training SC-CFG scale w", lo=0, lo_open=True)
    sc_cfg_max: float = _f(5.0, help="largest training SC-CFG scale w", lo=0, lo_open=True)
    label_drop_prob: float = _f(0.0, help="conditional: drop the source per example", lo=0, hi=1)
    sc_cfg_target: Literal["main_forward", "extra_forward"] = _f(
        "main_forward", help="SC-CFG target from the main forward (fast, equal with dropout 0) "
        "or from a third forward as the released code does")


@dataclass(frozen=True)
class OptimSettings:
    """Optimiser, schedule, clipping and EMA (spec §4)."""
    name: Literal["muon", "adamw"] = _f("muon", help="Muon for 2-D weights + Nesterov-Adam, or AdamW")
    blr: float = _f(1e-3, help="base lr; lr = blr * batch / 256", lo=0, lo_open=True)
    warmup_steps: int = _f(0, help="linear warm-up steps, then constant", lo=0)
    betas: tuple[float, float] = _f((0.9, 0.999), help="Adam betas (AdamW ablation: 0.9, 0.95)")
    weight_decay: float = _f(0.0, help="weight decay (released code: 0)", lo=0)
    grad_clip: float = _f(1.0, help="global grad-norm clip (0 = off)", lo=0)
    ema_decay: float = _f(0.9999, help="EMA decay per optimiser step", lo=0, hi=1)
    ema_warmup: bool = _f(False, help="decay min(ema_decay, (1+k)/(10+k)): for short runs")


@dataclass(frozen=True)
class BudgetSettings:
    """How long and how wide a run trains."""
    batch_size: int = _f(512, help="global batch (sequences per optimiser step)", lo=1)
    steps: int = _f(1000, help="optimiser steps", lo=1)
    grad_accum: int = _f(1, help="micro-batches per optimiser step", lo=1)
    checkpoint_every: int = _f(500, help="steps between resumable checkpoints", lo=1)
    log_every: int = _f(10, help="steps between training-log lines", lo=1)
    seed: int = _f(42, help="training seed (released code default 42)", lo=0)
    compile: bool = _f(False, help="torch.compile the network")


@dataclass(frozen=True)
class DistillSettings:
    """One progressive-distillation round (spec §7)."""
    student_steps: int = _f(16, help="student sampling steps of this round", lo=1)
    teacher_substeps: int = _f(4, help="teacher Euler sub-steps per student step", lo=1)


@dataclass(frozen=True)
class RunSettings:
    """One training run: a named override of ``run_defaults``."""
    dataset: str = _f(help="a key of `datasets`")
    embedding: str = _f("encoder", help="a key of `embeddings`")
    kind: Literal["train", "released", "distill"] = _f("train", help="how the checkpoint is made")
    model: ModelSettings = _f(help="network shape", factory=ModelSettings)
    objective: ObjectiveSettings = _f(help="training objective", factory=ObjectiveSettings)
    optim: OptimSettings = _f(help="optimiser", factory=OptimSettings)
    budget: BudgetSettings = _f(help="training budget", factory=BudgetSettings)
    teacher: Optional[str] = _f(None, help="distill: the teacher run")
    init_from: Optional[str] = _f(None, help="distill: the run whose EMA initialises the student")
    distill: Optional[DistillSettings] = _f(None, help="distill: the round's settings")
    released: Optional[str] = _f(None, help="released: Hugging Face id or local folder/file of the "
                                 "authors' checkpoint (folder: its highest checkpoint_<step>)")
    released_revision: Optional[str] = _f(None, help="released: Hub revision (commit, tag or branch) "
                                          "of the checkpoint repo; null = its default branch")
    paper_run: Optional[str] = _f(None, help="the paper's run id it replicates (R01..R34)")
    decoder: Optional[str] = _f(None, help="a key of `decoders`: decode samples with that separate "
                                "decoder (needs model.decode_head false and objective.decode_prob 0)")
    replicate_of: Optional[str] = _f(None, help="a training-seed replicate of that run: the same "
                                     "settings but budget.seed; evaluated on the same samplers, it gives "
                                     "the training-seed spread of the review's trend checks")


# --------------------------------------------------------------------------------------------------
# Sampling and evaluation settings (spec §5–6)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SamplerSettings:
    """A named sampler setting (spec §5)."""
    method: Literal["ode", "sde"] = _f("ode", help="Euler ODE or the SDE-inspired sampler")
    steps: int = _f(64, help="number of steps N", lo=1)
    gamma: float = _f(0.0, help="SDE noise re-injection scale", lo=0)
    grid: Literal["logit_normal", "uniform"] = _f("logit_normal", help="time grid")
    grid_mean: float = _f(-1.5, help="logit-normal grid mean")
    grid_std: float = _f(0.8, help="logit-normal grid std", lo=0, lo_open=True)
    sc_cfg: float = _f(1.0, help="self-conditioning CFG scale w", lo=0, lo_open=True)
    input_cfg: float = _f(1.0, help="input-condition CFG scale (conditional; 1 = one pass)", lo=0)
    split: Optional[Literal["validation", "test"]] = _f(
        None, help="conditional: the split whose sources are sampled and scored (null: "
        "evaluation.split); unconditional runs ignore it")
    n_examples: int = _f(0, help="conditional: score the split's first N examples per seed (0: "
                         "evaluation.n_examples), e.g. 1000 as the authors' configs score validation", lo=0)
    sde_variant: Literal["backed_off", "original"] = _f(
        "backed_off", help="SDE Euler step from the backed-off state (released code) or the "
        "original state (paper App. C.2)")
    noise_scale: float = _f(2.0, help="initial noise scale", lo=0, lo_open=True)
    t_eps: float = _f(0.05, help="clamp of 1-t", lo=0, hi=1, lo_open=True)
    precision: Literal["policy", "fp32"] = _f(
        "policy", help="sample under the experiment's `precision` policy (the authors sample with "
        "bf16 blocks), or in fp32 whatever the policy")


@dataclass(frozen=True)
class EvalSettings:
    """How many samples, which seeds, batch sizes, scorer."""
    seeds: tuple[int, ...] = _f((0, 1, 2, 3, 4, 5), help="evaluation seeds (paper: 0-5)")
    n_samples: int = _f(1000, help="samples per seed (unconditional)", lo=1)
    n_examples: int = _f(0, help="conditional test examples per seed (0 = the whole split)", lo=0)
    sample_batch_size: int = _f(64, help="samples per sampler batch", lo=1)
    score_batch_size: int = _f(64, help="samples per scorer batch (released scorer: 64)", lo=1)
    split: Literal["validation", "test"] = _f("test", help="split for conditional scores")
    replicate_samplers: tuple[str, ...] = _f(
        (), help="samplers a training-seed replicate (`replicate_of`) is evaluated on besides those its "
        "run's trend checks compare (their training-seed spread is in the review)")
    group_by: Literal["run", "sampler"] = _f(
        "sampler", help="evaluation jobs: one per run (all its samplers in one process: small models, "
        "where start-up dominates) or one per (run, sampler) (large models on GPUs)")


# --------------------------------------------------------------------------------------------------
# Data, encoders, scorer (spec §2, §6, §8)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CorporaSettings:
    """The embedded corpora that ``elf corpora`` generates (no downloads)."""
    seed: int = _f(0, help="generator seed", lo=0)
    train_docs: int = _f(2000, help="documents / pairs in each train split", lo=1)
    validation_docs: int = _f(200, help="documents / pairs in each validation split", lo=1)
    test_docs: int = _f(200, help="documents / pairs in each test split", lo=1)
    source_order: Literal["sov", "svo"] = _f(
        "sov", help="clause order of wmt's invented source language: subject-object-verb with the "
        "place before the object, or the English order (noun phrases and postpositions as in sov)")
    source_suffixes: Literal["attached", "separate"] = _f(
        "attached", help="wmt's source suffixes (plural, verb tense/number): part of their stem's word, "
        "or each written as a word of its own (a morpheme-aware tokenisation)")


HUB_REVISION_HELP = "Hub revision (commit, tag or branch); null = the repo's default branch"


@dataclass(frozen=True)
class RawDatasetSettings:
    """A raw-text dataset read through ``datasets`` (the test split of an ``authors`` dataset)."""
    name: str = _f(help="hub dataset id or local path")
    source: Literal["hub", "local"] = _f("hub", help="`datasets` hub id, or files")
    subset: Optional[str] = _f(None, help="hub config name (e.g. de-en)")
    revision: Optional[str] = _f(None, help=HUB_REVISION_HELP)


@dataclass(frozen=True)
class DatasetSettings:
    """One dataset: where its text or token ids come from and how rows are laid out (spec §2)."""
    task: Literal["unconditional", "translation", "summarization"] = _f(help="task type")
    source: Literal["embedded", "hub", "local", "authors"] = _f(
        help="generated here, `datasets` hub, files, or the authors' tokenised sets (Hub id or "
        "folder; rows laid out as the authors' collate does: elf/data/authors.py)")
    name: str = _f(help="embedded corpus name, hub dataset id, or local path; authors: id or folder, "
                   "with `{split}` standing for train / validation (without it: train only)")
    subset: Optional[str] = _f(None, help="hub config name (e.g. de-en)")
    revision: Optional[str] = _f(None, help="hub / authors: " + HUB_REVISION_HELP)
    test: Optional[RawDatasetSettings] = _f(
        None, help="authors: the raw dataset whose test split is tokenised and laid out like the "
        "authors' sets (their repos hold train and validation only)")
    target_length: Optional[int] = _f(None, help="conditional: target tokens each row keeps, stated "
                                      "to be checked = max_length - max_input_length", lo=1)
    max_length: int = _f(1024, help="model sequence length L", lo=2)
    max_input_length: Optional[int] = _f(None, help="conditional: source length cap", lo=1)
    pad_source: bool = _f(False, help="conditional: pad every source to max_input_length (pad id, "
                          "masked in the encoder), so every target starts at the same position "
                          "(paper: the target follows the source directly)")
    max_train_sequences: int = _f(0, help="cap on packed training sequences (0 = all)", lo=0)
    prepare_shards: int = _f(1, help="contiguous shards of the train split, tokenised and packed "
                             "separately (in parallel, resumable); unconditional packing restarts "
                             "at each shard and drops each shard's tail (< max_length tokens)", lo=1)
    embed_shards: int = _f(1, help="parallel `elf embed` jobs (one GPU each) writing the train split's "
                           "store, then one gather job; 1 = a single job. Scheduling only: the store "
                           "is the same for any value", lo=1)

    @property
    def target_tokens(self) -> int | None:
        """Target positions of a conditional row, which the sampler keeps (spec §2); None if
        unconditional."""
        if self.task == "unconditional" or self.max_input_length is None:
            return None
        return self.max_length - self.max_input_length


# Dataset fields that only schedule work (elf embed jobs): they change no byte of the packed tokens.
SCHEDULING_FIELDS = ("embed_shards",)


def content_settings(settings: DatasetSettings) -> dict:
    """The settings that decide a dataset's packed tokens (scheduling-only fields dropped): what
    ``elf prepare`` and the embedding rules are given, so that changing those reruns nothing."""
    return {k: v for k, v in to_dict(settings).items() if k not in SCHEDULING_FIELDS}


@dataclass(frozen=True)
class TokenizerSettings:
    """The T5-style tokenizer: built here (embedded) or loaded by name (paper: t5-small)."""
    source: Literal["build", "pretrained"] = _f("build", help="train it here, or from_pretrained")
    name_or_path: str = _f("t5-small", help="hub id (pretrained); ignored when built")
    revision: Optional[str] = _f(None, help="pretrained: " + HUB_REVISION_HELP)
    vocab_size: int = _f(1024, help="vocabulary size when built", lo=8)


@dataclass(frozen=True)
class EncoderSettings:
    """A T5 encoder: pretrained by name, or trained here with span corruption then frozen."""
    source: Literal["build", "pretrained"] = _f("build", help="train it here, or from_pretrained")
    name_or_path: str = _f("t5-small", help="hub id (pretrained); ignored when built")
    revision: Optional[str] = _f(None, help="pretrained: " + HUB_REVISION_HELP)
    dataset: str = _f("owt", help="built: the key of `datasets` whose packed train split it learns "
                      "from (span corruption)")
    d_model: int = _f(64, help="built: model width (= embedding width d)", lo=8)
    layers: int = _f(2, help="built: encoder (and decoder) layers", lo=1)
    heads: int = _f(4, help="built: attention heads", lo=1)
    d_ff: int = _f(256, help="built: feed-forward width", lo=8)
    steps: int = _f(300, help="built: span-corruption training steps", lo=1)
    batch_size: int = _f(32, help="built: training batch", lo=1)
    lr: float = _f(1e-3, help="built: peak learning rate (cosine decay to 0 after the warm-up)",
                   lo=0, lo_open=True)
    warmup_steps: int = _f(0, help="built: linear warm-up steps before the cosine decay "
                           "(paper R06: 0.4 epoch); fewer than steps", lo=0)
    checkpoint_every: int = _f(500, help="built: steps between resumable checkpoints", lo=1)
    seed: int = _f(0, help="built: training seed", lo=0)


@dataclass(frozen=True)
class ScorerSettings:
    """The Gen. PPL scorer: GPT-2 Large by name, or a small GPT-2 trained here on held-out text."""
    source: Literal["build", "pretrained"] = _f("build", help="train it here, or from_pretrained")
    name_or_path: str = _f("gpt2-large", help="hub id (pretrained); ignored when built")
    revision: Optional[str] = _f(None, help="pretrained: " + HUB_REVISION_HELP)
    vocab_size: int = _f(1024, help="built: byte-level BPE vocabulary", lo=260)
    layers: int = _f(2, help="built: transformer layers", lo=1)
    width: int = _f(128, help="built: model width", lo=8)
    heads: int = _f(4, help="built: attention heads", lo=1)
    steps: int = _f(300, help="built: training steps", lo=1)
    batch_size: int = _f(16, help="built: training batch", lo=1)
    context: int = _f(256, help="built: context length", lo=8)
    lr: float = _f(1e-3, help="built: learning rate", lo=0, lo_open=True)
    seed: int = _f(0, help="built: training seed", lo=0)


@dataclass(frozen=True)
class EmbeddingSettings:
    """How token ids become the clean embeddings x (spec §2, §8)."""
    kind: Literal["encoder", "token_table", "gaussian", "learned"] = _f(
        "encoder", help="contextual encoder, its token table, a frozen Gaussian table, or a "
        "table learned with the flow (cannot be cached: embedded on the fly)")
    encoder: str = _f("main", help="a key of `encoders`")
    normalization: Literal["fixed", "scalar", "per_channel"] = _f(
        "fixed", help="fixed mean/std (released: 0, 0.2), or statistics of the training data")
    mean: float = _f(0.0, help="fixed normalisation mean")
    std: float = _f(0.2, help="fixed normalisation std", lo=0, lo_open=True)
    dtype: Literal["float16", "bfloat16", "float32"] = _f("float16", help="stored dtype")
    cache: bool = _f(True, help="read a cached Zarr store (true) or embed token ids on the fly each "
                     "batch (false; needs normalization fixed; kind learned can only be uncached)")


@dataclass(frozen=True)
class DecoderSettings:
    """A separately trained decoder on a frozen embedding (paper R11; spec §8 'separate decoder')."""
    dataset: str = _f(help="a key of `datasets` (its train split's store is the training data)")
    embedding: str = _f("encoder", help="a key of `embeddings` (runs using it must use the same)")
    layers: int = _f(6, help="transformer layers (T5-small encoder mirror: 6)", lo=1)
    width: int = _f(512, help="model width (T5-small: 512)", lo=8)
    heads: int = _f(8, help="attention heads (T5-small: 8)", lo=1)
    steps: int = _f(1000, help="optimiser steps (paper: 3 epochs)", lo=1)
    batch_size: int = _f(32, help="sequences per step", lo=1)
    lr: float = _f(3e-4, help="peak AdamW lr, cosine decay to 0", lo=0, lo_open=True)
    mask_prob: float = _f(0.2, help="probability a token is replaced by the mask embedding", lo=0, hi=1)
    noise_mean: float = _f(0.5, help="logit-normal mean of the per-token clean weight")
    noise_std: float = _f(1.0, help="logit-normal std of the per-token clean weight", lo=0)
    noise_scale: float = _f(5.0, help="noise scale relative to the normalised embeddings", lo=0)
    seed: int = _f(0, help="initialisation, batch order and corruption seed", lo=0)


@dataclass(frozen=True)
class FigureSettings:
    """One figure or table of the paper: which runs, samplers and seeds it needs."""
    kind: Literal["figure", "table"] = _f(help="figure or table")
    title: str = _f(help="caption title")
    runs: tuple[str, ...] = _f(help="runs it plots")
    samplers: tuple[str, ...] = _f(help="sampler settings it plots")
    seeds: Literal["all", "first"] = _f("first", help="all evaluation seeds, or the first only")
    section: str = _f("Results", help="report category (paper section)")
    pairs: tuple[PairRef, ...] = _f(help="the (run, sampler) pairs it shows, when not every run with "
                                   "every sampler (each of its runs and samplers; F8: one sampler "
                                   "per task)", factory=tuple)


@dataclass(frozen=True)
class PairRef:
    """One evaluated (run, sampler) pair."""
    run: str = _f(help="a key of `runs`")
    sampler: str = _f(help="a key of `samplers`")


@dataclass(frozen=True)
class TrendSettings:
    """A claim of the paper checked on our numbers: ``lower`` has a lower ``metric`` than ``higher``
    (or, ``relation: equal``, the two are the same within a tenth of their value); elf/report/trends.py
    decides holds / does not hold / not resolved from both spreads."""
    claim: str = _f(help="the paper's claim in words")
    lower: PairRef = _f(help="the pair the claim says is lower")
    higher: PairRef = _f(help="the pair it is compared with")
    metric: str = _f("gen_ppl", help="aggregate metric compared (gen_ppl, entropy, bleu, ...)")
    relation: Literal["lower", "equal"] = _f("lower", help="lower: the claim is lower < higher; equal: "
                                             "the two agree within 10% of their mean")


@dataclass(frozen=True)
class Experiment:
    """A whole configuration file, validated."""
    results: str = _f("results", help="root of intermediate outputs")
    reports: str = _f("reports", help="root of figures, tables and reviews")
    scale: Literal["embedded", "paper"] = _f("embedded", help="labels the replication review")
    precision: Precision = _f("fp32", help="network precision policy of training, distillation, "
                              "sampling and scoring (elf/precision.py): fp32, or bf16 blocks with fp32 "
                              "input projections, embedders and heads as the authors run on GPU (and "
                              "the scorer's weights in bf16)")
    corpora: CorporaSettings = _f(help="embedded corpora", factory=CorporaSettings)
    tokenizer: TokenizerSettings = _f(help="tokenizer", factory=TokenizerSettings)
    encoders: dict[str, EncoderSettings] = _f(help="named encoders", factory=dict)
    scorer: ScorerSettings = _f(help="Gen. PPL scorer", factory=ScorerSettings)
    datasets: dict[str, DatasetSettings] = _f(help="named datasets", factory=dict)
    embeddings: dict[str, EmbeddingSettings] = _f(help="named embedding kinds", factory=dict)
    decoders: dict[str, DecoderSettings] = _f(help="named separate decoders (Fig. 5b)", factory=dict)
    sizes: dict[str, dict[str, int]] = _f(help="extra model-size presets", factory=dict)
    run_defaults: dict[str, Any] = _f(help="settings every run starts from", factory=dict)
    runs: dict[str, dict[str, Any]] = _f(help="named runs (overrides of run_defaults)", factory=dict)
    samplers: dict[str, SamplerSettings] = _f(help="named sampler settings", factory=dict)
    evaluation: EvalSettings = _f(help="evaluation protocol", factory=EvalSettings)
    figures: dict[str, FigureSettings] = _f(help="figures and tables to render", factory=dict)
    trends: dict[str, TrendSettings] = _f(help="the paper's claims checked on our numbers (review)",
                                          factory=dict)
    unstated: tuple[str, ...] = _f((), help="settings the paper does not state and the value chosen "
                                   "here (listed in the replication review)")

    def run(self, name: str) -> RunSettings:
        """The resolved settings of run ``name``: ``run_defaults`` merged with its overrides.
        Resolved once per name (the plan asks for every run many times: issue 26, linear planning);
        the cache lives outside the fields, so equality and ``to_dict`` ignore it."""
        resolved = self.__dict__.setdefault("_resolved_runs", {})
        if name not in resolved:
            if name not in self.runs:
                raise ConfigError(f"unknown run '{name}'; defined runs: {', '.join(self.runs)}")
            resolved[name] = from_dict(RunSettings, deep_merge(self.run_defaults, self.runs[name]),
                                       f"runs.{name}")
        return resolved[name]
