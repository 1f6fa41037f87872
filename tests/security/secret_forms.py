"""The attacker's side of the secret tests: a secret written the ways a model or a tool
might write it, and a check, independent of the matcher's own code, that a text does not
give it away (it decodes what it finds rather than re-deriving the matcher's variants)."""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import html
import re
import unicodedata
from urllib.parse import quote, quote_plus, unquote_plus

from hypothesis import strategies as st

__all__ = ("FORMS", "leaks", "planted", "secrets")

#: Secrets as services mint them: keys, passwords with punctuation, long enough to matter.
secrets = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!@#",
    min_size=8,
    max_size=40,
).filter(lambda s: len(set(s.lower())) >= 4)  # ("aaaaaaaa" is not a key anyone mints)

FORMS = (
    "plain", "upper", "lower", "swapcase", "spaced", "newlines", "reversed", "base64",
    "base64url", "url", "url_plus", "percent", "hex", "reversed_base64", "fullwidth",
    "zero_width", "html_decimal", "html_hex", "html_mixed", "json_unicode",
    "json_unicode_some", "rot13", "lookalike",
)

#: Latin letters and the Cyrillic or Greek ones a copy may write in their place.
_LOOKALIKE = {
    "a": "а", "c": "с", "e": "е", "o": "о", "p": "р", "x": "х", "y": "у", "i": "і",
    "j": "ј", "s": "ѕ", "A": "Α", "B": "В", "C": "С", "E": "Ε", "H": "Н", "K": "Κ",
    "M": "М", "O": "Ο", "P": "Р", "T": "Τ", "X": "Х", "v": "ν", "N": "Ν", "Z": "Ζ",
}  # fmt: skip
_FROM_LOOKALIKE = str.maketrans({v: k for k, v in _LOOKALIKE.items()})
#: ASCII characters HTML names (``&period;``).
_NAMED = {".": "&period;", "_": "&lowbar;", "!": "&excl;", "@": "&commat;", "#": "&num;"}
_JSON_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")  # (JSON in JSON: more backslashes)


def _html_mixed(secret: str) -> str:
    """Each character plain, as a decimal or hex reference, or by name, in turn."""
    out = []
    for i, c in enumerate(secret):
        bare = not secret[i + 1 : i + 2].isdigit()  # ("&#45" then "9" reads "&#459")
        if c in _NAMED and i % 2:
            out.append(_NAMED[c])
        else:
            out.append((c, f"&#{ord(c)};", f"&#x{ord(c):X};", f"&#{ord(c)}" + ";"[bare:])[i % 4])
    return "".join(out)


def _spaced(secret: str, gap: str) -> str:
    return gap.join(secret)


def written(secret: str, form: str, before: bytes = b"", after: bytes = b"") -> str:
    """``secret`` as ``form`` writes it; the encodings take bytes around it, as a real
    encoded blob would (``before``/``after`` change the alignment)."""
    raw = secret.encode()
    match form:
        case "plain":
            return secret
        case "upper":
            return secret.upper()
        case "lower":
            return secret.lower()
        case "swapcase":
            return secret.swapcase()
        case "spaced":
            return _spaced(secret, " ")
        case "newlines":
            return _spaced(secret, "\n ")
        case "reversed":
            return secret[::-1]
        case "base64":
            return base64.b64encode(before + raw + after).decode()
        case "base64url":
            return base64.urlsafe_b64encode(before + raw + after).decode()
        case "reversed_base64":
            return base64.b64encode(before + raw[::-1] + after).decode()
        case "url":
            return quote(secret, safe="")
        case "url_plus":
            return quote_plus(secret)
        case "percent":
            return "".join(f"%{b:02X}" for b in raw)
        case "hex":
            return raw.hex()
        case "fullwidth":  # (what a model copying from a CJK page may write)
            return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in secret)
        case "zero_width":  # invisible between every two characters
            return "\u200b".join(secret)
        case "html_decimal":
            return "".join(f"&#{ord(c)};" for c in secret)
        case "html_hex":
            return "".join(f"&#x{ord(c):x};" for c in secret)
        case "html_mixed":
            return _html_mixed(secret)
        case "json_unicode":  # (what json.dumps of an escaped text writes)
            return "".join(f"\\u{ord(c):04x}" for c in secret)
        case "json_unicode_some":
            return "".join(f"\\u{ord(c):04X}" if i % 3 == 1 else c for i, c in enumerate(secret))
        case "rot13":
            return codecs.encode(secret, "rot13")
        case "lookalike":  # Cyrillic and Greek letters for the Latin ones they look like
            return "".join(_LOOKALIKE.get(c, c) for c in secret)
    raise AssertionError(form)


@st.composite
def planted(draw: st.DrawFn, secret: str) -> str:
    """A text with ``secret`` inside, in a form drawn at random, among ordinary words."""
    form = draw(st.sampled_from(FORMS))
    before = draw(st.binary(max_size=5))
    after = draw(st.binary(max_size=5))
    words = st.sampled_from(("order", "A-1", "shipped", "{", '"k":', "\n", " ", "ok."))
    head = "".join(draw(st.lists(words, max_size=4)))
    tail = "".join(draw(st.lists(words, max_size=4)))
    return f"{head} {written(secret, form, before, after)} {tail}"


_B64_RUN = re.compile(r"[A-Za-z0-9+/_\-]{6,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{6,}")


def _decoded_views(text: str) -> list[str]:
    """``text`` as a reader with the usual tools would see it: URL-decoded, squeezed of
    whitespace, and every base64 or hex run decoded at every alignment."""
    seen = unicodedata.normalize("NFKC", text)  # as a person reads it
    seen = "".join(c for c in seen if unicodedata.category(c) != "Cf")
    unescaped = _JSON_ESCAPE.sub(lambda m: chr(int(m[1], 16)), html.unescape(text))
    views = [text, unquote_plus(text), "".join(text.split()), seen, unescaped]
    views += [codecs.encode(text, "rot13"), text.translate(_FROM_LOOKALIKE)]
    for run in _B64_RUN.findall(text):
        std = run.replace("-", "+").replace("_", "/")
        for skip in range(4):
            part = std[skip:]
            if len(part) % 4 == 1:  # (a lone character encodes no whole byte)
                part = part[:-1]
            part += "=" * (-len(part) % 4)
            with contextlib.suppress(binascii.Error, ValueError):
                views.append(base64.b64decode(part).decode("latin-1"))
    for run in _HEX_RUN.findall(text):
        for skip in range(2):
            part = run[skip:]
            part = part[: len(part) - len(part) % 2]
            views.append(bytes.fromhex(part).decode("latin-1"))
    return views


def leaks(text: str, secret: str) -> bool:
    """Whether ``text`` gives ``secret`` away in any form :data:`FORMS` lists (HTML and
    JSON escapes decoded, rot13 undone, look-alike letters read as Latin). (Decoded
    base64 shows the secret only where its bytes survive whole: a matcher that replaced
    part of the encoded run leaves none.)"""
    lowered = secret.lower()
    for view in _decoded_views(text):
        view = "".join(view.lower().split())
        if lowered in view or lowered[::-1] in view:
            return True
    return False
