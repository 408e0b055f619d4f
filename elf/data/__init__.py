"""Data layer: embedded corpora (``corpora``), the T5-style tokenizer (``tokenizer``), raw loading with
normalised columns (``loaders``) and packing into model sequences (``pack``). Stages own the I/O."""
