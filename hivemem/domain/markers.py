"""Rule-based detection of turns that state a decision, constraint, failure or goal.

Pure, deterministic, fast regexes over lowercased sentences (each tried only if one of its literal
"needles" occurs); precision over recall. Quoted text is dropped, unquoted reported speech ("they
said we must X") counts; questions and hypotheticals ("if it fails") are skipped; hedged sentences
("maybe we go with X") are no decisions; a leading "Decision:" (etc.) always counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hivemem.domain.models import BUILTIN_MARKERS

ORDER: tuple[str, ...] = ("decision", "constraint", "failure", "goal")
Rule = tuple[tuple[str, ...], re.Pattern[str]]

_SUBJ = (r"(?:i|we|they|he|she|the team|team)(?:'ve|'d| have| had| finally| eventually"
         r"| ultimately| just| both| all| also){0,2}")
_SOCIAL = (r"(?!(?:my|our|his|her|their|your|friends|family|him|them|us|me|some|a friend"
           r"|a group|the kids|the family|mom|dad)\b)")  # "going with my sister": company
_CHAT = (r"say|thank|know|hear|see|ask|tell|share|let|check|mention|apologi\w*|remind|show|talk"
         r"|chat|grab|catch|meet|join|come|go with|hang|congratulate|wish|introduce|point|add"
         r"|clarify|confirm|update|follow|give|send|hug|celebrate|get back to (?:you|me)")
_ADV = r"(?:really |also |still |eventually |definitely |just )?"


def _rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:  # needles: "a|b", one must occur
    return tuple((tuple(n.split("|")), re.compile(p)) for n, p in pairs)


_PREFIX = {m: re.compile(rf"(?:{p})\s*:") for m, p in (  # leading label: all that gleanr detects
    ("decision", "decision|decided|final call|approved"), ("constraint", "constraints?"),
    ("failure", "failure|failed"), ("goal", "goals?"))}

_RULES: dict[str, tuple[Rule, ...]] = {
    "decision": _rules(
        # "let's go with / use / switch to X" (not the cheer "let's go for it")
        ("let", r"\blet(?:'s| us) (?:go with|go for (?!it\b)|use|switch|stick with|pick|choose"
                r"|adopt|move to|ship)\b"),
        # "we'll use", "I'm going to go with", "the agent will use"
        ("use|with|switch|adopt|move|route|standard", r"\b(?:we|i|the \w+)(?:'ll| will|'re going to"
         r"| are going to|'m going to| am going to|'re gonna|'m gonna) (?:use|go with|stick with"
         r"|switch to|adopt|move to|stay with|keep using|route|standardi[sz]e on)\b"),
        # "we decided", "I chose", "we opted for", "settled on", "agreed to", "that's decided"
        ("decide|chose|opted|settled|agreed|made up|final", rf"\b{_SUBJ} (?:decided|chose|chosen"
         r"|opted|settled on|agreed (?:to|on)|made up (?:my|our) minds?)\b|(?:^|,\s*)decided\b"
         r"|\b(?:it|that)(?:'s| is) (?:decided|settled)\b|\bfinal (?:call|decision)\b"),
        # "the team picked X over Y", "I picked the red one"
        ("picked", rf"\b{_SUBJ} picked (?:the|a|an|option)\b|\bpicked (?:\w+ ){{1,3}}over\b"),
        # "going with X" / "went with X" (not "going with my sister")
        ("going with|went with", rf"(?:^|\bi'm |\bi am |\bwe're |\bwe are )going with {_SOCIAL}"
         rf"|\b(?:i|we|they)(?: finally| eventually| ultimately)? went with {_SOCIAL}"),
        # "switch to X" as an order, or "we're switching to monthly billing"
        ("switch|ship it|lgtm", r"(?:^|\b(?:we|i)(?:'re|'m| are| am)? )(?:switch|switching"
         r"|switched) (?:over )?to\b|\bship it\b|\blgtm\b"),
    ),
    "constraint": _rules(
        # deontic "must not"/"must return"; not "must have been", "must feel great", "a must"
        ("must", r"\bmust(?<!\bwho must)(?<!there must)(?<!\ba must)\b(?:n't| not| never| always"
         r"| only| (?!(?:be|have|'ve|say|admit|confess|try|see|visit|watch|read|check|come|feel"
         r"|love|enjoy|mean|know|look|seem|sound|add|take|miss|like|want|think|make|smell|taste"
         r"|bring|get|keep (?:you|them|him|her|me|us)|really|so|also|definitely|surely|truly)\b)"
         r"[a-z]| be (?:at|under|below|above|over|within|less|fewer|no|in|on|one|valid|unique"
         r"|compatible|backward|reproducible|idempotent|deterministic|stable|empty|set|run|done"
         r"|kept|(?!(?:tired|excited|thrilled|exhausted|stoked|pumped|elated|relieved|amazed"
         r"|worried|bored|pleased|delighted|blessed|stressed|frustrated|disappointed|surprised"
         r"|impressed|interested|scared)\b)[a-z]+(?:ed|en))\b)"),
        # "Never push to main", "should never", "don't ever"; not "never mind", "never been"
        ("never|ever", r"^(?:and |but |so |please |also )?never (?!(?:mind|been|thought|knew|have"
         r"|had|ever|again|seen|heard|felt|liked|got|saw|gonna|once|before|forget|stop|did|say"
         r"|give up|quit|lose|doubt|underestimate|settle)\b)\w+|\b(?:should|must|shall) never\b"
         r"|\b(?:don't|do not) ever (?!(?:forget|quit|give up|stop|doubt|change|lose)\b)"),
        # imperative "Do not touch X"; not "don't worry", "don't forget", "don't give up"
        ("don't|do not", r"^(?:please |and |but |so |also )?(?:don't|do not) (?!(?:worry|forget"
         r"|mind|be|feel|stress|panic|hesitate|know|think|care|get|even|let|you|ya|we|give up|quit"
         r"|push|apologi\w*|lose|stop|doubt|beat|miss|judge|rush|wait|laugh|ever)\b)\w+"),
        # "can't exceed", "we can't use GPL code", "I can't eat gluten", "I can only do mornings"
        ("can", r"\b(?:can't|cannot|can not) (?:exceed|go (?:over|above|beyond)|be (?:more|longer"
         r"|larger|bigger|over|above|greater|later)|be used|use|slip|store|eat|drink|have (?:any"
         r"|more|dairy|gluten|sugar|alcohol|caffeine|nuts|meat)|touch|deploy|share|commit)\b"
         r"|\bcan only (?!(?:imagine|hope|guess|say|think|wish|dream|laugh)\b)\w+"),
        # "has to be compatible", "we have to stay within", "needs to be done by Friday"
        ("has to|have to|needs to|need to", r"\bhas to\b(?! do with)|\b(?:we|i|it|they|will"
         r"|still|all) have to (?!(?:say|admit|go|run|leave|agree|tell|thank|ask|confess|check"
         r"|try|see|hang|catch|meet|come|visit|get going|share|show|figure|think|look|read|watch"
         r"|do|talk|celebrate|grab|get|be honest)\b)\w+|\bneeds? to (?:be|stay|remain|fit"
         r"|comply)\b(?=.*\b(?:by|under|within|before|no exceptions|compatible|at least|less"
         r"|fewer)\b)"),
        # numeric limits, caps and deadlines
        ("more than|most|longer than|later than|max|cap|limit|exception|negotiable|deadline"
         "|no more", r"\b(?:no|not) more than\b|\bat most\b|\bno (?:longer|later) than\b"
         r"|\bmax(?:imum)?(?: of)? \$?\d|\bcapped at\b|\bcap (?:is|of)\b|\bhard limit\b"
         r"|\blimit(?:ed)? (?:is|to|of|at) \$?\d|\bno exceptions\b|\bnon-negotiable\b"
         r"|\b(?:hard )?deadline is\b|, no more[.!]?$"),
        # permissions: "not allowed", "only allowed", "doesn't allow pets", "required to"
        ("allow|permit|prohibit|forbid|mandatory|required", r"\b(?:aren't|isn't|not|only)"
         r" (?:be )?(?:allowed|permitted)\b|\b(?:doesn't|don't|does not|do not|won't|will not)"
         r" (?:allow|permit)\b|\b(?:prohibited|forbidden|mandatory)\b|\brequired to\b"
         r"|\b(?:is|are) required\b"),
        # imperatives: "Only use X", "Keep it under 100 words", "make sure", "Always use UTC"
        ("only|keep|sure|always", r"^(?:please )?only (?:use|call|accept|read|write|deploy|run"
         r"|return|allow)\b|^(?:please )?keep (?:\w+ ){1,3}(?:under|below|within|short|brief"
         r"|less than)\b|^(?:make sure|ensure|be sure)\b.*\b(?:never|not|n't|always)\b"
         r"|^(?:please )?always (?:use|run|check|set|include|return|write|log|validate|ask|cite"
         r"|confirm|test|pin|close|lock|back up|respond|reply|call|store|sign|encrypt|verify|add"
         r"|keep)\b"),
        # "from now on nobody deploys on Fridays"; allergies
        ("from now on|going forward|from here on|allergic|intolerant", r"\b(?:from now on"
         r"|going forward|from here on)\b.*\b(?:nobody|no one|never|only)\b|\ballergic to\b"
         r"|\bintolerant\b"),
    ),
    "failure": _rules(
        # "that failed", "3 tests failing" (not "fail to see"), "was a disaster", "went wrong"
        ("fail", r"\bfail(?:ed|s|ing)\b(?! to (?:see|understand|mention|notice|grasp))"),
        ("failure|disaster|fiasco|flop|dead end|wrong|luck|worse", r"\b(?:was|is|been|were|be)"
         r" (?:a |an )?(?:complete |total |big |huge |)?(?:failure|disaster|fiasco)\b"
         r"|\bflop(?:ped)?\b|\bdead end\b|\bwent (?:horribly |badly |terribly )?wrong\b"
         r"|\bgone wrong\b|\bno luck\b|\bmade (?:\w+ ){1,2}worse\b"),
        # "didn't work", "didn't help"; not "I don't work Mondays", "Tuesday doesn't work for me"
        ("work", r"\b(?<!\bi )(?<!\bwe )(?<!\byou )(?<!\bthey )(?:(?:did|is|was|are|were|has"
         r"|have)(?:n't| not)|(?:does|do)(?:n't| not)(?! (?:\w+ )?work for (?:me|us|you))|stopped"
         r"|no longer|never) (?:\w+ )?work(?:s|ed|ing)?\b(?! (?:late|today|tomorrow|weekends)\b)"),
        ("n't|not", r"\b(?:did|does|has|have)(?:n't| not) (?:help(?:ed)?|go (?:well|as planned)"
         r"|pan out|work out|reach|pass|make it|get (?:in|accepted|selected|the job))\b"),
        # broke/broken/crashed; not "broke my record", "broke up", "I'm broke", "waves crashing"
        ("broke", r"\bbroke(?<!i'm broke)(?<!\bso broke)(?<!flat broke)\b(?! (?:\w+ ){0,2}"
         r"(?:record|leg|arm|wrist|ankle|nose|rib|toe|finger|foot|hand|heart|news|ice|silence"
         r"|promise|best|pb)\b)(?! (?:ground|even|free|up|out|into|in|through|bread"
         r"|down (?:crying|in tears))\b)|\b(?:is|are|was|were|been|got|seems|looks|still|totally"
         r"|completely) broken\b"),
        ("crash", r"(?<!waves )(?<!waves were )(?<!waves are )\bcrash(?:ed|es|ing)\b(?! (?:at|on"
         r"|with) (?:a|my|his|her|their|our|the) (?:friend|couch|place|sofa|house))"),
        # error reports: "Error: ...", "got an exception", "TypeError", segfaults, OOM
        ("error|exception|seg|memory|oom|refused", r"(?:^|\s)error\s*:|\b(?:got|get|getting|hit"
         r"|hitting|threw|throws|throwing|raised|raises|seeing) (?:an? |the |this |same |that )?"
         r"(?:\w+ )?(?:error|exception)s?\b|\bsegfault|\bsegmentation fault\b|\bout of memory\b"
         r"|\boom(?:-killed)?\b|\bconnection refused\b|\b[a-z]{2,}(?:error|exception)\b"),
        # "timed out", "was rejected", "got stuck", "keeps crashing", "returned 500", "aborted"
        ("out|reject|turned down|declined|denied|stuck|loop|hang|kept|keeps|return|aborted"
         "|hallucinat|never", r"\btim(?:ed|es|ing) out\b|\b(?:was|were|got|been|get|gets|is"
         r"|are) (?:\w+ )?(?:rejected|turned down|declined|denied)\b|\brejected (?:our|my|us"
         r"|me)\b|\b(?:got|gets|is|was|are|were) stuck\b|\binfinite loop\b|\bhangs? (?:forever"
         r"|indefinitely)\b|\bjust hangs\b|\b(?:keeps?|kept) (?:crashing|failing|dropping"
         r"|timing out|disconnecting|hanging|breaking|freezing|returning (?:\w+ )?(?:wrong"
         r"|irrelevant|empty|garbage|null))\b|\breturn(?:ed|s|ing)? (?:an? |http )?[45]\d\d\b"
         r"|\baborted\b|\bhallucinat(?:ed|es|ing)\b|\bnever (?:arrived|came through|showed up"
         r"|loaded|finished|completed|responded)\b"),
        # "missed the flight", "lost all my work", "the build is red", "blew up"
        ("missed|lost|flaky|red|blew|blown", r"\bmissed (?:the|my|our) (?:\w+ )?(?:flight|train"
         r"|bus|deadline|connection)\b|\blost (?:the|my|all|our) (?:\w+ )?(?:draft|data|work"
         r"|files?|progress|changes|backup)\b|\b(?:tests?|build|ci|job|suite|pipeline) (?:is|are"
         r"|was|were|went|turned) (?:still )?(?:flaky|red)\b|\b(?:blew|blown) up\b(?! at)"),
    ),
    "goal": _rules(
        # "the goal is", "our objective for Q3 is", "Goal for today:", "my dream is to"
        ("goal|aim|objective|target|purpose|mission|north star|milestone|plan|ambition",
         r"(?:^|\b(?:the|my|our|his|her|their|main|primary|first|next|one|ultimate|big|biggest)"
         r" )(?:\w+ )?(?:goal|aim|objective|target|purpose|mission|north star|milestone|plan"
         r"|ambition)(?: (?:of|for) [^,.:;]{1,40}?)?\s*(?:is|:)(?:\s|$)"),
        ("point|dream", r"\bpoint (?:of [^,.]{1,30} )?is to\b|\b(?:my|our) (?:\w+ )?dream"
         r" (?:is|was) to\b|\blifelong dream\b|\bdream of (?:becoming|opening|having|owning"
         r"|starting|being)\b"),
        # "I want to / we hope to / I'm planning to X"; not "I want to say thanks"
        ("want|hop|aim|plan|intend|determined", rf"\b(?:(?:i|we) {_ADV}(?:want|wanna)(?: (?!(?:you"
         rf"|him|her|them|me|i|we|to)\b)[a-z]+){{0,2}}?|(?:i|we) {_ADV}(?:hope|aim|plan|intend)"
         r"|(?:i|we)(?:'m|'re| am| are) (?:really |still |now )?(?:hoping|aiming|planning"
         rf"|determined|intending)) to (?!(?:{_CHAT})\b)[a-z]+"),
        # "I'd love to learn Japanese" (not the social "I'd love to try it / see you")
        ("like|love", rf"\b(?:i|we)(?:'d| would) (?:really |also )?(?:like|love) to (?!(?:{_CHAT}"
         r"|try|do|lend|read|watch|have|go|help|learn more|make it)\b)[a-z]+"),
        # "we're trying to reach 1k users", "working toward", "we need to build", "aiming for"
        ("trying|working|need to|aiming", r"\b(?:i|we)(?:'m|'re| am| are) (?:trying|working) to"
         r" (?:get|reach|hit|cut|reduce|lower|increase|grow|double|improve|build|save|lose|finish"
         r"|become|learn)\b|\bworking towards?\b|\b(?:we|i) (?:really |still )?need to (?:build"
         r"|ship|deliver|launch|implement|create|release|reach|hit|finish)\b|\baiming for\b"),
        # "by the end of the sprint it should", "training for a marathon", "next year I'm going to"
        ("end of|training for|going to|gonna", r"\bby (?:the )?end of (?:the |this |next )?(?:day"
         r"|week|sprint|month|quarter|year)\b(?=.*\b(?:should|will|want|need|aim|goal|must"
         r"|going to|hope)\b)|\b(?:should|will|want|need|aim|must|going to|hope)\b.*\bby (?:the )?"
         r"end of\b|\btraining for (?:a|the|my) (?:\w+ ){0,2}(?:marathon|race|triathlon|5k|10k"
         r"|half|ironman|competition|championship)\b|\b(?:next|this) (?:year|summer|spring|fall"
         r"|winter|month)\b.*\b(?:i|we)(?:'m| am|'re| are) (?:going to|gonna) \w+"),
    ),
}
_NEGATABLE = frozenset({"failure"})  # "nothing broke", "hasn't crashed", "might have failed"
_NEG_BEFORE = re.compile(r"\b(?:not|no|never|nothing|none|without|cannot|might|may|could|would"
                         r"|\w+n't)\s+(?:\w+\s+){0,2}$")
_HEDGE = re.compile(  # a decision still being weighed
    r"\b(?:maybe|perhaps|probably|not sure|thinking (?:of|about)|considering|might|leaning)\b")
_HYPOTHETICAL = re.compile(r"(?:if|in case|what if|suppose|supposing|unless|assuming|imagine)\b")
_QUESTION_OPENER = re.compile(r"(?:what|why|how|when|where|who|which|do|does|did|is|are|was|were"
                              r"|can|could|would|will|should|have|has|had|may|might|any|isn't"
                              r"|aren't|don't|doesn't|didn't|won't|right|or|and you|you|wanna)\b")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|(?:(?<=\s)|^)'[^']*'(?=[\s.,!?;:]|$)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*|;\s+")


def _statements(content: str) -> list[str]:
    """Declarative sentences of `content`, lowercased: no quotes, questions or hypotheticals."""
    text = _QUOTED.sub(" ", content.replace("\u2019", "'")).lower()
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        sentence = raw.strip()
        if not sentence or _HYPOTHETICAL.match(sentence):
            continue
        if sentence.endswith("?"):  # keep "I got the job" of "I got the job, can you believe it?"
            parts = sentence.split(", ")
            cut = next((i for i, part in enumerate(parts) if _QUESTION_OPENER.match(part)), 0)
            if not cut:
                continue
            sentence = ", ".join(parts[:cut])
        out.append(sentence)
    return out


def _fires(marker: str, sentence: str) -> bool:
    if _PREFIX[marker].match(sentence):
        return True
    if marker == "decision" and _HEDGE.search(sentence):
        return False
    for needles, rule in _RULES[marker]:
        matches = rule.finditer(sentence) if any(n in sentence for n in needles) else ()
        for m in matches:
            if marker not in _NEGATABLE or not _NEG_BEFORE.search(sentence, 0, m.start()):
                return True
    return False


def detect_markers(content: str, role: str | None = None) -> tuple[str, ...]:
    """Builtin markers the turn states, in ORDER; `role="tool"` only checks for failures."""
    sentences = _statements(content) if content else []
    wanted = ("failure",) if role == "tool" else ORDER
    return tuple(m for m in wanted if any(_fires(m, s) for s in sentences))


def merge_markers(given: Iterable[str], detected: Iterable[str]) -> tuple[str, ...]:
    """Caller-given markers are authoritative and kept as-is (in order, deduplicated).

    Giving any builtin marker means "I labelled this turn": detection adds nothing. `custom:*`
    markers say nothing about the builtin ones, so they never suppress detection; detected
    builtin markers are then appended after them."""
    out = list(dict.fromkeys(given))
    if any(m in BUILTIN_MARKERS for m in out):
        return tuple(out)
    out.extend(m for m in dict.fromkeys(detected) if m in BUILTIN_MARKERS and m not in out)
    return tuple(out)
