"""The corpus-grammar recognizer (elf/data/recognize.py) against generated text and violations."""

import random

import pytest

from elf.data.corpora import render_english, render_source, summarize
from elf.data.grammar import generate_document
from elf.data.recognize import accepts, grammar_scores, sentence_tenses, sentences


def documents(n=60, seed=3):
    rng = random.Random(seed)
    return [generate_document(rng) for _ in range(n)]


def test_every_generated_sentence_and_summary_is_accepted_with_its_document_tense():
    docs = documents()
    texts = [render_english(d) for d in docs]
    for doc, text in zip(docs, texts):
        for sentence in sentences(text):
            assert doc.tense in sentence_tenses(sentence), sentence
        assert doc.tense in sentence_tenses(summarize(doc)), summarize(doc)
    scores = grammar_scores(texts)
    assert scores["accepted"] == 1.0 and scores["one_tense"] == 1.0
    assert scores["sentences"] == sum(len(d.clauses) for d in docs)


@pytest.mark.parametrize("sentence", [
    "The stone think under the question.",   # singular subject, plural verb; a thing thinking
    "They was sharp.",                        # plural pronoun, singular copula
    "A foxes hide.",                          # singular determiner, plural noun
    "An fox hides.",                          # "an" before a consonant
    "A owl hides.",                           # "a" before a vowel
    "The fox chases.",                        # transitive verb without an object
    "The fox is.",                            # copula without its adjective
    "The fox is quiet near the tree.",        # copula with a place
    "The tree howls.",                        # a thing as the subject of an agent's verb
    "The fox rusts.",                         # an agent as the subject of a process
    "The fox hides the tree.",                # intransitive verb with an object
    "The fox hides near trees.",              # place without "the" and singular
    "The fox hides near the fox.",            # place that is not a thing
    "Fox hides.",                             # noun phrase without a determiner
    "The fox the tree hides.",                # word order
    "The glorp hides.",                       # not in the lexicon
])
def test_violations_are_rejected(sentence):
    assert not accepts(sentence)


def test_ambiguous_forms_keep_both_readings():
    assert sentence_tenses("The pupils read the book.") == {"present", "past"}
    assert sentence_tenses("A spotted cow grazes.") == {"present"}      # "spotted": adjective
    assert sentence_tenses("The sailor spotted the whale.") == {"past"}  # "spotted": verb


def test_sentences_keeps_complete_ones_only():
    assert sentences("the fox. The owl hoots. It hides. The bea") == ["The owl hoots.", "It hides."]
    assert sentences("") == []


def test_tense_windows_and_shares_by_hand():
    mixed = "The fox hides. The fox hid. The owl hides."
    one = "The fox hides. It watches the owl."
    scores = grammar_scores([mixed, one, "Owl the. The fox hides.", "no sentence here"])
    # 7 complete sentences, 6 accepted ("Owl the." is not); windows with two accepted sentences:
    # mixed (present, past, present: no shared tense) and one (present twice)
    assert scores["sentences"] == 7 and scores["accepted"] == pytest.approx(6 / 7)
    assert scores["windows"] == 2 and scores["one_tense"] == 0.5
    assert grammar_scores([]) == {"accepted": None, "sentences": 0, "one_tense": None, "windows": 0}


def test_shuffled_and_source_language_text_is_mostly_rejected():
    rng = random.Random(0)
    docs = documents(30)
    shuffled = []
    for doc in docs:
        words = render_english(doc).replace(".", "").split()
        rng.shuffle(words)
        shuffled.append(" ".join(words[:6]).capitalize() + ". " + " ".join(words[6:12]) + ".")
    assert grammar_scores(shuffled)["accepted"] < 0.2
    assert grammar_scores([render_source(d) for d in docs])["accepted"] == 0.0
