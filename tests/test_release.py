"""``elf release``: a folder written the way the authors' ``save_checkpoint`` writes it
(``checkpoint_<step>`` with all eight entries, a real optimiser and LambdaLR scheduler state, and
``config.yml``) becomes a run directory whose network gives the same outputs; without
``ema_params1`` the raw ``params`` are used and config.json says so; ``config.yml`` is checked
against the run's settings; bad files and mismatched settings fail naming the problem; Hub ids
resolve to the right repo, revision and files (stand-ins for the Hub calls: no network)."""

import json
from pathlib import Path

import pytest
import torch
import yaml

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


def settings(dataset=None, **run_overrides):
    fields = dict(dataset="owt", kind="released", released="unused/by-the-test", paper_run="R01",
                  model=ModelSettings(size="tiny", bottleneck=TINY["bottleneck"]))
    run = RunSettings(**{**fields, **run_overrides})
    dataset = dataset or DatasetSettings(task="unconditional", source="embedded", name="owt",
                                         max_length=TINY["max_length"])
    return json.dumps(dict(run=to_dict(run), dataset=to_dict(dataset),
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


def test_file_without_weights_fails_naming_the_missing_entries(tmp_path, tokenizer_dir, capsys):
    torch.save({"step": 3, "opt_state": {}}, tmp_path / "no_weights.pt")
    assert release(tmp_path / "no_weights.pt", tmp_path / "run", tokenizer_dir) == 2
    err = capsys.readouterr().err
    assert "no 'ema_params1' or 'params' entry" in err and "found step, opt_state" in err
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
    one_token = settings(model=ModelSettings(size="tiny", bottleneck=TINY["bottleneck"], control_tokens=1))
    assert release(tmp_path / "ckpt.pt", tmp_path / "run", tokenizer_dir, one_token) == 2
    assert "num_time_tokens: settings 1, checkpoint 4" in capsys.readouterr().err
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

    def download(repo_id, filename, revision):
        calls.append((repo_id, filename, revision))
        return str(tmp_path / filename)

    listing = {"org/model": ["README.md", "config.json", "elf_b.pt"]}
    path, config, origin = resolve_source("org/model", None, None, download,
                                          lambda repo, rev: listing[repo])
    assert calls[-1] == ("org/model", "elf_b.pt", None) and path == tmp_path / "elf_b.pt"
    assert config is None
    assert origin == {"source": "org/model", "repo_id": "org/model", "filename": "elf_b.pt",
                      "commit": None}
    resolve_source("org/model/sub/ckpt.pth", None, None, download, lambda repo, rev: listing[repo])
    assert calls[-1] == ("org/model", "sub/ckpt.pth", None)
    resolve_source("org/model", "other.bin", None, download, lambda repo, rev: listing[repo])
    assert calls[-1] == ("org/model", "other.bin", None)


def test_authors_hub_repo_gives_its_highest_checkpoint_and_config_at_the_revision(tmp_path):
    """embedded-language-flows/ELF-B-owt-torch holds checkpoint_95085 next to config.yml; the
    download's cache path names the commit it resolved to."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    calls, listings = [], []

    def download(repo_id, filename, revision):
        calls.append((repo_id, filename, revision))
        return str(tmp_path / "snapshots" / commit / filename)

    def list_files(repo_id, revision):
        listings.append((repo_id, revision))
        return [".gitattributes", "README.md", "config.yml", "checkpoint_9508", "checkpoint_95085"]

    path, config, origin = resolve_source("embedded-language-flows/ELF-B-owt-torch", None, "v1",
                                          download, list_files)
    assert listings == [("embedded-language-flows/ELF-B-owt-torch", "v1")]
    assert calls == [("embedded-language-flows/ELF-B-owt-torch", "checkpoint_95085", "v1"),
                     ("embedded-language-flows/ELF-B-owt-torch", "config.yml", "v1")]
    assert path.name == "checkpoint_95085" and config.name == "config.yml"
    assert origin["commit"] == commit and origin["filename"] == "checkpoint_95085"


def test_ambiguous_or_unreachable_sources_fail_clearly(tmp_path):
    with pytest.raises(ElfError, match="exactly one .*a.pt, b.pt; name it with --filename"):
        pick_checkpoint_file(["a.pt", "b.pt", "README.md"], "repo")
    assert pick_checkpoint_file(["checkpoint_9", "checkpoint_10", "x.pt", "checkpoint_10.bak"],
                                "repo") == "checkpoint_10"
    (tmp_path / "x.pt").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    path, config, origin = resolve_source(str(tmp_path), None)  # a folder: its one checkpoint file
    assert path == tmp_path / "x.pt" and config is None and origin["repo_id"] is None

    def offline(repo_id, filename, revision):
        raise OSError("offline")

    with pytest.raises(ElfError, match="download of org/model@r2/m.pt failed: offline"):
        resolve_source("org/model/m.pt", None, "r2", offline, lambda repo, rev: [])
    with pytest.raises(ElfError, match="not a Hugging Face id"):
        resolve_source(str(Path("/nonexistent dir/with spaces/x.pt")), None, None, offline)


def test_unsafe_pickles_are_refused(tmp_path, tokenizer_dir, capsys):
    torch.save({"ema_params1": {}, "extra": object()}, tmp_path / "code.pt")
    assert release(tmp_path / "code.pt", tmp_path / "run", tokenizer_dir) == 2
    assert "weights_only=True" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        read_meta(tmp_path / "run")


# --------------------------------------------------------------------------------------------------
# The authors' layout: a folder as their save_checkpoint writes it
# --------------------------------------------------------------------------------------------------

PAYLOAD_KEYS = ["dropout_rng", "ema_params1", "epoch", "grad_accum_buffers", "lr_scheduler",
                "opt_state", "params", "step"]


def authors_config(**overrides):
    """config.yml as the authors' training run leaves it (their Config keys, the tiny shape)."""
    return {"data_path": "embedded-language-flows/openwebtext-t5", "max_length": TINY["max_length"],
            "pad_token": "pad", "encoder_model_name": "t5-small", "latent_mean": 0.0,
            "latent_std": 0.2, "model": "tiny", "bottleneck_dim": TINY["bottleneck"],
            "num_time_tokens": 4, "num_self_cond_cfg_tokens": 4, "num_model_mode_tokens": 4,
            "optimizer": "muon", "ema_decay1": 0.9999, "seed": 42, **overrides}


def save_like_the_authors(folder: Path, step: int, seed: int = 1, with_ema: bool = True,
                          config: dict | None = None):
    """``checkpoint_<step>`` holding the eight entries of the authors' save_checkpoint payload after
    a few real optimiser and LambdaLR scheduler steps, and config.yml beside it."""
    ema, raw = tiny_model(seed), tiny_model(seed + 1)
    for model in (ema, raw):
        torch.nn.init.normal_(model.final_layer.linear.weight, std=0.02)
    optimizer = torch.optim.AdamW(raw.parameters(), lr=1e-3, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 5))
    for _ in range(2):
        x_hat, hidden = raw(torch.randn(2, TINY["max_length"], 2 * TINY["d"]), torch.rand(2),
                            torch.ones(2), mode=torch.zeros(2))
        (x_hat.square().mean() + raw.decode(hidden).logsumexp(-1).mean()).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    payload = {"params": raw.state_dict(),
               "ema_params1": {n: p.detach().clone() for n, p in ema.named_parameters()},
               "opt_state": optimizer.state_dict(), "lr_scheduler": scheduler.state_dict(),
               "step": step, "epoch": 3, "dropout_rng": torch.Generator().manual_seed(0).get_state(),
               "grad_accum_buffers": {n: torch.zeros_like(p) for n, p in raw.named_parameters()}}
    if not with_ema:
        del payload["ema_params1"]
    folder.mkdir(exist_ok=True)
    torch.save(payload, folder / f"checkpoint_{step}")
    (folder / "config.yml").write_text(yaml.safe_dump(config or authors_config()))
    return ema.eval(), raw.eval()


def test_authors_checkpoint_folder_becomes_a_run_with_identical_outputs(tmp_path, tokenizer_dir):
    folder = tmp_path / "ELF-B-owt-torch"
    save_like_the_authors(folder, 50, seed=5)           # an earlier checkpoint: not the one taken
    ema, raw = save_like_the_authors(folder, 100)
    assert sorted(torch.load(folder / "checkpoint_100", weights_only=True)) == PAYLOAD_KEYS
    assert release(folder, tmp_path / "run", tokenizer_dir) == 0

    loaded, meta = load_model(tmp_path / "run")
    for ours, theirs in zip(outputs(loaded), outputs(ema)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    loaded_raw, _ = load_model(tmp_path / "run", weights="model")
    for ours, theirs in zip(outputs(loaded_raw), outputs(raw)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    released = meta["released"]
    assert (released["filename"], released["step"], released["epoch"]) == ("checkpoint_100", 100, 3)
    assert (released["ema_weights"], released["raw_weights"]) == ("ema_params1", "params")
    assert released["entries"] == PAYLOAD_KEYS and released["revision"] is None
    checked = released["training_config"]["checked"]
    assert checked == {"model": "tiny", "bottleneck_dim": TINY["bottleneck"],
                       "max_length": TINY["max_length"], "max_input_length": None,
                       "pad_token": "pad", "latent_mean": 0.0, "latent_std": 0.2}
    assert released["training_config"]["sha256"] == __import__("hashlib").sha256(
        (folder / "config.yml").read_bytes()).hexdigest()


def test_without_ema_params1_the_raw_params_are_used_and_config_json_says_so(tmp_path, tokenizer_dir):
    _, raw = save_like_the_authors(tmp_path / "ckpt", 7, with_ema=False)
    assert release(tmp_path / "ckpt", tmp_path / "run", tokenizer_dir) == 0
    loaded, meta = load_model(tmp_path / "run")
    for ours, theirs in zip(outputs(loaded), outputs(raw)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert meta["released"]["ema_weights"].startswith("params (the file has no 'ema_params1'")
    assert meta["released"]["raw_weights"] == "params"


def test_config_yml_that_does_not_describe_the_run_fails_naming_each_entry(tmp_path, tokenizer_dir,
                                                                            capsys):
    wrong = authors_config(max_length=1024, model="ELF-M")
    del wrong["latent_std"]   # the authors' Config default: 1.0
    save_like_the_authors(tmp_path / "ckpt", 7, config=wrong)
    assert release(tmp_path / "ckpt", tmp_path / "run", tokenizer_dir) == 2
    err = capsys.readouterr().err
    assert "config.yml (the release's training settings) does not match the run" in err
    assert "model: config.yml 'ELF-M', run settings 'tiny'" in err
    assert f"max_length: config.yml 1024, run settings {TINY['max_length']}" in err
    assert "normalisation: config.yml fixed mean 0.0 / std 1.0, the run's embedding fixed mean 0.0 / std 0.2" in err
    assert not (tmp_path / "run").exists()
    # a conditional run: its layout and its EOS padding (spec §2) are checked too
    save_like_the_authors(tmp_path / "xsum", 7)
    xsum = DatasetSettings(task="summarization", source="authors", name="x_{split}",
                           max_length=TINY["max_length"], max_input_length=8)
    assert release(tmp_path / "xsum", tmp_path / "run", tokenizer_dir, settings(dataset=xsum)) == 2
    err = capsys.readouterr().err
    assert "max_input_length: config.yml None, run settings 8" in err
    assert "pad_token: config.yml 'pad', run settings 'eos'" in err
