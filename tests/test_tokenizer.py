"""The built T5-style tokenizer: special ids, sentinels, lossless round trip, save/load, determinism."""

import pytest

from elf.cli import main as elf_main
from elf.config import CorporaSettings
from elf.data.corpora import build_corpora, build_corpus
from elf.data.tokenizer import load_tokenizer, train_tokenizer

VOCAB = 300


def _texts(corpora):
    texts = list(corpora["owt"]["train"]["text"])
    for pair in corpora["wmt"]["train"]["translation"]:
        texts += [pair["de"], pair["en"]]
    return texts + list(corpora["xsum"]["train"]["document"]) + list(corpora["xsum"]["train"]["summary"])


@pytest.fixture(scope="module")
def corpora():
    return build_corpora(CorporaSettings(seed=0, train_docs=60, validation_docs=10, test_docs=10))


@pytest.fixture(scope="module")
def tokenizer(corpora):
    return train_tokenizer(_texts(corpora), VOCAB)


def test_special_ids_match_t5(tokenizer):
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<pad>", "</s>", "<unk>"]
    assert len(tokenizer) == VOCAB
    assert set(tokenizer.all_special_ids) == {0, 1, 2}  # no sentinels (see elf.embed.encoder)


def test_round_trip_on_generated_text(tokenizer):
    other = build_corpus("wmt", 7, {"test": 30})["test"]["translation"]
    texts = [p["de"] for p in other] + [p["en"] for p in other]
    texts += build_corpus("owt", 7, {"test": 10})["test"]["text"]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_special_tokens_only_when_asked(tokenizer):
    text = "The fox hides."
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert 1 not in plain
    assert tokenizer(text)["input_ids"] == plain + [1]  # T5 appends </s>
    assert tokenizer.decode(plain + [1] + plain, skip_special_tokens=True) == "The fox hides. The fox hides."


def test_unseen_character_is_unk(tokenizer):
    assert tokenizer.unk_token_id in tokenizer("The fox ☃", add_special_tokens=False)["input_ids"]


def test_training_is_deterministic(corpora, tokenizer):
    again = train_tokenizer(_texts(corpora), VOCAB)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_save_and_load_like_a_hub_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(str(tmp_path))
    loaded = load_tokenizer(str(tmp_path))
    text = "Some hens grazed near the barn. They were lazy."
    assert loaded(text, add_special_tokens=False)["input_ids"] == \
        tokenizer(text, add_special_tokens=False)["input_ids"]
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 1, 2)
    assert len(loaded) == len(tokenizer)
    assert loaded.model_max_length >= 10**6


def test_tokenizer_stage(tmp_path):
    corpora_dir, out = tmp_path / "corpora", tmp_path / "tokenizer"
    assert elf_main(["corpora", "--settings", '{"train_docs": 30, "validation_docs": 5, '
                     '"test_docs": 5}', "--out", str(corpora_dir)]) == 0
    assert elf_main(["tokenizer", "--settings", '{"vocab_size": 200}', "--corpora",
                     str(corpora_dir), "--out", str(out)]) == 0
    assert (out / "provenance.json").is_file()
    tok = load_tokenizer(str(out))
    assert len(tok) == 200 and tok.eos_token_id == 1
    assert elf_main(["tokenizer", "--settings", '{"vocab_size": 200}', "--corpora",
                     str(tmp_path / "missing"), "--out", str(out)]) == 2
