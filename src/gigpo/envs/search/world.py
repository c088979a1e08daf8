"""A generated world of fictional entities: the offline corpus and its questions.

Everything here is made up (names built from random syllables), so a model's prior knowledge
cannot answer a question; only retrieval can. The world is a pure function of its seed.

Entities and their documents (Search-R1's corpus format: ``contents = '"Title"\\ntext'``):
    country  -- its capital
    city     -- the country it lies in, its river, its founding year
    org      -- its industry, founder (a person), founding year, headquarters city
    person   -- occupation, birth city, birth year (the country is only in the city's document,
                so "which country was X born in" needs two searches)

Questions (one per subject entity and template; ``task_type`` "single_hop" / "multi_hop"):
    single_hop: birthplace, birth_year, founder, headquarters, city_country
    multi_hop:  founder_birthplace, founder_birth_year, birth_country, headquarters_country
Each question carries ``hops``: the queries an expert issues and what each one reveals.
Train/eval are split by subject entity (20 % of subjects go to eval), so no subject is shared.
"""

from __future__ import annotations

import functools
import random
import zlib
from dataclasses import dataclass

_ONSETS = [
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "k",
    "kl",
    "l",
    "m",
    "n",
    "p",
    "qu",
    "r",
    "s",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "vr",
    "z",
    "sh",
    "h",
    "j",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "ou", "y"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "x", "nd", "rk"]
_OCCUPATIONS = [
    "painter",
    "chemist",
    "novelist",
    "architect",
    "cartographer",
    "composer",
    "engineer",
    "botanist",
    "sculptor",
    "economist",
    "astronomer",
    "physician",
]
_INDUSTRIES = [
    "shipping",
    "textile",
    "software",
    "mining",
    "publishing",
    "brewing",
    "aerospace",
    "insurance",
    "glassworks",
    "robotics",
]
_ORG_SUFFIX = [
    "Dynamics",
    "Holdings",
    "Works",
    "Guild",
    "Institute",
    "Consortium",
    "Foundry",
    "Collective",
    "Labs",
    "Trading Company",
]

EVAL_FRACTION = 0.2


@dataclass(frozen=True)
class Question:
    """One generated question; ``hops`` is ((query, revealed_answer), ...) in expert order."""

    qid: str
    question: str
    answers: tuple[str, ...]
    task_type: str
    split: str
    hops: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class World:
    """Documents (``{"id", "contents"}``) and questions generated from ``seed``."""

    seed: int
    docs: tuple[dict, ...]
    questions: tuple[Question, ...]


def _namer(rng: random.Random):
    used: set[str] = set()

    def word(n_syll: int) -> str:
        s = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(n_syll))
        return (s + rng.choice(_CODAS)).capitalize()

    def fresh(make) -> str:
        while True:
            name = make()
            # Unique across ALL entity names (case-insensitive), so a name identifies one document.
            if name.lower() not in used:
                used.add(name.lower())
                return name

    return word, fresh


def _split_of(seed: int, subject_id: str) -> str:
    # Stable per subject, independent of generation order: a crc of (seed, id).
    h = zlib.crc32(f"{seed}:{subject_id}".encode()) / 2**32
    return "eval" if h < EVAL_FRACTION else "train"


@functools.lru_cache(maxsize=4)
def generate_world(
    seed: int = 0, n_countries: int = 24, n_cities: int = 240, n_orgs: int = 400, n_people: int = 1600
) -> World:
    """Generate the world for ``seed`` (about 2,300 documents by default; well under a second)."""
    for key, val in dict(n_countries=n_countries, n_cities=n_cities, n_orgs=n_orgs, n_people=n_people).items():
        if val < 1:
            raise ValueError(f"generate_world: {key} must be >= 1, got {val}")
    rng = random.Random(seed)
    word, fresh = _namer(rng)
    docs: list[dict] = []

    def add_doc(kind: str, i: int, title: str, text: str) -> None:
        docs.append({"id": f"{kind}-{i}", "contents": f'"{title}"\n{text}'})

    countries = [fresh(lambda: word(rng.randint(2, 3))) for _ in range(n_countries)]
    cities = []
    for i in range(n_cities):
        name = fresh(lambda: word(rng.randint(2, 3)))
        cities.append(
            dict(
                name=name, country=countries[i % n_countries], year=rng.randint(900, 1850), river=fresh(lambda: word(2))
            )
        )
    capital = {c["country"]: c["name"] for c in cities[:n_countries]}
    for i, c in enumerate(countries):
        add_doc("country", i, c, f"{c} is a country. Its capital city is {capital.get(c, 'disputed')}.")
    for i, c in enumerate(cities):
        add_doc(
            "city",
            i,
            c["name"],
            f"{c['name']} is a city in the country of {c['country']}. It lies "
            f"on the {c['river']} river and was founded in {c['year']}.",
        )

    people = []
    for i in range(n_people):
        name = fresh(lambda: f"{word(rng.randint(1, 2))} {word(rng.randint(2, 3))}")
        people.append(
            dict(name=name, city=rng.choice(cities)["name"], year=rng.randint(1850, 1999), job=rng.choice(_OCCUPATIONS))
        )
        p = people[-1]
        art = "an" if p["job"][0] in "aeiou" else "a"
        add_doc(
            "person", i, name, f"{name} is {art} {p['job']}. {name} was born in {p['year']} in the city of {p['city']}."
        )
    city_country = {c["name"]: c["country"] for c in cities}
    orgs = []
    for i in range(n_orgs):
        name = fresh(lambda: f"{word(2)} {rng.choice(_ORG_SUFFIX)}")
        founder = people[rng.randrange(n_people)]
        orgs.append(
            dict(
                name=name,
                founder=founder,
                year=founder["year"] + rng.randint(20, 60),
                city=rng.choice(cities)["name"],
                industry=rng.choice(_INDUSTRIES),
            )
        )
        o = orgs[-1]
        add_doc(
            "org",
            i,
            name,
            f"{name} is {'an' if o['industry'][0] in 'aeiou' else 'a'} {o['industry']} "
            f"organisation founded in {o['year']} by "
            f"{founder['name']}. Its headquarters are in {o['city']}.",
        )

    qs: list[Question] = []

    def q(template: str, subj: str, text: str, answer: str, hops) -> None:
        qs.append(
            Question(
                f"{template}:{subj}",
                text,
                (answer,),
                "multi_hop" if len(hops) > 1 else "single_hop",
                _split_of(seed, subj),
                tuple(hops),
            )
        )

    for i, p in enumerate(people):
        s = f"person-{i}"
        born = (f"where was {p['name']} born", p["city"])
        q("birthplace", s, f"Where was {p['name']} born?", p["city"], [born])
        q(
            "birth_year",
            s,
            f"In what year was {p['name']} born?",
            str(p["year"]),
            [(f"{p['name']} birth year", str(p["year"]))],
        )
        country = city_country[p["city"]]
        q(
            "birth_country",
            s,
            f"In which country was {p['name']} born?",
            country,
            [born, (f"which country is {p['city']} in", country)],
        )
    for i, o in enumerate(orgs):
        s, f = f"org-{i}", o["founder"]
        who = (f"who founded {o['name']}", f["name"])
        q("founder", s, f"Who founded {o['name']}?", f["name"], [who])
        hq = (f"{o['name']} headquarters", o["city"])
        q("headquarters", s, f"In which city is {o['name']} headquartered?", o["city"], [hq])
        q(
            "founder_birthplace",
            s,
            f"Where was the founder of {o['name']} born?",
            f["city"],
            [who, (f"where was {f['name']} born", f["city"])],
        )
        q(
            "founder_birth_year",
            s,
            f"In what year was the founder of {o['name']} born?",
            str(f["year"]),
            [who, (f"{f['name']} birth year", str(f["year"]))],
        )
        country = city_country[o["city"]]
        q(
            "headquarters_country",
            s,
            f"In which country is {o['name']} headquartered?",
            country,
            [hq, (f"which country is {o['city']} in", country)],
        )
    for i, c in enumerate(cities):
        q(
            "city_country",
            f"city-{i}",
            f"In which country is the city of {c['name']}?",
            c["country"],
            [(f"which country is {c['name']} in", c["country"])],
        )
    return World(seed, tuple(docs), tuple(qs))
