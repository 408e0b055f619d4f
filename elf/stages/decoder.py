"""``elf decoder``: train the separate decoder of the Fig. 5b ablation (paper R11) on a frozen embedding.

Reads ``--store`` (the dataset's train-split embedding store, see ``elf embed``; embeddings are
normalised as the embedding settings say, exactly as ``elf train`` feeds the denoiser) and the
tokenizer (vocabulary size). Trains ``elf.decoder.SeparateDecoder`` with token masking and
logit-normal corruption (AdamW, cosine decay from ``lr`` to 0, grad-norm clip 1), seeded by the
settings' ``seed``. Writes ``--out``/``config.json`` (decoder shape, settings, embedding, store
identity, loss curve) and then ``--out``/``model.safetensors``, each atomically:

    elf decoder --settings '{"decoder": {...}, "dataset": {...}, "embedding": {...}}' \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/decoders/sep

``load_decoder(dir)`` rebuilds it for ``elf sample --decoder``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from elf.cli import ElfError, resolve_device
from elf.config import (ConfigError, DatasetSettings, DecoderSettings, EmbeddingSettings, from_dict,
                        to_dict)


def register(sub) -> None:
    p = sub.add_parser("decoder", help="train a separate decoder on frozen embeddings (Fig. 5b)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", required=True,
                   help="JSON with keys decoder (DecoderSettings), dataset, embedding")
    p.add_argument("--store", required=True, help="train-split embedding store (.zarr)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="decoder directory to write")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def parse_settings(text: str) -> tuple[DecoderSettings, DatasetSettings, EmbeddingSettings]:
    try:
        blob = json.loads(text)
        return (from_dict(DecoderSettings, blob["decoder"], "decoder"),
                from_dict(DatasetSettings, blob["dataset"], "dataset"),
                from_dict(EmbeddingSettings, blob["embedding"], "embedding"))
    except (json.JSONDecodeError, KeyError, ConfigError) as err:
        raise ElfError(f"--settings: {err}") from err


def cosine_lr(step: int, total: int) -> float:
    """Multiplier of the peak lr at ``step``: 0.5·(1 + cos(π·step/total)), from 1 down to 0."""
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


def run(args) -> None:
    import torch
    from tqdm import tqdm

    from elf.artifacts import check_tokenizer
    from elf.data.tokenizer import load_tokenizer
    from elf.decoder import DecoderConfig, SeparateDecoder, decoder_loss, draw_corruption
    from elf.embed.reader import ShuffledBatches, StoreSource
    from elf.embed.store import open_store
    from elf.flow.objective import loss_mask

    dec_s, data_s, emb_s = parse_settings(args.settings)
    if not Path(args.store).exists():
        raise ElfError(f"--store {args.store} does not exist (run `elf embed` for the train split)")
    store = open_store(args.store)
    tokenizer = load_tokenizer(args.tokenizer)
    check_tokenizer(args.tokenizer, (store.attrs.get("identity") or {}).get("tokenizer"),
                    f"store {args.store}")
    device = resolve_device(args.device)
    if dec_s.width % dec_s.heads:
        raise ElfError(f"decoder width {dec_s.width} is not divisible by heads {dec_s.heads}")
    cfg = DecoderConfig(d=store.dim, width=dec_s.width, layers=dec_s.layers, heads=dec_s.heads,
                        vocab_size=len(tokenizer), max_length=store.seq_len)
    torch.manual_seed(dec_s.seed)  # initialisation
    decoder = SeparateDecoder(cfg).to(device)
    try:
        batches = ShuffledBatches(StoreSource(store), dec_s.batch_size, seed=dec_s.seed,
                                  normalization=emb_s.normalization, mean=emb_s.mean, std=emb_s.std)
    except ValueError as err:
        raise ElfError(f"--store {args.store}: {err}") from err
    optimizer = torch.optim.AdamW(decoder.parameters(), lr=dec_s.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: cosine_lr(k, dec_s.steps))
    generator = torch.Generator().manual_seed(dec_s.seed * 1_000_003 + 1)  # corruption draws
    covers_padding = data_s.task != "unconditional"
    losses = []
    bar = tqdm(range(dec_s.steps), desc="decoder", unit="step", disable=args.no_progress)
    try:
        for step in bar:
            batch = next(batches)
            x = batch["x"].to(device)
            draws = draw_corruption(tuple(x.shape), dec_s.mask_prob, dec_s.noise_mean, dec_s.noise_std,
                                    generator, device)
            loss = decoder_loss(decoder, x, batch["input_ids"].to(device),
                                loss_mask(batch, covers_padding).to(device), draws, dec_s.noise_scale)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(decoder.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            bar.set_postfix(ce=f"{losses[-1]:.3f}")
    finally:
        batches.close()
    meta = dict(decoder=dataclasses.asdict(cfg), settings=to_dict(dec_s), dataset=to_dict(data_s),
                embedding=to_dict(emb_s), store=str(args.store),
                store_identity=store.attrs.get("identity_sha256"), tokenizer=str(args.tokenizer),
                losses=losses)
    save_decoder(Path(args.out), decoder, meta)


def save_decoder(out_dir: Path, decoder, meta: dict) -> None:
    """config.json, then model.safetensors (the rule's output), each replaced in one rename, then
    the weights' checksums.json (``elf.artifacts``)."""
    from safetensors.torch import save_file

    from elf.artifacts import write_checksums
    from elf.io import atomic_path, provenance

    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / "config.json") as tmp:
        tmp.write_text(json.dumps({**meta, "provenance": provenance()}, indent=2, sort_keys=True,
                                  default=str) + "\n")
    state = {k: v.detach().float().cpu().contiguous() for k, v in decoder.state_dict().items()}
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(state, str(tmp))
    write_checksums(out_dir, ["model.safetensors"])


def load_decoder(path, device="cpu"):
    """(SeparateDecoder in eval mode, its config.json) from a directory written by ``elf decoder``,
    the weights verified against checksums.json."""
    from elf.artifacts import ArtifactError, MissingArtifactError, load_safetensors, read_json, verified_sha256
    from elf.decoder import DecoderConfig, SeparateDecoder

    path = Path(path)
    if not (path / "model.safetensors").exists() or not (path / "config.json").exists():
        raise MissingArtifactError(f"{path} is not a finished decoder (rerun its decoder rule)")
    verified_sha256(path / "model.safetensors", "rerun its decoder rule")
    meta = read_json(path / "config.json", "decoder config")
    try:
        decoder = SeparateDecoder(DecoderConfig(**meta["decoder"]))
        decoder.load_state_dict(load_safetensors(path / "model.safetensors"), strict=True)
    except (KeyError, TypeError, RuntimeError) as err:
        raise ArtifactError(f"{path}: model.safetensors does not fit config.json ({err})") from err
    return decoder.to(device).eval(), meta
