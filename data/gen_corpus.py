#!/usr/bin/env python3
"""Writes data/corpus.txt: English-like text about an invented country.

The text is generated from scratch (no outside text) by a small probabilistic
grammar over a fixed, invented world, so that a byte-level model has something
to learn at several scales:

  bytes and words   a limited vocabulary, English spelling and punctuation;
  sentences         templates with optional clauses, pronouns that agree;
  paragraphs        one topic each (a person, a place, a journey, a lesson, a
                    ledger, a chronicle, a conversation, a tale), kept consistent;
  the whole corpus  recurring people and places whose facts never change (where
                    someone was born, how far apart two towns are, what salt
                    costs in a market), dates and ages that agree, and arithmetic
                    that is always right ("seven plus five is twelve").

It uses only the Python standard library and its own random generator
(SplitMix64), so the same seed gives the same bytes on every Python 3.

    python3 data/gen_corpus.py                  # writes data/corpus.txt
    python3 data/gen_corpus.py --size 500000 --seed 7 --out /tmp/small.txt
"""
import argparse
import hashlib
import math
import os
import sys

from splitmix import SplitMix64  # data/splitmix.py, next to this script


class Rng(SplitMix64):
    """SplitMix64 plus the weighted choices the grammar needs."""

    def between(self, lo, hi):
        """Uniform integer in [lo, hi]."""
        return lo + self.below(hi - lo + 1)

    def chance(self, p):
        return (self.u64() >> 11) * (1.0 / (1 << 53)) < p

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def weighted(self, pairs):
        """pairs: [(weight, value)] with integer weights."""
        total = sum(w for w, _ in pairs)
        r = self.below(total)
        for w, v in pairs:
            if r < w:
                return v
            r -= w
        raise AssertionError("unreachable")

    def sample(self, seq, k):
        pool = list(seq)
        for i in range(k):
            j = i + self.below(len(pool) - i)
            pool[i], pool[j] = pool[j], pool[i]
        return pool[:k]


# ---------------------------------------------------------------------------
# Numbers, dates and small words.

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n):
    """0..9999 in words, British style: 'one hundred and five'."""
    assert 0 <= n < 10000
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else "")
    if n < 1000:
        head = ONES[n // 100] + " hundred"
        return head + (" and " + words(n % 100) if n % 100 else "")
    head = words(n // 1000) + " thousand"
    rest = n % 1000
    if rest == 0:
        return head
    return head + (" and " if rest < 100 else " ") + words(rest)


def a_an(s):
    return ("an " if s[0] in "aeiou" else "a ") + s


def plural(s):
    return s + ("es" if s.endswith("x") else "s")


def cap(s):
    return s[0].upper() + s[1:]


def ordinal(n):
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "%d%s" % (n, suffix)


def grouped(n):
    """4312 -> '4,312'."""
    return "{:,}".format(n)


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
SEASON = ["winter", "winter", "spring", "spring", "spring", "summer", "summer", "summer",
          "autumn", "autumn", "autumn", "winter"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def month_days(month, year):
    if month == 1:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month]


class Date:
    def __init__(self, day, month, year):
        self.day, self.month, self.year = day, month, year

    def text(self):
        return "%s of %s %d" % (ordinal(self.day), MONTHS[self.month], self.year)


def random_date(rng, lo_year, hi_year):
    year = rng.between(lo_year, hi_year)
    month = rng.below(12)
    return Date(rng.between(1, month_days(month, year)), month, year)


# ---------------------------------------------------------------------------
# The invented world: names, places, people. Built once from the seed.

ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r",
          "s", "st", "t", "th", "v", "w", "sk", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "st"]
PLACE_ENDS = ["ford", "wick", "holm", "mere", "by", "ton", "stead", "moor", "dale",
              "haven", "bridge", "well"]
FEMALE_ENDS = ["a", "ine", "elle", "ia", "eth", "wyn"]
MALE_ENDS = ["o", "an", "er", "ric", "us", "ald"]

OCCUPATIONS = ["baker", "weaver", "miller", "smith", "carpenter", "fisher", "potter",
               "shepherd", "clockmaker", "ferryman", "teacher", "brewer", "cooper",
               "mason", "tailor", "saddler", "glassblower", "candlemaker", "boatbuilder",
               "rope maker", "beekeeper", "miner", "woodcutter", "innkeeper"]
COLOURS = ["red", "blue", "green", "yellow", "grey", "white", "black", "brown", "orange",
           "purple"]
# (good, unit, plural unit, what the people who make it do, base price in pence)
GOODS = [("salt", "sack", "sacks", "dry salt by the sea", 9),
         ("wool", "bale", "bales", "keep sheep", 14),
         ("apples", "basket", "baskets", "grow apples", 4),
         ("flour", "sack", "sacks", "grow wheat and grind it", 7),
         ("copper", "bar", "bars", "mine copper", 21),
         ("cheese", "wheel", "wheels", "keep cows", 12),
         ("candles", "box", "boxes", "make candles", 6),
         ("rope", "coil", "coils", "make rope", 8),
         ("cloth", "bolt", "bolts", "weave cloth", 17),
         ("honey", "jar", "jars", "keep bees", 5),
         ("fish", "barrel", "barrels", "catch fish", 11),
         ("timber", "cart", "carts", "cut timber", 19)]
TRAITS = ["tall", "short", "quiet", "cheerful", "stubborn", "patient", "clever", "kind",
          "careful", "restless", "proud", "generous", "shy", "brave"]
MATERIALS = ["grey stone", "red brick", "timber", "white stone", "flint", "yellow brick"]
# Words for the story grammar.
OBJECTS = ["lantern", "old coin", "brass key", "letter", "small boat", "wooden box", "map",
           "silver ring", "broken clock", "bundle of papers", "lost lamb", "basket of eggs"]
FOUND_AT = ["by the river %(river)s", "under the %(building)s", "on the road to %(near)s",
            "behind the market hall", "in the long grass near %(near)s",
            "at the edge of the woods", "in a ditch outside %(home)s"]
TIMES = ["One morning in %(season)s", "Early one %(season)s evening",
         "On a cold day in %(season)s", "Late one night in %(season)s",
         "One %(day)s in %(season)s", "Just before dawn one %(season)s day"]
REACTIONS = ["%(P)s did not know what to do with it", "%(P)s was surprised",
             "%(P)s laughed", "%(P)s put it in %(pos)s pocket",
             "%(P)s looked around, but nobody was there",
             "%(P)s sat down to think"]
ASKS = ["%(P)s took it to %(friend)s, who said it was very old.",
        "%(P)s showed it to %(friend)s, who had never seen anything like it.",
        "%(P)s asked %(friend)s what it was, but %(friend_she)s could not say.",
        "%(P)s carried it all the way to %(near)s and back.",
        "%(P)s gave it to the %(occ)s of %(home)s for safe keeping."]
ENDINGS = ["In the end %(p)s kept it for the rest of %(pos)s life.",
           "Nobody ever learned where it came from.",
           "A week later it was gone, and %(p)s never saw it again.",
           "Years later %(p)s still told the story to anyone who would listen.",
           "After that %(p)s walked that way every %(day)s.",
           "%(P)s wrote it all down in a little book."]
BUILDINGS = ["bridge", "mill", "chapel", "tower", "inn", "school", "market hall",
             "lighthouse", "granary", "town hall"]
DIRECTIONS = ["east", "north-east", "north", "north-west", "west", "south-west", "south",
              "south-east"]
EVENTS = ["the river flooded the lower streets", "a great fire burned the market",
          "a new bridge was opened", "the harvest failed", "the old mill was rebuilt",
          "a fair was held for the first time", "the winter was so cold that the river froze",
          "a school was opened", "the road to the coast was paved",
          "a bell was hung in the tower"]


def syllable(rng):
    return rng.pick(ONSETS) + rng.pick(VOWELS) + rng.pick(CODAS)


def fresh_name(rng, used, make):
    while True:
        name = make()
        if name not in used and 3 <= len(name) <= 12:
            used.add(name)
            return name


class Place:
    pass


class Person:
    pass


class World:
    def __init__(self, rng, n_regions=5, n_rivers=14, n_places=40, n_families=45):
        used = set()
        self.regions = [fresh_name(rng, used, lambda: cap(syllable(rng) + syllable(rng)))
                        for _ in range(n_regions)]
        self.rivers = [fresh_name(rng, used, lambda: cap(syllable(rng) + rng.pick(["", "e", "a"])))
                       for _ in range(n_rivers)]
        self.places = []
        for i in range(n_places):
            p = Place()
            p.name = fresh_name(rng, used,
                                lambda: cap(syllable(rng) + rng.pick(PLACE_ENDS)))
            p.region = self.regions[i % n_regions]
            p.river = rng.pick(self.rivers)
            p.bank = rng.pick(["left", "right"])
            p.x, p.y = rng.below(200), rng.below(200)
            p.population = rng.pick([rng.between(80, 900), rng.between(1000, 9000),
                                     rng.between(1000, 9000), rng.between(10000, 60000)])
            p.kind = ("village" if p.population < 1000 else
                      "town" if p.population < 10000 else "city")
            p.founded = rng.between(900, 1500)
            p.good = rng.pick(GOODS)
            p.market_day = rng.pick(WEEKDAYS)
            p.building = rng.pick(BUILDINGS)
            p.built = rng.between(p.founded + 10, 1790)
            p.price_shift = rng.between(-3, 3)
            p.material = rng.pick(MATERIALS)
            p.streets = rng.pick(["narrow", "wide", "steep", "crooked", "quiet", "busy"])
            self.places.append(p)
        for p in self.places:
            near = sorted((q for q in self.places if q is not p),
                          key=lambda q: self.distance(p, q))
            p.neighbours = near[:4]
        self.people = []
        for _ in range(n_families):
            surname = fresh_name(rng, used, lambda: cap(syllable(rng) + syllable(rng)))
            home = rng.pick(self.places)
            family = []
            for _ in range(rng.between(1, 4)):
                h = Person()
                h.female = rng.chance(0.5)
                end = FEMALE_ENDS if h.female else MALE_ENDS
                h.first = fresh_name(rng, used, lambda: cap(syllable(rng) + rng.pick(end)))
                h.last = surname
                h.name = h.first + " " + surname
                h.home = home
                h.born = random_date(rng, 1790, 1850)
                h.occupation = rng.pick(OCCUPATIONS)
                h.colour = rng.pick(COLOURS)
                h.traits = rng.sample(TRAITS, 2)
                h.moved_age = rng.between(16, 40)
                h.moved_to = rng.pick(home.neighbours)
                family.append(h)
            for h in family:
                h.family = [o for o in family if o is not h]
            self.people.extend(family)
        for h in self.people:
            h.friend = rng.pick([o for o in self.people if o is not h and o.last != h.last])

    @staticmethod
    def distance(a, b):
        # Whole miles, symmetric, at least 3: the roads are not straight.
        dx, dy = a.x - b.x, a.y - b.y
        return max(3, int(round((dx * dx + dy * dy) ** 0.5 * 0.6)))

    @staticmethod
    def direction(frm, to):
        """Compass direction of `to` seen from `frm` (y grows to the north)."""
        angle = math.degrees(math.atan2(to.y - frm.y, to.x - frm.x)) % 360
        return DIRECTIONS[int((angle + 22.5) // 45) % 8]

    @staticmethod
    def price(place, good):
        return max(2, good[4] + place.price_shift)


# ---------------------------------------------------------------------------
# Pronouns and paragraph generators. Each returns one paragraph (no blank lines).

def she(h):
    return "she" if h.female else "he"


def her(h):
    return "her" if h.female else "his"


def herobj(h):
    return "her" if h.female else "him"


def relation(h, o):
    if o.born.year < h.born.year - 18:
        return "mother" if o.female else "father"
    return "sister" if o.female else "brother"


def person_paragraph(rng, w):
    h = rng.pick(w.people)
    S = []
    if rng.chance(0.5):
        S.append("%s was born in %s on the %s." % (h.name, h.home.name, h.born.text()))
    else:
        S.append("%s was born on the %s in %s, a %s on the river %s." %
                 (h.name, h.born.text(), h.home.name, h.home.kind, h.home.river))
    options = []
    options.append(rng.pick([
        "%s worked as %s." % (cap(she(h)), a_an(h.occupation)),
        "By trade %s was %s." % (she(h), a_an(h.occupation)),
        "%s became %s, as many people in %s did." % (cap(she(h)), a_an(h.occupation), h.home.name),
    ]))
    options.append("%s favourite colour was %s." % (cap(her(h)), h.colour))
    options.append(rng.pick([
        "%s was %s and %s." % (cap(she(h)), h.traits[0], h.traits[1]),
        "Everyone in %s knew that %s was %s." % (h.home.name, h.first, h.traits[0]),
        "%s friends said %s was %s, and sometimes %s." % (cap(her(h)), she(h), h.traits[0],
                                                         h.traits[1]),
    ]))
    for o in h.family[:2]:
        options.append(rng.pick([
            "%s %s was %s." % (cap(her(h)), relation(h, o), o.name),
            "%s had a %s called %s." % (cap(she(h)), relation(h, o), o.first),
        ]))
    f = h.friend
    options.append("%s often went to %s to see %s friend %s, who was %s." %
                   (cap(she(h)), f.home.name, her(h), f.name, a_an(f.occupation)))
    year = h.born.year + h.moved_age
    options.append("In %d, when %s was %s years old, %s moved to %s, %s miles %s of %s." %
                   (year, she(h), words(h.moved_age), she(h), h.moved_to.name,
                    words(w.distance(h.home, h.moved_to)),
                    w.direction(h.home, h.moved_to), h.home.name))
    options.append("%s market is held every %s, and %s went there each week to buy %s." %
                   (h.home.name + "'s", h.home.market_day, she(h), h.home.good[0]))
    S.extend(with_opener(rng, x) for x in rng.sample(options, rng.between(2, min(5, len(options)))))
    if rng.chance(0.3):
        S.append("People in %s still remember %s." % (h.home.name, herobj(h)))
    return " ".join(S)


def with_opener(rng, s):
    """Sometimes joins a sentence to the one before with a time word."""
    if not s.startswith(("She ", "He ")) or not rng.chance(0.3):
        return s
    o = rng.pick(["Later, ", "After that, ", "In time, ", "Soon "])
    return o + s[0].lower() + s[1:]


def place_paragraph(rng, w):
    p = rng.pick(w.places)
    S = ["%s is a %s in %s, on the %s bank of the river %s." %
         (p.name, p.kind, p.region, p.bank, p.river)]
    options = [
        rng.pick(["It was founded in %d." % p.founded,
                  "The %s was founded in %d, %s years before the %s was built." %
                  (p.kind, p.founded, words(p.built - p.founded), p.building)]),
        rng.pick(["About %s people live there." % grouped(p.population),
                  "The %s has %s people." % (p.kind, grouped(p.population))]),
        "Most people there %s." % p.good[3],
        "The oldest building in %s is the %s, which was built in %d." %
        (p.name, p.building, p.built),
        "The market is held every %s." % p.market_day,
        rng.pick(["The streets are %s and the houses are built of %s." % (p.streets, p.material),
                  "Most houses in %s are built of %s." % (p.name, p.material)]),
    ]
    for q in p.neighbours[:2]:
        options.append(rng.pick([
            "%s lies %s miles %s of %s." % (q.name, words(w.distance(p, q)),
                                            w.direction(p, q), p.name),
            "From %s it is %d miles to %s." % (p.name, w.distance(p, q), q.name),
        ]))
    options.append("A %s of %s costs %d pence there." %
                   (p.good[1], p.good[0], w.price(p, p.good)))
    S.extend(rng.sample(options, rng.between(3, len(options))))
    return " ".join(S)


def journey_paragraph(rng, w):
    h = rng.pick(w.people)
    a = h.home
    b = rng.pick(a.neighbours)
    c = rng.pick([q for q in b.neighbours if q is not a])
    d1, d2 = w.distance(a, b), w.distance(b, c)
    when = random_date(rng, h.born.year + 18, h.born.year + 60)
    speed = rng.pick([10, 12, 15, 20])
    days = -(-d1 // speed)
    S = ["On the %s, %s left %s for %s." % (when.text(), h.name, a.name, b.name),
         "The road from %s to %s is %d miles long." % (a.name, b.name, d1)]
    S.append("%s walked %s miles a day, so the journey took %s %s." %
             (cap(she(h)), words(speed), words(days), "day" if days == 1 else "days"))
    if rng.chance(0.5):
        S.append("It was %s, and the road was %s." %
                 (SEASON[when.month], rng.pick(["dry", "muddy", "dusty", "quiet", "busy"]))
                 if SEASON[when.month] != "winter" else
                 "It was winter, and the road was %s." % rng.pick(["frozen", "muddy", "quiet"]))
    g = b.good
    if rng.chance(0.7):
        k = rng.between(2, 9)
        price = w.price(b, g)
        S.append("In %s %s bought %s %s of %s at %d pence each and paid %d pence." %
                 (b.name, she(h), words(k), g[2], g[0], price, k * price))
    if rng.chance(0.6):
        S.append("From %s %s went on to %s, another %d miles." % (b.name, she(h), c.name, d2))
        S.append("In all %s travelled %d miles." % (she(h), d1 + d2))
    return " ".join(S)


def arith_fact(rng):
    op = rng.pick(["plus", "minus", "times", "divided by"])
    if op == "plus":
        a, b = rng.between(0, 20), rng.between(0, 20)
        return a, op, b, a + b
    if op == "minus":
        a = rng.between(0, 30)
        b = rng.between(0, a)
        return a, op, b, a - b
    if op == "times":
        a, b = rng.between(1, 12), rng.between(1, 12)
        return a, op, b, a * b
    b, q = rng.between(1, 12), rng.between(0, 12)
    return b * q, op, b, q


def lesson_paragraph(rng, w):
    p = rng.pick(w.places)
    teachers = [h for h in w.people if h.occupation == "teacher"] or w.people
    t = rng.pick(teachers)
    S = [rng.pick(["In the school at %s, %s taught the children their numbers." % (p.name, t.name),
                   "%s gave a lesson in sums at %s." % (t.name, p.name)])]
    for _ in range(rng.between(3, 7)):
        kind = rng.weighted([(6, "fact"), (2, "question"), (1, "count")])
        a, op, b, r = arith_fact(rng)
        if kind == "fact":
            S.append(cap("%s %s %s is %s." % (words(a), op, words(b), words(r))))
        elif kind == "question":
            child = rng.pick(w.people)
            wrong = r + rng.pick([-2, -1, 1, 2]) if r >= 2 else r + rng.pick([1, 2])
            if rng.chance(0.5):
                S.append('"Is %s %s %s %s?" asked %s. "Yes," said %s.' %
                         (words(a), op, words(b), words(r), child.first, t.first))
            else:
                S.append('"Is %s %s %s %s?" asked %s. "No," said %s, "%s %s %s is %s."' %
                         (words(a), op, words(b), words(wrong), child.first, t.first,
                          words(a), op, words(b), words(r)))
        else:
            step = rng.between(2, 9)
            start = step * rng.between(1, 4)
            seq = [words(start + step * i) for i in range(5)]
            S.append("They counted by %s: %s." % (plural(words(step)), ", ".join(seq)))
    return " ".join(S)


def ledger_paragraph(rng, w):
    h = rng.pick(w.people)
    year = h.born.year + rng.between(20, 50)
    lines = ["Ledger of %s, %s of %s, for the year %d:" % (h.name, h.occupation, h.home.name, year)]
    total = 0
    for p in rng.sample([h.home] + h.home.neighbours, rng.between(2, 4)):
        g = p.good
        k = rng.between(1, 12)
        price = w.price(p, g)
        cost = k * price
        total += cost
        unit = g[1] if k == 1 else g[2]
        lines.append("- %d %s of %s from %s at %d pence: %d pence" %
                     (k, unit, g[0], p.name, price, cost))
    lines.append("Total: %d pence." % total)
    return "\n".join(lines)


def chronicle_paragraph(rng, w):
    p = rng.pick(w.places)
    facts = [(p.founded, "%s was founded." % p.name),
             (p.built, "The %s was built." % p.building)]
    for h in w.people:
        if h.home is p:
            facts.append((h.born.year, "%s was born." % h.name))
        if h.moved_to is p:
            facts.append((h.born.year + h.moved_age, "%s came to live here." % h.name))
    for _ in range(rng.between(2, 4)):
        facts.append((rng.between(p.built, 1860), cap(rng.pick(EVENTS)) + "."))
    facts = rng.sample(facts, min(len(facts), rng.between(4, 7)))
    facts.sort(key=lambda f: f[0])
    lines = ["From the chronicle of %s:" % p.name]
    lines.extend("%d: %s" % f for f in facts)
    return "\n".join(lines)


def dialogue_paragraph(rng, w):
    a = rng.pick(w.people)
    b = a.friend
    dest = rng.pick(a.home.neighbours)
    d = w.distance(a.home, dest)
    S = ['"Where are you going, %s?" asked %s.' % (a.first, b.first),
         '"To %s," said %s. "It is %s miles from %s."' %
         (dest.name, a.first, words(d), a.home.name)]
    if rng.chance(0.6):
        g = dest.good
        S.append('"Then bring me %s %s of %s," said %s. "They cost %d pence there."' %
                 (words(2), g[2], g[0], b.first, w.price(dest, g)))
        S.append('"That will be %d pence," said %s.' % (2 * w.price(dest, g), a.first))
    if rng.chance(0.5):
        S.append('"The market there is on %s," said %s.' % (dest.market_day, b.first))
    return " ".join(S)


def story_paragraph(rng, w):
    """A short tale from a small grammar: when, who found what where, what then."""
    h = rng.pick(w.people)
    f = h.friend
    ctx = {"P": cap(she(h)), "p": she(h), "pos": her(h), "river": h.home.river,
           "building": h.home.building, "near": rng.pick(h.home.neighbours).name,
           "home": h.home.name, "friend": f.first, "friend_she": she(f),
           "occ": rng.pick(OCCUPATIONS), "day": rng.pick(WEEKDAYS),
           "season": rng.pick(["spring", "summer", "autumn", "winter"])}
    obj = rng.pick(OBJECTS)
    S = ["%s, %s found %s %s." % (rng.pick(TIMES) % ctx, h.name, a_an(obj),
                                  rng.pick(FOUND_AT) % ctx)]
    r1, r2 = rng.sample(REACTIONS, 2)
    S.append(cap(r1 % ctx) + rng.pick([".", ", and then " + r2 % dict(ctx, P=she(h)) + "."]))
    for a in rng.sample(ASKS, rng.between(1, 2)):
        S.append(a % ctx)
    if rng.chance(0.7):
        S.append(rng.pick(ENDINGS) % ctx)
    return " ".join(S)


KINDS = [(4, story_paragraph), (5, person_paragraph), (4, place_paragraph), (4, journey_paragraph),
         (4, lesson_paragraph), (2, ledger_paragraph), (2, chronicle_paragraph),
         (2, dialogue_paragraph)]


def heading(rng, w, n):
    title = rng.pick(["The Roads of %s" % rng.pick(w.regions),
                      "Along the River %s" % rng.pick(w.rivers),
                      "Markets and Prices", "People of %s" % rng.pick(w.places).name,
                      "Lessons", "Old Records"])
    return "Chapter %s: %s" % (cap(words(n)), title)


def generate(seed, size):
    rng = Rng(seed)
    world = World(rng)
    parts, total, chapter = [], 0, 0
    while total < size:
        if not parts or rng.chance(0.04):
            chapter += 1
            text = heading(rng, world, chapter)
        else:
            text = rng.weighted(KINDS)(rng, world)
        parts.append(text)
        total += len(text) + 2
    return "\n\n".join(parts) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--size", type=int, default=1800000,
                    help="stop after the paragraph that reaches this many bytes")
    ap.add_argument("--out", default=os.path.join(here, "corpus.txt"))
    args = ap.parse_args()
    if args.size <= 0:
        ap.error("--size must be positive")
    data = generate(args.seed, args.size).encode("ascii")
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.out)  # no partial file under the real name
    print("%s: %d bytes, sha256 %s" % (args.out, len(data), hashlib.sha256(data).hexdigest()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
