"""A recognizer for the embedded corpora's grammar (``elf.data.grammar``), built from its own lexicon
and rules: does a text keep the grammar its training corpus was drawn from?

A sentence is accepted when it is a clause the generator can produce (``corpora.english_words``):

    [SETTING ","] NP_subject VERB ( NP_object [PREP the NOUN] | ADJ | [PREP the NOUN] )

- a noun phrase is a pronoun ("it" singular, "they" plural) or DET [ADJ] NOUN, the determiner
  agreeing in number with the noun ("a"/"this"/"that" singular, "some"/"many"/"two"/"three"/"these"/
  "those" plural, "the" either; "an" exactly before a vowel);
- the verb agrees with the subject in number and has a tense (present or past);
- verb classes: the copula takes an adjective and nothing else; a transitive verb takes an object
  (and may take a place); intransitive verbs and processes take no object; agents (who can act)
  are the subjects of transitive and intransitive verbs, things (that only are or undergo) of
  processes; a pronoun may stand for either;
- a place is a preposition and "the" with a singular thing; the summary's opening is one of the
  topics' settings ("In the forest, ...").

``sentences(text)`` cuts a text into complete sentences: those ended by "." and begun at the start of
the text with a capital letter or after a ".". ``grammar_scores(texts)`` gives the share of complete
sentences accepted and the share of windows (texts with at least two accepted sentences) whose
accepted sentences share one tense (a document keeps one tense throughout; "read" and "cut" read
as either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from elf.data.grammar import (COPULA, DETERMINERS, LEXICON, PAST, PL, PREPOSITIONS, PRESENT, PRONOUNS,
                              SG)

_PRONOUN_NUMBER = {word: number for number, word in PRONOUNS.items()}
_NOUNS: dict[str, list[tuple[str, str]]] = {}          # form -> [(lemma, number)]
for _lemma, _forms in LEXICON.noun_forms.items():
    for _number, _form in _forms.items():
        _NOUNS.setdefault(_form, []).append((_lemma, _number))
_VERBS: dict[str, list[tuple[str, str, str]]] = {}     # form -> [(lemma, tense, number)]
for _lemma, _forms in LEXICON.verb_forms.items():
    for (_tense, _number), _form in _forms.items():
        _VERBS.setdefault(_form, []).append((_lemma, _tense, _number))
_INTRANSITIVE = {lemma for topic in LEXICON.topic_words.values() for lemma in topic["intransitive"]}
_PROCESSES = {lemma for topic in LEXICON.topic_words.values() for lemma in topic["processes"]}
_SETTINGS = ("on the farm", "in the forest", "at sea", "in the city", "at school", "in the kitchen",
             "on the mountain", "in the garden")
AGENT, THING, EITHER = "agent", "thing", "either"


@dataclass(frozen=True)
class NP:
    end: int          # index after the phrase
    number: str
    kind: str         # AGENT, THING or EITHER (a pronoun)
    definite_singular_thing: bool = False  # "the" + singular thing, no adjective: a valid place


def words_of(sentence: str) -> list[str]:
    """Lower-cased words of one sentence (without its final "."), commas as their own word."""
    return sentence.replace(",", " , ").lower().split()


def _noun_phrases(words: Sequence[str], i: int) -> list[NP]:
    if i >= len(words):
        return []
    word = words[i]
    if word in _PRONOUN_NUMBER:
        return [NP(i + 1, _PRONOUN_NUMBER[word], EITHER)]
    det = "a" if word == "an" else word
    if det not in DETERMINERS:
        return []
    j = i + 1
    adjective = j < len(words) and words[j] in LEXICON.adjectives
    out = []
    for k in ((j + 1, j) if adjective else (j,)):   # with the adjective, or "spotted" as not one
        if k >= len(words) or words[k] not in _NOUNS:
            continue
        if det == "a" and (word == "an") != (words[j][0] in "aeiou"):  # "a"/"an" by the next word
            continue
        for lemma, number in _NOUNS[words[k]]:
            required = DETERMINERS[det]
            if required is not None and required != number:
                continue
            kind = AGENT if lemma in LEXICON.agents else THING
            place = det == "the" and k == j and number == SG and kind == THING
            out.append(NP(k + 1, number, kind, place))
    return out


def _rest_ok(words: Sequence[str], i: int, lemma: str) -> bool:
    """The words after the verb fit its class."""
    def place_ok(k: int) -> bool:
        if k == len(words):
            return True
        if words[k] not in PREPOSITIONS:
            return False
        return any(np_.end == len(words) and np_.definite_singular_thing
                   for np_ in _noun_phrases(words, k + 1))

    if lemma == COPULA:
        return i + 1 == len(words) and words[i] in LEXICON.adjectives
    if lemma in LEXICON.transitive:
        return any(place_ok(np_.end) for np_ in _noun_phrases(words, i))
    return place_ok(i)


def _subject_fits(kind: str, lemma: str) -> bool:
    if kind == EITHER or lemma == COPULA:
        return True
    if lemma in _PROCESSES:
        return kind == THING
    return kind == AGENT  # transitive and intransitive verbs need an agent


def sentence_tenses(sentence: str) -> frozenset[str]:
    """The tenses under which the grammar accepts ``sentence`` (empty: rejected)."""
    words = words_of(sentence.rstrip().removesuffix("."))
    for setting in _SETTINGS:
        prefix = setting.split() + [","]
        if words[:len(prefix)] == prefix:
            words = words[len(prefix):]
            break
    tenses = set()
    for subject in _noun_phrases(words, 0):
        if subject.end >= len(words):
            continue
        for lemma, tense, number in _VERBS.get(words[subject.end], ()):
            if number == subject.number and _subject_fits(subject.kind, lemma) \
                    and _rest_ok(words, subject.end + 1, lemma):
                tenses.add(tense)
    return frozenset(tenses)


def accepts(sentence: str) -> bool:
    """Whether the corpus grammar can produce ``sentence`` (module docstring)."""
    return bool(sentence_tenses(sentence))


def sentences(text: str) -> list[str]:
    """The complete sentences of ``text``: each ended by "."; the first only if it starts the text
    with a capital letter (a window may begin inside a sentence)."""
    parts = text.split(".")
    complete = [p.strip() + "." for p in parts[:-1]]
    if complete and not complete[0][:1].isupper():
        complete = complete[1:]
    return [s for s in complete if s != "."]


def grammar_scores(texts: Iterable[str]) -> dict:
    """``accepted``: share of complete sentences the grammar accepts (of ``sentences``);
    ``one_tense``: share of the ``windows`` (texts with ≥ 2 accepted sentences) whose accepted
    sentences share a tense. Shares are None when there is nothing to count."""
    n_sentences = n_accepted = n_windows = n_one_tense = 0
    for text in texts:
        tense_sets = [sentence_tenses(s) for s in sentences(text)]
        n_sentences += len(tense_sets)
        accepted = [t for t in tense_sets if t]
        n_accepted += len(accepted)
        if len(accepted) >= 2:
            n_windows += 1
            n_one_tense += bool(frozenset.intersection(*accepted))
    return {"accepted": n_accepted / n_sentences if n_sentences else None, "sentences": n_sentences,
            "one_tense": n_one_tense / n_windows if n_windows else None, "windows": n_windows}


__all__ = ["accepts", "sentence_tenses", "sentences", "grammar_scores", "PRESENT", "PAST", "PL"]
