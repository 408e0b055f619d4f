"""The training batch reader (elf/embed/reader.py): order, resume, DDP slices, prefetch, sources."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elf.embed import store as st
from elf.embed.reader import OnTheFlySource, ShuffledBatches, StoreSource, epoch_seed
from tests.test_store import TinyEmbedder, make_tokens, write_store

N = 14


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(tokens, store path) for an unconditional and a conditional store of N rows."""
    root = tmp_path_factory.mktemp("stores")
    out = {}
    for conditional in (False, True):
        tokens = make_tokens(n=N, conditional=conditional, seed=3)
        path = root / f"{'cond' if conditional else 'uncond'}.zarr"
        write_store(path, tokens, chunk=1, block=4)
        out[conditional] = (tokens, path)
    return out


def take(batches, n):
    return [next(batches) for _ in range(n)]


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), key


def test_epochs_are_seeded_permutations(stores):
    _, path = stores[False]
    batches = ShuffledBatches(path, batch_size=4, seed=7, prefetch=0)
    assert len(batches) == 3                                  # 14 // 4, the partial batch dropped
    epoch0 = torch.cat([b["index"] for b in take(batches, 3)])
    epoch1 = torch.cat([b["index"] for b in take(batches, 3)])
    assert len(set(epoch0.tolist())) == 12 and len(set(epoch1.tolist())) == 12
    assert not torch.equal(epoch0, epoch1)                    # a fresh order each epoch
    g = torch.Generator().manual_seed(epoch_seed(7, 1))
    assert torch.equal(epoch1, torch.randperm(N, generator=g)[:12])
    again = ShuffledBatches(path, batch_size=4, seed=7, prefetch=0)
    assert torch.equal(torch.cat([b["index"] for b in take(again, 3)]), epoch0)
    other = ShuffledBatches(path, batch_size=4, seed=8, prefetch=0)
    assert not torch.equal(torch.cat([b["index"] for b in take(other, 3)]), epoch0)


def test_batch_rows_match_the_store(stores):
    tokens, path = stores[True]
    store = st.open_store(path)
    batch = next(ShuffledBatches(store, batch_size=4, seed=0, prefetch=0))
    idx = batch["index"].numpy()
    rows = store.read_rows(0, N)
    assert torch.equal(batch["input_ids"], torch.as_tensor(tokens["input_ids"][idx]))
    assert torch.equal(batch["cond_seq_mask"], torch.as_tensor(tokens["cond_seq_mask"][idx]))
    raw = st.from_storage(rows["embeddings"][idx], "float16")
    torch.testing.assert_close(batch["x"], raw / 0.2, rtol=0, atol=0)      # fixed: mean 0, std 0.2
    raw_ns = st.from_storage(rows["embeddings_nosource"][idx], "float16")
    torch.testing.assert_close(batch["x_nosource"], raw_ns / 0.2, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["scalar", "per_channel"])
def test_normalisation_uses_store_statistics(stores, mode):
    _, path = stores[False]
    store = st.open_store(path)
    batch = next(ShuffledBatches(store, batch_size=4, seed=0, prefetch=0, normalization=mode))
    raw = st.from_storage(store.read_rows(0, N)["embeddings"][batch["index"].numpy()], "float16")
    s = store.stats
    mean, std = ((s["scalar_mean"], s["scalar_std"]) if mode == "scalar"
                 else (torch.tensor(s["channel_mean"]), torch.tensor(s["channel_std"])))
    torch.testing.assert_close(batch["x"], (raw - mean) / std, rtol=1e-5, atol=1e-5)


def test_resume_from_state_dict_gives_the_same_batches(stores):
    _, path = stores[True]
    source = StoreSource(path)
    straight = ShuffledBatches(source, batch_size=4, seed=3, prefetch=2)
    take(straight, 2)
    state = straight.state_dict()                  # taken mid-epoch, with batches prefetched ahead
    assert (state["epoch"], state["position"]) == (0, 2)
    expected = take(straight, 5)                   # crosses into epochs 1 and 2
    resumed = ShuffledBatches(source, batch_size=4, seed=3, prefetch=2)
    take(resumed, 1)                               # its prefetch thread is running; loading resets it
    resumed.load_state_dict(state)
    assert_same_batches(take(resumed, 5), expected)
    assert resumed.state_dict() == straight.state_dict() == {**state, "epoch": 2, "position": 1}
    straight.close()
    resumed.close()
    with pytest.raises(ValueError, match="seed"):
        ShuffledBatches(source, batch_size=4, seed=4).load_state_dict(state)


def test_prefetch_does_not_change_the_order(stores):
    _, path = stores[False]
    source = StoreSource(path)
    plain = take(ShuffledBatches(source, batch_size=4, seed=1, prefetch=0), 7)
    ahead = ShuffledBatches(source, batch_size=4, seed=1, prefetch=3)
    assert_same_batches(take(ahead, 7), plain)
    ahead.close()


def test_ddp_rank_slices_partition_the_global_batch(stores):
    _, path = stores[True]
    source = StoreSource(path)
    whole = take(ShuffledBatches(source, batch_size=6, seed=5, prefetch=0), 4)
    ranks = [take(ShuffledBatches(source, batch_size=6, seed=5, rank=r, world_size=3, prefetch=0), 4)
             for r in range(3)]
    for step, global_batch in enumerate(whole):
        for key in global_batch:
            joined = torch.cat([ranks[r][step][key] for r in range(3)])
            assert torch.equal(joined, global_batch[key]), key
        assert all(len(ranks[r][step]["index"]) == 2 for r in range(3))
    with pytest.raises(ValueError, match="divisible"):
        ShuffledBatches(source, batch_size=6, seed=5, rank=0, world_size=4)


def test_store_and_on_the_fly_give_the_same_batches(stores):
    for conditional in (False, True):
        tokens, path = stores[conditional]
        cached = ShuffledBatches(StoreSource(path), batch_size=4, seed=2, prefetch=0,
                                 normalization="per_channel")
        fly = ShuffledBatches(OnTheFlySource(tokens, TinyEmbedder(), st.open_store(path).stats),
                              batch_size=4, seed=2, prefetch=2, normalization="per_channel")
        for a, b in zip(take(cached, 5), take(fly, 5)):
            assert a.keys() == b.keys()
            assert ("x_nosource" in a) == conditional
            for key in ("index", "input_ids", "attention_mask", "cond_seq_mask"):
                assert torch.equal(a[key], b[key])
            for key in ("x", "x_nosource")[:1 + conditional]:
                assert not torch.equal(a[key], b[key])          # cached values are fp16-rounded ...
                torch.testing.assert_close(a[key], b[key], rtol=2e-3, atol=1e-2)  # ... and only that
        fly.close()


def test_sliced_reads_equal_in_memory_reads(stores):
    _, path = stores[True]
    idx = np.array([9, 3, 4, 5, 0, 13, 12])          # unsorted, with contiguous runs
    lazy, memory = StoreSource(path, in_memory=False), StoreSource(path, in_memory=True)
    tokens_only = StoreSource(path, memory_limit=N * 6 * 6)          # tokens fit, embeddings do not
    assert set(tokens_only._lazy) == {"embeddings", "embeddings_nosource"}
    assert lazy._memory == {} and memory._lazy == ()
    a, b, c = lazy.fetch(idx), memory.fetch(idx), tokens_only.fetch(idx)
    for key in a:
        assert torch.equal(a[key], b[key]) and torch.equal(a[key], c[key]), key
    rows = st.open_store(path).read_rows(0, N)
    assert torch.equal(a["input_ids"], torch.as_tensor(rows["input_ids"][idx], dtype=torch.long))


def test_errors_are_raised_in_the_consumer(stores):
    tokens, path = stores[False]

    class Broken(StoreSource):
        def fetch(self, indices):
            raise RuntimeError("disk gone")

    batches = ShuffledBatches(Broken(path), batch_size=4, seed=0, prefetch=2)
    with pytest.raises(RuntimeError, match="disk gone"):
        next(batches)
    with pytest.raises(ValueError, match="statistics"):
        ShuffledBatches(OnTheFlySource(tokens, TinyEmbedder()), batch_size=4, seed=0, normalization="scalar")
    with pytest.raises(ValueError, match="cannot fill"):
        ShuffledBatches(path, batch_size=N + 1, seed=0)
