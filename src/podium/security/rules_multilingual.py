# ruff: noqa: E501  (the rule table reads best one pattern per line)
"""The heuristic screener's override and exfiltration rules beyond English: Cyrillic, CJK
and Arabic overrides, Polish ones (starting at their verb), "disregard your rules" in
Spanish, French and Portuguese, and the languages whose verb comes last (Hindi, Turkish),
with "you are now" and "reveal your system prompt" in each. Patterns run on lower-cased
windows of the text (see ``rule_family.py``).
"""

from __future__ import annotations

from podium.security.rule_family import GAP as _GAP
from podium.security.rule_family import WORD_START as _W
from podium.security.rule_family import Family
from podium.security.rule_family import family as _family
from podium.security.rule_family import starts as _starts

__all__ = ("MULTILINGUAL",)

# In FAMILIES' order, after the English override verbs (their index is the family's).
MULTILINGUAL: tuple[Family, ...] = (
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
)
