"""The small Python packages whose histories the ``regression_hunt`` generator writes: four packages of three modules
each, every function with its call cases, two functions per package with the one-line regression a commit brings.

A ``Function``'s body is the correct one; its ``cases`` are argument lists (the first three may become visible
tests, in order; every case is a trusted hidden check). A ``Regression`` names the line it breaks (``fixed``, once in
the body), what the bad commit makes of it (``buggy``) and how that commit's message puts it (``change``); the first
case must fail with the buggy line, so the visible test written with the function catches it.

Example:
    >>> [p.name for p in PACKAGES], [len(p.functions) for p in PACKAGES]
    (['numkit', 'textkit', 'listkit', 'dictkit'], [9, 9, 9, 9])
    >>> [f.name for p in PACKAGES for f in p.functions if f.regression][:2]
    ['gcd', 'median']
    >>> print(function_source(PACKAGES[0].functions[0], buggy=False, example=""), end="")
    def clamp(x, low, high):
        \"\"\"Return x limited to the range [low, high].\"\"\"
        return max(low, min(x, high))
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Regression:
    fixed: str  # a line of the body (without its indentation), exactly once in it
    buggy: str  # that line after the bad commit
    change: str  # the bad commit's words for the change, e.g. "count from 1 in index_of()"


@dataclass(frozen=True)
class Function:
    module: str
    name: str
    params: str
    doc: str  # one sentence
    body: str  # indented by 4 spaces, each line ending in a newline
    cases: tuple[str, ...]  # argument lists as Python text
    regression: Regression | None = None

    def call(self, args: str) -> str:
        """The expression calling this function through its module: ``stats.mean([1, 2])``."""
        return f"{self.module}.{self.name}({args})"


@dataclass(frozen=True)
class Package:
    name: str
    doc: str
    modules: dict[str, str]  # module name -> its docstring, in the order the README lists them
    functions: tuple[Function, ...]


def function_source(function: Function, buggy: bool, example: str) -> str:
    """The function's text: its body with the regression when ``buggy``; ``example`` (a doctest line pair, or "")
    extends the docstring."""
    body = function.body
    if buggy:
        old, new = function.regression.fixed, function.regression.buggy
        assert body.count(old) == 1, (function.name, old)
        body = body.replace(old, new)
    doc = f'"""{function.doc}"""' if not example else f'"""{function.doc}\n\n    {example}\n    """'
    return f"def {function.name}({function.params}):\n    {doc}\n{body}"


def _f(module: str, name: str, params: str, doc: str, body: str, cases: tuple[str, ...],
       regression: Regression | None = None) -> Function:
    lines = "".join(f"    {line}\n" for line in body.strip("\n").split("\n"))
    return Function(module, name, params, doc, lines, cases, regression)


NUMKIT = Package("numkit", "Small helpers for numbers.", {
    "basic": "Basic arithmetic helpers.", "stats": "Statistics of lists of numbers.",
    "rounding": "Rounding and formatting numbers."}, (
    _f("basic", "clamp", "x, low, high", "Return x limited to the range [low, high].",
       "return max(low, min(x, high))", ("5, 0, 3", "-2, 0, 3", "2, 0, 3", "7, 1, 9", "0, 0, 0")),
    _f("basic", "sign", "x", "Return -1, 0 or 1: the sign of x.",
       "return (x > 0) - (x < 0)", ("5", "-3", "0", "2.5")),
    _f("basic", "gcd", "a, b", "Return the greatest common divisor of a and b.",
       "while b:\n    a, b = b, a % b\nreturn abs(a)",
       ("4, -6", "12, 18", "7, 5", "0, 9", "-8, -12"),
       Regression("while b:", "while b > 0:", "make the loop condition of gcd() explicit")),
    _f("stats", "mean", "values", "Return the arithmetic mean of values.",
       "return sum(values) / len(values)", ("[1, 2]", "[2, 4, 6]", "[5]", "[-1, 2]")),
    _f("stats", "median", "values", "Return the middle value of values (the mean of the two middle ones if even).",
       "ordered = sorted(values)\nmiddle = len(ordered) // 2\nif len(ordered) % 2:\n    return ordered[middle]\n"
       "return (ordered[middle - 1] + ordered[middle]) / 2",
       ("[3, 1, 2]", "[4, 1, 3, 2]", "[5]", "[1, 2, 3]", "[9, 7, 8, 1, 2]"),
       Regression("ordered = sorted(values)", "ordered = list(values)", "avoid sorting a copy in median()")),
    _f("stats", "spread", "values", "Return the largest value minus the smallest.",
       "return max(values) - min(values)", ("[3, 9, 4]", "[5]", "[-2, 2]")),
    _f("rounding", "round_to", "x, step", "Return x rounded to the nearest multiple of step.",
       "return round(x / step) * step", ("8, 5", "7, 5", "-8, 5", "12, 4")),
    _f("rounding", "percent", "part, whole", "Return part as a percentage of whole, to one decimal.",
       "return round(100 * part / whole, 1)", ("1, 3", "1, 2", "3, 4", "0, 5")),
    _f("rounding", "thousands", "n", "Return n with commas between groups of three digits.",
       'return f"{n:,}"', ("1234567", "999", "-1000")),
))

TEXTKIT = Package("textkit", "Small helpers for text.", {
    "cases": "Changing the case of words.", "clean": "Cleaning up text.", "count": "Counting things in text."}, (
    _f("cases", "title_words", "text", "Return text with the first letter of every word in upper case.",
       'return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))',
       ('"hello world"', '"a  b"', '""', '"x-ray vision"')),
    _f("cases", "snake_case", "text", "Return text as lower-case words joined by underscores.",
       'return "_".join(text.lower().split())', ('"Hello World"', '" padded  words "', '"one"')),
    _f("cases", "initials", "name", "Return the upper-case initials of the words in name.",
       'return "".join(word[0].upper() for word in name.split())',
       ('"ada lovelace"', '"Grace Brewster Hopper"', '""')),
    _f("clean", "collapse_spaces", "text", "Return text with every run of whitespace made one space, stripped.",
       'return " ".join(text.split())', ('"a  b\\tc"', '"  x "', '""')),
    _f("clean", "strip_prefix", "text, prefix", "Return text without prefix at its start, if it starts with it.",
       "if prefix and text.startswith(prefix):\n    return text[len(prefix):]\nreturn text",
       ('"www.web.org", "www."', '"v1.2", "v"', '"aab", "a"', '"abc", "x"', '"abc", ""'),
       Regression("return text[len(prefix):]", "return text.lstrip(prefix)",
                  "let strip_prefix() use str.lstrip")),
    _f("clean", "truncate", "text, width", "Return text cut to width characters, ending in '...' when cut.",
       'if len(text) <= width:\n    return text\nreturn text[:width - 3] + "..."',
       ('"hello", 5', '"hello world", 8', '"hi", 5', '"abcdef", 4'),
       Regression("if len(text) <= width:", "if len(text) < width:", "simplify the length check of truncate()")),
    _f("count", "word_count", "text", "Return the number of words in text.",
       "return len(text.split())", ('"a b  c"', '""', '"one"')),
    _f("count", "vowel_count", "text", "Return the number of vowels (a, e, i, o, u) in text, in either case.",
       'return sum(1 for ch in text.lower() if ch in "aeiou")', ('"Audio Input"', '"hello"', '"xyz"')),
    _f("count", "letter_counts", "text", "Return how often each character occurs in text.",
       "return {ch: text.count(ch) for ch in sorted(set(text))}", ('"abca"', '""', '"zz"')),
))

LISTKIT = Package("listkit", "Small helpers for lists.", {
    "chunks": "Splitting lists into pieces.", "order": "Ordering lists.", "search": "Finding things in lists."}, (
    _f("chunks", "chunk", "items, size", "Return items in lists of size items (the last one may be shorter).",
       "return [items[i:i + size] for i in range(0, len(items), size)]",
       ("[1, 2, 3, 4, 5], 2", "[1, 2, 3], 3", "[], 2", "[1, 2, 3, 4], 3"),
       Regression("return [items[i:i + size] for i in range(0, len(items), size)]",
                  "return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]",
                  "stop chunk() at the last full chunk")),
    _f("chunks", "pairs", "items", "Return each item paired with the next one.",
       "return list(zip(items, items[1:]))", ("[1, 2, 3]", "[1]", "[]")),
    _f("chunks", "flatten", "lists", "Return the items of a list of lists as one list, in order.",
       "return [item for inner in lists for item in inner]", ("[[1, 2], [3], []]", "[]", "[[4], [5, 6]]")),
    _f("order", "dedupe", "items", "Return items without repeats, in the order they first occur.",
       "seen = set()\nout = []\nfor item in items:\n    if item not in seen:\n        seen.add(item)\n"
       "        out.append(item)\nreturn out", ("[3, 1, 3, 2, 1]", "[]", "[1, 1]")),
    _f("order", "top_n", "items, n", "Return the n largest items, largest first.",
       "return sorted(items, reverse=True)[:n]", ("[3, 1, 4, 1, 5], 2", "[2], 1", "[1, 2, 3], 0")),
    _f("order", "rotate", "items, k", "Return items rotated left by k places.",
       "if not items:\n    return []\nk %= len(items)\nreturn items[k:] + items[:k]",
       ("[1, 2, 3, 4], 1", "[1, 2, 3], 5", "[], 2", "[1, 2], -1")),
    _f("search", "index_of", "items, target", "Return the index of target in items, or -1 if it is absent.",
       "for index, item in enumerate(items):\n    if item == target:\n        return index\nreturn -1",
       ("[5, 6, 7], 6", "[5, 6, 7], 9", "[], 1")),
    _f("search", "first_over", "items, limit", "Return the first item greater than limit, or None.",
       "return next((item for item in items if item > limit), None)", ("[1, 5, 9], 5", "[1, 2], 5", "[7], 5")),
    _f("search", "binary_search", "ordered, target", "Return the index of target in the sorted list, or -1.",
       "low, high = 0, len(ordered) - 1\nwhile low <= high:\n    middle = (low + high) // 2\n"
       "    if ordered[middle] == target:\n        return middle\n    if ordered[middle] < target:\n"
       "        low = middle + 1\n    else:\n        high = middle - 1\nreturn -1",
       ("[1, 3, 5, 7], 7", "[1, 3, 5], 1", "[2, 4], 3", "[5], 5", "[1, 2, 3, 4, 5], 3"),
       Regression("while low <= high:", "while low < high:", "tighten the loop of binary_search()")),
))

DICTKIT = Package("dictkit", "Small helpers for dicts.", {
    "merge": "Combining dicts.", "access": "Reading nested dicts.", "shape": "Reshaping dicts."}, (
    _f("merge", "merge", "a, b", "Return a new dict with the items of a and then of b (b wins).",
       "return {**a, **b}", ('{"x": 1}, {"x": 2}', '{"a": 1}, {"b": 2}', "{}, {}")),
    _f("merge", "defaults", "data, fallback", "Return data with the keys of fallback it lacks added.",
       "return {**fallback, **data}", ('{"x": 1}, {"x": 0, "y": 0}', "{}, {}", '{"a": 1}, {}')),
    _f("merge", "without_none", "data", "Return data without the items whose value is None.",
       "return {key: value for key, value in data.items() if value is not None}",
       ('{"a": None, "b": 0}', "{}", '{"c": False}')),
    _f("access", "get_path", "data, path, default=None", "Return the value at a dotted path like 'a.b', or default.",
       "current = data\nfor key in path.split(\".\"):\n    if not isinstance(current, dict) or key not in current:\n"
       "        return default\n    current = current[key]\nreturn current",
       ('{"a": 1}, "a.b"', '{"a": {"b": 2}}, "a.b"', '{}, "x", 0', '{"a": "xyz"}, "a.y"',
        '{"a": {"b": None}}, "a.b", 5'),
       Regression("if not isinstance(current, dict) or key not in current:", "if key not in current:",
                  "simplify the lookup in get_path()")),
    _f("access", "pick", "data, keys", "Return the items of data whose keys are in keys.",
       "return {key: data[key] for key in keys if key in data}",
       ('{"a": 1, "b": 2}, ["a", "c"]', "{}, []", '{"a": 1}, ["a"]')),
    _f("access", "omit", "data, keys", "Return data without the given keys.",
       "return {key: value for key, value in data.items() if key not in keys}",
       ('{"a": 1, "b": 2}, ["a"]', "{}, []", '{"a": 1}, ["b"]')),
    _f("shape", "invert", "data", "Return data with keys and values swapped.",
       "return {value: key for key, value in data.items()}", ('{"a": 1, "b": 2}', "{}", '{"x": "y"}')),
    _f("shape", "count_by", "items, key", "Return how many items fall under each value of key(item).",
       "counts = {}\nfor item in items:\n    group = key(item)\n    counts[group] = counts.get(group, 0) + 1\n"
       "return counts",
       ('["a", "bb", "cc"], len', "[], len", "[1, 1, 2], str", '["x"], len'),
       Regression("counts[group] = counts.get(group, 0) + 1", "counts[group] = counts.get(group, 1) + 1",
                  "simplify the default count in count_by()")),
    _f("shape", "group_by", "items, key", "Return the items grouped in lists by key(item), in order.",
       "groups = {}\nfor item in items:\n    groups.setdefault(key(item), []).append(item)\nreturn groups",
       ('["a", "bb", "c"], len', "[], len", "[3, 4, 5], bool")),
))

PACKAGES = (NUMKIT, TEXTKIT, LISTKIT, DICTKIT)

# Regressions of functions the suite never breaks, for warm-start data only (``regression_hunt.warm_up_specs``): an
# agent policy warm-started on them learns to read the fix off the bad commit's diff, not to recall the suite's eight.
WARM_UP_REGRESSIONS = {
    ("numkit", "clamp"): Regression("return max(low, min(x, high))", "return min(low, max(x, high))",
                                    "write clamp() with the bounds the other way round"),
    ("numkit", "percent"): Regression("return round(100 * part / whole, 1)", "return round(100 * part // whole, 1)",
                                      "use integer division in percent()"),
    ("numkit", "round_to"): Regression("return round(x / step) * step", "return int(x / step) * step",
                                       "avoid a float round in round_to()"),
    ("numkit", "spread"): Regression("return max(values) - min(values)", "return max(values) - min(values[1:])",
                                     "skip the first value's comparison in spread()"),
    ("textkit", "snake_case"): Regression('return "_".join(text.lower().split())', 'return "_".join(text.split())',
                                          "keep the case of words in snake_case()"),
    ("textkit", "initials"): Regression('return "".join(word[0].upper() for word in name.split())',
                                        'return "".join(word[0] for word in name.split())',
                                        "keep the initials as written in initials()"),
    ("textkit", "word_count"): Regression("return len(text.split())", 'return len(text.split(" "))',
                                          "split words on spaces only in word_count()"),
    ("textkit", "vowel_count"): Regression('return sum(1 for ch in text.lower() if ch in "aeiou")',
                                           'return sum(1 for ch in text if ch in "aeiou")',
                                           "drop the lower() call of vowel_count()"),
    ("listkit", "pairs"): Regression("return list(zip(items, items[1:]))", "return list(zip(items, items[2:]))",
                                     "pair every other item in pairs()"),
    ("listkit", "top_n"): Regression("return sorted(items, reverse=True)[:n]", "return sorted(items)[:n]",
                                     "sort once, ascending, in top_n()"),
    ("listkit", "rotate"): Regression("return items[k:] + items[:k]", "return items[k:] + items[:k - 1]",
                                      "trim the wrapped part in rotate()"),
    ("listkit", "first_over"): Regression("return next((item for item in items if item > limit), None)",
                                          "return next((item for item in items if item >= limit), None)",
                                          "include the limit itself in first_over()"),
    ("dictkit", "merge"): Regression("return {**a, **b}", "return {**b, **a}", "merge the dicts in one pass"),
    ("dictkit", "defaults"): Regression("return {**fallback, **data}", "return {**data, **fallback}",
                                        "apply the fallback last in defaults()"),
    ("dictkit", "without_none"): Regression(
        "return {key: value for key, value in data.items() if value is not None}",
        "return {key: value for key, value in data.items() if value}", "shorten the test of without_none()"),
    ("dictkit", "omit"): Regression("return {key: value for key, value in data.items() if key not in keys}",
                                    "return {key: value for key, value in data.items() if key in keys}",
                                    "simplify the key test of omit()"),
}

