"""Word lists the detector and the recognizers share (a module of its own, so that
neither imports the other for them)."""

from __future__ import annotations

import functools

MONTH_NAMES = (r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
               r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
"""Month names and their abbreviations (lower case; the NER date filter uses them too)."""


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stop words and common greetings and fillers: words that are never
    a name (loads ``spacy.lang.en`` on first use)."""
    from spacy.lang.en.stop_words import STOP_WORDS

    extra = {"hello", "hi", "hey", "thanks", "thank", "please", "sure", "yes", "ok", "okay", "good", "great",
             "sorry", "dear", "regards", "bye", "goodbye", "welcome", "well", "oh", "no", "yeah", "yep", "sir",
             "madam", "shall"}
    return frozenset(STOP_WORDS) | frozenset(extra)


OCCUPATIONS = (  # job titles: a line of them is a title, not a name

    "manager|director|officer|executive|president|chairman|chairwoman|chair|head|chief|lead|supervisor|foreman|"
    "engineer|technician|technologist|operator|assistant|aide|clerk|administrator|analyst|consultant|coordinator|"
    "specialist|designer|developer|programmer|scientist|researcher|teacher|lecturer|professor|tutor|instructor|"
    "nurse|doctor|physician|surgeon|dentist|pharmacist|therapist|psychologist|psychiatrist|paramedic|midwife|"
    "lawyer|attorney|solicitor|barrister|paralegal|judge|accountant|auditor|bookkeeper|actuary|economist|"
    "architect|surveyor|planner|estimator|drafter|draftsman|inspector|examiner|investigator|detective|"
    "cashier|teller|driver|pilot|installer|mechanic|machinist|welder|electrician|plumber|carpenter|painter|"
    "repairer|fitter|fabricator|assembler|tender|setter|sorter|packer|loader|mover|cleaner|janitor|"
    "representative|agent|broker|adviser|advisor|counselor|counsellor|secretary|receptionist|"
    "editor|writer|author|journalist|reporter|producer|publicist|photographer|artist|musician|actor|"
    "chef|cook|baker|butcher|bartender|waiter|waitress|host|hostess|salesperson|merchandiser|buyer|"
    "librarian|translator|interpreter|curator|archivist|chemist|physicist|biologist|geologist|"
    "statistician|mathematician|worker|labourer|laborer|farmer|gardener|landscaper|ranger|guard|"
    "firefighter|soldier|sergeant|captain|platemaker|trainer|coach|caregiver|nanny|dispatcher|scheduler|"
    "recruiter|strategist|controller|treasurer|underwriter|adjuster|appraiser|optician|optometrist|"
    "radiographer|sonographer|hygienist|dietitian|nutritionist|veterinarian|vet|tailor|jeweler|jeweller"
)


OCCUPATION_SET = frozenset(OCCUPATIONS.split("|"))
