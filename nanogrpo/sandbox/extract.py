"""Code extraction from a completion: the last fenced block in the problem's language."""
import re

ALIASES = {
    "python": ("python", "py", "python3"),
    "javascript": ("javascript", "js", "node", "nodejs"),
    "cpp": ("cpp", "c++", "cc", "cxx"),
}
# Matched one line at a time: a single regex over the whole text (an opening fence, a lazy body, a closing
# fence) backtracked over every unclosed opening, quadratic in the completion (64 s for 96 KB of openings).
_OPEN = re.compile(r"[ \t]*```[ \t]*([^\s`]*)")  # a fence with its info string; the rest of the line is free
_CLOSE = re.compile(r"[ \t]*```[ \t]*")          # a closing fence is a line of its own


def extract_code(completion: str, language: str = "python", any_language: bool = False) -> str | None:
    """Body of the last closed ```<language> block (any block if any_language), or None if there is none.

    An unclosed block (a completion cut off by the length limit) does not count. Linear in the completion."""
    if language not in ALIASES:
        raise ValueError(f"unknown language {language!r} (expected one of {sorted(ALIASES)})")
    tags = ALIASES[language]
    found = tag = body = None
    pos = 0
    while True:
        end = completion.find("\n", pos)
        line = completion[pos:] if end < 0 else completion[pos:end]
        if tag is None:
            m = _OPEN.match(line)
            if m and end >= 0:  # an opening fence needs a body line after it
                tag, body = m.group(1), end + 1
        elif _CLOSE.fullmatch(line):
            if any_language or tag.lower() in tags:
                found = completion[body:pos]
            tag = None
        if end < 0:
            return found
        pos = end + 1
