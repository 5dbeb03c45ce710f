"""``chat``: dialogues, chat logs and support conversations, often lower case and tokenised.

Evidence: several short lines (turns) and the words of conversation (``i``, ``you``,
``please``, ``thanks``, ``could``, ``need``).

Rules:

Turns are lines; text in paragraphs between blank lines (a letter, an e-mail) is not chat.

* a weekday name alone is not a date (``on Saturday``: no date is named), and a
  nationality before food words is a cuisine (``Indian food``, ``Chinese restaurant``);
  currency codes (``GBP``) and compass or area words (``North``, ``Centre``) are not names;
* venues and streets without capitals: a head word (``guest house``, ``college``,
  ``museum``, ``road``, ``street``) and the one to four name words before it
  (``the acorn guest house``, ``clare college``, ``pool way``, ``whitehill road``);
* venues named after a cue (``called avalon``, ``how about little seoul ?``, ``i
  recommend the curry prince``), when a word of the name is not common;
* a car after an article or a colour (``a white Toyota``) is a product, a dictionary
  word read as a person (``Glad to help``) is not a name;
* propagation ignores case: a name detected once in a turn (``Saigon City``) is removed
  in every turn that repeats it (``saigon city``);
* words for a kind of venue or a booking's details are no name (``guest house``,
  ``gastropubs``, ``free wifi``, ``entrance fee``, ``postcode``, and their misspellings,
  ``gueshouse``), unless a name stands just before them (``Hobson 's House``); a word of two
  common words written with a capital inside a turn is a name (``the Allenbell``);
* an address after its cue (``the address is pool way``, ``located on trinity lane``);
* the other members of a list two of whose members pi found (``archway house , avalon ,
  hamilton lodge , home from home , or limehouse``): the members between two found ones,
  and the last one after ``and`` or ``or``.
"""

from __future__ import annotations

import bisect
import functools

import regex as re

from privatize.redaction.filters import is_known_name, zipf
from privatize.redaction.styles.vocab import first_names, is_dictionary_word, is_misspelt_or_compound
from privatize.redaction.spans import Span
from privatize.redaction.styles.base import DocumentStyle, register_style
from privatize.redaction.words import stop_words

_CHAT_WORDS = frozenset("""
i i'm im i'd i'll i've me my you you're your yours we us our please thanks thank thx hi hello hey ok okay sure
yes yeah no nope could would can need want like help book looking great bye goodbye sorry
""".split())
_WEEKDAY = re.compile(r"(?i)(?:on[ \t]+)?(?:mon|tues|wednes|thurs|fri|satur|sun)days?")
_CURRENCY = frozenset("gbp usd eur jpy cad aud chf cny inr".split())
_FOOD_AFTER = re.compile(r"(?i)[ \t]+(?:food|cuisine|restaurants?|places?|dishes|dish|meal|meals|dinner|lunch|"
                         r"breakfast|takeaway|place|one|option|options|style|kitchen)\b")
_VENUE_HEADS = (r"guest[ \t]*house|guesthouse|hotel|restaurant|college|museum|gallery|park|church|pool|theatre|"
                r"theater|cinema|pub|bar|kitchen|bistro|cafe|café|house|inn|lodge|hall|arcade|club|gardens?|"
                r"nightclub|boathouse|cruisers|pizzeria|brasserie|grill|chapel|cathedral|abbey|library|"
                r"centre|center|punting|punters?|tours|cafeteria|tavern|diner|steakhouse|b[ \t]*&[ \t]*b|"
                r"bed[ \t]+and[ \t]+breakfast")
_STREET_HEADS = (r"road|rd|street|st|lane|ln|way|avenue|ave|drive|dr|close|hill|square|row|place|terrace|crescent|"
                 r"court|green|walk|parade|gate|bridge|mews|grove|broadway")
_W = r"[^\W\d_][\p{L}'’-]*"
_VENUE = re.compile(rf"(?i)(?<![\w'’-])(?P<v>(?:{_W}[ \t]+){{1,4}}(?:'s?[ \t]+)?(?:{_VENUE_HEADS}))(?![\w'’-])")
_STREET = re.compile(rf"(?i)(?<![\w'’-])(?P<v>(?:\d+[a-z]?[ \t]+)?(?:{_W}[ \t]+){{1,3}}(?:{_STREET_HEADS}))(?![\w'’-])")
# words that end a name when read leftwards from the head word ("is the acorn guest house")
_NOT_NAME_WORDS = frozenset("""
cheap expensive moderate moderately priced nice good great lovely popular famous best other another local nearby
north south east west centre center central town city area part side free wifi internet parking star stars
book booking booked reservation reserve called named recommend suggest try visit about like want need find
looking any some that this these those which what there here one two three four five a an the at in on for to
is are was be it its it's and or of my your our their with near from by located address
cheapest nearest closest first second third last same different small large big new old only just really very
place places restaurant restaurants hotel hotels attraction attractions one ones option options
""".split())
# a venue named after a cue: "called avalon", "how about little seoul ?", "i recommend the curry prince"
_NAME_CUE = re.compile(r"(?i)\b(?:called|named|the[ \t]+name[ \t]+is|name[ \t]+of|by[ \t]+the[ \t]+name[ \t]+of|"
                       r"recommend(?:ing)?|suggest(?:ing)?|how[ \t]+about|what[ \t]+about|info(?:rmation)?[ \t]+(?:on|about)|"
                       r"interested[ \t]+in|favou?rite[ \t]+is|try)[ \t]+(?:the[ \t]+)?"
                       r"(?P<v>[^\W\d_][\p{L}'’&-]*(?:[ \t]+(?!(?:for|in|on|at|that|which|and|or|is|are|with|to|it|they|"
                       r"but|because|as|if|near|located|please|instead|then|too|also)\b)[^\W\d_][\p{L}'’&-]*){0,4})"
                       r"(?=[ \t]*(?:[.,?!:;\n\"]|$|[ \t]+(?:for|in|on|at|that|which|and|is|are|with|it|they|but|please|thanks|"
                       r"today|tonight|tomorrow)\b))")
_SUBJECT = re.compile(r"(?m)^(?i:sure|yes|ok|okay|well)?[ \t,!]*(?i:the[ \t]+)?(?P<v>[^\W\d_][\p{L}'’&-]*(?:[ \t]+[^\W\d_][\p{L}'’&-]*){0,3})"
                      r"[ \t]+(?:is|has|sounds|fits|serves|offers)[ \t]+(?:located|a|an|the|at|on|in|perfect|great|good|"
                      r"interesting|an?[ \t]+\w+|\w+ing)\b")
# words for kinds of venue and the things a booking asks about, not names of any one place
# ("guest house", "gastropubs", "free wifi", "entrance fee", "postcode"); with their plurals
# and misspellings ("gueshouse", "accomodations") a span made only of these names nothing
_TYPE_WORDS = frozenset("""
guest house guesthouse guesthouses hotel hotels restaurant restaurants college colleges museum museums gallery
galleries park parks church churches pool pools theatre theatres theater theaters cinema cinemas pub pubs gastropub
gastropubs bar bars bistro cafe cafes café kitchen inn lodge hall arcade club clubs nightclub nightclubs boat boats
boating punting punt punts steakhouse steakhouses pizzeria brasserie tavern diner chapel cathedral abbey library
architecture attraction attractions entertainment sports swimming swimmingpool concert concerthall venue venues
accommodation accommodations accomodation lodging lodgings room rooms bed breakfast b&b
postcode postcodes post code zip address phone number wifi internet parking entrance fee fees ticket tickets
price prices range pricerange area areas centre center central town city part side north south east west
star stars rating reservation reservations booking bookings reference train trains taxi taxis car cars
food cuisine cheap cheaply expensive moderate moderately priced free recommendation recommendations
""".split())
# an address after its cue: "the address is pool way , ...", "it is located on trinity lane ."
_ADDR_CUE = re.compile(r"(?i)\b(?:address(?:[ \t]+is|[ \t]*:)|located[ \t]+(?:on|at)|situated[ \t]+(?:on|at))[ \t]+"
                       r"(?:the[ \t]+)?(?P<v>(?:\d+[a-z]?[ \t]+)?[^\W\d_][\p{L}'’&-]*(?:[ \t]+[^\W\d_][\p{L}'’&-]*){0,4})"
                       r"(?=[ \t]*(?:[.,?!;:\n]|$))")
# a list inside one clause of a turn: its members between commas, the last one maybe after
# "and" / "or" ("archway house , avalon , hamilton lodge , or limehouse ?")
_CLAUSE = re.compile(r"[^.?!;:|\n\"()]+")
_ITEM = re.compile(r"[ \t]*(?P<join>(?:and|or)[ \t]+)?(?:the[ \t]+)?"
                   r"(?P<v>[\p{L}\d][\p{L}\d'’&-]*(?:[ \t]+[\p{L}\d'’&-]+){0,5})[ \t]*", re.I)
_LIST_TYPES = frozenset({"LOCATION", "ORGANIZATION", "PERSON"})
# the rest of an address after its cue, piece by piece between commas ("the address is unit 8 ,
# viking way , bar hill .", "located at the grafton centre , east road"), up to the clause's end
# or a word that leaves the address ("and the phone number", "postcode cb11ps")
_ADDR_LIST = re.compile(r"(?i)\b(?:address(?:[ \t]+is|[ \t]*:)|located[ \t]+(?:on|at|in)|situated[ \t]+(?:on|at))"
                        r"[ \t,]+(?P<list>[^.?!;:\n|\"()]+)")
_ADDR_STOP = re.compile(r"(?i)\b(?:and|post[ \t]*code|phone|number|with|which|but|it|they|is|are|if|so|for|that|"
                        r"you|we|i|do|does|can|would|has|have|near|postal|zip|in[ \t]+the)\b")
_WHERE_WORDS = frozenset("downtown uptown northern southern eastern western end heart middle outskirts edge corner "
                         "district neighbourhood neighborhood".split())
"""Words that say where in town without naming an address ("the northern part of town")."""
_ADDR_PIECE = re.compile(r"(?i)[ \t]*(?:the[ \t]+)?(?P<v>[\p{L}\d][\p{L}\d'’&-]*(?:[ \t]+[\p{L}\d'’&-]+){0,4})[ \t]*")
_TOKEN = re.compile(r"(?<![\w'’-])[^\W\d_][\p{L}]{3,}(?![\w'’-])")
_COLOUR = re.compile(r"(?i)\b(?:a|an|the)[ \t]+(?:(?:black|white|red|blue|grey|gray|yellow|green|silver)[ \t]+)?$")


@register_style
class Chat(DocumentStyle):
    name = "chat"
    threshold = 0.08
    trim_articles = True

    def evidence(self, text: str, words: list[str]) -> float:
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if len(lines) < 3 or sum(len(ln) for ln in lines) / len(lines) > 300:
            return 0.0
        if text.count("\n\n") * 3 >= len(lines):
            return 0.0  # paragraphs between blank lines: a letter or an e-mail, not turns
        return sum(1 for w in words if w in _CHAT_WORDS) / len(words)

    def drop(self, text: str, span: Span) -> str | None:
        s, e, etype, _sc, source, _ctx = span
        piece = text[s:e].strip()
        if etype in ("LOCATION", "ORGANIZATION", "PERSON", "NRP") and _only_type_words(piece) \
                and not _name_before(text, s):
            return "words for a kind of venue or a booking's details (guest house, entrance fee), no name"
        if etype == "DATE_TIME" and _WEEKDAY.fullmatch(piece):
            return "a weekday alone names no date"
        if etype in ("NRP", "LOCATION") and _FOOD_AFTER.match(text, e):
            return "a cuisine"
        if etype == "ORGANIZATION" and _COLOUR.search(text, max(0, s - 16), s) and " " not in piece:
            return "a product (a white Toyota)"
        if etype == "PERSON" and source in ("spacy", "spacy_case", "propagation") \
                and all(is_dictionary_word(w) or w.lower() in stop_words() for w in piece.split()) \
                and not any(w.lower().strip(".,'’") in first_names() for w in piece.split()):
            return "dictionary words (Glad, Terrific, Postcode)"
        if etype == "STREET_ADDRESS" and re.search(r"(?i)\b(?:a|an|the)[ \t]+\S+$", piece) \
                and not re.match(r"\d", piece):
            return "a common noun phrase (find a place)"
        if etype in ("ORGANIZATION", "LOCATION", "PERSON", "NRP") and " " not in piece:
            w = piece.strip(".,;:()'’\"")
            if w.lower() in _CURRENCY:
                return "currency code"
            if w.lower() in _NOT_NAME_WORDS:
                return "common word"
            if not is_known_name(w) and zipf(w) >= 4.0 and source in ("spacy", "spacy_case", "propagation"):
                return "common word"
            if w.islower() and zipf(w) >= 4.0 and source == "propagation":
                return "common word"
        return None

    def extra(self, text: str) -> list[Span]:
        out: list[Span] = []
        for rx, etype in ((_VENUE, "LOCATION"), (_STREET, "STREET_ADDRESS")):
            for m in rx.finditer(text):
                span = self._trim(text, m.start("v"), m.end("v"), etype)
                if span is not None:
                    out.append(span)
        for m in _TOKEN.finditer(text):  # a word in no dictionary and almost never written: a name
            w = m.group(0)
            if zipf(w) < 2.0 and not is_dictionary_word(w) and not is_known_name(w) and w.lower() not in stop_words() \
                    and (not is_misspelt_or_compound(w) or _capitalised_inside(text, m.start(), w)):
                out.append((m.start(), m.end(), "LOCATION", 0.4, "chat_rare", False))
        for m in _ADDR_CUE.finditer(text):
            words = [w for w in m.group("v").split() if not w[:1].isdigit()]
            if not words or words[0].lower() in _NOT_NAME_WORDS or _only_type_words(" ".join(words)) or all(
                    w.lower() in _NOT_NAME_WORDS or w.lower() in stop_words() for w in words):
                continue
            if not (re.fullmatch(rf"(?i){_STREET_HEADS}", words[-1]) and len(words) > 1) and not any(
                    zipf(w) < 4.0 and w.lower() not in _NOT_NAME_WORDS for w in words):
                continue  # "located at the end": no name in it
            out.append((m.start("v"), m.end("v"), "STREET_ADDRESS", 0.5, "chat_address", True))
        for m in _ADDR_LIST.finditer(text):
            out += _address_pieces(text, m.start("list"), m.end("list"))
        for m in _SUBJECT.finditer(text):  # "Kohinoor has an address", "Loch fyne is perfect"
            words = m.group("v").split()
            if any(w.lower() in _NOT_NAME_WORDS or w.lower() in stop_words() for w in words[:1]) or not (any(
                    zipf(w) < 3.5 and not is_dictionary_word(w) for w in words) or _title_cased(words)):
                continue
            out.append((m.start("v"), m.end("v"), "LOCATION", 0.5, "chat_venue", True))
        for m in _NAME_CUE.finditer(text):
            words = m.group("v").split()
            if any(w.lower() in _NOT_NAME_WORDS for w in words[:1]) or all(
                    w.lower() in _NOT_NAME_WORDS or w.lower() in stop_words() for w in words):
                continue
            if not any(zipf(w) < 4.0 and w.lower() not in _NOT_NAME_WORDS for w in words):
                continue  # "how about something cheap": no name in it
            out.append((m.start("v"), m.end("v"), "LOCATION", 0.5, "chat_venue", True))
        return out

    @staticmethod
    def _trim(text: str, s: int, e: int, etype: str) -> Span | None:
        """The name before the head word: words read leftwards until one that is not part
        of a name (``is the``, ``a cheap``); at least one name word must remain."""
        words = [(m.start() + s, m.group(0)) for m in re.finditer(r"\S+", text[s:e])]
        heads = 1
        while heads < len(words) and re.fullmatch(rf"(?i){_VENUE_HEADS}|{_STREET_HEADS}|and|breakfast|bed|&|b",
                                                  words[-heads - 1][1]):
            heads += 1
        names = words[:-heads]
        keep = []
        for a, w in reversed(names):
            lw = w.lower()
            if lw.isdigit() and etype == "STREET_ADDRESS":
                keep.append(a)
                continue
            if lw in ("'s", "’s"):  # "Hobson 's House"
                keep.append(a)
                continue
            if lw in _NOT_NAME_WORDS or lw in stop_words() and lw not in ("a", "b"):
                break
            keep.append(a)
        if not keep:
            return None
        a = min(keep)
        name_words = [w for p, w in names if p >= a and not w.isdigit()]
        if not name_words or all((zipf(w) >= 4.0 and not is_known_name(w)) or re.fullmatch(
                r"(?i)\p{L}+(?:ish|ian|ese|an|ic)|thai|french|greek|swimming|cheap|expensive", w) for w in name_words):
            return None  # "the main road", "a big house"
        return (a, e, etype, 0.5, f"chat_{etype.lower()}", True)

    def propagate_key(self, piece: str) -> str | None:
        return piece.lower()

    def complete(self, text: str, spans: list[Span]) -> list[Span]:
        out: list[Span] = []
        names = [sp for sp in spans if sp[2] in _LIST_TYPES]
        if len(names) < 2:
            return out
        starts = [sp[0] for sp in names]
        for seg in _CLAUSE.finditer(text):
            if seg.group(0).count(",") < 2:
                continue
            # the names inside this clause only (spans are sorted): linear in the text
            lo, hi = bisect.bisect_left(starts, seg.start()), bisect.bisect_left(starts, seg.end())
            near = names[max(0, lo - 1):hi]
            near_starts = starts[max(0, lo - 1):hi]
            items = _comma_pieces(text, seg.start(), seg.end(), _ITEM)
            found = [m is not None and _covered(m.start("v"), m.end("v"), near, near_starts) for m in items]
            if sum(found) < 2:
                continue
            first, last = found.index(True), len(found) - 1 - found[::-1].index(True)
            if items[-1] is not None and items[-1].group("join"):
                last = len(items) - 1  # "..., or limehouse": the list runs to its end
            for k, m in enumerate(items):
                if m is None or found[k] or not first < k <= last:
                    continue
                words = m.group("v").split()
                if len(words) > 5 or _only_type_words(m.group("v")) or words[0].lower() in _NOT_NAME_WORDS \
                        or words[0].lower() in stop_words():
                    continue  # "i like it", "no way": no member of the list
                span = (m.start("v"), m.end("v"), "LOCATION", 0.5, "chat_list", True)
                if self.drop(text, span) is None:
                    out.append(span)
        return out

@functools.lru_cache(maxsize=20_000)
def _type_word(word: str) -> bool:
    """A word of :data:`_TYPE_WORDS`, its plural, or a misspelling of one (an edit or two
    in a long word: ``gueshouse``, ``accomodations``, ``reccomendation``)."""
    w = word.lower().strip(".,;:!?()'’\"")
    if not w or w in _TYPE_WORDS or (w.endswith("s") and w[:-1] in _TYPE_WORDS) \
            or (w.endswith("es") and w[:-2] in _TYPE_WORDS):
        return True
    if len(w) < 6 or not w.isalpha():
        return False
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    return process.extractOne(w, [t for t in _TYPE_WORDS if len(t) >= 6], scorer=Levenshtein.distance,
                              score_cutoff=1 if len(w) < 9 else 2) is not None


# a name just before a type word ("Hobson 's House", "Bridge Guest House"): the type word is
# the head of that name, which NER read in two parts
_NAME_BEFORE = re.compile(r"(?<![\w'’-])(?P<w>\p{Lu}[\p{L}'’-]*)[ \t]+(?:['’]s[ \t]+)?$")


def _name_before(text: str, s: int) -> bool:
    m = _NAME_BEFORE.search(text, max(0, s - 40), s)
    if m is None:
        return False
    w = m.group("w").lower()
    return w not in _NOT_NAME_WORDS and w not in stop_words() and not _type_word(w)


def _capitalised_inside(text: str, s: int, word: str) -> bool:
    """A word written with a capital inside a turn (``the Allenbell``, ``at Limehouse``):
    a name even when it splits into two common words, unless those are a venue type or a
    booking's detail (``Pricerange``)."""
    if not (word[:1].isupper() and not word.isupper()) or _type_word(word):
        return False
    k = s - 1
    while k >= 0 and text[k] in " \t":
        k -= 1
    return k >= 0 and text[k] not in ".!?:\n\"" and not (text[k].isalpha() and text[max(0, k - 1):k + 1].lower()
                                                           in ("ok",))


def _comma_pieces(text: str, s: int, e: int, rx) -> list:
    """``rx`` matched in full against each comma-separated piece of ``text[s:e]`` (its
    match, offsets into ``text``, or ``None`` where the piece is not one)."""
    out, pos = [], s
    for piece in text[s:e].split(","):
        out.append(rx.fullmatch(text, pos, pos + len(piece)))
        pos += len(piece) + 1
    return out


def _address_pieces(text: str, s: int, e: int) -> list[Span]:
    """The comma-separated pieces of an address in ``text[s:e]`` (see :data:`_ADDR_LIST`)."""
    stop = _ADDR_STOP.search(text, s, e)
    e = stop.start() if stop else e
    out: list[Span] = []
    for m in _comma_pieces(text, s, e, _ADDR_PIECE):
        if m is None:
            break  # not a piece of an address: the list ends here
        words = m.group("v").split()
        if re.fullmatch(r"(?i)[a-z]{1,2}\d[a-z\d]{2,5}", "".join(words)):
            continue  # a postcode: its own recognizer's
        if all((w.lower() in _NOT_NAME_WORDS or w.lower() in _WHERE_WORDS or w.lower() in stop_words()) for w in words) \
                and not re.fullmatch(rf"(?i){_STREET_HEADS}", words[-1]):
            continue  # "the centre", "town"
        out.append((m.start("v"), m.end("v"), "STREET_ADDRESS", 0.5, "chat_address", True))
    return out


def _title_cased(words: list[str]) -> bool:
    """Two words or more, each capitalised but short function words (``Home From Home``,
    ``Whale of a Time``)."""
    return len(words) >= 2 and words[0][:1].isupper() and all(
        w[:1].isupper() and not w.isupper() or w.lower() in ("of", "a", "the", "and", "from", "in", "on", "at")
        for w in words)


def _covered(s: int, e: int, spans: list[Span], starts: list[int]) -> bool:
    """At least half of ``text[s:e]`` lies inside ``spans`` (merged, sorted; ``starts``
    their starts): only the spans that can overlap it are looked at."""
    k = max(0, bisect.bisect_left(starts, s) - 1)
    inside = 0
    while k < len(spans) and spans[k][0] < e:
        a, b = spans[k][0], spans[k][1]
        inside += max(0, min(e, b) - max(s, a))
        k += 1
    return inside * 2 >= e - s


_NUMBER_WORDS = frozenset("one two three four five first second third".split())


def _only_type_words(piece: str) -> bool:
    """Every word of ``piece`` names a kind of place or a booking's detail, or is a word
    that is never part of a name (``the``, ``cheap``; not a number: ``Restaurant Two
    Two``), and one at least is a type word."""
    words = piece.split()
    if not words or not any(_type_word(w) for w in words):
        return False
    return all(_type_word(w) or (w.lower() in _NOT_NAME_WORDS and w.lower() not in _NUMBER_WORDS) for w in words)
