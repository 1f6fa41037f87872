# ruff: noqa: E501  (the rule table reads best one pattern per line)
"""The heuristic screener's rules: families of regular expressions, each opened by anchors.

``heuristics.py`` describes how they run (one anchor pass, then the family's rules on a
small window around each anchor); this module holds the table: English, and the override
verbs of the European languages; ``rules_multilingual.py`` the other scripts and word
orders, and ``rule_family.py`` how a family is built. Patterns run on lower-cased windows
of the text.
"""

from __future__ import annotations

from podium.security.rule_family import GAP as _GAP
from podium.security.rule_family import WORD_START as _W
from podium.security.rule_family import Family
from podium.security.rule_family import family as _family
from podium.security.rule_family import starts as _starts
from podium.security.rules_multilingual import MULTILINGUAL

__all__ = ("FAMILIES", "Family")

_OVERRIDE_VERBS = r"(?:ignore|ignoring|disregard|forget|override|bypass|skip)"
_OVERRIDE_WHAT = r"(?:previous|prior|above|earlier|preceding|original|initial|all|any|your|system|developer|safety)"
_HARMFUL = "toxic|harmful|hateful|offensive|racist|sexist|discriminatory|insulting|derogatory|abusive|unfriendly|negative|rude|violent"
_UTTERANCES = "sentence|statement|comment|remark|message|tweet|joke|thing"
_OVERRIDE_NOUNS = r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages|context|guardrails|programming|commands?)"


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
    *MULTILINGUAL,
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
