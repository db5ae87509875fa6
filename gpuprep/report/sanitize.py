"""Strings that came from a node (host names, GPU and OS names, driver strings, kernel command lines, probe
errors) made safe for each output before any renderer sees them, in one place:
- text: control characters (C0, DEL, C1), line and paragraph separators, bidirectional overrides and lone
  surrogates are shown escaped (\\x1b, \\n, \\u202e), so nothing a node says can move the cursor, set the
  clipboard (OSC 52), clear the screen or start a line of its own that reads like gpuprep's verdict;
- XML (JUnit): every character XML 1.0 forbids is shown escaped the same way;
- HTML, Prometheus, JSON: lone surrogates (valid JSON escapes, invalid Unicode) escaped; the renderers escape
  the rest themselves."""
from __future__ import annotations

import re
from typing import Any, Callable

_SURROGATE = "\ud800-\udfff"
_TEXT_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069{_SURROGATE}]")
_XML_UNSAFE = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff{_SURROGATE}]")
_SURROGATES = re.compile(f"[{_SURROGATE}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: "re.Match[str]") -> str:
    ch = match.group(0)
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def text_safe(value: str) -> str:
    return _TEXT_UNSAFE.sub(_escape, value)


def xml_safe(value: str) -> str:
    return _XML_UNSAFE.sub(_escape, value)


def unicode_safe(value: str) -> str:
    return _SURROGATES.sub(_escape, value)


def cleaned(document: Any, clean: Callable[[str], str]) -> Any:
    """A copy of the document with every string (keys too) passed through `clean`."""
    if isinstance(document, str):
        return clean(document)
    if isinstance(document, dict):
        return {cleaned(k, clean) if isinstance(k, str) else k: cleaned(v, clean) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [cleaned(v, clean) for v in document]
    return document


_OWN_COLOUR = re.compile(r"(\x1b\[[0-9;]*m)")


def terminal_line(line: str) -> str:
    """A line of the text report: everything made text_safe except the colour codes the report's Writer adds
    (SGR sequences only: they cannot move the cursor, clear the screen or write the clipboard)."""
    return "".join(part if _OWN_COLOUR.fullmatch(part) else text_safe(part) for part in _OWN_COLOUR.split(line))


# the text report's document is made text_safe before the Writer adds its own colour (so an ESC[8m in a GPU name is
# shown as \x1b[8m and hides nothing); the Writer's line-by-line terminal_line stays as the second guard
CLEANERS = {"junit": xml_safe, "html": unicode_safe, "prometheus": unicode_safe,
            "json": unicode_safe, "text": text_safe}
