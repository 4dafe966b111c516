"""Toy biographies (the toy Bias in Bios): the profession told by content words, the gender by
the name and pronouns, each cue's strength set by ``BiographyCues``.
"""

from __future__ import annotations

from dataclasses import dataclass

from circuitlasso.data.toyworld.lexicon import CITIES, FEMALE_NAMES, MALE_NAMES, Rng, pick, render

PROFESSIONS = ("professor", "nurse")
GENDERS = ("male", "female")
FIELDS = (
    "history", "physics", "chemistry", "economics", "biology", "philosophy", "linguistics",
    "mathematics", "astronomy", "geology", "sociology", "psychology", "literature", "statistics",
    "anthropology",
)  # fmt: skip
WARDS = (
    "surgical",
    "maternity",
    "cancer",
    "emergency",
    "pediatric",
    "cardiac",
    "geriatric",
    "burns",
)
PROFESSOR_WORDS = (
    "university", "lectures", "undergraduate", "research", "journals", "doctoral", "grant",
    "papers", "books", "seminar", "semester", "faculty", "thesis", "campus", "tenure",
)  # fmt: skip
NURSE_WORDS = (
    "hospital", "ward", "patients", "surgery", "medication", "vital", "signs", "shifts",
    "night", "nursing", "wounds", "infections", "care", "cares", "bandages", "injections",
)  # fmt: skip
HOBBIES = (
    "hiking", "reading", "cooking", "gardening", "painting", "music", "running", "chess",
    "swimming", "cycling", "fishing", "knitting", "dancing", "photography", "climbing", "baking",
)  # fmt: skip

_BIO_OPENINGS = {
    "professor": ("{name} teaches {field} at the university of {city} .",),
    "nurse": ("{name} works on the {ward} ward of a hospital in {city} .",),
}
_BIO_PLAIN_OPENING = "{name} lives in {city} ."  # names the person, not the profession
_BIO_SENTENCES = {
    "professor": (
        "{he} gives lectures on {field} to undergraduate students .",
        "{his} research on {field} appears in leading journals .",
        "{he} supervises doctoral students in the department of {field} .",
        "{he} received a grant to study the history of {field} .",
        "{he} has published many papers and two books .",
        "{he} runs a seminar on {field} every semester .",
        "{he} joined the faculty after finishing {his} thesis .",
        "{he} was granted tenure at a campus in {city} .",
    ),
    "nurse": (
        "{he} cares for patients after surgery .",
        "{he} gives medication and checks the vital signs of patients .",
        "{he} works night shifts in the emergency department .",
        "{his} patients trust {him} with their care .",
        "{he} trained at a nursing school in {city} .",
        "{he} helps doctors treat wounds and infections .",
        "{he} teaches nursing students on the ward .",
        "{he} changes bandages and gives injections .",
    ),
}
_BIO_NEUTRAL = (
    "{he} lives in {city} with {his} family .",
    "in {his} free time {he} enjoys {hobby} .",
    "{he} has two children and a dog .",
    "{he} likes {hobby} and {hobby2} .",
    "{his} friends say that {he} is kind and calm .",
)
_PRONOUNS = {
    "male": {"he": "he", "his": "his", "him": "him"},
    "female": {"he": "she", "his": "her", "him": "her"},
}
# A biography that does not tell the gender: "the author teaches ... their research ...".
_UNTOLD = {"name": "the author", "he": "the author", "his": "their", "him": "them"}


@dataclass(frozen=True)
class BiographyCues:
    """How strongly a biography tells its profession and its gender: a share
    ``profession_openings`` of biographies open with the profession ("... teaches physics at the
    university ...", the rest with where the person lives), then come ``profession_sentences``
    profession sentences and ``gender_sentences`` sentences about the person's life, which tell
    the gender (pronouns) but not the profession. A share ``gender_told`` of biographies tell the
    gender (a name and pronouns), the rest speak of "the author" and "their". The default is the
    standard biography."""

    profession_openings: float = 1.0
    profession_sentences: int = 2
    gender_sentences: int = 1
    gender_told: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.profession_openings <= 1.0:
            raise ValueError(
                f"profession_openings must lie in [0, 1], got {self.profession_openings}"
            )
        if not 0.0 <= self.gender_told <= 1.0:
            raise ValueError(f"gender_told must lie in [0, 1], got {self.gender_told}")
        most = min(len(pool) for pool in _BIO_SENTENCES.values())
        if not 0 <= self.profession_sentences <= most:
            raise ValueError(
                f"profession_sentences must lie in 0..{most}, got {self.profession_sentences}"
            )
        if not 1 <= self.gender_sentences <= len(_BIO_NEUTRAL):
            raise ValueError(
                f"gender_sentences must lie in 1..{len(_BIO_NEUTRAL)}, got {self.gender_sentences}"
            )


STANDARD_CUES = BiographyCues()  # the standard biography, as the toy world's LM read it


def biography(rng: Rng, profession: str, gender: str, cues: BiographyCues = STANDARD_CUES) -> str:
    """A rendered biography: an opening and, in random order, the profession and gender
    sentences of ``cues`` (the default: a profession opening, two profession sentences and one
    about the person's life)."""
    if profession not in PROFESSIONS:
        raise ValueError(f"unknown profession {profession!r}; expected one of {PROFESSIONS}")
    if gender not in GENDERS:
        raise ValueError(f"unknown gender {gender!r}; expected one of {GENDERS}")
    names = MALE_NAMES if gender == "male" else FEMALE_NAMES
    hobbies = rng.permutation(len(HOBBIES))[:2]
    slots = {
        "name": pick(rng, names),
        "city": pick(rng, CITIES),
        "field": pick(rng, FIELDS),
        "ward": pick(rng, WARDS),
        "hobby": HOBBIES[hobbies[0]],
        "hobby2": HOBBIES[hobbies[1]],
        **_PRONOUNS[gender],
    }
    pool = _BIO_SENTENCES[profession]
    body = [pool[i] for i in rng.permutation(len(pool))[: cues.profession_sentences]]
    life = [pick(rng, _BIO_NEUTRAL)]  # draws as the standard biography does, then any others
    if cues.gender_sentences > 1:
        rest = [t for t in _BIO_NEUTRAL if t != life[0]]
        life += [rest[i] for i in rng.permutation(len(rest))[: cues.gender_sentences - 1]]
    body += life
    opening = pick(rng, _BIO_OPENINGS[profession])
    if cues.profession_openings < 1.0 and rng.random() >= cues.profession_openings:
        opening = _BIO_PLAIN_OPENING
    if cues.gender_told < 1.0 and rng.random() >= cues.gender_told:
        slots.update(_UNTOLD)
    templates = [opening] + [body[i] for i in rng.permutation(len(body))]
    return " ".join(render(t.format(**slots).split()) for t in templates)


def biography_words() -> set[str]:
    """Every word :func:`biography` can emit."""
    words = set(MALE_NAMES + FEMALE_NAMES + CITIES + FIELDS + WARDS + HOBBIES)
    words |= {p for row in _PRONOUNS.values() for p in row.values()}
    templates = (*_BIO_NEUTRAL, _BIO_PLAIN_OPENING) + tuple(
        t for table in (_BIO_OPENINGS, _BIO_SENTENCES) for ts in table.values() for t in ts
    )
    return words | {w for t in templates for w in t.split() if not w.startswith("{")}
