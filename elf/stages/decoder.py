r"""``elf decoder``: train the separate decoder of the Fig. 5b ablation (paper R11) on a frozen embedding.

Reads ``--store`` (the dataset's train-split embedding store, see ``elf embed``; embeddings are
normalised as the embedding settings say, exactly as ``elf train`` feeds the denoiser) and the
tokenizer (vocabulary size). Trains ``elf.decoder.SeparateDecoder`` with token masking and
logit-normal corruption (AdamW, cosine decay from ``lr`` to 0, grad-norm clip 1), seeded by the
settings' ``seed``. Writes ``--out``/``config.json`` (decoder shape, settings, embedding, store
identity, loss curve) and then ``--out``/``model.safetensors``, each atomically:

    elf decoder --settings '{"decoder": {...}, "dataset": {...}, "embedding": {...}}' \
        --store results/embeddings/owt/encoder/train.zarr --tokenizer results/models/tokenizer \
        --out results/decoders/sep

``elf.train.checkpoint.load_decoder(dir)`` rebuilds it for ``elf sample --decoder``; the training
itself is ``elf.train.decoder.train_decoder``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from elf.errors import ElfError
from elf.config import DatasetSettings, DecoderSettings, EmbeddingSettings, to_dict
from elf.stages.args import parse_sections, resolve_device


def register(sub) -> None:
    p = sub.add_parser("decoder", help="train a separate decoder on frozen embeddings (Fig. 5b)",
                       description=__doc__)
    p.add_argument("--settings", required=True,
                   help="JSON with keys decoder (DecoderSettings), dataset, embedding")
    p.add_argument("--store", required=True, help="train-split embedding store (.zarr)")
    p.add_argument("--tokenizer", required=True, help="tokenizer path or hub id (vocabulary size)")
    p.add_argument("--out", required=True, help="decoder directory to write")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> None:
    settings = parse_sections(args.settings, decoder=DecoderSettings, dataset=DatasetSettings,
                              embedding=EmbeddingSettings)
    train_separate_decoder(settings["decoder"], settings["dataset"], settings["embedding"],
                           store_path=args.store, tokenizer_ref=args.tokenizer, out=Path(args.out),
                           device=resolve_device(args.device), progress=not args.no_progress)


def train_separate_decoder(dec_s: DecoderSettings, data_s: DatasetSettings, emb_s: EmbeddingSettings,
                           *, store_path: str, tokenizer_ref: str, out: Path, device,
                           progress: bool) -> None:
    """Open the store and the tokenizer, train the decoder, write its folder."""
    import torch

    from elf.artifacts import check_tokenizer
    from elf.artifacts.names import STORE_TOKENIZER
    from elf.data.tokenizer import load_tokenizer
    from elf.decoder import DecoderConfig, SeparateDecoder
    from elf.embed.reader import ShuffledBatches, StoreSource
    from elf.embed.store import open_store
    from elf.train.checkpoint import save_decoder
    from elf.train.decoder import train_decoder

    if not Path(store_path).exists():
        raise ElfError(f"--store {store_path} does not exist (run `elf embed` for the train split)")
    store = open_store(store_path)
    tokenizer = load_tokenizer(tokenizer_ref)
    check_tokenizer(tokenizer_ref, store.identity.get(STORE_TOKENIZER), f"store {store_path}")
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
        raise ElfError(f"--store {store_path}: {err}") from err
    try:
        losses = train_decoder(decoder, batches, dec_s, covers_padding=data_s.task != "unconditional",
                               device=device, progress=progress)
    finally:
        batches.close()
    meta = dict(decoder=dataclasses.asdict(cfg), settings=to_dict(dec_s), dataset=to_dict(data_s),
                embedding=to_dict(emb_s), store=str(store_path), store_identity=store.identity_sha256,
                tokenizer=str(tokenizer_ref), losses=losses)
    save_decoder(out, decoder, meta)
