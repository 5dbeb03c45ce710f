"""Dates: numeric, partial and month-name forms, validated, scored by context.

Replaces Presidio's ``DateRecognizer`` in the batch detector. Presidio's recognizer
scores the short forms clinical and conversational text uses (``10/13``, ``9/7``,
``3/2019``) at 0.1-0.2, below any redaction threshold, has no form for a bare day and
month at all (``10/13``) and none for two-digit years (``'92``). Here every candidate
is validated (month 1-12, day 1-31, years 1800-2199) and scored by how much its shape
and its neighbourhood say "date":

* full numeric dates (``10/13/92``, ``2019-03-04``, ``13.10.1992``, ISO date-times)
  and month-name dates (``Oct 13``, ``13th of October 2019``, ``March 2019``,
  ``13-Mar-19``, ``28 Oct, 88``: a two-digit year after a comma when no word follows
  it, so ``12 May, 20 mg`` keeps its dose): 0.6, as Presidio's full forms;
* a day and month without a year (``10/13``, ``9/7``) or a month and year
  (``3/2019``): 0.45 after a date cue (``on``, ``since``, ``until``, ``dated``,
  ``d/c``...), 0.2 otherwise (below the 0.3 threshold; context words such as
  ``admitted``, ``seen``, ``date`` raise it); never a fraction or a dose (``1/2
  tab``, ``2/3 of``) or part of a longer number (``130/80``, ``1/2/3``);
* two-digit years: ``'92`` (apostrophe) 0.5; ``in 92`` only after ``in``/``since``/
  ``of`` at the end of a clause, 0.2 unless history words (``hx``, ``MI``, ``dx``...)
  are near.

Month names that are also English words (``may``, ``march``) count in lower case only
with a day number and an ordinal or a year (``may 5th``, ``march 2019``), so "you may
3" is not a date.
"""

from __future__ import annotations

import regex as re

from privatize.redaction.presidio import import_presidio
from privatize.redaction.words import MONTH_NAMES

import_presidio()
from presidio_analyzer import Pattern, PatternRecognizer  # noqa: E402

NOCASE = re.MULTILINE | re.IGNORECASE | re.VERSION0

_MONTH = rf"(?:{MONTH_NAMES})\.?"
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?"
_YEAR4 = r"(?:1[89]\d\d|20\d\d|21\d\d)"
_YEAR = rf"(?:{_YEAR4}|['’]\d\d)"
_END = r"(?![\w]|[/.-]\d)"
_START = r"(?<![\w/.-])"
# words after a bare "m/d" that make it a fraction, a dose or a ratio, not a date
_NOT_DATE_AFTER = (r"(?![ \t]*(?:of\b|tab|tabs|tablet|pill|cap|caps|dose|doses|strength|mg|mcg|ml|cc|units?\b|"
                   r"cups?\b|tsp|tbsp|inch|in\b|ft\b|mile|miles|km|kg|lb|lbs|oz|%|x\b|times|share|portion|ratio|"
                   r"split|of the|scale|score|vision|days?\b|weeks?\b|months?\b|years?\b|hours?\b|hrs?\b|mins?\b|minutes?\b|"
                   r"people|persons|patients|beds|nights|guests|stars|[a-z]*meters?\b))")
_WEEKDAY = (r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?|sat(?:urday)?|"
            r"sun(?:day)?)\.?")
# an optional weekday before and clock time after a date: "Tue 8/17 at 14:00", "Wed, 26 Jul 2017 09:15:22 +0000"
_PRE = rf"(?:{_WEEKDAY},?[ \t]+)?"
_TIME = (r"(?:,?[ \t]+(?:at[ \t]+|@[ \t]?)?(?:[01]?\d|2[0-3])(?::[0-5]\d){1,2}(?:[ \t]?[ap]\.?m\.?)?"
         r"(?:[ \t]+[+-]\d{4}|[ \t]?(?:GMT|UTC|[ECMP][SD]T))?"
         r"|,?[ \t]+(?:at[ \t]+|@[ \t]?)?(?:1[0-2]|0?[1-9])[ \t]?[ap]\.?m\.?)?")
_CUE = (r"(?:on|since|from|until|till|til|by|before|after|dated|thru|through|to|starting|beginning|ending|"
        r"effective|dob|d\.o\.b\.?|d/c'?d|d/c|admitted|adm|discharged|born|due|expires?|exp|seen|"
        r"last|next|of|as of|" + _WEEKDAY[3:-4] + ")")


def _valid_md(m: int, d: int) -> bool:
    return 1 <= m <= 12 and 1 <= d <= 31 and not (m == 2 and d > 29) and not (m in (4, 6, 9, 11) and d > 30)


_YMD = re.compile(rf"{_YEAR4}[/.-](\d{{1,2}})[/.-](\d{{1,2}})(?!\d)")
_MD = re.compile(r"(?<![\d:])(\d{1,2})[/.-](\d{1,2})(?![\d:])")
_WORDY_MONTH = re.compile(r"^(?:may|mar|march)\.?$")
_ORDINAL_OR_YEAR = re.compile(rf"\d(?:st|nd|rd|th)\b|{_YEAR4}|['’]\d\d", re.IGNORECASE)


class ValidatedDateRecognizer(PatternRecognizer):
    """Dates in numeric, partial and month-name forms (see the module docstring)."""

    PATTERNS = [
        Pattern("iso date-time",
                rf"{_START}{_YEAR4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
                r"(?:[T ][0-2]\d:[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:Z|[+-][0-2]\d:?[0-5]\d)?)?" + _END, 0.6),
        Pattern("y/m/d", rf"{_START}{_YEAR4}[/.](?:0?[1-9]|1[0-2])[/.](?:0?[1-9]|[12]\d|3[01]){_END}", 0.6),
        Pattern("numeric with year", rf"(?<![\w/.-]){_PRE}\d{{1,2}}([/.-])\d{{1,2}}\1(?:\d{{4}}|\d{{2}}){_TIME}{_END}",
                0.6),
        Pattern("weekday and m/d", rf"(?<![\w]){_WEEKDAY},?[ \t]+\d{{1,2}}/\d{{1,2}}{_TIME}(?![\w]|[/.,-]\d)", 0.6),
        Pattern("month name, day, year",
                rf"(?<![\w]){_PRE}{_MONTH}[ \t]*[-/.]?[ \t]*{_DAY}(?:(?:[ \t]*,[ \t]*|[ \t]*[-/][ \t]*|[ \t]+){_YEAR})?"
                rf"{_TIME}(?![\w])", 0.6),
        Pattern("day, month name, year",
                rf"(?<![\w.,/-]){_PRE}{_DAY}(?:[ \t]+of[ \t]+|[ \t]*[-/. ][ \t]*){_MONTH}"
                rf"(?:(?:[ \t]*,[ \t]*|[ \t]*[-/. ][ \t]*){_YEAR}|[-/.]\d\d|[ \t]*,[ \t]*\d\d(?![\w:]|[.,/][ \t]*\d|[ \t]*[-–][ \t]*\d)(?![ \t]*[a-z%]))?"
                rf"{_TIME}(?![\w])", 0.6),
        Pattern("month name and year", rf"(?<![\w]){_MONTH}(?:[ \t]*,[ \t]*|[ \t]*[-/][ \t]*|[ \t]+){_YEAR}(?![\w])",
                0.6),
        Pattern("m/d after a cue",
                rf"(?<=\b{_CUE}[ \t:]{{1,3}}(?:the[ \t]+)?){_START}\d{{1,2}}[/-]\d{{1,2}}{_TIME}(?![\w]|[/.,-]\d)"
                rf"{_NOT_DATE_AFTER}", 0.45),
        Pattern("m/d", rf"{_START}(?<!\d[ \t]?[x*][ \t]?)\d{{1,2}}/\d{{1,2}}(?![\w]|[/.,-]\d){_NOT_DATE_AFTER}", 0.2),
        Pattern("m/yyyy after a cue", rf"(?<=\b{_CUE}[ \t:]{{1,3}}){_START}(?:0?[1-9]|1[0-2])[/-]{_YEAR4}{_END}", 0.45),
        Pattern("m/yyyy", rf"{_START}(?:0?[1-9]|1[0-2])[/-]{_YEAR4}{_END}", 0.3),
        Pattern("'yy", r"(?<![\w'’])['’](?:[0-9]\d)(?:s)?(?![\w'’])", 0.5),
        Pattern("in yy", r"(?<=\b(?:in|since|of|circa|c\.)[ \t]{1,3})(?:[2-9]\d|0\d|1\d)(?=[ \t]*(?:[.,;:)]|$|\n))",
                0.2),
    ]
    CONTEXT = ["date", "dated", "dob", "birth", "born", "birthday", "admitted", "admission", "adm", "discharge",
               "discharged", "seen", "visit", "appointment", "appt", "surgery", "procedure", "scheduled",
               "follow", "hx", "history", "dx", "diagnosed", "mi", "cabg", "since", "onset", "last", "deceased",
               "died", "expired", "married", "divorced", "hired", "signed", "effective", "expiry", "expires"]

    def __init__(self, supported_language: str = "en", supported_entity: str = "DATE_TIME"):
        super().__init__(supported_entity=supported_entity, name="ValidatedDateRecognizer", patterns=list(self.PATTERNS),
                         context=list(self.CONTEXT), supported_language=supported_language,
                         global_regex_flags=NOCASE)

    def invalidate_result(self, pattern_text: str) -> bool:
        text = pattern_text.strip()
        first = re.match(r"[A-Za-z]+\.?", text)
        if first and _WORDY_MONTH.match(first.group(0)) and first.group(0)[0].islower():
            if not _ORDINAL_OR_YEAR.search(text):
                return True  # "may 3", "march 12" in lower case: likely the verbs
        ymd = _YMD.search(text)
        if ymd:
            return not _valid_md(int(ymd.group(1)), int(ymd.group(2)))
        md = _MD.search(text)
        if md:
            a, b = int(md.group(1)), int(md.group(2))
            return not (_valid_md(a, b) or _valid_md(b, a))
        return False
