# ruff: noqa: E501  (the rule table reads best one pattern per line)
"""The heuristic screener's rules: families of regular expressions, each opened by anchors.

``heuristics.py`` describes how they run (one anchor pass, then the family's rules on a
small window around each anchor); this module holds the table and how a family is built
from it. Patterns run on lower-cased windows of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ahocorasick_rs

__all__ = ("FAMILIES", "Family")

# Up to 40 characters within a sentence; a single line break too (a wrapped line), not a
# blank line (a paragraph's end).
_GAP = r"(?:[^.\n。!?]|\n(?!\n)){0,40}?"
_W = r"(?<![\w])"  # a word start that also works after punctuation and CJK
_OVERRIDE_VERBS = r"(?:ignore|ignoring|disregard|forget|override|bypass|skip)"
_OVERRIDE_WHAT = r"(?:previous|prior|above|earlier|preceding|original|initial|all|any|your|system|developer|safety)"
_HARMFUL = "toxic|harmful|hateful|offensive|racist|sexist|discriminatory|insulting|derogatory|abusive|unfriendly|negative|rude|violent"
_UTTERANCES = "sentence|statement|comment|remark|message|tweet|joke|thing"
_OVERRIDE_NOUNS = r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages|context|guardrails|programming|commands?)"


@dataclass(frozen=True, slots=True)
class Family:
    anchors: tuple[str, ...]
    before: int  # how far before an anchor a match may start; 0: matches start at the anchor
    after: int  # how far after it a match may end
    rules: tuple[tuple[str, float, re.Pattern[str]], ...]
    # The same rules over lower-cased UTF-8 bytes, for windows that are all ASCII: there a
    # byte is a character and ASCII lowering is str lowering, so they match exactly alike.
    # Each with the words it needs (see _Rule): every group must have one in the window.
    byte_rules: tuple[tuple[str, float, re.Pattern[bytes], tuple[tuple[bytes, ...], ...]], ...]
    # ASCII punctuation one of which every match holds (lowering never makes one out of
    # another character): a window holding none is skipped before any regex runs.
    needs: tuple[bytes, ...]
    # Words every match begins with, for a family whose anchor ends its matches: an ASCII
    # window is scanned for them (a small automaton) and the rules tried only where one
    # starts, instead of re.search trying each position of the window in turn.
    leads: ahocorasick_rs.BytesAhoCorasick | None
    # Words one of which every match holds (the nouns an override needs): an ASCII window
    # holding none of them is skipped, which costs one small automaton pass instead of
    # the regexes' backtracking through every gap length.
    holds: ahocorasick_rs.BytesAhoCorasick | None
    # For each of ``holds``' words, the rules (a bit per rule of ``byte_rules``) that a
    # window holding it may match: a rule with words of its own (see _Rule) only where one
    # of them holds a word of ``holds`` (the automaton's overlapping matches say which).
    # The automaton also finds what no match holds (the end of a sentence, where every
    # gap of the rules stays in one), for a family whose matches start at the anchor:
    # -1 here, where the hold words it reports after it (by end) are out of reach.
    hold_rules: tuple[int, ...]
    # A regex over the bytes after an anchor (ASCII case ignored) that holds wherever one
    # of the rules can match from the anchor: an occurrence without it opens no window
    # (Hyperscan does not even report it: see anchors.py). Only for families whose
    # matches start at the anchor, so that a window holds nothing unless a rule matches
    # right there.
    guard: bytes


def _spaces_as_whitespace(pattern: str) -> str:
    r"""``pattern`` with each space outside a character class as ``\s``."""
    out: list[str] = []
    in_class = escaped = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == " " and not in_class:
            c = r"\s"
        out.append(c)
    return "".join(out)


def _as_bytes(pattern: str) -> re.Pattern[bytes]:
    # str-mode ``\s`` also matches the ASCII separators \x1c-\x1f; bytes-mode does not.
    return re.compile(pattern.replace(r"\s", r"[\s\x1c-\x1f]").encode())


def _merged(rules: tuple[tuple[str, float, str], ...]) -> list[tuple[str, float, str]]:
    """Consecutive rules with the same name and score as one alternation. Where matches start
    at the anchor, ``match`` tries the alternatives in order, as the rules one by one would
    (the first that matches is kept either way): one regex call instead of several."""
    out: list[tuple[str, float, str]] = []
    for rule, score, pattern in rules:
        if out and out[-1][:2] == (rule, score):
            out[-1] = (rule, score, f"{out[-1][2]}|(?:{pattern})")
        else:
            out.append((rule, score, f"(?:{pattern})"))
    return out


def _merged_requires(
    rules: tuple[tuple[str, float, str], ...], requires: list[tuple[tuple[bytes, ...], ...]]
) -> list[tuple[tuple[bytes, ...], ...]]:
    """The words each of ``_merged(rules)`` needs: a match of the alternation is a match of
    one of its rules, so it holds a word of that rule's first group; the union of those
    groups is the merged rule's one group, where every rule merged has words (else none)."""
    out: list[tuple[tuple[bytes, ...], ...]] = []
    last: tuple[str, float] | None = None
    for (rule, score, _), need in zip(rules, requires, strict=True):
        if last == (rule, score):
            out[-1] = ((*out[-1][0], *need[0]),) if out[-1] and need else ()
        else:
            out.append((need[0],) if need else ())
        last = (rule, score)
    # (a word holding another of its group adds nothing: where it is, the other is)
    return [
        tuple(tuple(w for w in g if not any(v != w and v in w for v in g)) for g in r)
        for r in out
    ]


# A rule: name, score, pattern and, optionally, the words it cannot match without, as
# groups of space-separated literals (every group must have one of its words in the window
# for the pattern to match): ``in`` rules a window out before the regex runs. A regex
# opening on lookbehinds or \b alternations has no literal prefix for re's own scan to
# skip by, and tries every position of a 160-character window; a literal listed here
# must be one every match holds (the rules see lower-cased windows, so lower case).
_Rule = tuple[str, float, str] | tuple[str, float, str, tuple[str, ...]]


def _family(
    anchors: tuple[str, ...],
    before: int,
    after: int,
    *specs: _Rule,
    needs: str = "",
    leads: tuple[str, ...] = (),
    holds: tuple[str, ...] = (),
    ends: tuple[str, ...] = (),
    guard: bytes = b"",
) -> Family:
    assert all(c.isascii() and not c.isalnum() for c in needs)
    assert not guard or before == 0
    assert not ends or (before == 0 and holds)
    stops = tuple(w.encode() for w in (*holds, *ends))
    requires = [
        tuple(tuple(w.encode() for w in g.split()) for g in s[3]) if len(s) == 4 else ()
        for s in specs
    ]
    assert all(w and " " not in w.decode() for r in requires for g in r for w in g)
    # A space in a rule is any one whitespace character: a phrase wrapped onto the next
    # line ("your system\nprompt") is the phrase.
    rules = tuple((s[0], s[1], _spaces_as_whitespace(s[2])) for s in specs)
    merged = _merged(rules) if before == 0 else rules
    if before == 0:
        requires = _merged_requires(rules, requires)
    return Family(
        anchors,
        before,
        after,
        tuple((r, s, re.compile(p)) for r, s, p in merged),
        tuple((r, s, _as_bytes(p), q) for (r, s, p), q in zip(merged, requires, strict=True)),
        tuple(c.encode() for c in needs),
        ahocorasick_rs.BytesAhoCorasick([w.encode() for w in leads]) if leads else None,
        ahocorasick_rs.BytesAhoCorasick(list(stops)) if holds else None,
        (*_hold_rules(tuple(w.encode() for w in holds), requires), *(-1 for _ in ends)),
        guard,
    )


def _hold_rules(
    holds: tuple[bytes, ...], requires: list[tuple[tuple[bytes, ...], ...]]
) -> tuple[int, ...]:
    """``Family.hold_rules``: hold word ``h`` may let rule ``j`` match when ``h`` is in
    one of the words of ``j``'s first group (any rule without words: every hold word). A
    match of ``j`` holds one of those words, and each of them holds a word of ``holds``,
    which the automaton then finds."""
    if not holds:
        return ()
    bits = [0] * len(holds)
    for j, need in enumerate(requires):
        for i, h in enumerate(holds):
            if not need or any(h in w for w in need[0]):
                bits[i] |= 1 << j
        assert not need or all(any(h in w for h in holds) for w in need[0]), need
    return tuple(bits)


def _starts(
    anchors: tuple[str, ...],
    after: int,
    *rules: _Rule,
    needs: str = "",
    holds: tuple[str, ...] = (),
    ends: tuple[str, ...] = (),
    guard: bytes = b"",
) -> Family:
    """A family whose matches begin with one of its anchors (a verb): the rules are tried
    only *at* the anchor (``re.match``), the cheapest test there is."""
    return _family(anchors, 0, after, *rules, needs=needs, holds=holds, ends=ends, guard=guard)


# Patterns run on lower-cased windows of the text.
FAMILIES: tuple[Family, ...] = (
    _family(
        (
            "you are now",
            "from now on",
            "new instruction",
            "new system instruction",
            "developer mode",
            "dan mode",
            "god mode",
            "jailbr",
            "do anything now",
        ),
        10,
        120,
        (
            "override",
            0.8,
            r"you are now (?:a |an |in )?(?:dan|jailbroken|unrestricted|unfiltered|developer mode|free|no longer)",
            ("now",),
        ),
        ("override", 0.6, r"from now on,? you (?:will|must|are|should)", ("from",)),
        ("override", 0.7, r"(?:^|\n|\. )\W*new (?:system )?instructions?\s*:", ("instruction",)),
        (
            "override",
            0.7,
            r"(?:developer|dan|jailbreak|god) mode|do anything now|jailbroken",
            ("mode anything jailbroken",),
        ),
    ),
    _starts(
        (
            *("ignor", "disregard", "forget", "overrid", "bypass", "skip "),
            "oubli",
            "olvid",
            "omit",
            "esque",
            "vergiss",
            "vergess",
            "missacht",
            "dimentic",
            "negeer",
            "vergeet",
        ),
        # The longest match (verb, 40 characters, "previous"..., 40 more, the noun: 110)
        # and the character after it, which the closing \b reads: a window no longer has
        # nothing more for the rules, and its hold words are the ones a match can hold.
        111,
        (
            "override",
            0.9,
            rf"{_W}{_OVERRIDE_VERBS}{_GAP}{_OVERRIDE_WHAT}\b{_GAP}{_OVERRIDE_NOUNS}\b",
            ("instruction prompt direction directive rules guideline message context guardrail programming command",),
        ),
        (
            "override",
            0.9,
            rf"{_W}(?:ignore[zr]?|oublie[zr]?){_GAP}(?:instructions|consignes|directives)\b",
            ("instructions consignes directives",),
        ),
        (
            "override",
            0.9,
            rf"{_W}(?:ignora|ignore|olvida|omite){_GAP}(?:instrucciones|indicaciones)\b",
            ("instrucciones indicaciones",),
        ),
        (
            "override",
            0.8,
            rf"{_W}(?:ignore|disregard|forget){_GAP}(?:previous|prior|above|other|all|any|everything)\b{_GAP}(?:content|text|info|information|data)\b",
            ("content text info data",),
        ),
        ("override", 0.9, rf"{_W}(?:ignore|ignora|esqueça|esqueca){_GAP}instru[çc](?:ões|oes)", ("instru",)),
        (
            "override",
            0.9,
            rf"{_W}(?:ignoriere|ignorier|ignorieren|vergiss|vergessen|missachte){_GAP}(?:anweisungen|instruktionen|befehle|regeln|vorgaben)\b",
            ("anweisungen instruktionen befehle regeln vorgaben",),
        ),
        ("override", 0.9, rf"{_W}(?:ignora|dimentica){_GAP}(?:istruzioni|indicazioni)\b", ("istruzioni indicazioni",)),
        ("override", 0.9, rf"{_W}(?:negeer|vergeet){_GAP}(?:instructies|aanwijzingen)\b", ("instructies aanwijzingen",)),
        # The rules' nouns, or a stem of them: every match holds one.
        holds=(
            *("instru", "prompt", "direction", "directive", "rules", "guideline", "message"),
            *("context", "guardrail", "programming", "command", "consigne", "indicaci"),
            *("anweisung", "befehl", "regeln", "vorgabe", "istruzion", "indicazion"),
            *("aanwijzing", "content", "text", "info", "data"),
        ),
        # (_GAP, between a rule's words, runs to none of these)
        ends=(".", "!", "?", "\n\n"),
    ),
    _family(
        # Bytes are lowered as ASCII only: Cyrillic anchors come in their usual cases.
        (
            "игнор",
            *("не обращай", "Не обращай", "НЕ ОБРАЩАЙ", "отбрось", "Отбрось", "пренебреги"),
            "Пренебреги",
            "Игнор",
            "ИГНОР",
            "забуд",
            "Забуд",
            "ЗАБУД",
            "忽略",
            "忽视",
            "无视",
            "無視",
            "不要理会",
            "忘记",
            "忘掉",
            "忘れ",
            "무시",
            "잊어",
            "تجاهل",
        ),
        60,
        120,
        (
            "override",
            0.9,
            r"(?:игнорируй|игнорируйте|игнорировать|забудь|забудьте|не обращай(?:те)? внимания на|отбрось|отбросьте|пренебреги|пренебрегите)[^.\n]{0,40}(?:инструкци|указани|правил|ограничени)",
        ),
        (
            "override",
            0.9,
            # (not "请不要忽视安全提示": "do not ignore the safety notes")
            r"(?<!不要)(?<!不能)(?<!别)(?<!勿)(?:忽略|忽视|无视|無視|不要理会|忘记|忘掉)[^。\n]{0,12}(?:指令|指示|说明|提示|规则|命令)",
        ),
        ("override", 0.9, r"(?:指示|命令|プロンプト|ルール)[^。\n]{0,12}(?:無視|忘れ)"),
        ("override", 0.9, r"(?:지시|지침|명령|규칙)[^.\n]{0,12}(?:무시|잊어)"),
        ("override", 0.9, r"تجاهل[^.\n]{0,30}(?:التعليمات|الأوامر|التوجيهات|القواعد|تعليماتك|قواعدك|أوامرك)"),
    ),
    # Polish overrides start at their verb: "zignoruj wszystkie poprzednie instrukcje".
    _starts(
        ("zignoruj", "zapomnij", "pomiń", "pomin", "zlekceważ", "zlekcewaz", "nie zwracaj"),
        220,
        (
            "override",
            0.9,
            rf"{_W}(?:zignoruj|zapomnij|pomiń|pomin|zlekceważ|zlekcewaz|nie zwracaj uwagi)(?:cie)?\b{_GAP}(?:wszystk|poprzedn|wcześniejsz|wczesniejsz|powyższ|powyzsz|swoj|swoich|twoj|systemow|dotychczasow)\w*{_GAP}(?:instrukcj|polece|zasad|regu|wytyczn|ogranicze)\w*",
        ),
    ),
    # "disregard your rules" in Spanish, French, Portuguese, anchored on the possessive and
    # its noun (never in English text): a possessive or "all" before the rules, not
    # "olvida las reglas del juego".
    _family(
        tuple(
            f"{det} {noun}"
            for det, nouns in (
                ("tus", ("reglas", "normas", "restricciones", "directrices")),
                ("sus", ("reglas", "normas", "restricciones", "directrices")),
                ("todas las", ("reglas", "normas", "restricciones", "directrices")),
                ("tes", ("règles", "regles", "restrictions", "consignes")),
                ("vos", ("règles", "regles", "restrictions", "consignes")),
                ("toutes les", ("règles", "regles", "restrictions", "consignes")),
                ("suas", ("regras", "restrições", "restricoes", "diretrizes")),
                ("tuas", ("regras", "restrições", "restricoes", "diretrizes")),
                ("todas as", ("regras", "restrições", "restricoes", "diretrizes")),
            )
            for noun in nouns
        ),
        80,
        40,
        (
            "override",
            0.85,
            rf"{_W}(?:ignora|olvida|omite|descarta|desobedece|ignore[zr]?|oublie[zr]?|ne (?:tiens|tenez) pas compte de|ignore|esqueça|esqueca|desconsidere)\b{_GAP}(?:tus|sus|todas (?:tus|las)|tes|vos|toutes (?:tes|vos|les)|suas|tuas|todas as)\b{_GAP}(?:reglas|normas|restricciones|directrices|règles|regles|restrictions|consignes|regras|restrições|restricoes|diretrizes)\b",
        ),
    ),
    # Overrides in languages whose verb comes last (Hindi, Turkish, Japanese's kin), "you
    # are now unrestricted" and "reveal your system prompt" beyond English. Anchors are
    # the verbs or nouns that every match holds.
    _family(
        (
            # Hindi: "पिछले सभी निर्देशों को अनदेखा करें", and its romanised form
            *("अनदेखा", "अनदेखी", "नज़रअंदाज़", "नज़रअंदाज़", "नजरअंदाज", "भूल जा", "उपेक्षा"),
            *("अवहेलना", "ध्यान न", "ध्यान मत", "तुम अब", "आप अब"),
            *("मत मान", "ignore kar", "ignore kr", "bhool ja", "bhul ja", "nazarandaz"),
            *("अब तुम", "अब आप", "अब से तुम", "अब से आप", "सिस्टम प्रॉम्प्ट", "सिस्टम प्रोम्प्ट"),
            "सिस्टम निर्देश",
            # Turkish: "önceki tüm talimatları yok say", "kurallarını görmezden gel"
            *("yok say", "rmezden gel", "ardı et", "ardi et", "dikkate alma", "nemseme", "unut"),
            *("sistem istem", "sistem komut", "sistem talimat", "sistem prompt", "sistem mesaj"),
            *("artık sen", "artik sen", "sen artık", "sen artik", "bundan sonra sen"),
            # "you are now ..." and "reveal the system prompt" in the other languages
            *("ahora eres", "ahora tú eres", "ahora tu eres", "de ahora eres", "del sistema"),
            *("prompt syst", "prompt del sistema", "prompt de sistema", "prompt do sistema"),
            *("de sistema", "maintenant", "désormais", "desormais", "dorénavant", "du système"),
            *("instructions syst", "consignes syst", "du systeme", "de système", "du bist jetzt", "du bist nun", "du bist ab", "system-prompt"),
            *("systemprompt", "systemanweisung", "você é", "voce é", "voce e", "do sistema"),
            *("jesteś", "jestes", "systemow", "теперь ты", "Теперь ты", "отныне ты", "Отныне ты"),
            *("системн", "Системн", "你现在是", "现在你是", "开始你是", "起你是", "系统提示", "系統提示", "系统指令"),
            *("システムプロンプト", "システム指示", "あなたは今", "今からあなた", "これからあなた"),
            *("أنت الآن", "انت الان", "النظام"),
        ),
        100,
        100,
        (
            "override",
            0.9,
            r"(?:पिछल|पहले|ऊपर|सभी|सारे|तमाम|अपने|सिस्टम)[^।\n]{0,40}(?:निर्देश|नियम|आदेश|हिदायत|निर्देशों|नियमों)[^।\n]{0,20}(?:अनदेखा|अनदेखी|नज़रअंदाज़|नज़रअंदाज़|नजरअंदाज|भूल जा|उपेक्षा|अवहेलना|मत मान|पर ध्यान (?:न|मत))",
        ),
        (
            "override",
            0.85,
            r"\b(?:pichh?le|pehle|purane|saare|sare|sabhi|sab|apne|upar)\b[^.\n]{0,30}\b(?:instructions?|nirdesh\w*|rules|niyam\w*|prompts?)\b (?:ko )?(?:ignore|bhool|bhul|nazarandaz|andekha|anadekha) (?:karo|kar do|kardo|karein|karen|kro|kr do|jao|ja)\b",
        ),
        (
            "override",
            0.9,
            r"(?:önceki|onceki|tüm|tum|bütün|butun|yukarıdaki|yukaridaki|sistem|geliştirici|gelistirici|eski|kendi)[^.\n]{0,40}(?:talimat|komut|yönerge|yonerge|kural|direktif|istem)\w*[^.\n]{0,20}(?:yok say(?:ın|in)?|görmezden gel(?:in)?|gormezden gel(?:in)?|göz ardı et(?:in)?|goz ardi et(?:in)?|unut(?:un)?|dikkate alma(?:yın|yin)?|önemseme(?:yin)?|onemseme(?:yin)?)(?!\w)",
        ),
        # "you are now" with no restrictions, in each language (not "ahora eres libre de
        # elegir": freedom alone is everyday speech)
        (
            "override",
            0.8,
            r"(?:(?:ahora|a partir de ahora|desde ahora),? (?:tú |tu )?eres|(?:tu es|vous êtes|vous etes) (?:maintenant|désormais|desormais|dorénavant|dorenavant)|du bist (?:jetzt|nun|ab jetzt|ab sofort)|(?:agora|a partir de agora|de agora em diante),? (?:você é|voce é|voce e|tu és|tu es)|(?:teraz|od teraz|od tej chwili) (?:jesteś|jestes)|(?:теперь|отныне) ты|(?:artık|artik|bundan sonra) sen|sen (?:artık|artik)|अब (?:से )?(?:तुम|आप)|(?:तुम|आप) अब)[^.\n。।]{0,40}?(?:sin (?:restricciones|filtros|censura|límites|limites|reglas)|sans (?:restrictions?|filtres?|censure|limites?|règles|regles)|ohne (?:einschränkungen|einschraenkungen|filter|zensur|regeln|grenzen)|uneingeschränkt|sem (?:restrições|restricoes|filtros|censura|limites|regras)|bez (?:ograniczeń|ograniczen|filtrów|filtrow|cenzury|zasad)|nieograniczon|без (?:ограничений|цензуры|фильтров|правил)|неограниченн|kısıtlamasız|kisitlamasiz|sınırsız|sinirsiz|filtresiz|sansürsüz|sansursuz|kuralsız|kuralsiz|बिना (?:किसी )?(?:प्रतिबंध|रोक|सीमा|नियम|फ़िल्टर|फिल्टर)|\bdan\b|jailbroken|jailbreak)",
        ),
        ("override", 0.8, r"(?:你现在是|现在你是|从现在(?:开始|起)你是)[^。\n]{0,12}(?:没有(?:任何)?限制|不受(?:任何)?(?:限制|约束)|无限制|dan|越狱)"),
        ("override", 0.8, r"(?:あなたは今から|今からあなたは|これからあなたは|あなたは今)[^。\n]{0,15}(?:制限のない|制限なし|制約のない|dan|脱獄)"),
        ("override", 0.8, r"(?:أنت الآن|انت الان)[^.\n]{0,20}(?:بلا قيود|بدون قيود|غير مقيد|دان|dan)"),
        # "reveal your system prompt"
        (
            "exfiltrate",
            0.75,
            r"\b(?:revela|revélame|revelame|muestra|muéstrame|muestrame|dime|imprime|repite|comparte|révèle|revele|révélez|revelez|montre|montrez|affiche|affichez|donne|donnez|répète|repete|répétez|repetez|dis|dites|revele|mostre|mostra|diga|imprima|repita|compartilhe)(?:-moi|-nous|me)?\b[^.\n]{0,40}(?:prompt|(?:tus|tu|vos|tes|ton|votre|suas|sua|seu|teu|tuas) (?:mensaje|indicaciones|instrucciones|invite|instructions|consignes|instruções|instrucoes|mensagem)) (?:del |de |du |do )?(?:sistema|système|systeme)\b",
        ),
        ("exfiltrate", 0.75, r"\b(?:verrate|zeige|zeig|gib|nenne|wiederhole|offenbare|enthülle|enthuelle|drucke)\b[^.\n]{0,40}(?:system-?prompt|systemanweisung|systemnachricht)"),
        ("exfiltrate", 0.75, r"\b(?:ujawnij|pokaż|pokaz|wyświetl|wyswietl|podaj|powiedz|wypisz|powtórz|powtorz|zdradź|zdradz)\b[^.\n]{0,40}(?:prompt\w* systemow|systemow\w* prompt|instrukcj\w* systemow|polecen\w* systemow)"),
        ("exfiltrate", 0.75, r"(?:покажи|раскрой|выведи|напиши|повтори|сообщи|назови|открой)[^.\n]{0,40}системн\w* (?:промпт|подсказк|инструкци|сообщени)"),
        ("exfiltrate", 0.75, r"(?:显示|告诉我|透露|泄露|输出|打印|重复|公开|展示)[^。\n]{0,12}(?:系统提示|系統提示|系统指令|系统消息)"),
        ("exfiltrate", 0.75, r"(?:システムプロンプト|システム指示)[^。\n]{0,15}(?:教えて|見せて|表示|出力|開示|繰り返)"),
        ("exfiltrate", 0.75, r"(?:اكشف|أظهر|اظهر|اعرض|أخبرني|اخبرني|اطبع|كرر)[^.\n]{0,40}(?:موجه النظام|تعليمات النظام|رسالة النظام|مطالبة النظام)"),
        ("exfiltrate", 0.75, r"(?:सिस्टम प्रॉम्प्ट|सिस्टम प्रोम्प्ट|सिस्टम निर्देश|सिस्टम संदेश)[^।\n]{0,30}(?:बताओ|बताएं|बताएँ|बताइए|बता दो|दिखाओ|दिखाएं|दिखाएँ|दिखाइए|प्रकट कर|लिखो|छापो|दोहराओ|साझा कर)"),
        ("exfiltrate", 0.75, r"sistem (?:istem|komut|talimat|prompt|mesaj)\w*[^.\n]{0,30}(?:göster|goster|açıkla|acikla|söyle|soyle|yaz|ifşa et|ifsa et|paylaş|paylas|tekrarla)"),
    ),
    _family(
        (
            "system prompt",
            "initial prompt",
            "hidden instruction",
            "api key",
            "api_key",
            "api-key",
            "apikey",
            "password",
            "secret",
            "credential",
            "do not tell",
            "do not inform",
            "do not alert",
            "do not warn",
        ),
        80,
        60,
        (
            "exfiltrate",
            0.75,
            rf"{_W}(?:reveal|print|show|repeat|output|leak|send|tell me|give me|disclose){_GAP}(?:system prompt|initial prompt|hidden instructions|api[ _-]?keys?|passwords?|secrets?|credentials)\b",
        ),
        ("override", 0.6, r"do not (?:tell|inform|alert|warn) the user"),
        leads=(
            *("reveal", "print", "show", "repeat", "output", "leak", "send", "tell me"),
            *("give me", "disclose", "do not "),
        ),
    ),
    # Instructions planted in a document (garak's latent injection): what the model is to
    # output instead of doing its task, when it is asked; a harmful sentence ordered up.
    _family(
        (
            # (whole phrases, not "if " or "only": those open a window in every other
            # sentence of prose, and each window costs the family's regexes)
            *("if the user", "if user", "if anyone", "if someone", "if asked"),
            *("if you are asked", "if you're asked", "if you are questioned", "if questioned"),
            *("with only", "using only", "nothing else", "instead,", "instead print"),
            *("instead say", "instead output", "instead write", "instead reply", "instead respond"),
            *("just print", "just say", "just output", "just write", "just reply"),
            *("just respond", "simply print", "simply say", "simply output"),
            # (the adjective with its noun: "harmful" alone is in every other jailbreak)
            *(f"{a} {n}" for a in _HARMFUL.split("|") for n in _UTTERANCES.split("|")),
            *("note to", "note for", "message to", "message for", "reminder to", "reminder for"),
            *("attention ai", "attention assistant", "dear ai", "dear assistant", "hey assistant"),
            *("system:", "system message", "system note", "system instruction", "system update"),
            *("admin:", "administrator:", "developer:", "developer note", "admin note"),
            # the task switched: "when you summarize this, say...", "your new task is"
            *("when you summari", "when you are asked", "when you're asked", "when you answer"),
            *("when you respond", "when you reply", "when asked", "when summari"),
            *("when answering", "when responding", "your new ", "your real ", "your actual "),
            "your true ",
            # a label of urgency giving an order; the end of the data a new task follows
            *("important:", "important!", "urgent:", "urgent!", "attention:", "attention!"),
            *("end of document", "end of the document", "end of context", "end of the context"),
            *("end of text", "end of input", "end of data", "end of email", "end of transcript"),
            *("instead of summari", "instead of translat", "instead of answer"),
            # a reader the text knows to be a model: "if you are an AI reading this"
            *("you are an ai", "you are a language model", "you are an llm"),
            *("you're an ai", "ai reading", "model reading", "assistant reading"),
            *("llm reading", "ais reading", "models reading", "assistants reading"),
        ),
        80,
        80,
        (
            "hijack",
            0.6,
            r"\b(?:if|when) (?:the )?(?:user|anyone|someone|you|asked|questioned|summari[sz]ing|answering|responding)\b(?: (?:are|is|ever))?(?: (?:asks?|asked|questioned|queried))?[^.\n]{0,60}?\b(?:say|reply|respond|answer|report|print|output) (?:that|with|only|exactly|\")",
            ("if when", "say reply respond answer report print output"),
        ),
        (
            "hijack",
            0.6,
            rf"\b(?:write|generate|produce|compose|say) (?:one|a|an|some|\d+) (?:\w+ )?(?:{_HARMFUL}) (?:{_UTTERANCES})s?\b",
            (_HARMFUL.replace("|", " "), _UTTERANCES.replace("|", " ")),
        ),
        (
            # Words addressed to the assistant in a document: data does not speak to it.
            "hijack",
            0.6,
            r"\b(?:(?:note|message|reminder|instructions?) (?:to|for)|attention|dear|hey),? (?:the |any |all )?(?:ai|assistant|model|llm|language model|chatbot|bot|gpt|chatgpt|claude|copilot|agent)s?\b\s*[:,]",
            ("note message reminder instruction attention dear hey",),
        ),
        (
            # A system or admin label giving an order: "SYSTEM MESSAGE: ignore...".
            "hijack",
            0.7,
            r"\b(?:system|admin|administrator|developer)(?: (?:message|note|instructions?|update|override|notice))? ?: ?(?:ignore|disregard|forget|focus|print|say|output|respond|reply|write|do not|don't|you (?:must|should|will|are))\b",
            ("system admin developer", ":"),
        ),
        # A task given in place of the reader's own: "your new task is", "instead of
        # summarizing, ...", and a reader addressed as a model ("if you are an AI reading
        # this", "to any LLM reading this page").
        (
            "hijack",
            0.7,
            r"\byour (?:new|real|actual|true) (?:task|goal|objective|instructions?|job) (?:is|are|will be)\b|\binstead of (?:summari[sz]ing|translating|answering)\b[^.\n]{0,80}?\b(?:print|say|output|write|reply|respond|tell|inform|state|include)\b",
            ("your instead",),
        ),
        (
            "hijack",
            0.7,
            r"\b(?:you are|you're) (?:an? )?(?:ai|llm|language model|large language model|ai assistant|ai model)\b[^.\n]{0,40}?\b(?:reading|processing|summari[sz]ing|analy[sz]ing|reviewing|parsing)\b|\b(?:ai|llm|model|assistant|agent)s? reading this\b",
            ("you reading",),
        ),
        (
            # "IMPORTANT: ignore...", "URGENT!!! print...": not "Important: do not commit
            # keys" (docs' notes give orders too, but not these)
            "hijack",
            0.6,
            r"\b(?:important|urgent|attention) ?(?:!{1,3}|:) ?(?:ignore|disregard|forget|print|say|output|respond|reply|tell the user|send)\b(?! (?:statements?|functions?|calls?|debugging|outputs?|commands?|buffers?)\b)",
            ("important urgent attention", "! :"),
        ),
        (
            # The data's end announced, then a task: "--- END OF DOCUMENT --- New
            # instructions:", "end of context. system:".
            "hijack",
            0.7,
            r"\bend of (?:the )?(?:document|context|text|input|data|email|transcript)\b[^\w\n]{0,12}\n?[^\w\n]{0,12}(?:new |updated |real |actual |your )?(?:instructions?|task|system|prompt|assistant)\b",
            ("end", "instruction task system prompt assistant"),
        ),
        # (after the conditional: where both match, the finding starts at its "if")
        # Output forced, unless it reads as a programming how-to: a subject or a modal
        # before it ("you can just write", "we simply print"), or code, a pronoun or a
        # preposition after it ("just print(x)", "just write `...`", "just write a test",
        # "simply write to the file"): documentation is full of those.
        (
            "hijack",
            0.6,
            r"(?<!can )(?<!could )(?<!may )(?<!will )(?<!would )(?<!should )(?<!must )(?<!you )(?<!we )(?<!i )(?<!they )(?<!to )(?<!then )(?:just|instead,?|simply) (?:print|say|output|write|reply|respond)\b(?! ?[`(\[{<=|])(?! (?:a|an|your|our|my|some|code|tests?|it|them|one|out|down|up|in|into|on|from|for|to|back|about|something|anything|whatever|more|less|each|every|the (?:value|values|result|results|output|contents?|variable|error|errors|response|type|length|number|first|last|name|path))\b)",
            ("just instead simply", "print say output write reply respond"),
        ),
        ("hijack", 0.6, r"(?:reply|respond|answer) (?:with|using) only\b|and (?:absolutely )?nothing else\b", ("only nothing",)),
    ),
    _family(
        (
            "system prompt",
            "|>",
            "[inst]",
            "[/inst]",
            "sys>>",
            "_of_turn>",
            "system>",
            "tool_result>",
            "tool_output>",
            "function_results>",
            "instruction>",
            "instructions>",
            "system:",
            "assistant:",
            "developer:",
            "prompt:",
            "message:",
            "instructions:",
            "instruction:",
            "[system](",
            "[assistant](",
        ),
        60,
        60,
        # A chat's role written as a markdown link, the way injected pages spoof one:
        # "[system](#instructions)".
        ("role_spoof", 0.75, r"\[(?:system|assistant)\]\(#[\w-]+\)"),
        (
            "role_spoof",
            0.85,
            r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text)\|>",
        ),
        ("role_spoof", 0.85, r"\[/?inst\]|<</?sys>>|<(?:start|end)_of_turn>"),
        (
            "role_spoof",
            0.75,
            r"</?(?:system|tool_result|tool_output|function_results|instructions?)>",
        ),
        (
            "role_spoof",
            0.55,
            r"(?:^|\n)[ \t]*(?:#{1,4}[ \t]*)?(?:system|assistant|developer)(?:[ \t]+(?:prompt|message|instructions?))?[ \t]*:",
        ),
        needs="[<:",
    ),
    _family(
        (
            'tool_calls"',
            'function_call"',
            'arguments"',
            'args"',
            'parameters"',
            'input"',
            # The tags with their "<": a bare "tool_call" is everyday prose in docs about
            # agents, and the rules around it all need a quote or a "<" anyway.
            "<tool_call",
            "<function_call",
            "<tool_use",
            "<invoke",
        ),
        120,
        40,
        ("tool_call", 0.7, r"\"(?:tool_calls|function_call)\"\s*:"),
        (
            "tool_call",
            0.7,
            # "input" only as an object (Anthropic's tool_use): {"tool": "calculator",
            # "input": "2+2", "output": 4} is a record of a call that was made.
            r"\{\s*\"(?:name|tool|function)\"\s*:\s*\"[\w.-]+\"\s*,\s*\"(?:(?:arguments|args|parameters)\"\s*:|input\"\s*:\s*\{)",
        ),
        ("tool_call", 0.7, r"<(?:tool_call|function_call|tool_use|invoke)\b"),
    ),
    _starts(
        ("call ", "invoke ", "execute "),
        100,
        (
            "tool_call",
            0.6,
            r"(?:call|invoke|execute) (?:the )?[`'\"]?[a-z]+_[a-z_]+[`'\"]?(?: (?:tool|function)\b|\(| now\b| immediately\b| with\b)",
        ),
        # The rule's start after its verb, on the bytes. The rule reads the window lowered
        # as str, where [a-z] also matches the Kelvin sign (U+212A lowers to "k"; U+0130,
        # the only other non-ASCII character that lowers to ASCII, lowers to "i" and a
        # combining dot, which [a-z] does not match): its UTF-8 counts as a letter.
        guard=rb"(?:the )?[`'\x22]?(?:[a-z]|\xe2\x84\xaa)+_",
    ),
)
