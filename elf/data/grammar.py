"""The grammar of the embedded corpora (``elf.data.corpora`` renders and assembles them): the lexicon,
a document's structure (entities, noun phrases, clauses) and its generation.

``generate_document(rng)`` draws one ``Document``: a topic biasing which words its sentences use, a
tense kept throughout, a protagonist with a habitual action, entities introduced indefinitely and then
referred to definitely or by pronoun; subject and verb agree in number, determiners with their noun.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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
