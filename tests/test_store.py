"""The Zarr embedding store and the ``elf embed`` stage (elf/embed/store.py, elf/stages/embed.py).

Uses a stand-in embedder (a fixed random table plus a masked contextual mix written here, independently
of elf.embed.kinds) so the tests check the store, not a particular encoder.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import zarr

from elf.cli import main as elf_main
from elf.embed import store as st

# --------------------------------------------------------------------------------------------------
# Stand-ins
# --------------------------------------------------------------------------------------------------


class TinyEmbedder(torch.nn.Module):
    """Embedder interface: token table + 0.5 x mean of the visible columns' table rows, where source
    rows see valid source columns, target rows see all valid columns except source ones when dropped."""
    cacheable = True

    def __init__(self, vocab: int = 40, dim: int = 8, seed: int = 0):
        super().__init__()
        self.dim = dim
        self.register_buffer("table", torch.randn(vocab, dim, generator=torch.Generator().manual_seed(seed)))

    def forward(self, input_ids, attention_mask, cond_seq_mask, drop_source):
        e = self.table[input_ids]                                       # (B, L, d)
        valid, source = attention_mask.bool(), cond_seq_mask.bool()
        src_col = (source & valid)[:, None, :]                          # (B, 1, L)
        tgt_vis = valid[:, None, :] & ~(drop_source.view(-1, 1, 1) & src_col)
        visible = torch.where(source[:, :, None], src_col, tgt_vis).float()  # (B, L, L)
        mix = visible @ e / visible.sum(-1, keepdim=True).clamp_min(1)
        return e + 0.5 * mix


def make_tokens(n: int = 11, length: int = 6, conditional: bool = False, seed: int = 0) -> dict:
    """Random rows with trailing padding; conditional rows start with a 1-3 token source."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 40, size=(n, length))
    lengths = rng.integers(length // 2, length + 1, size=n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    cond = np.zeros((n, length), dtype=np.int64)
    if conditional:
        src = rng.integers(1, 4, size=n)
        cond = (np.arange(length)[None, :] < src[:, None]).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask, "cond_seq_mask": cond}


def write_store(path, tokens: dict, dtype: str = "float16", *, chunk: int = 2, block: int = 4,
                embedder=None, after_block=None, finalize: bool = True, identity=None, sharded=True):
    arrays = st.TokenArrays(tokens)
    embedder = embedder or TinyEmbedder()
    layout = st.plan_layout(len(arrays), arrays.seq_len, embedder.dim, dtype, arrays.conditional,
                            chunk_sequences=chunk, block_sequences=block, sharded=sharded)
    st.create_store(path, layout, identity or {"test": 1})
    st.write_blocks(path, arrays, embedder, batch_size=3, after_block=after_block, progress=False)
    if finalize:
        st.finalize_store(path, progress=False)
    return layout


def direct(tokens: dict, drop: bool = False) -> torch.Tensor:
    t = {k: torch.as_tensor(v) for k, v in tokens.items()}
    return TinyEmbedder()(t["input_ids"], t["attention_mask"], t["cond_seq_mask"],
                          torch.full((len(t["input_ids"]),), drop))


def contents(path) -> dict:
    """Every array, and the attributes that describe the data (not who ran it when)."""
    group = zarr.open_group(str(path), mode="r")
    arrays = {name: arr[:] for name, arr in group.arrays()}
    attrs = {k: v for k, v in group.attrs.asdict().items() if k not in ("provenance",)}
    return {"arrays": arrays, "attrs": attrs}


def assert_same_store(a, b):
    ca, cb = contents(a), contents(b)
    assert ca["attrs"] == cb["attrs"]
    assert ca["arrays"].keys() == cb["arrays"].keys()
    for name in ca["arrays"]:
        np.testing.assert_array_equal(ca["arrays"][name], cb["arrays"][name], err_msg=name)


# --------------------------------------------------------------------------------------------------
# Round trip, statistics, conditional arrays
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,stored,tol", [("float16", "float16", 2e-3), ("bfloat16", "uint16", 1.6e-2),
                                              ("float32", "float32", 0.0)])
def test_round_trip_equals_direct_embedder_call(tmp_path, dtype, stored, tol):
    tokens = make_tokens()
    write_store(tmp_path / "s.zarr", tokens, dtype)
    store = st.open_store(tmp_path / "s.zarr")
    rows = store.read_rows(0, len(store))
    np.testing.assert_array_equal(rows["input_ids"], tokens["input_ids"])
    np.testing.assert_array_equal(rows["attention_mask"], tokens["attention_mask"])
    assert rows["input_ids"].dtype == np.int32 and rows["attention_mask"].dtype == np.int8
    assert rows["embeddings"].dtype == np.dtype(stored)
    assert store.group["embeddings"].attrs["dtype"] == dtype
    assert "embeddings_nosource" not in store.group
    got = st.from_storage(rows["embeddings"], dtype)
    want = direct(tokens)
    assert got.shape == (11, 6, 8)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    if dtype != "float32":
        assert not torch.equal(got, want)  # really rounded to the smaller type


def test_unsharded_store_holds_the_same_data(tmp_path):
    tokens = make_tokens()
    write_store(tmp_path / "sharded.zarr", tokens)
    write_store(tmp_path / "plain.zarr", tokens, sharded=False)
    assert zarr.open_array(str(tmp_path / "plain.zarr" / "embeddings")).shards is None
    assert zarr.open_array(str(tmp_path / "sharded.zarr" / "embeddings")).shards == (4, 6, 8)
    a, b = contents(tmp_path / "sharded.zarr"), contents(tmp_path / "plain.zarr")
    for name in a["arrays"]:
        np.testing.assert_array_equal(a["arrays"][name], b["arrays"][name])
    assert a["attrs"]["normalization_stats"] == b["attrs"]["normalization_stats"]


def test_bfloat16_bits_decode_exactly():
    x = torch.randn(3, 4, 5)
    bits = st.to_storage(x, "bfloat16")
    assert bits.dtype == np.uint16
    assert torch.equal(st.from_storage(bits, "bfloat16"), x.to(torch.bfloat16).float())


def test_statistics_equal_direct_computation_over_valid_tokens(tmp_path):
    tokens = make_tokens(n=13)
    write_store(tmp_path / "s.zarr", tokens, "float16", chunk=1, block=3)
    store = st.open_store(tmp_path / "s.zarr")
    stored = st.from_storage(store.read_rows(0, 13)["embeddings"], "float16").numpy().astype(np.float64)
    valid = stored[tokens["attention_mask"] == 1]                       # (n_valid, d)
    stats = store.stats
    assert stats["count"] == tokens["attention_mask"].sum()
    np.testing.assert_allclose(stats["channel_mean"], valid.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats["channel_std"], valid.std(0), rtol=1e-10)
    np.testing.assert_allclose(stats["scalar_mean"], valid.mean(), rtol=1e-10)
    np.testing.assert_allclose(stats["scalar_std"], valid.std(), rtol=1e-10)
    # padding must not count: including it moves the statistics
    assert not np.isclose(stats["scalar_mean"], stored.reshape(-1, 8).mean())


def test_merge_moments_equals_one_pass():
    rng = np.random.default_rng(1)
    emb = torch.from_numpy(rng.normal(3.0, 2.0, size=(10, 5, 4)))
    valid = torch.from_numpy(rng.random((10, 5)) < 0.7)
    parts = [st.block_moments(emb[a:b], valid[a:b]) for a, b in ((0, 3), (3, 4), (4, 10))]
    merged = st.merge_moments(np.stack(parts))
    np.testing.assert_allclose(merged, st.block_moments(emb, valid), rtol=1e-12)


def test_conditional_store_has_nosource_array(tmp_path):
    tokens = make_tokens(conditional=True)
    write_store(tmp_path / "c.zarr", tokens)
    store = st.open_store(tmp_path / "c.zarr")
    assert store.conditional
    rows = store.read_rows(0, len(store))
    np.testing.assert_array_equal(rows["cond_seq_mask"], tokens["cond_seq_mask"])
    with_src = st.from_storage(rows["embeddings"], "float16")
    no_src = st.from_storage(rows["embeddings_nosource"], "float16")
    torch.testing.assert_close(no_src, direct(tokens, drop=True), rtol=2e-3, atol=2e-3)
    source = torch.as_tensor(tokens["cond_seq_mask"]).bool()
    target = torch.as_tensor(tokens["attention_mask"]).bool() & ~source
    assert torch.equal(with_src[source], no_src[source])        # source rows never see the target
    differs = (with_src[target] - no_src[target]).abs().amax(-1) > 1e-2
    assert differs.all()                                        # every target row lost the source


# --------------------------------------------------------------------------------------------------
# Resume, marker, scatter/gather
# --------------------------------------------------------------------------------------------------

class Killed(Exception):
    pass


@pytest.mark.parametrize("sharded", [True, False])
def test_killed_write_resumes_to_identical_store(tmp_path, sharded):
    tokens = make_tokens(n=11, conditional=True)
    write_store(tmp_path / "whole.zarr", tokens, sharded=sharded)

    def kill_after_two(block):
        if block == 1:
            raise Killed

    with pytest.raises(Killed):
        write_store(tmp_path / "part.zarr", tokens, after_block=kill_after_two, sharded=sharded)
    group = zarr.open_group(str(tmp_path / "part.zarr"), mode="r")
    assert st.pending_blocks(group) == [2]                       # 11 rows / 4 per block: 0, 1 done
    with pytest.raises(st.StoreError, match="incomplete"):
        st.open_store(tmp_path / "part.zarr")
    rewritten = st.write_blocks(tmp_path / "part.zarr", st.TokenArrays(tokens), TinyEmbedder(),
                                batch_size=3, progress=False)
    assert rewritten == 1
    st.finalize_store(tmp_path / "part.zarr", progress=False)
    assert_same_store(tmp_path / "whole.zarr", tmp_path / "part.zarr")


def test_store_without_marker_is_refused_with_clear_error(tmp_path):
    path = tmp_path / "d" / "train.zarr"
    write_store(path, make_tokens(), finalize=False)
    with pytest.raises(st.StoreError) as err:
        st.open_store(path)
    message = str(err.value)
    assert str(path) in message and "rerun the embed stage" in message
    with pytest.raises(st.StoreError, match="no embedding store at"):
        st.open_store(tmp_path / "absent.zarr")


def test_existing_store_for_other_inputs_is_refused(tmp_path):
    tokens = make_tokens()
    write_store(tmp_path / "s.zarr", tokens, finalize=False, identity={"source": "a"})
    layout = st.plan_layout(11, 6, 8, "float16", False, chunk_sequences=2, block_sequences=4)
    with pytest.raises(st.StoreError, match="other inputs"):
        st.create_store(tmp_path / "s.zarr", layout, {"source": "b"})
    st.create_store(tmp_path / "s.zarr", layout, {"source": "a"})  # same identity: reopened


def single_and_shard_inputs(tmp_path):
    """A finished one-process store (single.zarr), and the token arrays, layout and path
    (sharded.zarr) for shard jobs writing the same data."""
    tokens = make_tokens(n=11, conditional=True)
    write_store(tmp_path / "single.zarr", tokens)
    layout = st.plan_layout(11, 6, 8, "float16", True, chunk_sequences=2, block_sequences=4)
    return st.TokenArrays(tokens), layout, tmp_path / "sharded.zarr"


def test_sharded_write_and_finalize_equal_single_process(tmp_path):
    arrays, layout, path = single_and_shard_inputs(tmp_path)
    for shard in (2, 0):  # shard jobs run in any order; each creates-or-reopens the store
        st.create_store(path, layout, {"test": 1})
        st.write_blocks(path, arrays, TinyEmbedder(), batch_size=3, shard=shard, num_shards=3, progress=False)
    with pytest.raises(st.StoreError, match=r"1 of 3 blocks not written \(blocks 1\)"):
        st.finalize_store(path, progress=False)
    st.write_blocks(path, arrays, TinyEmbedder(), batch_size=3, shard=1, num_shards=3, progress=False)
    st.finalize_store(path, progress=False)
    assert_same_store(tmp_path / "single.zarr", path)


def test_checksum_is_sha256_of_int32_token_ids(tmp_path):
    import hashlib

    tokens = make_tokens()
    write_store(tmp_path / "s.zarr", tokens)
    want = hashlib.sha256(tokens["input_ids"].astype("<i4").tobytes()).hexdigest()
    assert st.open_store(tmp_path / "s.zarr").attrs["token_ids_sha256"] == want


def test_layout_choice_and_size_line():
    owt = st.plan_layout(8_800_000, 1024, 512, "float16", False)
    assert (owt.chunk_sequences, owt.block_sequences) == (1, 256)        # 1 MiB chunks, 256 MiB shards
    wmt = st.plan_layout(4_500_000, 128, 512, "bfloat16", True)
    assert (wmt.chunk_sequences, wmt.block_sequences) == (2, 2048)       # 256 KiB chunks
    tiny = st.plan_layout(10, 128, 64, "float32", False)
    assert (tiny.chunk_sequences, tiny.block_sequences) == (8, 16)     # 32 KiB rows; block ~ N
    assert st.human_bytes(9e9 * 512 * 2) == "8.4 TiB"
    assert "8,800,000 sequences x 1024 tokens x 512 dims x 2 bytes (float16) = 8.4 TiB" in owt.describe()


# --------------------------------------------------------------------------------------------------
# The stage, end to end through `elf embed`
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def token_dir(tmp_path):
    import datasets

    tokens = make_tokens(n=9, conditional=True)
    split = datasets.Dataset.from_dict({**tokens, "source_length": tokens["cond_seq_mask"].sum(1)})
    datasets.DatasetDict(train=split, validation=split).save_to_disk(str(tmp_path / "tokens"))
    (tmp_path / "tokens" / "provenance.json").write_text(json.dumps({"tokenizer": "tok", "tokenizer_sha256": "ab"}))
    return tmp_path / "tokens", tokens


@pytest.fixture
def stand_in_encoder(tmp_path, monkeypatch):
    """A local encoder config (for identity) and build_embedder patched to the stand-in."""
    from transformers import T5Config

    import elf.embed.kinds as kinds

    T5Config(vocab_size=40, d_model=8, num_layers=1, num_heads=2, d_kv=4, d_ff=16).save_pretrained(
        tmp_path / "encoder")
    monkeypatch.setattr(kinds, "build_embedder", lambda settings, path, vocab, seed=0: TinyEmbedder(vocab))
    return str(tmp_path / "encoder")


def embed_args(tokens_dir, encoder, out, *extra, settings='{"kind": "encoder", "dtype": "float16"}'):
    return ["embed", "--settings", settings, "--encoder", encoder, "--tokens", str(tokens_dir),
            "--split", "train", "--out", str(out), "--block-sequences", "4", "--chunk-sequences", "2",
            "--batch-size", "3", *extra]


def test_stage_single_and_sharded_runs_agree(tmp_path, token_dir, stand_in_encoder, capsys):
    tokens_dir, tokens = token_dir
    assert elf_main(embed_args(tokens_dir, stand_in_encoder, tmp_path / "one.zarr")) == 0
    out = capsys.readouterr().out
    assert "9 sequences x 6 tokens x 8 dims x 2 bytes (float16)" in out and "complete" in out
    store = st.open_store(tmp_path / "one.zarr")
    np.testing.assert_array_equal(store.read_rows(0, 9)["input_ids"], tokens["input_ids"])
    identity = store.attrs["identity"]
    assert identity["tokenizer"] == {"name_or_path": "tok", "tokenizer_sha256": "ab"}
    assert identity["encoder"]["config_sha256"] and identity["source"]["datasets_fingerprint"]
    assert store.attrs["settings"]["normalization"] == "fixed" and store.attrs["code_version"]

    for shard in ("1", "0"):
        assert elf_main(embed_args(tokens_dir, stand_in_encoder, tmp_path / "two.zarr",
                                   "--shard", shard, "--num-shards", "2")) == 0
    with pytest.raises(st.StoreError, match="incomplete"):
        st.open_store(tmp_path / "two.zarr")
    assert elf_main(["embed", "--finalize", "--out", str(tmp_path / "two.zarr")]) == 0
    assert_same_store(tmp_path / "one.zarr", tmp_path / "two.zarr")


def test_stage_refuses_learned_kind(tmp_path, token_dir, stand_in_encoder, capsys):
    tokens_dir, _ = token_dir
    code = elf_main(embed_args(tokens_dir, stand_in_encoder, tmp_path / "l.zarr",
                               settings='{"kind": "learned"}'))
    assert code == 2
    assert "training embeds on the fly" in capsys.readouterr().err
    assert not (tmp_path / "l.zarr").exists()


def test_stage_finalize_of_missing_store_is_clear(tmp_path, capsys):
    assert elf_main(["embed", "--finalize", "--out", str(tmp_path / "none.zarr")]) == 2
    assert "none.zarr" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Scatter / gather as the Snakemake rules run it (embed_shard jobs, then embed_gather)
# --------------------------------------------------------------------------------------------------

def test_finalize_names_the_shard_jobs_that_did_not_finish(tmp_path):
    tokens = make_tokens(n=11)   # 3 blocks of 4 rows; 2 shard jobs: job 0 writes blocks 0, 2; job 1 block 1
    layout = st.plan_layout(11, 6, 8, "float16", False, chunk_sequences=2, block_sequences=4)
    path = tmp_path / "s.zarr"
    st.create_store(path, layout, {"test": 1})
    st.write_blocks(path, st.TokenArrays(tokens), TinyEmbedder(), batch_size=3, shard=0, num_shards=2,
                    progress=False)
    with pytest.raises(st.StoreError, match=r"blocks 1\): shard job\(s\) 1 of 2 did not finish"):
        st.finalize_store(path, num_shards=2, progress=False)


def test_killed_shard_job_resumes_its_own_blocks(tmp_path):
    arrays, layout, path = single_and_shard_inputs(tmp_path)
    st.create_store(path, layout, {"test": 1})

    def kill(block):
        raise Killed

    with pytest.raises(Killed):   # job 0 of 2 (blocks 0 and 2) killed after block 0
        st.write_blocks(path, arrays, TinyEmbedder(), batch_size=3, shard=0, num_shards=2,
                        after_block=kill, progress=False)
    st.create_store(path, layout, {"test": 1})  # the retry reopens the store
    assert st.write_blocks(path, arrays, TinyEmbedder(), batch_size=3, shard=0, num_shards=2,
                           progress=False) == 1
    assert st.write_blocks(path, arrays, TinyEmbedder(), batch_size=3, shard=1, num_shards=2,
                           progress=False) == 1
    st.finalize_store(path, num_shards=2, progress=False)
    assert_same_store(tmp_path / "single.zarr", path)


def test_stage_scatter_gather_through_a_work_store_equals_one_job(tmp_path, token_dir, stand_in_encoder,
                                                                  capsys):
    tokens_dir, _ = token_dir
    one, two = tmp_path / "one" / "train.zarr", tmp_path / "two" / "train.zarr"
    assert elf_main(embed_args(tokens_dir, stand_in_encoder, one, "--work", f"{one}.partial")) == 0
    assert one.is_dir() and not (tmp_path / "one" / "train.zarr.partial").exists()
    capsys.readouterr()
    work = f"{two}.partial"
    assert elf_main(embed_args(tokens_dir, stand_in_encoder, two, "--work", work,
                               "--shard", "1", "--num-shards", "2")) == 0
    out = capsys.readouterr().out
    assert "9 sequences x 6 tokens x 8 dims" in out   # the projected size, before writing
    assert f"elf embed --finalize --work {work} --out {two} --num-shards 2" in out
    assert not two.exists()
    assert elf_main(["embed", "--finalize", "--work", work, "--out", str(two), "--num-shards", "2"]) == 2
    assert "shard job(s) 0 of 2 did not finish" in capsys.readouterr().err
    assert elf_main(embed_args(tokens_dir, stand_in_encoder, two, "--work", work,
                               "--shard", "0", "--num-shards", "2")) == 0
    assert elf_main(["embed", "--finalize", "--work", work, "--out", str(two), "--num-shards", "2"]) == 0
    assert two.is_dir() and not (tmp_path / "two" / "train.zarr.partial").exists()
    assert_same_store(one, two)
    st.open_store(two)
