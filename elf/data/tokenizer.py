"""A T5-style tokenizer: trained here on the embedded corpora, or loaded by name (paper: ``t5-small``).

``train_tokenizer(texts, vocab_size)`` builds a SentencePiece-style BPE model with the ``tokenizers``
library (NFKC normaliser, Metaspace "▁" pre-tokenizer and decoder, ``<unk>`` for unseen characters and
no byte fallback, as in T5; punctuation split off words, so "rose." is "▁rose" + "." as T5-small
tokenises it and a word is not learned twice), with T5's special ids
``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2. It has no ``<extra_id_k>`` sentinels: span-corruption
training of the built encoder reserves sentinel ids above the vocabulary (``elf.embed.encoder``).
It returns a ``transformers`` fast tokenizer; ``save_pretrained(dir)`` then ``load_tokenizer(dir)``
(= ``AutoTokenizer.from_pretrained``) gives it back — the same call that loads ``t5-small``.

Why BPE merges and not T5's Unigram model: the ``tokenizers`` Unigram trainer is not reproducible — it
iterates a hash map of word counts in a per-process random order, so its float sums, scores and even
piece order differ from run to run (checked: three runs, three different files), and every later
artifact (encoder, embeddings, runs) depends on these ids. The BPE trainer breaks ties by pair order
and gives the same file each time (a test checks). Downstream code only needs ids, the special ids
and a lossless decode, which both provide.

``corpus_texts(corpora_dir)`` yields the training texts: the train splits of the embedded owt, wmt
(both sides) and xsum (documents and summaries). The ``elf tokenizer`` stage runs both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)  # ids 0, 1, 2 as in T5
METASPACE = "▁"
MAX_PIECE_LENGTH = 16


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a tokenizer of at most ``vocab_size`` ids (fewer if the corpus runs out of merges)."""
    backend = Tokenizer(models.BPE(unk_token=UNK))
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always"),
        pre_tokenizers.Punctuation()])
    backend.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
        max_token_length=MAX_PIECE_LENGTH, show_progress=False)
    backend.train_from_iterator(texts, trainer)
    # T5 appends </s> when special tokens are requested; ELF itself always tokenises without them
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK,
        model_max_length=int(1e30), clean_up_tokenization_spaces=False)
    return tokenizer


def load_tokenizer(name_or_path: str):
    """A saved tokenizer folder or a Hub reference (``hub:t5-small`` on a cluster; ``@revision`` pins
    one; elf/hub.py)."""
    from elf.hub import pretrained_kwargs

    name, kwargs = pretrained_kwargs(name_or_path, "tokenizer")
    return AutoTokenizer.from_pretrained(name, **kwargs)


def corpus_texts(corpora_dir: str | Path) -> Iterator[str]:
    """Every text of the embedded corpora's train splits, both languages (owt, wmt, xsum)."""
    import datasets  # here, not at the top: sampling jobs load a tokenizer and skip this import

    root = Path(corpora_dir)
    yield from datasets.load_from_disk(str(root / "owt"))["train"]["text"]
    for pair in datasets.load_from_disk(str(root / "wmt"))["train"]["translation"]:
        yield pair["de"]
        yield pair["en"]
    xsum = datasets.load_from_disk(str(root / "xsum"))["train"]
    yield from xsum["document"]
    yield from xsum["summary"]
