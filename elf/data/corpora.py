"""Embedded corpora: small synthetic stand-ins for OpenWebText, WMT14 De-En and XSum (no downloads).

Every text comes from one probabilistic grammar over a lexicon of ~350 English lemmas
(``elf.data.grammar``):

- a document has a *topic* (farm, forest, sea, ...) that biases which nouns, verbs and adjectives its
  sentences draw, a *tense* kept across all its sentences, and a *protagonist* with a habitual action
  that recurs; entities are introduced with an indefinite determiner ("a fox", "some hens") and
  referred to later as "the fox" or by a pronoun ("it", "they") — long-range structure a small model
  can learn and a scorer can tell from shuffled text;
- subject and verb agree in number, determiners agree with their noun ("a"/"this" vs "some"/"these").

The structure of each sentence (``Clause``) is kept, so tests check agreement and reference on the
grammar's own metadata (``english_words``) rather than on strings. From the same structures:

- ``render_english(doc)``: the English text (the "owt" corpus, the WMT target, the XSum document);
- ``render_source(doc)``: an invented "source language" (WMT's ``de`` side): every lemma maps to one
  invented stem, subject-object-verb order (or, ``source_order: svo``, the English clause order),
  adjectives after the noun, determiners after the noun, postpositions, and suffixes for plural
  nouns and for verb tense/number (``source_suffixes: separate``: each suffix written as a word of its
  own, as a morpheme-aware tokenizer would split it, so ~350 stems and 5 suffixes fill the vocabulary
  rather than every inflected form);
- ``summarize(doc)``: a one-sentence summary fixed by the content: the topic's setting, the entity that
  is subject most often, and its most frequent action.

``build_corpora(CorporaSettings)`` returns the three ``DatasetDict``s with the real hub schemas (owt:
``text``; wmt: ``translation`` = {"de", "en"}; xsum: ``document``, ``summary``, ``id``); each split is
drawn from its own seed. The ``elf corpora`` stage (``elf/stages/corpora.py``) saves them to disk.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable

import datasets
from tqdm import tqdm

from elf.data.grammar import (DETERMINERS, LEXICON, PAST, PL, PREPOSITIONS, PRESENT, PRONOUNS, SG, Clause,
                              Document, NounPhrase, Word, generate_document)

CORPUS_NAMES = ("owt", "wmt", "xsum")
SPLITS = ("train", "validation", "test")
HELDOUT_SPLIT = "heldout"  # owt only: text for training the Gen. PPL scorer (never for ELF)

# --------------------------------------------------------------------------------------------------
# English rendering
# --------------------------------------------------------------------------------------------------


def _np_words(np_: NounPhrase, role: str) -> list[Word]:
    if np_.pronoun:
        return [Word(np_.noun, "PRON", np_.noun, np_.number, role)]
    words = []
    if np_.det:
        words.append(Word(np_.det, "DET", np_.det, np_.number, role))
    if np_.adjective:
        words.append(Word(np_.adjective, "ADJ", np_.adjective, None, role))
    words.append(Word(LEXICON.noun_forms[np_.noun][np_.number], "NOUN", np_.noun, np_.number, role))
    if np_.det == "a" and words[1].text[0] in "aeiou":
        words[0] = Word("an", "DET", "a", np_.number, role)
    return words


def english_words(clause: Clause) -> list[Word]:
    """The clause as English words with their metadata: S V [O | ADJ] [P NP]."""
    subject = clause.subject
    words = _np_words(subject, "subject")
    verb_text = LEXICON.verb_forms[clause.verb][(clause.tense, subject.number)]
    words.append(Word(verb_text, "VERB", clause.verb, subject.number, "verb"))
    if clause.obj:
        words += _np_words(clause.obj, "object")
    if clause.complement:
        words.append(Word(clause.complement, "ADJ", clause.complement, None, "complement"))
    if clause.prep:
        words.append(Word(clause.prep, "PREP", clause.prep, None, "prep"))
        words += _np_words(clause.place, "place")
    return words


def _sentence(tokens: list[str]) -> str:
    text = " ".join(tokens)
    return text[0].upper() + text[1:] + "."


def render_english(doc: Document) -> str:
    return " ".join(_sentence([w.text for w in english_words(c)]) for c in doc.clauses)


# --------------------------------------------------------------------------------------------------
# Source language (the "de" side of the embedded WMT corpus)
# --------------------------------------------------------------------------------------------------

_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
NOUN_PLURAL_SUFFIX = "en"
VERB_SUFFIX = {(PRESENT, SG): "et", (PRESENT, PL): "ent", (PAST, SG): "ut", (PAST, PL): "unt"}


def _build_source_lexicon() -> dict[str, str]:
    """English lemma -> invented stem, fixed for all seeds (a language does not change per corpus).

    Stems are consonant-vowel syllables (1 for function words, 2-3 for content words); every suffix
    ends in a consonant, and suffixes differ in length by at most one, so no inflected form of one
    stem can equal another stem or another stem's form (the map is invertible; a test checks).
    """
    rng = random.Random("elf-source-lexicon-v1")
    function_words = sorted(set(DETERMINERS) | set(PRONOUNS.values()) | set(PREPOSITIONS))
    content_words = sorted(set(LEXICON.noun_forms) | set(LEXICON.verb_forms) | LEXICON.adjectives)
    english = {form for forms in LEXICON.noun_forms.values() for form in forms.values()}
    english |= {form for forms in LEXICON.verb_forms.values() for form in forms.values()}
    english |= set(LEXICON.adjectives) | set(function_words)
    stems: dict[str, str] = {}
    used: set[str] = set()
    for lemma in function_words + content_words:
        syllables = 1 if lemma in function_words else (2 if rng.random() < 0.7 else 3)
        while True:
            stem = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
            if stem not in used and stem not in english:
                break
        stems[lemma] = stem
        used.add(stem)
    return stems


SOURCE_STEMS = _build_source_lexicon()


SOURCE_SUFFIXES = ("attached", "separate")


def _inflect(stem: str, suffix: str, suffixes: str) -> list[str]:
    """``stem`` + ``suffix`` as one word (``attached``) or two (``separate``); no suffix: the stem."""
    if not suffix:
        return [stem]
    return [stem + suffix] if suffixes == "attached" else [stem, suffix]


def _np_source(np_: NounPhrase, suffixes: str) -> list[str]:
    if np_.pronoun:
        return [SOURCE_STEMS[np_.noun]]
    words = _inflect(SOURCE_STEMS[np_.noun], NOUN_PLURAL_SUFFIX if np_.number == PL else "", suffixes)
    if np_.adjective:
        words.append(SOURCE_STEMS[np_.adjective])
    if np_.det:
        words.append(SOURCE_STEMS[np_.det])
    return words


SOURCE_ORDERS = ("sov", "svo")


def source_tokens(clause: Clause, order: str = "sov", suffixes: str = "attached") -> list[str]:
    """The clause in the source language, noun-adjective-determiner and postpositions; ``sov``:
    S [NP P] [O | ADJ] V; ``svo`` (the English clause order): S V [O | ADJ] [NP P]; suffixes
    ``attached`` to their stem or written ``separate``ly after it."""
    if order not in SOURCE_ORDERS:
        raise ValueError(f"unknown source order {order!r} ({', '.join(SOURCE_ORDERS)})")
    if suffixes not in SOURCE_SUFFIXES:
        raise ValueError(f"unknown source suffixes {suffixes!r} ({', '.join(SOURCE_SUFFIXES)})")
    subject = _np_source(clause.subject, suffixes)
    place = _np_source(clause.place, suffixes) + [SOURCE_STEMS[clause.prep]] if clause.prep else []
    rest = _np_source(clause.obj, suffixes) if clause.obj else []
    if clause.complement:
        rest.append(SOURCE_STEMS[clause.complement])
    verb = _inflect(SOURCE_STEMS[clause.verb], VERB_SUFFIX[(clause.tense, clause.subject.number)], suffixes)
    return subject + place + rest + verb if order == "sov" else subject + verb + rest + place


def render_source(doc: Document, order: str = "sov", suffixes: str = "attached") -> str:
    return " ".join(_sentence(source_tokens(c, order, suffixes)) for c in doc.clauses)


# --------------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------------

# where each topic's story takes place (the summary's opening phrase)
SETTINGS = {"farm": "on the farm", "forest": "in the forest", "sea": "at sea", "city": "in the city",
            "school": "at school", "kitchen": "in the kitchen", "mountain": "on the mountain",
            "garden": "in the garden"}


def main_subject(doc: Document) -> int:
    """The entity that is subject most often (ties: the one that is subject first)."""
    subjects = [c.subject.entity for c in doc.clauses]
    counts = Counter(subjects)
    return max(counts, key=lambda e: (counts[e], -subjects.index(e)))


def main_action(doc: Document, entity: int) -> Clause:
    """The first clause with ``entity``'s most frequent action (ties: the action seen first)."""
    clauses = [c for c in doc.clauses if c.subject.entity == entity]
    counts = Counter(c.action() for c in clauses)
    order = {a: i for i, a in reversed(list(enumerate(c.action() for c in clauses)))}
    best = max(counts, key=lambda a: (counts[a], -order[a]))
    return clauses[order[best]]


def summarize(doc: Document) -> str:
    """"<Setting>, the <main subject> <its main action>." in the document's tense."""
    subject_index = main_subject(doc)
    entity = doc.entities[subject_index]
    clause = main_action(doc, subject_index)
    subject = NounPhrase(entity.noun, entity.number, "the", entity.adjective, subject_index)
    obj = clause.obj and NounPhrase(clause.obj.noun, clause.obj.number, "the", None, None)
    core = Clause(subject, clause.verb, doc.tense, obj, clause.complement)
    return _sentence([SETTINGS[doc.topic] + ","] + [w.text for w in english_words(core)])


# --------------------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------------------


def split_rng(seed: int, corpus: str, split: str) -> random.Random:
    """An independent, reproducible stream per (seed, corpus, split)."""
    return random.Random(f"elf-corpora:{seed}:{corpus}:{split}")


def owt_rows(rng: random.Random, n: int) -> dict[str, list]:
    docs = [generate_document(rng) for _ in tqdm(range(n), desc="owt", leave=False)]
    return {"text": [render_english(d) for d in docs]}


def wmt_rows(rng: random.Random, n: int, order: str = "sov", suffixes: str = "attached") -> dict[str, list]:
    docs = [generate_document(rng, 1, 2) for _ in tqdm(range(n), desc="wmt", leave=False)]
    return {"translation": [{"de": render_source(d, order, suffixes), "en": render_english(d)}
                            for d in docs]}


def xsum_rows(rng: random.Random, n: int, id_offset: int) -> dict[str, list]:
    docs = [generate_document(rng) for _ in tqdm(range(n), desc="xsum", leave=False)]
    return {"document": [render_english(d) for d in docs],
            "summary": [summarize(d) for d in docs],
            "id": [str(id_offset + i) for i in range(n)]}


XSUM_ID_OFFSETS = {"train": 10_000_000, "validation": 20_000_000, "test": 30_000_000}
_FEATURES = {
    "owt": datasets.Features({"text": datasets.Value("string")}),
    "wmt": datasets.Features({"translation": datasets.Translation(languages=["de", "en"])}),
    "xsum": datasets.Features({"document": datasets.Value("string"),
                               "summary": datasets.Value("string"), "id": datasets.Value("string")}),
}


def build_corpus(name: str, seed: int, sizes: dict[str, int], source_order: str = "sov",
                 source_suffixes: str = "attached") -> datasets.DatasetDict:
    """One corpus (``name`` in ``CORPUS_NAMES``) with a split per entry of ``sizes`` (wmt: its
    source language in ``source_order``, its suffixes ``source_suffixes``)."""
    makers: dict[str, Callable[[random.Random, int, str], dict[str, list]]] = {
        "owt": lambda rng, n, split: owt_rows(rng, n),
        "wmt": lambda rng, n, split: wmt_rows(rng, n, source_order, source_suffixes),
        "xsum": lambda rng, n, split: xsum_rows(rng, n, XSUM_ID_OFFSETS[split]),
    }
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict(makers[name](split_rng(seed, name, split), n, split),
                                          features=_FEATURES[name])
        for split, n in sizes.items()})


def build_corpora(settings) -> dict[str, datasets.DatasetDict]:
    """All three corpora for a ``CorporaSettings``; owt also gets a ``heldout`` split."""
    sizes = {"train": settings.train_docs, "validation": settings.validation_docs,
             "test": settings.test_docs}
    return {name: build_corpus(name, settings.seed,
                               sizes | ({HELDOUT_SPLIT: settings.validation_docs} if name == "owt"
                                        else {}), settings.source_order, settings.source_suffixes)
            for name in CORPUS_NAMES}
