"""``elf release``: a file in the authors' release layout becomes a run directory whose network gives
the same outputs; bad files and mismatched settings fail naming the problem; Hub ids resolve to the
right repo and file (with stand-ins for the Hub calls: no network)."""

import json
from pathlib import Path

import pytest
import torch

from elf.cli import ElfError
from elf.cli import main as elf_main
from elf.config import DatasetSettings, EmbeddingSettings, ModelSettings, RunSettings, to_dict
from elf.stages.release import pick_checkpoint_file, resolve_source
from elf.train.checkpoint import load_model, read_meta
from tests.helpers import TINY, tiny_model

TINY_SIZE = {"tiny": {k: TINY[k] for k in ("depth", "width", "heads")}}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from elf.data.tokenizer import train_tokenizer

    path = tmp_path_factory.mktemp("tok")
    texts = ["the cat sat on the mat", "a dog ran in the park", "hello world again"] * 4
    train_tokenizer(texts, 24).save_pretrained(path)
    return path


def released_blob(ema_seed=1, raw_seed=2, **overrides):
    """Two tiny networks' state dicts, stored as the authors do (bf16 would also do: cast on load)."""
    ema, raw = tiny_model(ema_seed, **overrides), tiny_model(raw_seed, **overrides)
    for model in (ema, raw):  # a trained-looking denoise head (it is zero-initialised)
        torch.nn.init.normal_(model.final_layer.linear.weight, std=0.02)
    return ema, {"params": raw.state_dict(), "ema_params1": ema.state_dict()}


def settings(**run_overrides):
    fields = dict(dataset="owt", kind="released", released="unused/by-the-test", paper_run="R01",
                  model=ModelSettings(size="tiny", bottleneck=TINY["bottleneck"]))
    run = RunSettings(**{**fields, **run_overrides})
    return json.dumps(dict(run=to_dict(run), dataset=to_dict(DatasetSettings(
        task="unconditional", source="embedded", name="owt", max_length=TINY["max_length"])),
        embedding=to_dict(EmbeddingSettings()), sizes=TINY_SIZE))


def release(source, out, tokenizer, settings_json=None, *extra):
    return elf_main(["release", "--source", str(source), "--settings", settings_json or settings(),
                     "--tokenizer", str(tokenizer), "--out", str(out), *extra])


def outputs(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_in = torch.randn(2, TINY["max_length"], 2 * TINY["d"], generator=g)
    t, w = torch.rand(2, generator=g), torch.tensor([1.0, 2.5])
    with torch.no_grad():
        x_hat, h = model(x_in, t, w, mode=torch.tensor([0.0, 1.0]))
        return x_hat, model.decode(h)


def test_released_file_becomes_a_run_with_identical_outputs(tmp_path, tokenizer_dir):
    ema, blob = released_blob()
    torch.save(blob, tmp_path / "ckpt.pt")
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir) == 0

    loaded, meta = load_model(tmp_path / "run")
    for ours, theirs in zip(outputs(loaded), outputs(ema.eval())):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    raw, _ = load_model(tmp_path / "run", weights="model")
    torch.testing.assert_close(raw.blocks[0].attn.qkv.weight, blob["params"]["blocks.0.attn.qkv.weight"])
    # The train stage's keys, the inferred shape, and where the weights came from.
    assert {"model", "run", "dataset", "embedding", "tokenizer", "normalization_stats", "store",
            "num_parameters"} <= set(meta)
    assert meta["model"]["depth"] == TINY["depth"] and meta["model"]["vocab_size"] == TINY["vocab_size"]
    assert meta["model"]["max_length"] == TINY["max_length"] and meta["run"]["kind"] == "released"
    assert meta["normalization_stats"] == {"normalization": "fixed", "mean": 0.0, "std": 0.2}
    assert meta["released"]["sha256"] == __import__("hashlib").sha256(
        (tmp_path / "ckpt.pt").read_bytes()).hexdigest()
    assert meta["released"]["raw_weights"] == "params" and meta["store"] is None


def test_bf16_release_is_cast_to_float32(tmp_path, tokenizer_dir):
    ema, blob = released_blob()
    blob = {k: {n: v.bfloat16() for n, v in s.items()} for k, s in blob.items()}
    torch.save(blob, tmp_path / "ckpt.pt")
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir) == 0
    loaded, _ = load_model(tmp_path / "run")
    assert loaded.proj_kernel.dtype == torch.float32
    torch.testing.assert_close(loaded.proj_kernel, ema.proj_kernel.bfloat16().float(), rtol=0, atol=0)


def test_file_without_ema_fails_naming_the_missing_entry(tmp_path, tokenizer_dir, capsys):
    _, blob = released_blob()
    torch.save({"params": blob["params"]}, tmp_path / "raw_only.pt")
    assert release(tmp_path / "raw_only.pt", tmp_path / "run", tokenizer_dir) == 2
    err = capsys.readouterr().err
    assert "no 'ema_params1' entry" in err and "found params" in err
    assert not (tmp_path / "run").exists()


def test_missing_raw_weights_fall_back_to_ema_and_say_so(tmp_path, tokenizer_dir):
    ema, blob = released_blob()
    torch.save({"ema_params1": blob["ema_params1"]}, tmp_path / "ema_only.pt")
    assert release(tmp_path / "ema_only.pt", tmp_path / "run", tokenizer_dir) == 0
    raw, meta = load_model(tmp_path / "run", weights="model")
    torch.testing.assert_close(raw.proj_kernel, ema.proj_kernel)
    assert "has no 'params'" in meta["released"]["raw_weights"]


def test_settings_that_do_not_describe_the_checkpoint_fail(tmp_path, tokenizer_dir, capsys):
    _, blob = released_blob()
    torch.save(blob, tmp_path / "ckpt.pt")
    wrong = settings(model=ModelSettings(size="tiny", bottleneck=32, conditioning="adaln"))
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir, wrong) == 2
    err = capsys.readouterr().err
    assert "bottleneck: settings 32, checkpoint 8" in err
    assert "conditioning: settings 'adaln', checkpoint 'in_context'" in err
    trained = json.loads(settings())
    trained["run"]["kind"] = "train"
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir, json.dumps(trained)) == 2
    assert "converts kind 'released' runs" in capsys.readouterr().err


def test_tokenizer_larger_than_the_decode_head_fails(tmp_path, tokenizer_dir, capsys):
    _, blob = released_blob(vocab_size=8)
    torch.save(blob, tmp_path / "ckpt.pt")
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir) == 2
    assert "decode head only 8" in capsys.readouterr().err


def test_hub_ids_resolve_repo_and_file_without_the_network(tmp_path):
    calls = []

    def download(repo_id, filename):
        calls.append((repo_id, filename))
        return str(tmp_path / filename)

    listing = {"org/model": ["README.md", "config.json", "elf_b.pt"]}
    path, origin = resolve_source("org/model", None, download, listing.__getitem__)
    assert calls[-1] == ("org/model", "elf_b.pt") and path == tmp_path / "elf_b.pt"
    assert origin == {"source": "org/model", "repo_id": "org/model", "filename": "elf_b.pt"}
    resolve_source("org/model/sub/ckpt.pth", None, download, listing.__getitem__)
    assert calls[-1] == ("org/model", "sub/ckpt.pth")
    resolve_source("org/model", "other.bin", download, listing.__getitem__)
    assert calls[-1] == ("org/model", "other.bin")


def test_ambiguous_or_unreachable_sources_fail_clearly(tmp_path):
    with pytest.raises(ElfError, match="expected exactly one .*a.pt, b.pt; name it with --filename"):
        pick_checkpoint_file(["a.pt", "b.pt", "README.md"], "repo")
    (tmp_path / "x.pt").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    path, origin = resolve_source(str(tmp_path), None)  # a folder: its one checkpoint file
    assert path == tmp_path / "x.pt" and origin["repo_id"] is None

    def offline(repo_id, filename):
        raise OSError("offline")

    with pytest.raises(ElfError, match="download of org/model/m.pt failed: offline"):
        resolve_source("org/model/m.pt", None, offline, lambda repo: [])
    with pytest.raises(ElfError, match="not a Hugging Face id"):
        resolve_source(str(Path("/nonexistent dir/with spaces/x.pt")), None, offline)


def test_unsafe_pickles_are_refused(tmp_path, tokenizer_dir, capsys):
    torch.save({"ema_params1": {}, "extra": object()}, tmp_path / "code.pt")
    assert release(tmp_path / "code.pt", tmp_path / "run", tokenizer_dir) == 2
    assert "weights_only=True" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        read_meta(tmp_path / "run")
