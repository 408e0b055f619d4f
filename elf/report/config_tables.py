"""The paper's configuration tables beside the runs' metadata (``config.json``, ``tokens.json``): T2 the
paper's survey (as it is), T6 model configurations (our networks' parameter counts as config.json
records them, and epochs), T7 the D0 hyperparameters beside each run's, T8 training tokens (batch ×
steps × L from config.json; distillation from tokens.json), T11 the paper's baseline settings (the
paper's only). Each a function ``(inputs: TableInputs) -> Table``.
"""

from __future__ import annotations

from typing import Any, Callable

from elf.artifacts.names import RUN_MODEL, RUN_PARAMETERS, RUN_SETTINGS
from elf.report.cells import (DASH, Table, TableInputs, count_text, same_setting, setting_cell, tokens_b,
                              _text)
from elf.report.runs import (authors_steps, our_token_bars, paper_pd_tokens, run_epochs, token_basis,
                             trained_tokens, valid_fraction)



# --------------------------------------------------------------------------------------------------
# The survey (T2) and the baselines' settings (T11): the paper's only
# --------------------------------------------------------------------------------------------------

T2_HEADER = {"method": "Method", "process": "Process", "state": "State",
             "train_per_step_discr": "Train per-step discr.",
             "infer_per_step_discr": "Inference per-step discr.", "sep_decoder": "Separate decoder"}


def survey_cell(value: Any) -> str:
    """A Table 2 cell as the paper prints it: ✓ for yes, blank for no (YAML reads yes/no as bool)."""
    if isinstance(value, bool):
        return "✓" if value else ""
    return str(value)


def table_T2(inputs: TableInputs) -> Table:
    """The paper's survey of continuous diffusion/flow LMs (categorical), its rows as they are."""
    section = inputs.paper_values.get("table_2") or {}
    columns = section.get("columns", [])
    header = [T2_HEADER.get(c, c) for c in columns]
    rows = [[survey_cell(v) for v in row] for row in section.get("rows", [])]
    notes = [section.get("caption", ""), "✓ = yes, blank = no. " + section.get("note", ""),
             "Paper: Table 2, pp. 17–18 (v2); a survey, nothing here is measured. ELF's row is the "
             "paper's description of the method this pipeline implements."]
    return Table("T2", inputs.title, header, rows, [n for n in notes if n])


T11_DATASETS = {"xsum": "XSum", "de_en": "De-En"}


def _t11_column(name: str) -> str:
    model, _, dataset = name.partition("_")
    return f"{model} ({T11_DATASETS.get(dataset, dataset)})" if dataset else model


def _t11_cell(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def table_T11(inputs: TableInputs) -> Table:
    """The paper's settings for its reproduced conditional baselines (Table 11): the paper's values
    only, since this pipeline trains no baselines."""
    section = inputs.paper_values.get("table_11") or {}
    columns = section.get("columns", [])
    header = ["Setting", *[f"{_t11_column(c)} (paper)" for c in columns]]
    rows = [[key.replace("_", " ").capitalize(), *[_t11_cell(v) for v in values]]
            for key, values in section.items()
            if key != "columns" and isinstance(values, list) and len(values) == len(columns)]
    notes = ["All values are the paper's (Table 11, p. 32 v2): the authors' reproduced baselines "
             "B1–B5. This pipeline trains no baselines; nothing in this table is ours.",
             section.get("note", "")]
    return Table("T11", inputs.title, header, rows, [n for n in notes if n])


# --------------------------------------------------------------------------------------------------
# Model configurations (T6)
# --------------------------------------------------------------------------------------------------

ADALN_MODEL = "ELF-B (adaLN-Zero)"   # R28: the paper states its 148M in App. D (F14), not in T6
PAPER_SIZE_OF_RUN = {"R01": "ELF-B", "R02": "ELF-M", "R03": "ELF-L",  # paper Table 6 rows
                     "R28": ADALN_MODEL}


def t6_entries(paper_values: dict) -> list[dict]:
    """Table 6's rows, and R28's adaLN-Zero ELF-B (its parameter count from the text, App. D / F14;
    its other settings ELF-B's)."""
    section = paper_values.get("table_6") or {}
    entries = list(section.get("entries", []))
    stated = (section.get("related_text") or {}).get("adaLN_zero_ELF_B_params")
    base = next((e for e in entries if e.get("model") == "ELF-B"), None)
    if stated and base:
        entries.append({**base, "model": ADALN_MODEL, "params": stated, "src": "T6 / App. D (F14)"})
    return entries


def paper_dims_params(size: str) -> int:
    """Our network's parameters at a paper size and the paper's data dims
    (``elf.model.preset_num_parameters``; ``ADALN_MODEL``: ELF-B with adaLN-Zero conditioning)."""
    from elf.model import preset_num_parameters

    if size != ADALN_MODEL:
        return preset_num_parameters(size)
    import torch

    from elf.model import ELF, model_config

    with torch.device("meta"):
        return ELF(model_config("ELF-B", conditioning="adaln")).num_parameters()


def paper_model_of(config: dict) -> str | None:
    """The paper's Table 6 row of a run: by its paper run (R01–R03), else by its size name."""
    run = config.get(RUN_SETTINGS) or {}
    size = (run.get("model") or {}).get("size")
    return PAPER_SIZE_OF_RUN.get(run.get("paper_run")) or (size if size in PAPER_SIZE_OF_RUN.values()
                                                           else None)


def run_model_record(run: str, meta: dict) -> dict:
    """What Table 6 shows of one of our runs, from its ``config.json`` (the parameter count its
    training stage recorded)."""
    config = meta["config"]
    model = config.get(RUN_MODEL) or {}
    return {"run": run, "size": ((config.get(RUN_SETTINGS) or {}).get("model") or {}).get("size"),
            "paper_model": paper_model_of(config), "depth": model.get("depth"),
            "width": model.get("width"), "heads": model.get("heads"),
            "params": config.get(RUN_PARAMETERS),
            "tokens": trained_tokens(config), "epochs": run_epochs(config),
            "path": meta["config_path"]}


EPOCHS_NOTE = ("training tokens = valid (non-pad) tokens, steps × batch × L × the train store's "
               "valid share (its valid-token count ÷ rows × L), as the paper counts them (45.2B = 5 "
               "epochs × 9.04B valid OWT tokens); epochs = steps × batch ÷ the store's rows. A run "
               "that records no row count shows token slots (steps × batch × L) and slots ÷ valid "
               "tokens.")


def table_T6(inputs: TableInputs) -> Table:
    """Model configurations: the paper's B/M/L, our network at those sizes and the paper's dims
    (parameter count by construction), and each configured run as trained (its config.json)."""
    paper = t6_entries(inputs.paper_values)
    header = ["Model", "Source", "Depth", "Width", "Heads", "Params", "Training tokens", "Epochs"]
    records = [run_model_record(run, meta) for run, meta in inputs.runs_meta.items()]
    rows = []
    for entry in paper:
        model = entry["model"]
        rows.append([model, f"paper ({entry.get('src', 'T6')})", *(str(entry.get(k, DASH)) for k in
                                            ("depth", "hidden", "heads", "params")),
                     DASH, f"{entry.get('owt_epochs', DASH)} (OWT)"])
        rows.append([model, "our network at the paper's dims", *(str(entry.get(k, DASH)) for k in
                                                                 ("depth", "hidden", "heads")),
                     count_text(paper_dims_params(model)), DASH, DASH])
        rows += [_t6_run_row(r) for r in records if r["paper_model"] == model]
    rows += [_t6_run_row(r) for r in records if r["paper_model"] not in {e["model"] for e in paper}]
    notes = ["Paper: Table 6, p. 30 (v2); the adaLN-Zero ELF-B (R28) has the 148M parameters App. D "
             "states for F14. 'Our network at the paper's dims': elf.model with the "
             "paper's size, d=512 (T5-small), vocabulary 32128, L=1024, bottleneck 128, in-context "
             "conditioning, counted on the meta device. Our runs: the network and parameter count "
             "each run's config.json records; " + EPOCHS_NOTE] + _metadata_note(records)
    return Table("T6", inputs.title, header, rows, notes)


def _t6_run_row(record: dict) -> list[str]:
    return [f"{record['size']} [{record['run']}]", "ours", _text(record["depth"]),
            _text(record["width"]), _text(record["heads"]), count_text(record["params"]),
            _text(record["tokens"], "{:,.0f}"), _text(record["epochs"], "{:.2f}")]


def _metadata_note(records: list[dict]) -> list[str]:
    paths = [r["path"] for r in records]
    return ["Run metadata: " + ", ".join(paths) + "."] if paths else \
        ["No runs: the configuration lists none for this table."]


# --------------------------------------------------------------------------------------------------
# The D0 hyperparameters (T7)
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Table 7 (D0) items: (group, paper key, shown name, our value from config.json, tolerance).
# A tolerance of None means the two are not comparable (only shown); 0 means equal as text/number.
def _lr(config: dict) -> float:
    run = config[RUN_SETTINGS]
    return run["optim"]["blr"] * run["budget"]["batch_size"] / 256  # elf.train.optim.lr_at

# --------------------------------------------------------------------------------------------------
def _warmup_epochs(config: dict) -> float | None:
    run, epochs, tokens = config[RUN_SETTINGS], run_epochs(config), trained_tokens(config)
    if epochs is None or not tokens:
        return None
    return run["optim"]["warmup_steps"] / run["budget"]["steps"] * epochs


def _embedding_text(config: dict) -> str:
    emb = config.get("embedding") or {}
    return f"{emb.get('kind')} '{emb.get('encoder')}' (frozen)"


def _model(key: str) -> Callable[[dict], Any]:
    return lambda config: config[RUN_MODEL][key]


def _objective(key: str) -> Callable[[dict], Any]:
    return lambda config: config[RUN_SETTINGS]["objective"][key]


def _optim(key: str) -> Callable[[dict], Any]:
    return lambda config: config[RUN_SETTINGS]["optim"][key]


def _constant(value: Any) -> Callable[[dict], Any]:
    return lambda config: value


ARCH, NOISE, GUIDE, OPT, BUDGET = ("model_architecture", "denoising_and_decoding",
                                   "conditioning_and_guidance", "optimization", "related_text")
D0_ITEMS: list[tuple[str, str, str, Callable[[dict], Any], float | None]] = [
    (ARCH, "model", "Model", lambda c: c[RUN_SETTINGS]["model"]["size"], 0),
    (ARCH, "model_size", "Parameters", lambda c: c.get(RUN_PARAMETERS), 0.01),
    (ARCH, "encoder_backbone", "Encoder", _embedding_text, None),
    (ARCH, "embedding_dim", "Embedding dim d", _model("d"), 0),
    (ARCH, "bottleneck_dim", "Bottleneck", _model("bottleneck"), 0),
    (ARCH, "model_dim", "Model width", _model("width"), 0),
    (ARCH, "sequence_length", "Sequence length L", _model("max_length"), 0),
    # elf.flow.paths always draws t logit-normal (spec §4)
    (NOISE, "time_schedule", "Time schedule", _constant("logit_normal"), 0),
    (NOISE, "denoiser_p_mean", "Denoiser t mean", _objective("t_mean"), 0),
    (NOISE, "denoiser_p_std", "Denoiser t std", _objective("t_std"), 0),
    (NOISE, "denoiser_noise_scale", "Denoiser noise scale", _objective("noise_scale"), 0),
    (NOISE, "decoder_p_mean", "Decoder p mean", _objective("decode_lambda_mean"), 0),
    (NOISE, "decoder_p_std", "Decoder p std", _objective("decode_lambda_std"), 0),
    (NOISE, "decoder_noise_scale", "Decoder noise scale", _objective("decode_noise_scale"), 0),
    (NOISE, "denoiser_vs_decoder_prob", "Denoise / decode probability",
     lambda c: [round(1 - c[RUN_SETTINGS]["objective"]["decode_prob"], 12),
                c[RUN_SETTINGS]["objective"]["decode_prob"]], 0),
    (GUIDE, "self_cond_prob", "Self-conditioning probability", _objective("self_cond_prob"), 0),
    (GUIDE, "sc_cfg_train_range", "Training SC-CFG range",
     lambda c: [c[RUN_SETTINGS]["objective"]["sc_cfg_min"], c[RUN_SETTINGS]["objective"]["sc_cfg_max"]], 0),
    (GUIDE, "sc_cfg_train_distribution", "Training SC-CFG distribution",
     _constant("log-uniform in 1 + w (denser at small w)"), None),  # elf.flow.paths.sc_cfg_scale
    (GUIDE, "n_time_tokens", "Time tokens", _model("num_time_tokens"), 0),
    (GUIDE, "n_cfg_tokens", "SC-CFG tokens", _model("num_cfg_tokens"), 0),
    (GUIDE, "n_mode_tokens", "Mode tokens", _model("num_mode_tokens"), 0),
    (OPT, "optimizer", "Optimiser", _optim("name"), 0),
    (OPT, "learning_rate", "Learning rate (blr × batch / 256)", _lr, 0),
    (OPT, "weight_decay", "Weight decay", _optim("weight_decay"), 0),
    (OPT, "epochs", "Epochs", run_epochs, 0.01),
    (OPT, "global_batch_size", "Global batch", lambda c: c[RUN_SETTINGS]["budget"]["batch_size"], 0),
    (OPT, "lr_schedule", "LR schedule", _constant("constant"), 0),  # after warm-up (lr_at)
    (OPT, "warmup_epochs", "Warm-up (epochs)", _warmup_epochs, 0.01),
    (OPT, "ema_decay", "EMA decay", _optim("ema_decay"), 0),
    (BUDGET, "owt_steps_5_epochs", "Steps (configured)", lambda c: c[RUN_SETTINGS]["budget"]["steps"],
     None),
    (BUDGET, "owt_steps_5_epochs", "Steps (authors' code: ⌊rows ÷ batch⌋ × 5)",
     lambda c: authors_steps(c, 5), None),
]
D0_GROUPS = {ARCH: "Architecture", NOISE: "Denoising / decoding", GUIDE: "Conditioning / guidance",
             OPT: "Optimisation", BUDGET: "Budget"}


def d0_items(config: dict, table_7: dict) -> list[dict]:
    """Table 7's hyperparameters with ours (one run's config.json) and whether they are the same."""
    items = []
    for group, key, name, ours_of, tolerance in D0_ITEMS:
        paper = (table_7.get(group) or {}).get(key)
        try:
            ours = ours_of(config)
        except (KeyError, TypeError):
            ours = None
        items.append({"group": D0_GROUPS[group], "key": key, "name": name, "paper": paper,
                      "ours": ours, "same": same_setting(paper, ours, tolerance)})
    return items


def table_T7(inputs: TableInputs) -> Table:
    """Default hyperparameters D0: the paper's Table 7 beside each configured run's (config.json)."""
    table_7 = inputs.paper_values.get("table_7") or {}
    runs = list(inputs.runs_meta)
    header = ["Group", "Hyperparameter", "Paper (D0)"] + \
        [c for run in runs for c in (f"Ours [{run}]", "Same")]
    per_run = [d0_items(inputs.runs_meta[run]["config"], table_7) for run in runs]
    rows = []
    for position, (group, key, name, _, _) in enumerate(D0_ITEMS):
        cells = [D0_GROUPS[group], name, setting_cell((table_7.get(group) or {}).get(key))]
        for items in per_run:
            cells += [setting_cell(items[position]["ours"]), items[position]["same"]]
        rows.append(cells)
    notes = ["Paper: Table 7, p. 30 (v2), the defaults every run follows unless noted. Ours: each "
             "run's config.json (the settings it trained with); learning rate = blr × batch / 256 "
             "(elf.train.optim); " + EPOCHS_NOTE + " Steps: as configured, and as the authors' code "
             "derives them (⌊rows ÷ batch⌋ × epochs); the paper rounds to ≈ 95K. Same: equal "
             "settings (a configuration comparison, not a measurement); – = not comparable."]
    records = [{"path": inputs.runs_meta[r]["config_path"]} for r in runs]
    return Table("T7", inputs.title, header, rows, notes + _metadata_note(records))


# --------------------------------------------------------------------------------------------------
# Training tokens (T8)
# --------------------------------------------------------------------------------------------------

T8_PD_LABEL = "ELF-B+PD"


def _base_formula(meta: dict) -> str:
    config = meta["config"]
    budget = (config.get(RUN_SETTINGS) or {}).get("budget") or {}
    length = (config.get(RUN_MODEL) or {}).get("max_length")
    if trained_tokens(config) is None:
        return DASH
    formula = f"{budget['batch_size']} × {budget['steps']:,} × {length}"
    if token_basis(config) == "valid":
        formula += f" × {valid_fraction(config):.3f} valid"
    return formula


def table_T8(inputs: TableInputs) -> Table:
    """Effective training tokens: the paper's Table 8 and ours from the runs' metadata (config.json:
    batch × steps × L; distillation rounds: tokens.json), each with its ratio to ELF."""
    section = inputs.paper_values.get("table_8") or {}
    header = ["Model", "Base (batch × steps × L)", "Distillation", "Tokens", "Tokens (B)", "× ELF",
              "Source"]
    rows = []
    for entry in section.get("entries", []):
        rows.append([entry["model"], str(entry.get("base") or DASH),
                     str(entry.get("distill") or DASH), DASH, f"{float(entry['value']):.1f}",
                     f"{float(entry['ratio_vs_elf']):.1f}", "paper (T8)"])
    bars = our_token_bars(inputs.runs_meta)
    if any(bar.rounds for bar in bars) and paper_pd_tokens(inputs.paper_values) is not None:
        extra = section["not_in_table"]
        rows.append([T8_PD_LABEL, "5 × 9.04B", "PD rounds r1–r5",
                     DASH, f"{float(extra['ELF-B+PD_train_tokens_B']):.1f}",
                     f"{float(extra['ELF-B+PD_ratio_vs_ELF']):.1f}", "paper (v2 Fig. 9b)"])
    reference = next((bar.total for bar in bars if not bar.rounds and bar.total), None)
    for bar in bars:
        meta = inputs.runs_meta[bar.run]
        base = _base_formula(meta) if not bar.rounds else \
            f"teacher {meta['tokens'].get('teacher')}: {_text(bar.base, '{:,.0f}')}"
        distill = DASH if not bar.rounds else \
            f"{len(bar.rounds)} round{'s' * (len(bar.rounds) != 1)}: {bar.distill:,.0f}"
        ratio = bar.ratio(reference if not bar.rounds else bar.base)
        rows.append([f"{'ELF+PD' if bar.rounds else 'ELF'} [{bar.run}]", base, distill,
                     _text(bar.total, "{:,.0f}"), tokens_b(bar.total), _text(ratio, "{:.1f}"),
                     f"ours ({bar.path})"])
    notes = ["Paper: Table 8, p. 31 (v2): " + section.get("caption", ""),
             "Ours: " + EPOCHS_NOTE + " A distilled run adds its rounds "
             "(tokens.json, written by `elf distill`, × the same valid share) to its teacher's tokens. × ELF: against our "
             "first trained run (a distilled run: against its teacher), as the paper's ratio is "
             "against ELF-B. Released checkpoints were not trained here (–)."]
    return Table("T8", inputs.title, header, rows, notes)
