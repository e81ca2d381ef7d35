"""Rule-based marker detection: does a turn state a decision, constraint, failure or goal?

Pure, deterministic and fast: each rule is a compiled regex over the lowercased sentence, tried
only when one of its literal "needles" occurs in it. The rules favour precision: a missed marker
costs a small recall boost, a wrong one pollutes every recall that turn shows up in.

How a turn is read:
- Text in quotation marks is dropped: quoted speech is someone else's words. Reported speech
  without quotes ("security said we must rotate keys") still counts.
- It is split into sentences. Questions ("should we use Postgres?") and hypotheticals ("if it
  fails, ...") are skipped; in "I want to run a marathon, what about you?" the part before the
  question tail is kept. Hedged sentences ("maybe we go with Vue") are not decisions.
- "Decision:" / "Constraint:" / "Failure:" / "Goal:" at the start of a sentence always count.
- role="tool" turns are only checked for failures (tool output states no decisions or goals).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hivemem.models import BUILTIN_MARKERS

ORDER: tuple[str, ...] = ("decision", "constraint", "failure", "goal")
Rule = tuple[tuple[str, ...], re.Pattern[str]]

_SOCIAL = (  # "going with my sister" is company, not a choice
    r"(?!(?:my|our|his|her|their|your|friends|family|him|them|us|me|some|a friend|a group"
    r"|the kids|the family|mom|dad)\b)")
_SUBJ = (r"(?:i|we|they|he|she|the team|team)(?:'ve|'d| have| had| finally| eventually"
         r"| ultimately| just| both| all| also){0,2}")


def _rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:
    """(needles, pattern) pairs; needles are '|'-separated substrings, one must be present."""
    return tuple((tuple(n.split("|")), re.compile(p)) for n, p in pairs)


_PREFIX = {  # an explicit label at the start of a sentence (all that gleanr detects)
    "decision": re.compile(r"(?:decision|decided|final call|approved)\s*:"),
    "constraint": re.compile(r"constraints?\s*:"),
    "failure": re.compile(r"(?:failure|failed)\s*:"),
    "goal": re.compile(r"goals?\s*:"),
}

_RULES: dict[str, tuple[Rule, ...]] = {
    "decision": _rules(
        # "let's go with / use / switch to X" (not the cheer "let's go for it")
        ("let", r"\blet(?:'s| us) (?:go with|go for (?!it\b)|use|switch|stick with|pick|choose|"
         r"adopt|move to|ship)\b"),
        # "we'll use", "I'm going to go with", "the agent will use"
        ("use|with|switch|adopt|move|route|standard", r"\b(?:we|i|the \w+)(?:'ll| will|'re going to"
         r"| are going to|'m going to| am going to|'re gonna|'m gonna) (?:use|go with|stick with|"
         r"switch to|adopt|move to|stay with|keep using|route|standardi[sz]e on)\b"),
        # "we decided", "I chose", "we opted for", "settled on", "agreed to", "that's decided"
        ("decide|chose|opted|settled|agreed|made up", r"\b(?:i|we|they|he|she|the team|team)(?:'ve|"
         r"'d| have| had| finally| eventually| ultimately| just| both| all| also){0,2} (?:decided|"
         r"chose|chosen|opted|settled on|agreed (?:to|on)|made up (?:my|our) minds?)\b|(?:^|,\s*)"
         r"decided\b|\b(?:it|that)(?:'s| is) (?:decided|settled)\b"),
        ("final", r"\bfinal (?:call|decision)\b"),
        # "the team picked X over Y", "I picked the red one"
        ("picked", r"\b(?:i|we|they|he|she|the team|team)(?:'ve|'d| have| had| finally| eventually|"
         r" ultimately| just| both| all| also){0,2} picked (?:the|a|an|option)\b|\bpicked (?:\w+ ){"
         r"1,3}over\b"),
        # "going with X" / "went with X" (not "going with my sister")
        ("going with", r"(?:^|\bi'm |\bi am |\bwe're |\bwe are )going with (?!(?:my|our|his|her|"
         r"their|your|friends|family|him|them|us|me|some|a friend|a group|the kids|the family|mom|"
         r"dad)\b)"),
        ("went with", r"\b(?:i|we|they)(?: finally| eventually| ultimately)? went with (?!(?:my|our"
         r"|his|her|their|your|friends|family|him|them|us|me|some|a friend|a group|the kids|the "
         r"family|mom|dad)\b)"),
        # "switch to X" as an order, or "we're switching to monthly billing"
        ("switch", r"(?:^|\b(?:we|i)(?:'re|'m| are| am)? )(?:switch|switching|switched) (?:over )?"
         r"to\b"),
        ("ship it|lgtm", r"\bship it\b|\blgtm\b"),
    ),
    "constraint": _rules(
        # deontic "must" ("must not", "must return JSON", "must be at least 12"), not epistemic
        # ("must have been", "must feel great", "must be so proud", "a must", "who must save")
        ("must", r"\bmust(?<!\bwho must)(?<!there must)(?<!\ba must)\b(?:n't| not| never| always| "
         r"only| (?!(?:be|have|'ve|say|admit|confess|try|see|visit|watch|read|check|come|feel|love|"
         r"enjoy|mean|know|look|seem|sound|add|take|miss|like|want|think|make|smell|taste|bring|get"
         r"|keep (?:you|them|him|her|me|us)|really|so|also|definitely|surely|truly)\b)[a-z]| be (?:"
         r"at|under|below|above|over|within|less|fewer|no|in|on|one|valid|unique|compatible|"
         r"backward|reproducible|idempotent|deterministic|stable|empty|present|set|run|done|kept|"
         r"met|sent|put|built|(?!(?:tired|excited|thrilled|exhausted|stoked|pumped|elated|relieved|"
         r"amazed|overwhelmed|devastated|worried|bored|pleased|delighted|blessed|stressed|"
         r"frustrated|disappointed|surprised|impressed|interested|obsessed|scared|hooked|spoiled)\b"
         r")[a-z]+(?:ed|en))\b)"),
        # "Never push to main", "should never"; not "never mind", "never been", "never say never"
        ("never", r"^(?:and |but |so |please |also )?never (?!(?:mind|been|thought|knew|have|had|"
         r"ever|again|seen|heard|felt|liked|got|saw|gonna|once|before|forget|stop|did|say|give up|"
         r"quit|lose|doubt|underestimate|settle)\b)\w+|\b(?:should|must|shall) never\b"),
        # "don't ever commit .env"; not "don't ever give up"
        ("ever", r"\b(?:don't|do not) ever (?!(?:forget|quit|give up|stop|doubt|change|lose)\b)"),
        # imperative "Do not touch X"; not "don't worry", "don't forget", "don't give up"
        ("don't|do not", r"^(?:please |and |but |so |also )?(?:don't|do not) (?!(?:worry|forget|"
         r"mind|be|feel|stress|panic|hesitate|know|think|care|get|even|let|you|ya|we|give up|quit|"
         r"push|apologi\w*|lose|stop|doubt|beat|miss|judge|rush|wait|laugh|ever)\b)\w+"),
        # "can't exceed", "we can't use GPL code", "I can't eat gluten", "I can only do mornings"
        ("can", r"\b(?:can't|cannot|can not) (?:exceed|go (?:over|above|beyond)|be (?:more|longer|"
         r"larger|bigger|over|above|greater|later)|be used|use|slip|store|eat|drink|have (?:any|"
         r"more|dairy|gluten|sugar|alcohol|caffeine|nuts|meat)|touch|deploy|share|commit)\b|\bcan "
         r"only (?!(?:imagine|hope|guess|say|think|wish|dream|laugh)\b)\w+"),
        # "has to be backward compatible", "we have to stay within"; not "I have to say"
        ("has to|have to", r"\bhas to\b(?! do with)|\b(?:we|i|it|they|will|still|all) have to (?!(?"
         r":say|admit|go|run|leave|agree|tell|thank|ask|confess|check|try|see|hang|catch|meet|come|"
         r"visit|get going|share|show|figure|think|look|read|watch|do|talk|celebrate|grab|get|be "
         r"honest)\b)\w+"),
        # "needs to be done by Friday"
        ("to be|to stay|to remain|to fit|to comply", r"\bneeds? to (?:be|stay|remain|fit|comply)\b("
         r"?=.*\b(?:by|under|within|before|no exceptions|compatible|at least|less|fewer)\b)"),
        # numeric limits, caps and deadlines
        ("more than|most|longer than|later than|max|cap|limit|exception|negotiable|deadline|no more",
         r"\b(?:no|not) more than\b|\bat most\b|\bno (?:longer|later) than\b|\bmax(?:imum)?(?: of)?"
         r" \$?\d|\bcapped at\b|\bcap (?:is|of)\b|\bhard limit\b|\blimit(?:ed)? (?:is|to|of|at) \$?"
         r"\d|\bno exceptions\b|\bnon-negotiable\b|\b(?:hard )?deadline is\b|, no more[.!]?$"),
        # permissions: "not allowed", "only allowed", "doesn't allow pets", "required to"
        ("allow|permit|prohibit|forbid|mandatory|required", r"\b(?:aren't|isn't|not|only) (?:be )?("
         r"?:allowed|permitted)\b|\b(?:doesn't|don't|does not|do not|won't|will not) (?:allow|"
         r"permit)\b|\b(?:prohibited|forbidden|mandatory)\b|\brequired to\b|\b(?:is|are) required\b"),
        # "Only use X", "Keep the summary under 100 words", "make sure it never blocks"
        ("only|keep|sure", r"^(?:please )?only (?:use|call|accept|read|write|deploy|run|return|"
         r"allow)\b|^(?:please )?keep (?:\w+ ){1,3}(?:under|below|within|short|brief|less than)\b|^"
         r"(?:make sure|ensure|be sure)\b.*\b(?:never|not|n't|always)\b"),
        # imperative "Always use UTC" (not "always here for you")
        ("always", r"^(?:please )?always (?:use|run|check|set|include|return|write|log|validate|ask"
         r"|cite|confirm|test|pin|close|lock|back up|respond|reply|call|store|sign|encrypt|verify|"
         r"add|keep)\b"),
        # "from now on nobody deploys on Fridays"; allergies
        ("from now on|going forward|from here on|allergic|intolerant",
         r"\b(?:from now on|going forward|from here on)\b.*\b(?:nobody|no one|never|only)\b|"
         r"\ballergic to\b|\bintolerant\b"),
    ),
    "failure": _rules(
        # "that failed", "it fails", "3 tests failing" (not "fail to see")
        ("fail", r"\bfail(?:ed|s|ing)\b(?! to (?:see|understand|mention|notice|grasp))"),
        # "was a disaster", "flop", "dead end", "went wrong", "made things worse"
        ("failure|disaster|fiasco|flop|dead end|wrong|luck|worse",
         r"\b(?:was|is|been|were|be) (?:a |an )?(?:complete |total |big |huge |)?(?:failure|"
         r"disaster|fiasco)\b|\bflop(?:ped)?\b|\bdead end\b|\bwent (?:horribly |badly |terribly )?"
         r"wrong\b|\bgone wrong\b|\bno luck\b|\bmade (?:\w+ ){1,2}worse\b"),
        # "didn't work", "stopped working" (not "I don't work Mondays", "Tuesday doesn't work for
        # me"); "didn't help", "didn't work out", "didn't make it"
        ("work", r"\b(?<!\bi )(?<!\bwe )(?<!\byou )(?<!\bthey )(?:(?:did|is|was|are|were|has|have)("
         r"?:n't| not)|(?:does|do)(?:n't| not)(?! (?:\w+ )?work for (?:me|us|you))|stopped|no "
         r"longer|never) (?:\w+ )?work(?:s|ed|ing)?\b(?! (?:late|today|tomorrow|weekends)\b)"),
        ("n't|not", r"\b(?:did|does|has|have)(?:n't| not) (?:help(?:ed)?|go (?:well|as planned)|pan"
         r" out|work out|reach|pass|make it|get (?:in|accepted|selected|the job))\b"),
        # broke / broken (not "broke my record", "broke ground", "broke up", "I'm broke")
        ("broke", r"\bbroke(?<!i'm broke)(?<!\bso broke)(?<!flat broke)\b(?! (?:\w+ ){0,2}(?:record"
         r"|leg|arm|wrist|ankle|nose|rib|toe|finger|foot|hand|heart|news|ice|silence|promise|best|"
         r"pb)\b)(?! (?:ground|even|free|up|out|into|in|through|bread|down (?:crying|in tears))\b)|"
         r"\b(?:is|are|was|were|been|got|seems|looks|still|totally|completely) broken\b"),
        # crashed (not "waves crashing", "crashed at a friend's place")
        ("crash", r"\bcrash(?:ed|es|ing)\b(?<!waves crashing)(?<!waves crashed)(?! (?:at|on|with) ("
         r"?:a|my|his|her|their|our|the) (?:friend|couch|place|sofa|house))"),
        # error reports: "Error: ...", "got an exception", "TypeError", segfaults, OOM
        ("error|exception|seg|memory|oom|refused", r"(?:^|\s)error\s*:|\b(?:got|get|getting|hit|"
         r"hitting|threw|throws|throwing|raised|raises|seeing) (?:an? |the |this |same |that )?(?:"
         r"\w+ )?(?:error|exception)s?\b|\bsegfault|\bsegmentation fault\b|\bout of memory\b|\boom("
         r"?:-killed)?\b|\bconnection refused\b|\b[a-z]{2,}(?:error|exception)\b"),
        # "timed out", "was rejected", "got stuck", "keeps crashing", "returned 500", "aborted"
        ("out|reject|turned down|declined|denied|stuck|loop|hang|kept|keeps|return|aborted|hallucinat|never",
         r"\btim(?:ed|es|ing) out\b|\b(?:was|were|got|been|get|gets|is|are) (?:\w+ )?(?:rejected|"
         r"turned down|declined|denied)\b|\brejected (?:our|my|us|me)\b|\b(?:got|gets|is|was|are|"
         r"were) stuck\b|\binfinite loop\b|\bhangs? (?:forever|indefinitely)\b|\bjust hangs\b|\b(?:"
         r"keeps?|kept) (?:crashing|failing|dropping|timing out|disconnecting|hanging|breaking|"
         r"freezing|returning (?:\w+ )?(?:wrong|irrelevant|empty|garbage|null))\b|\breturn(?:ed|s|"
         r"ing)? (?:an? |http )?[45]\d\d\b|\baborted\b|\bhallucinat(?:ed|es|ing)\b|\bnever (?:"
         r"arrived|came through|showed up|loaded|finished|completed|responded)\b"),
        # "missed the flight", "lost all my work", "the build is red", "blew up"
        ("missed|lost|flaky|red|blew|blown", r"\bmissed (?:the|my|our) (?:\w+ )?(?:flight|train|bus"
         r"|deadline|connection)\b|\blost (?:the|my|all|our) (?:\w+ )?(?:draft|data|work|files?|"
         r"progress|changes|backup)\b|\b(?:tests?|build|ci|job|suite|pipeline) (?:is|are|was|were|"
         r"went|turned) (?:still )?(?:flaky|red)\b|\b(?:blew|blown) up\b(?! at)"),
    ),
    "goal": _rules(
        # "the goal is", "our objective for Q3 is", "the plan is to", "Goal for today:"
        ("goal|aim|objective|target|purpose|mission|north star|milestone|plan|ambition",
         r"(?:^|\b(?:the|my|our|his|her|their|main|primary|first|next|one|ultimate|big|biggest) )(?"
         r":\w+ )?(?:goal|aim|objective|target|purpose|mission|north star|milestone|plan|ambition)("
         r"?: (?:of|for) [^,.:;]{1,40}?)?\s*(?:is|:)(?:\s|$)"),
        # "the point of this is to", "my dream is to"
        ("point|dream", r"\bpoint (?:of [^,.]{1,30} )?is to\b|\b(?:my|our) (?:\w+ )?dream (?:is|was"
         r") to\b|\blifelong dream\b|\bdream of (?:becoming|opening|having|owning|starting|being)\b"),
        # "I want to / we hope to / I'm planning to X", "we want users to be able to X" (not "I want
        # to say thanks", "I'm planning a trip to ...")
        ("want|hop|aim|plan|intend|determined", r"\b(?:(?:i|we) (?:really |also |still |eventually "
         r"|definitely |just )?(?:want|wanna)(?: (?!(?:you|him|her|them|me|i|we|to)\b)[a-z]+){0,2}?"
         r"|(?:i|we) (?:really |also |still |eventually |definitely |just )?(?:hope|aim|plan|intend"
         r")|(?:i|we)(?:'m|'re| am| are) (?:really |still |now )?(?:hoping|aiming|planning|"
         r"determined|intending)) to (?!(?:say|thank|know|hear|see|ask|tell|share|let|check|mention"
         r"|apologi\w*|remind|show|talk|chat|grab|catch|meet|join|come|go with|hang|congratulate|"
         r"wish|introduce|point|add|clarify|confirm|update|follow|give|send|hug|celebrate|get back "
         r"to (?:you|me))\b)[a-z]+"),
        # "I'd love to learn Japanese" (not the social "I'd love to try it / see you")
        ("like|love", r"\b(?:i|we)(?:'d| would) (?:really |also )?(?:like|love) to (?!(?:say|thank|"
         r"know|hear|see|ask|tell|share|let|check|mention|apologi\w*|remind|show|talk|chat|grab|"
         r"catch|meet|join|come|go with|hang|congratulate|wish|introduce|point|add|clarify|confirm|"
         r"update|follow|give|send|hug|celebrate|get back to (?:you|me)|try|do|lend|read|watch|have"
         r"|go|help|learn more|make it)\b)[a-z]+"),
        # "we're trying to reach 1k users", "working toward", "we need to build", "aiming for"
        ("trying|working", r"\b(?:i|we)(?:'m|'re| am| are) (?:trying|working) to (?:get|reach|hit|"
         r"cut|reduce|lower|increase|grow|double|improve|build|save|lose|finish|become|learn)\b|"
         r"\bworking towards?\b"),
        ("need to|aiming", r"\b(?:we|i) (?:really |still )?need to (?:build|ship|deliver|launch|"
         r"implement|create|release|reach|hit|finish)\b|\baiming for\b"),
        # "by the end of the sprint it should ..."; "training for a marathon"; "next year I'm going to"
        ("end of|training for|going to|gonna", r"\bby (?:the )?end of (?:the |this |next )?(?:day|"
         r"week|sprint|month|quarter|year)\b(?=.*\b(?:should|will|want|need|aim|goal|must|going to|"
         r"hope)\b)|\b(?:should|will|want|need|aim|must|going to|hope)\b.*\bby (?:the )?end of\b|"
         r"\btraining for (?:a|the|my) (?:\w+ ){0,2}(?:marathon|race|triathlon|5k|10k|half|ironman|"
         r"competition|championship)\b|\b(?:next|this) (?:year|summer|spring|fall|winter|month)\b.*"
         r"\b(?:i|we)(?:'m| am|'re| are) (?:going to|gonna) \w+"),
    ),
}
_NEGATABLE = frozenset({"failure"})  # "nothing broke", "hasn't crashed", "might have failed"
_NEG_BEFORE = re.compile(
    r"\b(?:not|no|never|nothing|none|without|cannot|might|may|could|would|\w+n't)\s+"
    r"(?:\w+\s+){0,2}$")
_HEDGE = re.compile(  # a decision still being weighed
    r"\b(?:maybe|perhaps|probably|not sure|thinking (?:of|about)|considering|might|leaning)\b")
_HYPOTHETICAL = re.compile(
    r"(?:if|in case|what if|suppose|supposing|unless|assuming|imagine|even if|whether)\b")
_QUESTION_OPENER = re.compile(
    r"(?:what|why|how|when|where|who|which|whose|do|does|did|is|are|was|were|can|could|would"
    r"|will|should|shall|have|has|had|may|might|any|anything|isn't|aren't|don't|doesn't|didn't"
    r"|won't|wouldn't|right|or|and you|you|wanna)\b")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|(?:(?<=\s)|^)'[^']*'(?=[\s.,!?;:]|$)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*|;\s+")


def _statements(content: str) -> list[str]:
    """Declarative sentences of `content`, lowercased: no quotes, questions or hypotheticals."""
    text = _QUOTED.sub(" ", content.replace("’", "'").replace("‘", "'")).lower()
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        sentence = raw.strip()
        if not sentence or _HYPOTHETICAL.match(sentence):
            continue
        if sentence.endswith("?"):  # keep "I got the job" of "I got the job, can you believe it?"
            parts = sentence.split(", ")
            keep = []
            for part in parts:
                if _QUESTION_OPENER.match(part):
                    break
                keep.append(part)
            if not keep or len(keep) == len(parts):
                continue
            sentence = ", ".join(keep)
        out.append(sentence)
    return out


def _fires(marker: str, sentence: str) -> bool:
    if _PREFIX[marker].match(sentence):
        return True
    if marker == "decision" and _HEDGE.search(sentence):
        return False
    for needles, rule in _RULES[marker]:
        if not any(n in sentence for n in needles):
            continue
        for m in rule.finditer(sentence):
            if marker not in _NEGATABLE or not _NEG_BEFORE.search(sentence, 0, m.start()):
                return True
    return False


def detect_markers(content: str, role: str | None = None) -> tuple[str, ...]:
    """Builtin markers the turn states, in the fixed order decision, constraint, failure, goal.

    `role="tool"` restricts detection to failures.
    """
    if not content or not content.strip():
        return ()
    sentences = _statements(content)
    found = {m for m in ORDER if (role != "tool" or m == "failure")
             and any(_fires(m, s) for s in sentences)}
    return tuple(m for m in ORDER if m in found)


def merge_markers(given: Iterable[str], detected: Iterable[str]) -> tuple[str, ...]:
    """The caller's markers, plus detected ones only if the caller gave no builtin marker.

    Caller-given markers are authoritative and kept as-is, in order: giving any builtin marker
    (even one) means "I labelled this turn", which switches detection off for it. `custom:*`
    markers say nothing about the builtin ones, so they never suppress detection; detected
    builtin markers are appended after them, without duplicates.
    """
    out = list(dict.fromkeys(given))
    if any(m in BUILTIN_MARKERS for m in out):
        return tuple(out)
    out.extend(m for m in dict.fromkeys(detected) if m in BUILTIN_MARKERS and m not in out)
    return tuple(out)
