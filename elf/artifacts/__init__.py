"""What one stage hands another, in one place: the names, the layout, the records and their checks.

- ``names``: every file name, store attribute, record key and header field that crosses a stage
  (who writes it, who reads it);
- ``layout``: where files lie inside an evaluation folder, a run directory and the report root;
- ``records``: the samples file, ``tokens.json`` and the fingerprints of folders and texts, built and
  parsed;
- ``checks``: the readers that verify an input against what its provenance records (exit status 2,
  ``ArtifactError``), re-exported here: ``from elf.artifacts import verified_sha256``.
"""

from elf.artifacts.checks import (TOKEN_HASH_LIMIT, ArtifactError, MissingArtifactError, check_samples_header,
                                  check_store, check_tokenizer, file_sha256, load_safetensors, mismatch,
                                  read_json, short, store_files, store_problems, tokenizer_sha256, tokens_tokenizer,
                                  verified_sha256, write_checksums)

__all__ = ["TOKEN_HASH_LIMIT", "ArtifactError", "MissingArtifactError", "check_samples_header", "check_store",
           "check_tokenizer", "file_sha256", "load_safetensors", "mismatch", "read_json", "short",
           "store_files", "store_problems", "tokenizer_sha256", "tokens_tokenizer", "verified_sha256", "write_checksums"]
