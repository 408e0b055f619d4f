"""The embedded corpora: determinism, hub schemas, grammar (agreement, reference), summaries, translation."""

import random
from collections import Counter

import datasets
import pytest

from elf.cli import main as elf_main
from elf.config import CorporaSettings
from elf.data import corpora as C
from elf.data.corpora import SOURCE_STEMS
from elf.data.grammar import (DEFINITE, INDEFINITE, LEXICON, PAST, PL, PRESENT, SG, Clause, Document, Entity,
                              NounPhrase)


@pytest.fixture(scope="module")
def documents():
    rng = random.Random(123)
    return [C.generate_document(rng) for _ in range(300)]


def _subject_head(words):
    return [w for w in words if w.role == "subject" and w.pos in ("NOUN", "PRON")][-1]


# --------------------------------------------------------------------------------------------------
# Determinism and schemas
# --------------------------------------------------------------------------------------------------

def test_same_seed_same_corpus_other_seed_differs():
    a = C.build_corpus("owt", 3, {"train": 20, "validation": 5})
    b = C.build_corpus("owt", 3, {"train": 20, "validation": 5})
    c = C.build_corpus("owt", 4, {"train": 20, "validation": 5})
    assert a["train"]["text"] == b["train"]["text"]
    assert a["validation"]["text"] == b["validation"]["text"]
    assert a["train"]["text"] != c["train"]["text"]
    # each split has its own stream: validation is not a prefix of train
    assert a["validation"]["text"] != a["train"]["text"][:5]


def test_build_corpora_uses_hub_schemas_and_sizes():
    built = C.build_corpora(CorporaSettings(seed=1, train_docs=6, validation_docs=3, test_docs=2))
    owt, wmt, xsum = built["owt"], built["wmt"], built["xsum"]
    assert {s: len(d) for s, d in owt.items()} == {"train": 6, "validation": 3, "test": 2,
                                                    "heldout": 3}
    assert owt["train"].column_names == ["text"]
    assert list(wmt) == ["train", "validation", "test"]
    assert isinstance(wmt["train"].features["translation"], datasets.Translation)
    pair = wmt["test"][0]["translation"]
    assert set(pair) == {"de", "en"} and pair["de"] != pair["en"]
    assert xsum["train"].column_names == ["document", "summary", "id"]
    ids = [i for split in xsum.values() for i in split["id"]]
    assert len(ids) == len(set(ids)) == 11


def test_corpora_stage_writes_three_corpora(tmp_path):
    out = tmp_path / "corpora"
    assert elf_main(["corpora", "--settings", '{"train_docs": 4, "validation_docs": 2, '
                     '"test_docs": 2}', "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["owt", "provenance.json", "wmt", "xsum"]
    assert datasets.load_from_disk(str(out / "owt"))["heldout"].num_rows == 2
    assert elf_main(["corpora", "--settings", '{"train_docs": 0}', "--out", str(out)]) == 2


def test_document_lengths_are_small():
    texts = C.build_corpus("owt", 0, {"train": 200})["train"]["text"]
    lengths = [len(t.split()) for t in texts]
    assert min(lengths) >= 15 and max(lengths) <= 160
    assert 40 <= sum(lengths) / len(lengths) <= 100


# --------------------------------------------------------------------------------------------------
# Grammar
# --------------------------------------------------------------------------------------------------

def test_inflection_tables_hand_checked():
    assert LEXICON.verb_forms["catch"] == {(PRESENT, SG): "catches", (PRESENT, PL): "catch",
                                           (PAST, SG): "caught", (PAST, PL): "caught"}
    assert LEXICON.verb_forms["hurry"][(PRESENT, SG)] == "hurries"
    assert LEXICON.verb_forms["hurry"][(PAST, PL)] == "hurried"
    assert LEXICON.verb_forms["bake"][(PAST, SG)] == "baked"
    assert LEXICON.verb_forms["echo"][(PRESENT, SG)] == "echoes"
    assert LEXICON.verb_forms["be"][(PAST, PL)] == "were"
    assert LEXICON.noun_forms["wolf"][PL] == "wolves"
    assert LEXICON.noun_forms["bus"][PL] == "buses"
    assert LEXICON.noun_forms["family"][PL] == "families"
    assert LEXICON.noun_forms["tomato"][PL] == "tomatoes"
    assert 250 <= len(LEXICON.noun_forms) + len(LEXICON.verb_forms) + len(LEXICON.adjectives) <= 500


def test_rendered_text_is_the_tagged_words(documents):
    for doc in documents[:50]:
        sentences = [" ".join(w.text for w in C.english_words(c)) for c in doc.clauses]
        assert C.render_english(doc) == " ".join(s[0].upper() + s[1:] + "." for s in sentences)


def test_subject_verb_agreement(documents):
    seen = Counter()
    for doc in documents:
        for clause in doc.clauses:
            words = C.english_words(clause)
            subject = _subject_head(words)
            verb = next(w for w in words if w.pos == "VERB")
            assert words.index(verb) == words.index(subject) + 1   # the verb follows its subject
            assert verb.number == subject.number
            forms = LEXICON.verb_forms[verb.lemma]
            assert verb.text == forms[(clause.tense, subject.number)]
            if clause.tense == PRESENT:
                other = PL if subject.number == SG else SG
                assert verb.text != forms[(PRESENT, other)]
            seen[(clause.tense, subject.number)] += 1
    assert min(seen.values()) > 50  # every tense/number combination is exercised


def test_determiners_agree_with_their_noun(documents):
    for doc in documents:
        for clause in doc.clauses:
            words = C.english_words(clause)
            for i, word in enumerate(words):
                if word.pos != "DET":
                    continue
                noun = next(w for w in words[i:] if w.pos == "NOUN")
                assert word.number == noun.number
                assert C.DETERMINERS[word.lemma] in (None, noun.number)
                if word.text in ("a", "an"):
                    assert (word.text == "an") == (words[i + 1].text[0] in "aeiou")


def test_pronouns_refer_to_previous_subject_and_first_mentions_are_indefinite(documents):
    pronouns = 0
    for doc in documents:
        mentioned = set()
        previous = None
        for clause in doc.clauses:
            for np_ in (clause.subject, clause.obj):
                if np_ is None:
                    continue
                entity = doc.entities[np_.entity]
                if np_.pronoun:
                    pronouns += 1
                    assert np_.entity == previous
                    assert np_.noun == {SG: "it", PL: "they"}[entity.number]
                else:
                    assert (np_.noun, np_.number) == (entity.noun, entity.number)
                    dets = DEFINITE if np_.entity in mentioned else INDEFINITE
                    assert np_.det in dets[entity.number]
                    mentioned.add(np_.entity)
            previous = clause.subject.entity
    assert pronouns > 100


def test_topic_biases_the_lexicon_across_sentences(documents):
    in_topic = total = 0
    for doc in documents:
        topic_nouns = set(LEXICON.topic_words[doc.topic]["agents"]) | \
            set(LEXICON.topic_words[doc.topic]["things"])
        for clause in doc.clauses:
            nouns = [w.lemma for w in C.english_words(clause) if w.pos == "NOUN"]
            in_topic += sum(n in topic_nouns for n in nouns)
            total += len(nouns)
    assert in_topic / total > 0.6  # vs ~0.14 if topics did not bias the lexicon


def test_only_agents_act():
    rng = random.Random(5)
    for _ in range(200):
        for clause in C.generate_document(rng).clauses:
            if clause.verb in LEXICON.transitive:
                subject = clause.subject
                noun = subject.noun if not subject.pronoun else None
                assert noun is None or noun in LEXICON.agents


# --------------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------------

def _np(entity, index, det, adjective=None, pronoun=False):
    e = entity[index]
    if pronoun:
        return NounPhrase({SG: "it", PL: "they"}[e.number], e.number, None, None, index, True)
    return NounPhrase(e.noun, e.number, det, adjective, index)


def test_summary_hand_made_document():
    ents = (Entity("fox", SG, "grey"), Entity("rabbit", PL, None), Entity("owl", SG, None))
    clauses = (
        Clause(_np(ents, 0, "a", "grey"), "chase", PRESENT, _np(ents, 1, "some")),
        Clause(_np(ents, 0, None, pronoun=True), "howl", PRESENT),
        Clause(_np(ents, 2, "an"), "be", PRESENT, complement="quiet"),
        Clause(_np(ents, 0, "the"), "chase", PRESENT, _np(ents, 1, "the"), prep="near",
               place=NounPhrase("stream", SG, "the", None, None)),
    )
    doc = Document("forest", PRESENT, ents, clauses)
    assert C.render_english(doc) == ("A grey fox chases some rabbits. It howls. An owl is quiet. "
                                     "The fox chases the rabbits near the stream.")
    assert C.summarize(doc) == "In the forest, the grey fox chases the rabbits."
    past = Document("forest", PAST, ents, tuple(
        Clause(c.subject, c.verb, PAST, c.obj, c.complement, c.prep, c.place) for c in clauses))
    assert C.summarize(past) == "In the forest, the grey fox chased the rabbits."


def test_summary_ties_go_to_the_first_subject_and_action():
    ents = (Entity("hen", PL, None), Entity("farmer", SG, "lazy"))
    clauses = (
        Clause(_np(ents, 1, "a", "lazy"), "snore", PAST),
        Clause(_np(ents, 0, "some"), "graze", PAST),
        Clause(_np(ents, 1, "the"), "be", PAST, complement="hungry"),
        Clause(_np(ents, 0, "the"), "wander", PAST),
    )
    assert C.summarize(Document("farm", PAST, ents, clauses)) == "On the farm, the lazy farmer snored."


def test_summary_is_recomputed_from_content(documents):
    """An independent recount: most frequent subject entity, then its most frequent action."""
    for doc in documents:
        subjects = [c.subject.entity for c in doc.clauses]
        main = sorted(set(subjects), key=lambda e: (-subjects.count(e), subjects.index(e)))[0]
        actions = [(c.verb, c.obj and (c.obj.noun, c.obj.number), c.complement)
                   for c in doc.clauses if c.subject.entity == main]
        verb, obj, complement = sorted(set(actions), key=lambda a: (-actions.count(a),
                                                                    actions.index(a)))[0]
        entity = doc.entities[main]
        words = [C.SETTINGS[doc.topic] + ",", "the"] + ([entity.adjective] if entity.adjective else [])
        words += [LEXICON.noun_forms[entity.noun][entity.number],
                  LEXICON.verb_forms[verb][(doc.tense, entity.number)]]
        words += ["the", LEXICON.noun_forms[obj[0]][obj[1]]] if obj else []
        words += [complement] if complement else []
        sentence = " ".join(words)
        assert C.summarize(doc) == sentence[0].upper() + sentence[1:] + "."


# --------------------------------------------------------------------------------------------------
# Translation
# --------------------------------------------------------------------------------------------------

def _parse_source(word):
    """Source word -> (lemma, suffix) using only the stem table (inverse map)."""
    inverse = {stem: lemma for lemma, stem in SOURCE_STEMS.items()}
    word = word.rstrip(".").lower()
    if word in inverse:
        return inverse[word], ""
    for suffix in (C.NOUN_PLURAL_SUFFIX, *C.VERB_SUFFIX.values()):
        if word.endswith(suffix) and word[:-len(suffix)] in inverse:
            return inverse[word[:-len(suffix)]], suffix
    raise AssertionError(f"source word {word!r} does not parse")


def test_source_lexicon_is_a_fixed_bijection():
    assert len(set(SOURCE_STEMS.values())) == len(SOURCE_STEMS)
    assert C._build_source_lexicon() == SOURCE_STEMS  # same map in every process and corpus
    lemmas = set(LEXICON.noun_forms) | set(LEXICON.verb_forms) | set(LEXICON.adjectives)
    assert lemmas <= set(SOURCE_STEMS)
    surfaces = Counter()
    for lemma, stem in SOURCE_STEMS.items():
        forms = {stem}
        if lemma in LEXICON.noun_forms:
            forms.add(stem + C.NOUN_PLURAL_SUFFIX)
        if lemma in LEXICON.verb_forms:
            forms |= {stem + s for s in C.VERB_SUFFIX.values()}
        surfaces.update(forms)
    assert max(surfaces.values()) == 1  # no surface form is shared by two lemmas / inflections


def test_source_sentence_hand_made():
    S = SOURCE_STEMS
    ents = (Entity("fox", SG, "grey"), Entity("rabbit", PL, None))
    clause = Clause(NounPhrase("fox", SG, "the", "grey", 0), "chase", PAST,
                    NounPhrase("rabbit", PL, "some", None, 1), prep="near",
                    place=NounPhrase("stream", SG, "the", None, None))
    doc = Document("forest", PAST, ents, (clause,))
    assert C.render_english(doc) == "The grey fox chased some rabbits near the stream."
    expected = (f"{S['fox']} {S['grey']} {S['the']} {S['stream']} {S['the']} {S['near']} "
                f"{S['rabbit']}en {S['some']} {S['chase']}ut.")
    assert C.render_source(doc) == expected[0].upper() + expected[1:]
    svo = (f"{S['fox']} {S['grey']} {S['the']} {S['chase']}ut {S['rabbit']}en {S['some']} "
           f"{S['stream']} {S['the']} {S['near']}.")
    assert C.render_source(doc, "svo") == svo[0].upper() + svo[1:]
    separate = (f"{S['fox']} {S['grey']} {S['the']} {S['stream']} {S['the']} {S['near']} "
                f"{S['rabbit']} en {S['some']} {S['chase']} ut.")
    assert C.render_source(doc, suffixes="separate") == separate[0].upper() + separate[1:]
    with pytest.raises(ValueError, match="unknown source order"):
        C.render_source(doc, "vso")
    with pytest.raises(ValueError, match="unknown source suffixes"):
        C.render_source(doc, suffixes="fused")


def test_separate_suffixes_are_the_attached_words_split():
    """``separate`` writes each suffix as its own word: joining a suffix back onto the word before it
    gives the ``attached`` text, and no suffix word is a stem (stems end in a vowel)."""
    suffix_words = {C.NOUN_PLURAL_SUFFIX, *C.VERB_SUFFIX.values()}
    assert not suffix_words & set(SOURCE_STEMS.values())
    rng = random.Random(4)
    for _ in range(200):
        doc = C.generate_document(rng, 1, 2)
        joined = []
        for word in C.render_source(doc, suffixes="separate").split():
            if word.rstrip(".") in suffix_words:
                joined[-1] += word
            else:
                joined.append(word)
        assert " ".join(joined) == C.render_source(doc)


def test_corpora_settings_choose_the_source_suffixes():
    sizes = dict(seed=2, train_docs=20, validation_docs=1, test_docs=1)
    attached = C.build_corpora(CorporaSettings(**sizes))["wmt"]["train"]["translation"]
    separate = C.build_corpora(CorporaSettings(**sizes, source_suffixes="separate"))["wmt"]["train"]["translation"]
    assert [p["en"] for p in separate] == [p["en"] for p in attached]   # same documents
    words = " ".join(p["de"] for p in separate).replace(".", "").split()
    assert set(C.VERB_SUFFIX.values()) <= set(words)                    # suffixes as words
    assert [p["de"] for p in separate] != [p["de"] for p in attached]


def test_translation_pairs_are_consistent():
    rng = random.Random(9)
    for _ in range(300):
        doc = C.generate_document(rng, 1, 2)
        source_sentences = C.render_source(doc).split(". ")
        assert len(source_sentences) == len(doc.clauses)
        for clause, sentence in zip(doc.clauses, source_sentences):
            parsed = [_parse_source(w) for w in sentence.split()]
            english = C.english_words(clause)
            assert Counter(lemma for lemma, _ in parsed) == Counter(w.lemma for w in english)
            verb_lemma, verb_suffix = parsed[-1]   # verb-final, inflected for tense and number
            assert verb_lemma == clause.verb
            assert verb_suffix == C.VERB_SUFFIX[(clause.tense, clause.subject.number)]
            for lemma, suffix in parsed:   # plural nouns carry the plural suffix
                english_nouns = [w for w in english if w.pos == "NOUN" and w.lemma == lemma]
                if english_nouns and suffix:
                    assert PL in {w.number for w in english_nouns}


def test_a_bigram_model_tells_fluent_from_shuffled_text():
    """The grammar is learnable: add-one bigram perplexity is far lower on fluent held-out text."""
    import math
    train = C.build_corpus("owt", 0, {"train": 300})["train"]["text"]
    test = C.build_corpus("owt", 1, {"test": 40})["test"]["text"]
    pairs, unigrams = Counter(), Counter()
    for text in train:
        words = ["<s>"] + text.split()
        unigrams.update(words)
        pairs.update(zip(words, words[1:]))
    vocab = len(unigrams) + 1

    def perplexity(texts):
        nll = n = 0
        for text in texts:
            words = ["<s>"] + text.split()
            for a, b in zip(words, words[1:]):
                nll -= math.log((pairs[(a, b)] + 1) / (unigrams[a] + vocab))
                n += 1
        return math.exp(nll / n)

    rng = random.Random(0)
    shuffled = [" ".join(rng.sample(t.split(), len(t.split()))) for t in test]
    assert perplexity(test) < 0.5 * perplexity(shuffled)
