"""The links from a checkpoint down to the data: checkpoint → run config → embedding store (or the
packed tokens, for embeddings made on the fly) → dataset, tokenizer, encoder."""

from __future__ import annotations

import json
from pathlib import Path

from elf.artifacts.names import (DATASETS_FINGERPRINT, EMA_WEIGHTS, ENCODER_WEIGHT_FILES,
                                 ENCODER_WEIGHTS_SHA256, TOKENS_SHA256, PROVENANCE_FILE, RUN_CONFIG,
                                 RUN_RELEASED, RUN_SETTINGS, RUN_STATS, RUN_STORE, RUN_STORE_IDENTITY,
                                 RUN_TOKENS, RUN_TOKENS_FINGERPRINT, STORE_COMPLETE, STORE_ENCODER,
                                 STORE_IDENTITY, STORE_IDENTITY_SHA256, STORE_LAYOUT, STORE_SOURCE,
                                 STORE_STATS, STORE_TOKEN_IDS_SHA256, STORE_TOKENIZER, TOKENIZER_FILE,
                                 TOKENIZER_SHA256)
from elf.artifacts.checks import store_problems
from elf.audit.base import TracerBase
from elf.audit.links import BROKEN, CHANGED, MISSING, NAMED, NOT_RECORDED, Link
from elf.io import sha256_json
from elf.artifacts import read_json


def released_info(released: dict) -> dict:
    """What a released checkpoint's config.json says about its origin, for the run config link."""
    keys = ("source", "revision", "commit", "filename", "step", "sha256", "ema_weights")
    info = {f"released_{key}": released.get(key) for key in keys}
    if released and released.get("revision") is None:
        info["released_revision"] = "default branch"
    return info


class InputLinks(TracerBase):
    """Checkpoint, run config, embedding store, dataset, tokenizer and encoder links."""

    def checkpoint(self, directory: str | Path, recorded: str | None, named_by: str | None,
                   run_config_recorded: str | None, is_root: bool = False) -> Link:
        folder = self.resolve(directory)
        link = self.file_link("checkpoint", folder / EMA_WEIGHTS, recorded, named_by, is_root)
        if not folder.is_dir() and link.problems:
            link.problems[-1] = f"checkpoint directory {folder} is gone (named by {named_by})"
        if not self.first_time(link, run_config_recorded):
            return link
        # the samples header, not the weights, records the run config's hash
        link.children.append(self.run_config(folder, run_config_recorded, named_by, is_root))
        return link

    def run_config(self, folder: Path, recorded: str | None, named_by: str | None,
                   is_root: bool = False) -> Link:
        path = folder / RUN_CONFIG
        link = Link("run config", str(path), recorded=recorded, named_by=named_by)
        if not path.is_file():
            link.fail(MISSING, f"checkpoint config not found (named by {named_by})")
            return link
        meta = self.read(link, read_json)
        if meta is None:
            return link
        if RUN_SETTINGS not in meta:
            link.fail(BROKEN, f"{RUN_CONFIG} has no '{RUN_SETTINGS}' settings")
            return link
        run = meta[RUN_SETTINGS]
        link.sha256 = sha256_json(run)
        self.compare(link, link.sha256, recorded, is_root)
        link.info.update(kind=run.get("kind"), paper_run=run.get("paper_run"), dataset=run.get("dataset"),
                         embedding=run.get("embedding"), size=run.get("model", {}).get("size"),
                         steps=run.get("budget", {}).get("steps"), seed=run.get("budget", {}).get("seed"),
                         file_sha256=self.file_sha256(path))
        if meta.get(RUN_STORE):
            link.children.append(self.store(meta[RUN_STORE], meta.get(RUN_STORE_IDENTITY),
                                            meta.get(RUN_STATS), link.path))
        elif meta.get(RUN_TOKENS):  # embedded on the fly (cache: false): no store between run and data
            source = {"tokens": meta[RUN_TOKENS], "split": "train",
                      **(meta.get(RUN_TOKENS_FINGERPRINT) or {})}
            link.children.append(self.dataset(source, link.path))
        elif run.get("kind", "train") == "train":
            link.fail(BROKEN, f"a trained run's {RUN_CONFIG} names neither an embedding store nor tokens")
        else:
            link.info["note"] = f"run kind {run.get('kind')}: no embedding store of ours behind it"
            link.info.update(released_info(meta.get(RUN_RELEASED) or {}))
        return link

    def store(self, path: str, recorded_identity: str | None, recorded_stats: dict | None,
              named_by: str) -> Link:
        import zarr  # only when a chain reaches a store

        folder = self.resolve(path)
        link = Link("embedding store", str(folder), recorded=recorded_identity, named_by=named_by)
        if not (folder / "zarr.json").is_file():
            link.fail(MISSING, f"embedding store not found (named by {named_by})")
            return link
        attrs = self.read(link, lambda p: zarr.open_group(str(p), mode="r").attrs.asdict())
        if attrs is None:
            return link
        link.sha256 = attrs.get(STORE_IDENTITY_SHA256)
        identity, layout = attrs.get(STORE_IDENTITY, {}), attrs.get(STORE_LAYOUT, {})
        link.info.update({**identity.get("settings", {}),
                          "shape": f"{layout.get('num_sequences')} x {layout.get('seq_len')} x "
                                   f"{layout.get('dim')}",
                          STORE_TOKEN_IDS_SHA256: attrs.get(STORE_TOKEN_IDS_SHA256),
                          "code_version": attrs.get("code_version")})
        if not attrs.get(STORE_COMPLETE):
            link.fail(BROKEN, "the store is incomplete (no completion marker)")
        else:  # what a stage reading it checks (elf.artifacts.store_problems), every problem listed
            for problem in store_problems(folder, attrs):
                link.fail(BROKEN, str(problem))
        if recorded_identity is not None:
            self.compare(link, link.sha256, recorded_identity)
        elif recorded_stats is None:
            link.fail(NOT_RECORDED, f"{named_by} records neither the store's identity nor its "
                      "normalisation statistics: it cannot be verified")
        else:
            link.info["verified_by"] = "normalization_stats (the checkpoint records no store identity)"
        if recorded_stats is not None and attrs.get(STORE_STATS) != recorded_stats:
            link.fail(CHANGED, "its normalisation statistics differ from those the checkpoint was "
                      "trained with: the store was re-embedded after training; retrain or restore it")
        if not self.first_time(link, json.dumps(recorded_stats, sort_keys=True)):
            return link
        if STORE_SOURCE in identity:
            link.children.append(self.dataset(identity[STORE_SOURCE], link.path))
        else:
            link.fail(BROKEN, "the store's identity names no source data")
        if identity.get(STORE_TOKENIZER):
            link.children.append(self.tokenizer(identity[STORE_TOKENIZER], link.path))
        if identity.get(STORE_ENCODER):
            link.children.append(self.encoder(identity[STORE_ENCODER], link.path))
        return link

    def dataset(self, source: dict, named_by: str) -> Link:
        from elf.embed.store import StoreError, TokenArrays

        recorded = {k: v for k, v in source.items() if k not in ("tokens", "split")}
        tokens = self.resolve(source.get("tokens", ""))
        fingerprint = recorded.get(DATASETS_FINGERPRINT) or recorded.get(TOKENS_SHA256)
        link = Link("dataset", str(tokens), recorded=fingerprint, named_by=named_by,
                    info={"split": source.get("split"), "rows": recorded.get("num_rows")})
        if not tokens.is_dir():
            link.fail(MISSING, f"packed-token dataset not found (named by {named_by})")
            return link
        try:
            current = TokenArrays.from_disk(tokens, source.get("split")).fingerprint()
        except (StoreError, OSError, ValueError) as err:
            link.fail(BROKEN, f"cannot open split {source.get('split')!r}: {err}")
            return link
        link.sha256 = current.get(DATASETS_FINGERPRINT) or current.get(TOKENS_SHA256)
        if fingerprint is None:
            link.fail(NOT_RECORDED, f"{named_by} records no fingerprint of the tokens it was made from: "
                      "they cannot be verified")
        elif current != recorded:
            link.fail(CHANGED, f"fingerprint {current} now, {recorded} when {named_by} was embedded: "
                      "the tokens were re-prepared; re-embed and retrain")
        record = tokens / PROVENANCE_FILE
        if record.is_file():
            prepared = read_json(record)
            settings = prepared.get("settings", {})
            test = settings.get("test") or {}
            link.info.update(name=settings.get("name"), source=settings.get("source"),
                             revision=settings.get("revision"),
                             test_split=f"{test.get('name')}@{test.get('revision') or 'default'}"
                             if test else None,
                             raw_root=prepared.get("raw_root"), code_version=prepared.get("code_version"))
        return link

    def tokenizer(self, identity: dict, named_by: str) -> Link:
        return self._model_files("tokenizer", identity.get("name_or_path"), identity.get(TOKENIZER_SHA256),
                                 (TOKENIZER_FILE,), named_by)

    def encoder(self, identity: dict, named_by: str) -> Link:
        return self._model_files("encoder", identity.get("name_or_path"), identity.get(ENCODER_WEIGHTS_SHA256),
                                 ENCODER_WEIGHT_FILES, named_by)

    def _model_files(self, kind: str, name: str | None, recorded: str | None, files: tuple,
                     named_by: str) -> Link:
        """A local model folder's file, re-hashed; a hub name with no recorded hash is ``named``."""
        from elf.hub import split_ref

        folder = self.resolve(name or "")
        if recorded is None and not folder.is_dir():
            hub_name, revision = split_ref(str(name))
            return Link(kind, str(name), status=NAMED, named_by=named_by,
                        info={"note": "hub name: nothing local to re-hash", "name": hub_name,
                              "revision": revision or "default branch"})
        target = next((folder / f for f in files if (folder / f).is_file()), folder / files[0])
        return self.file_link(kind, target, recorded, named_by)
