"""The prompts of entity-graph synthesis (SoE, paper 001, after EntiGraph), and the checks
that decide whether an answer followed its instruction.

The association prompt is the paper's Appendix C (Figure 9) as published. The others
follow EntiGraph's steps in our own words: list the salient entities, describe each
entity, and for each k-tuple write question-answer pairs and an analysis of how its
entities relate, always conditioned on the article. Entity tokens (``Person_[...]``)
are entities like any other: prompts ask the model to copy them exactly.
"""

from __future__ import annotations

import re

SYSTEM = ("You are an assistant that helps a reader learn everything an article says. You answer only from the "
          "article. Some names in the article are encrypted tokens such as Person_[AbC1=]; treat each token as a "
          "name and copy it exactly, character for character.")

ASSOCIATION = """You will act as a scorer responsible for evaluating the strength of association between two specific entities (E1 and E2) in a given article. The evaluation will be based on the following three criteria:

1. Causal Relationship: Assess whether there is a causal relationship between E1 and E2. Describe each of the following situations:

- E1 causes or influences E2: <specific description>
- E2 causes or influences E1: <specific description>

2. Dependency: Evaluate the extent to which one entity depends on or is influenced by the other within the context of the article.

- E1 depends on E2: <specific description>
- E2 depends on E1: <specific description>

3. Indirect Association: If there is no direct relationship between E1 and E2, identify indirect connections through other entities.

- * List intermediary entities mentioned in the article that are connected to both E1 and E2.
- * Describe how these intermediary entities help establish a connection between E1 and E2.
- * Determine the type of relationship between the intermediary entities and each of the two target entities.

After analyzing these three criteria, assign a score (between 0 and 1) representing the overall strength of association between E1 and E2 in the context of the article. The score should reflect the degree of connection based on the article's content.

Your response should follow the format below to ensure clarity and organization:

Causal Relationship between <E1> and <E2> in <Title>

E1 influences E2: <Describe the causal effect of E1 on E2>.

E2 influences E1: <Describe the causal effect of E2 on E1>.

Dependency between <E1> and <E2> in <Title>

E1 depends on E2: <Describe how E1 depends on E2>.

E2 depends on E1: <Describe how E2 depends on E1>.

Indirect Association between <E1> and <E2> in <Title>

Intermediary Entities: <List and describe other entities that act as bridges between E1 and E2>.

Link through Intermediaries: <Discuss how these entities link E1 and E2>.

Score: <Assign a score between 0 and 1 based on the strength of connection>.

Title: {title}
E1: {e1}
E2: {e2}

Article:
{article}"""

ENTITIES = """List the salient entities of the article below: people, places, organisations, objects and concepts that matter to what it says. Write one entity per line, each line starting with "- ", using the article's own words (copy encrypted tokens exactly), at most {limit} lines and nothing else.

Title: {title}

Article:
{article}"""

DESCRIPTION = """Using only the article below, describe the entity "{entity}": who or what it is, what it does and what happens to it. Write a paragraph of plain prose.

Title: {title}

Article:
{article}"""

QA = """Using only the article below, write question-answer pairs about how these entities relate to each other: {entities}. Each pair must mention at least two of them. Write each pair as two lines:
Q: <question>
A: <answer>

Title: {title}

Article:
{article}"""

RELATION = """Using only the article below, analyse how these entities relate to each other: {entities}. Discuss how each influences, depends on or is connected with the others, citing what the article says. Write plain prose.

Title: {title}

Article:
{article}"""

_QA_PAIR = re.compile(r"^\s*\**Q\**\s*[:：].+\n\s*\**A\**\s*[:：].+", re.MULTILINE)


def messages(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_entities(answer: str, limit: int) -> list[str]:
    """The ``- `` lines of an entity list, stripped, distinct, at most ``limit``."""
    out: list[str] = []
    for line in (answer or "").splitlines():
        line = line.strip()
        if line.startswith(("- ", "* ")):
            e = line[2:].strip().strip("*\"'").strip()
            if e and len(e) <= 200 and e not in out:
                out.append(e)
        if len(out) >= limit:
            break
    return out


def problem(kind: str, answer: str, entities: tuple[str, ...]) -> str | None:
    """Why a synthetic sample does not follow its instruction, or None: ``empty``;
    ``format`` (a QA answer without a ``Q:``/``A:`` pair); ``entities`` (a tuple's sample
    that names fewer than two of its entities, or a description that omits its entity)."""
    text = (answer or "").strip()
    if not text:
        return "empty"
    if kind == "qa" and not _QA_PAIR.search(text):
        return "format"
    named = sum(1 for e in entities if e in text)
    if kind in ("qa", "relation") and named < min(2, len(entities)):
        return "entities"
    if kind == "description" and named < 1:
        return "entities"
    return None
