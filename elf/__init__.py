"""ELF: Embedded Language Flows — a reference open implementation.

Packages, in the order data flows through them:
``data`` (corpora, tokenizers, packing) → ``embed`` (encoders, Zarr stores) → ``model`` / ``flow``
(network, objective, samplers) → ``train`` (optimiser, loop, checkpoints) → ``evaluate`` (Gen. PPL,
entropy, BLEU, ROUGE, seeds) → ``report`` (figures, tables, replication review).
``stages`` holds one module per ``elf`` subcommand; they own all I/O.
"""

__version__ = "0.1.0"

from elf.runtime import tune_malloc as _tune_malloc

_tune_malloc()  # CPU allocator thresholds (elf/runtime.py); ELF_MALLOC_TUNING=0 turns it off
