"""Training instructions for distilling drafts, built from templates × topics in code.

Why in code: the corpus must exist on every machine, offline, and be identical given a seed, so
the drafts rebuild bit for bit. The verifier answers these instructions itself (see
``distill``), which makes the training text on-policy: what a draft must predict at
decoding time is exactly the verifier's own style. The instructions are kept apart from the
evaluation prompts (``specnb/data/prompts.jsonl``): different templates and topics, and any exact
overlap is dropped by :func:`build_instructions`.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from specnb.core.errors import ParameterError
from specnb.core.paths import PROMPTS_FILE

_CODING = [
    "Write a Python function that {task}.",
    "Show how to {task} in Python, with a short explanation.",
    "Write a small JavaScript snippet that {task}.",
]
_CODING_TASKS = [
    "counts the vowels in a string", "reverses the words of a sentence", "checks whether a number is prime",
    "merges two sorted lists", "computes a factorial", "finds the largest element of a list",
    "converts inches to centimetres", "returns the nth Fibonacci number", "flattens a nested list",
    "counts word frequencies in a text", "sorts a list of dictionaries by a key", "computes the median of a list",
    "finds common elements of two lists", "capitalizes each word", "computes the GCD of two numbers",
    "checks whether two words are anagrams", "rotates a list by k positions", "checks whether a year is a leap year",
    "transposes a matrix", "groups words by their first letter", "finds the longest word in a sentence",
]
_EXPLAIN = [
    "Explain {topic} in simple terms.", "What is {topic}? Give a short answer.",
    "Give three key facts about {topic}.", "Why does {topic} matter? Answer briefly.",
    "Describe {topic} in two sentences.",
]
_TOPICS = [
    "the water cycle", "gravity", "compound interest", "the immune system", "glaciers", "coral reefs",
    "black holes", "supply and demand", "recycling", "the internet", "vaccines", "plate tectonics",
    "electric cars", "the moon's phases", "democracy", "the stock market", "nuclear fusion",
    "the French Revolution", "solar panels", "the human heart", "ocean tides", "inflation", "rainbows",
    "antibiotics", "the Roman Empire", "climate change", "hurricanes", "DNA", "earthquakes", "magnets",
    "the Silk Road", "fermentation", "the Pythagorean theorem", "wind turbines", "blockchain",
]
_STORY = [
    "Write a short story about {thing}.", "Write a four-line poem about {thing}.",
    "Tell a funny anecdote involving {thing}.", "Describe a day in the life of {thing}.",
]
_THINGS = [
    "a lighthouse keeper", "a lost umbrella", "a curious fox", "an old clock", "a robot gardener",
    "a dragon who loves tea", "a library at midnight", "a brave little boat", "a snowman in spring",
    "a talking parrot", "a forgotten key", "a retired astronaut", "a clockwork mouse", "a shy giraffe",
]
_EMAIL = [
    "Write a polite email to {who} about {what}.", "Draft a short message to {who} regarding {what}.",
]
_WHO = ["a supplier", "my landlord", "a customer", "my teacher", "the team", "the school office", "my manager"]
_WHAT = [
    "a delayed delivery", "rescheduling a meeting", "a broken heater", "a project update", "a missing invoice",
    "taking a day off", "a noise complaint", "a new product launch",
]
_ADVICE = [
    "Give me {n} tips for {goal}.", "How can I {goal2}?", "What are good ways to {goal2}?",
]
_GOALS = [
    ("staying focused while studying", "stay focused while studying"), ("saving money", "save money"),
    ("writing a cover letter", "write a good cover letter"), ("learning a new language", "learn a new language"),
    ("keeping houseplants alive", "keep houseplants alive"), ("reducing screen time", "spend less time on my phone"),
    ("public speaking", "get better at public speaking"), ("cooking on a budget", "cook cheap healthy meals"),
]
_SUMMARY_SOURCES = [
    "The river had flooded twice that spring. Farmers moved their animals to higher fields, and the town "
    "council voted to build a new levee before the autumn rains.",
    "The old fishing harbour was dredged last year, so larger boats can now dock there. Local fishermen say "
    "their catch can reach the market two hours earlier.",
    "The chess club meets every Thursday in the community hall. Beginners get a free lesson, and a tournament "
    "is held at the end of each season.",
    "Researchers found that short walks after meals lowered blood sugar levels. Even ten minutes of light "
    "walking made a measurable difference.",
    "The company reported higher sales in the third quarter, driven by online orders, but warned that "
    "shipping costs would rise next year.",
]
_MATH = [
    "A shop sells pens at {a} dollars each. How much do {b} pens cost?",
    "A garden has {a} rows of {b} plants. How many plants are there?",
    "Sara reads {a} pages a day. How many pages does she read in {b} days?",
    "What is {a} plus {b}? Explain step by step.", "What is {a} times {b}?",
]
_TRANSLATE = ["Translate to French: '{s}'", "Translate to Spanish: '{s}'", "Translate to German: '{s}'"]
_SENTENCES = [
    "The museum is closed on Mondays.", "My sister plays the violin.", "How much does this ticket cost?",
    "The children are playing in the park.", "I forgot my umbrella at home.", "Our neighbours have two dogs.",
]
_CHAT = [
    "What's your favourite season and why?", "Which board game would you suggest for a family evening?",
    "What is a good name for a goldfish?", "Tell me something interesting about penguins.",
    "What do you think makes a good friend?", "What is a fun fact about octopuses?",
    "Good morning! Any advice for a productive day?", "Is it better to travel by train or by plane?",
]


def _one(rng: random.Random) -> str:
    """Draw one instruction: pick a category, then its template and fillers."""
    kind = rng.choice(["code", "explain", "explain", "story", "email", "advice", "summary", "math",
                       "translate", "chat"])
    if kind == "code":
        return rng.choice(_CODING).format(task=rng.choice(_CODING_TASKS))
    if kind == "explain":
        return rng.choice(_EXPLAIN).format(topic=rng.choice(_TOPICS))
    if kind == "story":
        return rng.choice(_STORY).format(thing=rng.choice(_THINGS))
    if kind == "email":
        return rng.choice(_EMAIL).format(who=rng.choice(_WHO), what=rng.choice(_WHAT))
    if kind == "advice":
        goal, goal2 = rng.choice(_GOALS)
        return rng.choice(_ADVICE).format(n=rng.choice([3, 4, 5]), goal=goal, goal2=goal2)
    if kind == "summary":
        return f"Summarize in one sentence: {rng.choice(_SUMMARY_SOURCES)}"
    if kind == "math":
        return rng.choice(_MATH).format(a=rng.randint(2, 60), b=rng.randint(2, 12))
    if kind == "translate":
        return rng.choice(_TRANSLATE).format(s=rng.choice(_SENTENCES))
    return rng.choice(_CHAT)


def evaluation_prompts(path: Path | None = None) -> list[str]:
    """Texts of the evaluation prompts, so training can avoid them (empty if the file is absent)."""
    path = path or PROMPTS_FILE
    if not path.is_file():
        return []
    return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()]


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _template_grams() -> set[tuple[str, ...]]:
    """4-word phrases of the bare templates: sharing only these ("Write a short story about")
    is sharing an instruction format, not a task."""
    templates = _CODING + _EXPLAIN + _STORY + _EMAIL + _ADVICE + _MATH + _TRANSLATE + ["Summarize in one sentence:"]
    return set().union(*(_grams(re.sub(r"{\w+}", " ", t)) for t in templates))


def build_instructions(n: int, seed: int = 0, exclude: list[str] | None = None) -> list[str]:
    """``n`` distinct training instructions, deterministic given ``seed``.

    An instruction is skipped when it shares any 4-word phrase (beyond the bare template wording)
    with a text in ``exclude`` (default: the evaluation prompts), so the drafts are never trained
    on the tasks they are measured on. Distinct because repeating an instruction under greedy
    decoding repeats its answer: wasted verifier time and a skewed corpus.
    """
    rng = random.Random(seed)
    exclude = evaluation_prompts() if exclude is None else exclude
    banned = set().union(*(_grams(t) for t in exclude)) - _template_grams() if exclude else set()
    seen: set[str] = set()
    out: list[str] = []
    for _ in range(n * 50):
        text = _one(rng)
        if text not in seen and not (_grams(text) & banned):
            out.append(text)
            if len(out) == n:
                return out
        seen.add(text)
    raise ParameterError(f"only {len(out)} distinct training instructions could be drawn; ask for fewer than {n}")
