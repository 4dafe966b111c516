"""Biographies generated here, offline, in the schema of the hub's Bias in Bios.

Bias in Bios (:mod:`circuitlasso.data.bias_in_bios`) lives on the Hugging Face hub. This module
writes short third-person biographies of six professions in three pairs (:data:`PAIRS`: the
paper's professor / nurse, surgeon / dietitian, software engineer / paralegal), seeded, as the
rows of the hub's splits (``hard_text``, ``profession`` and ``gender`` ids of its dataset card).
:func:`load_synthetic_bios` then builds the ambiguous and balanced sets from them with the hub
loader's own construction (:func:`~circuitlasso.data.bias_in_bios.build_sets`): the two paths
differ only in where the rows come from.

A biography is a sequence of sentence frames, each filled from word lists:

- an introduction (the full name and a workplace),
- one or two duties, a topic the person works on, a hobby and, in one of two biographies, a
  home and family.

Gender is carried by the first name and the pronouns (he / his / him, she / her / her).
Profession is carried by the workplace, the duties and the topics; like the hub's
``hard_text``, which leaves out the sentence that states the title, no frame names the
profession itself. The frames, their number and their order (the biography's *template*) are
drawn independently of the profession and the gender, so that no template is a shortcut: a
test fits a probe on the template alone and finds it near chance. Everything else (names,
years, hobbies, cities, families) is drawn from lists that every profession shares; no last name
is a first name.

Each split has its own stream of a string-seeded ``random.Random`` (``synthetic-bios/{split}/
{seed}``), the same on every machine; :data:`SHA256` is the digest of each split at seed 0
(:func:`digest`), which a test checks.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import pandas as pd

from circuitlasso.data.bias_in_bios import GENDERS, PROFESSIONS, build_sets, check_request

PAIRS = (("professor", "nurse"), ("surgeon", "dietitian"), ("software_engineer", "paralegal"))
"""The profession pairs ``(a, b)``: the ambiguous sets pair a with men and b with women."""
PER_GROUP = {"train": 600, "dev": 150, "test": 300}
"""Biographies of each (profession, gender) group in each split."""
SHA256 = {
    "train": "2780c4271c7f85dffe5efc4c259fe68fcee8d6808488e826d4f52d197765622e",
    "dev": "366b418bee54ac8ea315ff6f9b4f91e1a33bd6fdb998ad5f2a153cfd54956835",
    "test": "0193961bd5f3d37036650a3eea5cf4943b9bc14bff8a91d47601b23c4aa0e94e",
}
"""sha256 of each split at seed 0 (:func:`digest`)."""

CUES: dict[str, dict[str, tuple[str, ...]]] = {
    "professor": {
        "places": (
            "the University of Michigan",
            "the department of history at Yale",
            "a small liberal arts college",
            "the school of engineering at Purdue",
            "the faculty of economics at the University of Toronto",
            "the institute for advanced study at Princeton",
        ),
        "duties": (
            "teaches undergraduate courses in organic chemistry",
            "supervises doctoral students writing their dissertations",
            "lectures on medieval European history to large classes",
            "runs a research group funded by the national science foundation",
            "serves on the editorial board of two academic journals",
            "advises graduate students on their thesis research",
            "publishes papers in peer-reviewed journals every year",
            "chairs the curriculum committee of the department",
        ),
        "topics": (
            "the economics of labor markets",
            "early modern political philosophy",
            "computational models of language acquisition",
            "the history of science",
            "comparative literature and translation",
            "sustainable materials design",
        ),
    },
    "nurse": {
        "places": (
            "the emergency department of St. Mary's Hospital",
            "the intensive care unit at Mercy Medical Center",
            "a pediatric clinic",
            "the cardiac ward of the county hospital",
            "a home health agency",
            "the maternity ward at General Hospital",
        ),
        "duties": (
            "administers medication to patients on the night shift",
            "monitors the vital signs of patients recovering from surgery",
            "dresses wounds and changes bandages on the ward",
            "works twelve-hour shifts caring for critically ill patients",
            "educates families on how to care for patients at home",
            "draws blood and starts intravenous lines for new admissions",
            "coordinates patient care with doctors and therapists",
            "triages patients who arrive at the emergency room",
        ),
        "topics": (
            "pain management for elderly patients",
            "infection control on hospital wards",
            "neonatal care",
            "wound healing and patient comfort",
            "palliative care for families",
            "patient safety during night shifts",
        ),
    },
    "surgeon": {
        "places": (
            "the department of surgery at Johns Hopkins Hospital",
            "a trauma center in Chicago",
            "the orthopedic unit of a regional hospital",
            "the transplant center at the Mayo Clinic",
            "a cardiothoracic practice",
            "the operating theatres of University Hospital",
        ),
        "duties": (
            "performs minimally invasive operations on the abdomen",
            "repairs fractured bones and replaces damaged joints",
            "leads the operating team during organ transplants",
            "operates on patients with congenital heart defects",
            "trains residents in laparoscopic techniques in the operating room",
            "removes tumors and reconstructs the tissue around them",
            "is on call for emergency operations at the trauma center",
            "reviews scans with radiologists before each operation",
        ),
        "topics": (
            "robotic surgery",
            "outcomes of knee replacement",
            "spinal reconstruction",
            "surgical techniques for heart valve repair",
            "trauma care after accidents",
            "recovery after abdominal surgery",
        ),
    },
    "dietitian": {
        "places": (
            "a weight management clinic",
            "the nutrition service of a children's hospital",
            "a community health center",
            "a sports performance institute",
            "the diabetes program at a regional clinic",
            "a school meals program",
        ),
        "duties": (
            "designs meal plans for clients with diabetes",
            "counsels patients on healthy eating and portion sizes",
            "assesses the nutritional needs of athletes in training",
            "plans menus that meet the dietary needs of schoolchildren",
            "helps clients with food allergies find balanced diets",
            "runs workshops on nutrition and healthy cooking",
            "tracks the calorie and protein intake of patients",
            "advises families on feeding young children a balanced diet",
        ),
        "topics": (
            "plant-based diets",
            "nutrition during pregnancy",
            "gut health and fiber",
            "eating habits of teenagers",
            "sports nutrition and hydration",
            "low-sodium diets for heart health",
        ),
    },
    "software_engineer": {
        "places": (
            "a cloud computing company in Seattle",
            "a fintech startup in London",
            "the infrastructure team of a large search company",
            "a video game studio",
            "a company that builds mobile apps",
            "the data platform group of a retailer",
        ),
        "duties": (
            "writes backend services in Go and Python",
            "reviews code and maintains the continuous integration pipeline",
            "designs distributed systems that process billions of requests",
            "builds user interfaces for web applications in TypeScript",
            "debugs performance problems in large databases",
            "develops machine learning pipelines that run in production",
            "maintains open source libraries used by thousands of developers",
            "ships new features for the company's mobile app every week",
        ),
        "topics": (
            "compilers and programming languages",
            "scalable database systems",
            "computer security and cryptography",
            "developer tooling",
            "real-time graphics engines",
            "reliability of cloud services",
        ),
    },
    "paralegal": {
        "places": (
            "a corporate law firm in New York",
            "the legal department of an insurer",
            "a family law practice",
            "the district attorney's office",
            "an immigration law firm",
            "a real estate law office",
        ),
        "duties": (
            "drafts contracts and prepares documents for closings",
            "researches case law and summarizes court opinions for attorneys",
            "organizes exhibits and files motions before trial",
            "interviews clients and witnesses to prepare case files",
            "manages discovery documents in complex litigation",
            "prepares filings for immigration hearings",
            "schedules depositions and keeps track of court deadlines",
            "assists attorneys during trials and settlement negotiations",
        ),
        "topics": (
            "contract law",
            "immigration procedures",
            "estate planning documents",
            "litigation support software",
            "intellectual property filings",
            "landlord and tenant disputes",
        ),
    },
}
"""Each profession's workplaces, duties (a verb phrase in the third person) and topics."""

FIRST_NAMES = {
    "male": ("James", "John", "Robert", "Michael", "William", "David", "Richard", "Joseph",
             "Thomas", "Charles", "Daniel", "Matthew", "Anthony", "Mark", "Paul", "Steven",
             "Andrew", "Kevin", "Brian", "George", "Edward", "Ryan", "Jason", "Eric", "Peter",
             "Henry", "Samuel", "Adam", "Nathan", "Simon"),
    "female": ("Mary", "Patricia", "Jennifer", "Linda", "Elizabeth", "Barbara", "Susan",
               "Jessica", "Sarah", "Karen", "Nancy", "Lisa", "Margaret", "Sandra", "Ashley",
               "Emily", "Donna", "Michelle", "Laura", "Rebecca", "Sharon", "Cynthia", "Amy",
               "Anna", "Helen", "Emma", "Olivia", "Rachel", "Julia", "Grace"),
}  # fmt: skip
LAST_NAMES = ("Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis",
              "Wilson", "Anderson", "Taylor", "Nelson", "Moore", "Martin", "Jackson", "Thompson",
              "White", "Harris", "Clark", "Lewis", "Walker", "Hall", "Young", "King", "Wright",
              "Lopez", "Hill", "Scott", "Green", "Baker")  # fmt: skip
PRONOUNS = {
    "male": {"he": "he", "He": "He", "his": "his", "His": "His", "him": "him"},
    "female": {"he": "she", "He": "She", "his": "her", "His": "Her", "him": "her"},
}
HOBBIES = ("hiking", "reading novels", "playing the piano", "gardening", "cooking for friends",
           "running marathons", "painting landscapes", "birdwatching", "playing chess",
           "sailing", "photography", "volunteering at the local library")  # fmt: skip
CITIES = ("Boston", "Denver", "Portland", "Austin", "Chicago", "Atlanta", "Minneapolis",
          "San Diego", "Philadelphia", "Pittsburgh")  # fmt: skip
FAMILY = ("partner", "two children", "family", "dog", "two cats")

INTRODUCTIONS = (
    "{name} works at {place}.",
    "{name} has been with {place} since {year}.",
    "Based at {place}, {name} has over {n} years of experience.",
    "{name} joined {place} in {year}.",
    "For the past {n} years, {name} has worked at {place}.",
)
DUTIES = (
    "{He} {duty}.",
    "Most days, {he} {duty}.",
    "These days {he} mainly {duty}.",
    "Colleagues describe {him} as someone who {duty}.",
    "In {his} current role, {he} {duty}.",
)
TOPICS = (
    "{His} main interest is {topic}.",
    "{He} has written several articles about {topic}.",
    "In {year}, {he} received an award for {his} work on {topic}.",
    "{He} is particularly interested in {topic}.",
)
HOBBY_FRAMES = (
    "Outside work, {he} enjoys {hobby}.",
    "In {his} free time, {he} likes {hobby}.",
    "{He} spends {his} weekends {hobby}.",
)
HOMES = (
    "{He} lives in {city} with {his} {family}.",
    "{He} and {his} {family} live in {city}.",
)


def template(rng: random.Random) -> tuple[int, ...]:
    """A biography's frames, drawn with no regard to profession or gender: (introduction,
    first duty, a different second duty or -1, topic, hobby, home or -1, whether the topic
    comes before the duties)."""
    first, second = rng.sample(range(len(DUTIES)), 2)
    return (
        rng.randrange(len(INTRODUCTIONS)),
        first,
        second if rng.random() < 0.5 else -1,
        rng.randrange(len(TOPICS)),
        rng.randrange(len(HOBBY_FRAMES)),
        rng.randrange(len(HOMES)) if rng.random() < 0.5 else -1,
        int(rng.random() < 0.3),
    )


def _pair_of(profession: str) -> tuple[str, str]:
    return next(pair for pair in PAIRS if profession in pair)


def biography(
    rng: random.Random,
    profession: str,
    gender: str,
    frames: Sequence[int],
    profession_signal: float = 1.0,
) -> str:
    """One biography of ``profession`` and ``gender`` on the frames of :func:`template`. Each of
    its profession cues (the workplace, each duty, the topic) is the profession's own with
    probability ``profession_signal``, else drawn from either profession of its pair (below 1,
    the profession is a weaker signal than the gender; 1 draws no extra number); its two duties
    always differ."""
    words = PRONOUNS[gender]
    intro, first, second, topic, hobby, home, topic_first = frames

    def cues() -> dict[str, tuple[str, ...]]:
        if profession_signal >= 1.0 or rng.random() < profession_signal:
            return CUES[profession]
        return CUES[rng.choice(_pair_of(profession))]

    if profession_signal >= 1.0:
        duties = rng.sample(CUES[profession]["duties"], 2)
    else:
        duties = []
        while len(duties) < 2:  # two different duties, as at signal 1
            duty = rng.choice(cues()["duties"])
            if duty not in duties:
                duties.append(duty)
    fill = {
        **words,
        "name": f"{rng.choice(FIRST_NAMES[gender])} {rng.choice(LAST_NAMES)}",
        "place": rng.choice(cues()["places"]),
        "topic": rng.choice(cues()["topics"]),
        "hobby": rng.choice(HOBBIES),
        "city": rng.choice(CITIES),
        "family": rng.choice(FAMILY),
        "year": rng.randrange(1995, 2024),
        "n": rng.randrange(3, 30),
    }
    work = [DUTIES[first].format(**fill, duty=duties[0])]
    if second >= 0:
        work.append(DUTIES[second].format(**fill, duty=duties[1]))
    about = [TOPICS[topic].format(**fill)]
    body = about + work if topic_first else work + about
    sentences = [INTRODUCTIONS[intro].format(**fill), *body, HOBBY_FRAMES[hobby].format(**fill)]
    if home >= 0:
        sentences.append(HOMES[home].format(**fill))
    return " ".join(sentences)


def generate_split(
    split: str, seed: int = 0, per_group: int | None = None, profession_signal: float = 1.0
) -> pd.DataFrame:
    """``split`` (``train``, ``dev`` or ``test``) as the hub's rows: ``per_group`` biographies
    (default :data:`PER_GROUP`) of each profession of :data:`PAIRS` and each gender, in group
    order, with ``hard_text``, ``profession`` (id) and ``gender`` (id, 0 male), and
    ``template`` (the frames, for checks)."""
    if split not in PER_GROUP:
        raise ValueError(f"split must be one of {list(PER_GROUP)}, got {split!r}")
    n = PER_GROUP[split] if per_group is None else per_group
    if n < 1:
        raise ValueError(f"per_group must be at least 1, got {n}")
    rng = random.Random(f"synthetic-bios/{split}/{seed}")
    rows = []
    for profession in (p for pair in PAIRS for p in pair):
        for gender in GENDERS:
            for _ in range(n):
                frames = template(rng)
                rows.append({
                    "hard_text": biography(rng, profession, gender, frames, profession_signal),
                    "profession": PROFESSIONS.index(profession),
                    "gender": GENDERS.index(gender),
                    "template": frames,
                })  # fmt: skip
    return pd.DataFrame(rows)


def digest(frame: pd.DataFrame) -> str:
    """sha256 of a split's rows (text, profession, gender), one tab-separated line each."""
    columns = (frame["hard_text"], frame["profession"], frame["gender"])
    lines = (f"{t}\t{p}\t{g}\n" for t, p, g in zip(*columns, strict=True))
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def load_synthetic_bios(
    professions: tuple[str, str] = ("professor", "nurse"),
    *,
    split: str = "train",
    seed: int = 0,
    per_group: int | None = None,
    profession_signal: float = 1.0,
) -> dict[str, pd.DataFrame]:
    """The ambiguous and balanced sets of
    :func:`~circuitlasso.data.bias_in_bios.load_bias_in_bios`, built by its construction
    (:func:`~circuitlasso.data.bias_in_bios.build_sets`) from generated rows: training sets from
    ``split`` (``train`` or ``dev``), test sets from ``test``; ``professions`` one of
    :data:`PAIRS`. ``per_group``: biographies per group in each split (default
    :data:`PER_GROUP`); ``profession_signal``: the chance that a profession cue is the
    profession's own (:func:`biography`), in (0, 1]."""
    if not 0 < profession_signal <= 1:
        raise ValueError(f"profession_signal must be in (0, 1], got {profession_signal}")
    check_request(professions, split)
    if tuple(professions) not in PAIRS:
        raise ValueError(f"professions must be one of the generated pairs {PAIRS}, got "
                         f"{tuple(professions)}")  # fmt: skip
    train = generate_split(split, seed, per_group, profession_signal)
    test = generate_split("test", seed, per_group, profession_signal)
    return build_sets(train, test, professions, split=split, seed=seed)
