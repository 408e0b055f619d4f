"""Embedded corpora: small synthetic stand-ins for OpenWebText, WMT14 De-En and XSum (no downloads).

Every text comes from one probabilistic grammar over a lexicon of ~350 English lemmas:

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
  invented stem, subject-object-verb order, adjectives after the noun, determiners after the noun,
  postpositions, and suffixes for plural nouns and for verb tense/number;
- ``summarize(doc)``: a one-sentence summary fixed by the content: the topic's setting, the entity that
  is subject most often, and its most frequent action.

``build_corpora(CorporaSettings)`` returns the three ``DatasetDict``s with the real hub schemas (owt:
``text``; wmt: ``translation`` = {"de", "en"}; xsum: ``document``, ``summary``, ``id``); each split is
drawn from its own seed. The ``elf corpora`` stage (``elf/stages/corpora.py``) saves them to disk.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import datasets
from tqdm import tqdm

CORPUS_NAMES = ("owt", "wmt", "xsum")
SPLITS = ("train", "validation", "test")
HELDOUT_SPLIT = "heldout"  # owt only: text for training the Gen. PPL scorer (never for ELF)

SG, PL = "sg", "pl"
PRESENT, PAST = "present", "past"

# --------------------------------------------------------------------------------------------------
# Lexicon. Nouns "sg/pl" and verbs "base/past" list irregular forms; the rest follow _plural/_third/_past.
# --------------------------------------------------------------------------------------------------

TOPICS: dict[str, dict[str, str]] = {
    "farm": dict(
        agents="cow horse pig goat hen farmer pony duck lamb donkey",
        things="tractor barn field fence bucket gate",
        adjectives="muddy hungry brown noisy lazy fat spotted patient",
        transitive="feed/fed lead/led push follow pull wash",
        intransitive="graze doze wander grumble snore",
        processes="creak rust"),
    "forest": dict(
        agents="fox wolf/wolves owl bear squirrel hunter rabbit badger",
        things="tree mushroom path stream leaf/leaves log",
        adjectives="wild dark quiet clever grey tall ancient shy",
        transitive="chase hunt watch find/found track smell",
        intransitive="hide/hid howl creep/crept prowl vanish",
        processes="rot rustle"),
    "sea": dict(
        agents="sailor whale crab gull captain dolphin",
        things="ship boat wave harbour net island shell anchor",
        adjectives="salty stormy blue brave wet distant calm swift",
        transitive="steer catch/caught repair spot/spotted drag/dragged guard",
        intransitive="swim/swam dive/dived splash row sail",
        processes="drift float sink/sank"),
    "city": dict(
        agents="driver baker officer crowd clerk painter",
        things="bus taxi tower street shop bridge market lamp",
        adjectives="busy crowded bright modern loud narrow rich tired",
        transitive="visit build/built paint sell/sold clean deliver",
        intransitive="hurry wait shout work travel/travelled",
        processes="glow rattle"),
    "school": dict(
        agents="teacher student pupil principal janitor",
        things="book desk lesson pencil classroom library map clock bell poem question",
        adjectives="curious careful young strict thick new silent eager",
        transitive="read/read write/wrote study teach/taught open answer",
        intransitive="learn listen laugh think/thought whisper",
        processes="ring/rang tick"),
    "kitchen": dict(
        agents="chef waiter mouse/mice guest",
        things="pot pan knife/knives spoon bowl oven soup loaf/loaves cake apple onion kettle plate",
        adjectives="hot sweet fresh sharp empty warm greasy heavy",
        transitive="stir/stirred bake cut/cut taste boil chop/chopped",
        intransitive="hum yawn dance complain",
        processes="simmer burn bubble sizzle steam"),
    "mountain": dict(
        agents="climber eagle yak guide hiker ram",
        things="rock cliff peak cave glacier rope tent valley storm pine",
        adjectives="steep cold rocky snowy high lonely strong windy",
        transitive="climb reach cross carry shelter descend",
        intransitive="shiver rest camp slip/slipped",
        processes="crumble echo"),
    "garden": dict(
        agents="gardener bee worm frog snail butterfly beetle",
        things="rose flower hedge bench pond spade tomato/tomatoes",
        adjectives="green tiny colourful gentle thorny pretty sunny damp",
        transitive="plant water dig/dug trim/trimmed pick grow/grew",
        intransitive="buzz crawl sing/sang hop/hopped",
        processes="bloom wither"),
}
GENERAL = dict(
    agents="friend stranger child/children dog cat bird man/men woman/women family neighbour",
    things="box bag stone ball",
    adjectives="happy small big old sad kind strange quick proud little",
    transitive="see/saw like help meet/met greet notice",
    intransitive="smile nod/nodded sigh arrive stay",
    processes="fall/fell shake/shook")
NOUN_CLASSES = ("agents", "things")          # agents can act; things only "are" or undergo processes
VERB_CLASSES = ("transitive", "intransitive", "processes")
PREPOSITIONS = "near under behind beside beyond inside around along".split()
# determiner lemma -> number it requires; "a" is written "an" before a vowel
DETERMINERS = {"a": SG, "this": SG, "that": SG, "the": None, "some": PL, "many": PL,
               "two": PL, "three": PL, "these": PL, "those": PL}
INDEFINITE = {SG: ("a",), PL: ("some", "many", "two", "three")}
DEFINITE = {SG: ("the", "the", "this", "that"), PL: ("the", "the", "these", "those")}
PRONOUNS = {SG: "it", PL: "they"}
COPULA = "be"


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _third_person(verb: str) -> str:
    if verb.endswith(("s", "x", "z", "ch", "sh", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _past(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


@dataclass(frozen=True)
class Lexicon:
    """All word forms, keyed by lemma; ``verb_forms[lemma][(tense, number)]`` is the inflected verb."""
    noun_forms: dict[str, dict[str, str]]
    verb_forms: dict[str, dict[tuple[str, str], str]]
    transitive: frozenset[str]
    agents: frozenset[str]
    adjectives: frozenset[str]
    topic_words: dict[str, dict[str, tuple[str, ...]]]  # topic (and "general") -> class -> lemmas


def _build_lexicon() -> Lexicon:
    noun_forms: dict[str, dict[str, str]] = {}
    verb_forms: dict[str, dict[tuple[str, str], str]] = {
        COPULA: {(PRESENT, SG): "is", (PRESENT, PL): "are", (PAST, SG): "was", (PAST, PL): "were"}}
    transitive: set[str] = set()
    agents: set[str] = set()
    adjectives: set[str] = set()
    topic_words: dict[str, dict[str, tuple[str, ...]]] = {}
    for topic, classes in {**TOPICS, "general": GENERAL}.items():
        words: dict[str, list[str]] = {}
        for cls, spec in classes.items():
            words[cls] = []
            for entry in spec.split():
                lemma, _, irregular = entry.partition("/")
                if lemma in noun_forms or lemma in verb_forms or lemma in adjectives:
                    raise AssertionError(f"lexicon lemma '{lemma}' listed twice")
                words[cls].append(lemma)
                if cls in NOUN_CLASSES:
                    noun_forms[lemma] = {SG: lemma, PL: irregular or _plural(lemma)}
                    if cls == "agents":
                        agents.add(lemma)
                elif cls == "adjectives":
                    adjectives.add(lemma)
                else:
                    assert cls in VERB_CLASSES, f"unknown word class '{cls}'"
                    past = irregular or _past(lemma)
                    verb_forms[lemma] = {(PRESENT, SG): _third_person(lemma), (PRESENT, PL): lemma,
                                         (PAST, SG): past, (PAST, PL): past}
                    if cls == "transitive":
                        transitive.add(lemma)
        topic_words[topic] = {cls: tuple(lemmas) for cls, lemmas in words.items()}
    return Lexicon(noun_forms, verb_forms, frozenset(transitive), frozenset(agents),
                   frozenset(adjectives), topic_words)


LEXICON = _build_lexicon()

# --------------------------------------------------------------------------------------------------
# Sentence structures
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entity:
    """Something a document talks about: a noun with a fixed number and (optional) adjective."""
    noun: str
    number: str
    adjective: str | None


@dataclass(frozen=True)
class NounPhrase:
    """One mention. ``entity`` indexes ``Document.entities`` (None for a location's noun)."""
    noun: str
    number: str
    det: str | None
    adjective: str | None
    entity: int | None
    pronoun: bool = False


@dataclass(frozen=True)
class Clause:
    """One sentence: subject, verb (``COPULA`` with an adjective complement), optional object and place."""
    subject: NounPhrase
    verb: str
    tense: str
    obj: NounPhrase | None = None
    complement: str | None = None
    prep: str | None = None
    place: NounPhrase | None = None

    def action(self) -> tuple:
        """What the subject does, independent of how it is worded: (verb, object noun+number, adjective)."""
        obj = (self.obj.noun, self.obj.number) if self.obj else None
        return (self.verb, obj, self.complement)


@dataclass(frozen=True)
class Document:
    topic: str
    tense: str
    entities: tuple[Entity, ...]
    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class Word:
    """A rendered English word with its grammatical metadata (what tests check agreement on)."""
    text: str
    pos: str          # DET ADJ NOUN PRON VERB PREP
    lemma: str
    number: str | None
    role: str         # subject, verb, object, complement, place, prep


# --------------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------------

TOPIC_BIAS = 0.75       # probability a content word comes from the document's topic
PROTAGONIST_SUBJECT = 0.5
PRONOUN_REFERENCE = 0.6  # repeated subject -> pronoun
HABIT = 0.6              # protagonist repeats its habitual action
PLACE = 0.4              # sentence gets a prepositional phrase


class _DocumentBuilder:
    """Draws one document; all randomness from the caller's ``random.Random``."""

    def __init__(self, rng: random.Random, topic: str, tense: str):
        self.rng, self.topic, self.tense = rng, topic, tense
        self.entities: list[Entity] = []
        self.mentioned: set[int] = set()

    def word(self, cls: str) -> str:
        source = self.topic if self.rng.random() < TOPIC_BIAS else "general"
        return self.rng.choice(LEXICON.topic_words[source][cls])

    def new_entity(self, agent: bool | None = None) -> int:
        """Introduce an entity: an agent (can act), a thing, or either (``agent=None``)."""
        if agent is None:
            agent = self.rng.random() < 0.6
        number = SG if self.rng.random() < 0.6 else PL
        adjective = self.word("adjectives") if self.rng.random() < 0.5 else None
        noun = self.word("agents" if agent else "things")
        self.entities.append(Entity(noun, number, adjective))
        return len(self.entities) - 1

    def mention(self, index: int, pronoun_ok: bool = False) -> NounPhrase:
        entity = self.entities[index]
        if pronoun_ok and self.rng.random() < PRONOUN_REFERENCE:
            return NounPhrase(PRONOUNS[entity.number], entity.number, None, None, index, True)
        first = index not in self.mentioned
        self.mentioned.add(index)
        dets = INDEFINITE if first else DEFINITE
        # the adjective always comes with the first mention, so the summary's wording is in the text
        show_adjective = entity.adjective and (first or self.rng.random() < 0.3)
        return NounPhrase(entity.noun, entity.number, self.rng.choice(dets[entity.number]),
                          entity.adjective if show_adjective else None, index)

    def action(self, subject: int) -> tuple[str, int | None, str | None]:
        """(verb, object entity, copula adjective) for a subject: agents act, things undergo."""
        kind = self.rng.random()
        if self.entities[subject].noun not in LEXICON.agents:
            if kind < 0.6:
                return self.word("processes"), None, None
            return COPULA, None, self.word("adjectives")
        if kind < 0.5:
            others = [i for i in range(len(self.entities)) if i != subject]
            obj = (self.rng.choice(others) if others and self.rng.random() < 0.35
                   else self.new_entity())
            return self.word("transitive"), obj, None
        if kind < 0.8:
            return self.word("intransitive"), None, None
        return COPULA, None, self.word("adjectives")

    def clause(self, subject: int, previous_subject: int | None,
               action: tuple[str, int | None, str | None]) -> Clause:
        verb, obj, complement = action
        subject_np = self.mention(subject, pronoun_ok=subject == previous_subject)
        obj_np = self.mention(obj) if obj is not None else None
        prep = place = None
        if complement is None and self.rng.random() < PLACE:
            prep = self.rng.choice(PREPOSITIONS)
            noun = self.rng.choice(LEXICON.topic_words[self.topic]["things"])
            place = NounPhrase(noun, SG, "the", None, None)
        return Clause(subject_np, verb, self.tense, obj_np, complement, prep, place)


def generate_document(rng: random.Random, min_sentences: int = 6, max_sentences: int = 14,
                      topic: str | None = None) -> Document:
    """One document of ``min_sentences``..``max_sentences`` clauses drawn with ``rng``."""
    topic = topic or rng.choice(sorted(TOPICS))
    tense = PRESENT if rng.random() < 0.6 else PAST
    builder = _DocumentBuilder(rng, topic, tense)
    protagonist = builder.new_entity(agent=True)
    habit = builder.action(protagonist)
    clauses, previous = [], None
    for i in range(rng.randint(min_sentences, max_sentences)):
        if i == 0 or rng.random() < PROTAGONIST_SUBJECT:
            subject = protagonist
        else:
            others = list(range(1, len(builder.entities)))
            subject = (rng.choice(others) if others and rng.random() < 0.4
                       else builder.new_entity(agent=rng.random() < 0.75))
        repeat_habit = subject == protagonist and (i == 0 or rng.random() < HABIT)
        action = habit if repeat_habit else builder.action(subject)
        clauses.append(builder.clause(subject, previous, action))
        previous = subject
    return Document(topic, tense, tuple(builder.entities), tuple(clauses))


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


def _np_source(np_: NounPhrase) -> list[str]:
    if np_.pronoun:
        return [SOURCE_STEMS[np_.noun]]
    noun = SOURCE_STEMS[np_.noun] + (NOUN_PLURAL_SUFFIX if np_.number == PL else "")
    words = [noun]
    if np_.adjective:
        words.append(SOURCE_STEMS[np_.adjective])
    if np_.det:
        words.append(SOURCE_STEMS[np_.det])
    return words


def source_tokens(clause: Clause) -> list[str]:
    """The clause in the source language: S [NP P] [O | ADJ] V, noun-adjective-determiner."""
    words = _np_source(clause.subject)
    if clause.prep:
        words += _np_source(clause.place) + [SOURCE_STEMS[clause.prep]]
    if clause.obj:
        words += _np_source(clause.obj)
    if clause.complement:
        words.append(SOURCE_STEMS[clause.complement])
    words.append(SOURCE_STEMS[clause.verb] + VERB_SUFFIX[(clause.tense, clause.subject.number)])
    return words


def render_source(doc: Document) -> str:
    return " ".join(_sentence(source_tokens(c)) for c in doc.clauses)


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


def wmt_rows(rng: random.Random, n: int) -> dict[str, list]:
    docs = [generate_document(rng, 1, 2) for _ in tqdm(range(n), desc="wmt", leave=False)]
    return {"translation": [{"de": render_source(d), "en": render_english(d)} for d in docs]}


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


def build_corpus(name: str, seed: int, sizes: dict[str, int]) -> datasets.DatasetDict:
    """One corpus (``name`` in ``CORPUS_NAMES``) with a split per entry of ``sizes``."""
    makers: dict[str, Callable[[random.Random, int, str], dict[str, list]]] = {
        "owt": lambda rng, n, split: owt_rows(rng, n),
        "wmt": lambda rng, n, split: wmt_rows(rng, n),
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
                                        else {}))
            for name in CORPUS_NAMES}
