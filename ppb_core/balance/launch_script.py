"""The words a Megatron-LM launch script hands `pretrain_gpt.py`, read without running the script.

A real launch script (Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh,
examples/llama/train_llama3_8b_h100_fp8.sh, examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh)
keeps its flags in bash arrays and its sizes in variables (`NUM_LAYERS=32`, `TP=${TP:-1}`,
`--num-layers $NUM_LAYERS`). The words are read as the shell reads them (lines joined by `\\`,
quotes, `#` comments) and each variable takes the value the script assigns it, its default where
it reads the environment (`${TP:-1}` is 1): the check is of the script as written, not of the
caller's environment. An array element quoted with its value (`"--vocab-size 128256"`) is split
as the unquoted `${ARGS[@]}` splits it. An `if` whose test the script's own values decide (`[[ "$TOKENIZER_ARG"
== "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]`: string comparisons, `-z`, `-n`, integer comparisons, `!`, `&&`,
`||`) runs the branch bash would run; where the test asks what the script cannot say (a file, an unassigned
variable, a command) both branches are read (the last value given wins, as argparse keeps the last). Until
session 32 both were always read: examples/llama/train_llama3_8b_h100_fp8.sh, whose tokenizer defaults to
MOCK, was imported with its real-data branch's HuggingFace tokenizer, whose file it does not name. A
variable the script never assigns stays `$NAME`, and a size flag holding one is refused by the flag reader.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field

from ppb_core import limits

_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)", re.DOTALL)
# ${NAME}, ${NAME:-default} / ${NAME-default}, $NAME (bash's parameter expansion, the forms scripts use)
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


# A profiler wrapping the launch (examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh's
# `PROFILE_CMD=(nsys profile --sample=none ...)`): its options are its own, not pretrain_gpt.py's,
# up to the launcher it runs or the array's end.
_PROFILERS = frozenset({"nsys", "ncu"})
_LAUNCHERS = frozenset({"torchrun", "python", "python3", "uv"})


class ScriptError(ValueError):
    """Text the shell itself could not read (an unclosed quote)."""


# A word or a variable expanded beyond this is refused: variables of doubling variables would
# otherwise grow without bound (`A=$B$B`, thirty times over).
EXPANDED_CHARACTERS = limits.YAML_BYTES
_PASSES = 8  # nested defaults (`${X:-${Y:-3}}`) expand from the inside, one level a pass


def _expand(word: str, variables: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:  # the default of ${NAME:-default}
            return match.group(2)
        return match.group(0)

    for _ in range(_PASSES):
        expanded = _REFERENCE.sub(value, word)
        if len(expanded) > EXPANDED_CHARACTERS:
            raise ScriptError(f"variables expanded: {limits.over(len(expanded), EXPANDED_CHARACTERS, 'characters')}")
        if expanded == word:
            break
        word = expanded
    return _ARITHMETIC.sub(lambda match: _arithmetic(match, variables), word)


def unread_word(value: str) -> str:
    """What a flag's word that is no integer is, said as a problem: `$(echo 8)` and `$((2**3))` were said to be
    shell variables."""
    if "$((" in value:
        return "shell arithmetic ppb does not evaluate (it reads + - * / % of numbers and assigned variables)"
    if "$(" in value or "`" in value:
        return "a command's output, which ppb does not run"
    return "a shell variable the script does not assign" if "$" in value else "not an integer"


# $(( expression )): bash's integer arithmetic (examples/gptoss/02_train.sh `WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))`,
# a pipeline size of `${WORLD_SIZE}`), with one level of parentheses inside
_ARITHMETIC = re.compile(r"\$\(\(((?:[^()]|\([^()]*\))*)\)\)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT64 = 2**63  # bash's arithmetic is in 64-bit integers
_ARITHMETIC_CHARACTERS = 200


def _arithmetic(match: re.Match[str], variables: dict[str, str]) -> str:
    """The value of `$((...))` as bash computes it (+ - * / %, division truncating toward zero, a bare
    name its variable's value); left as written where a name is not assigned (`$RANDOM`)."""
    if len(match.group(1)) > _ARITHMETIC_CHARACTERS:  # a launch script's sums are short; the parser recurses
        return match.group(0)
    names = {name: variables.get(name) for name in _NAME.findall(match.group(1))}
    if any(value is None or not value.strip().lstrip("-").isdigit() for value in names.values()):
        return match.group(0)
    expression = _NAME.sub(lambda name: f"({names[name.group(0)].strip()})", match.group(1))
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return match.group(0)
    result = _evaluate(tree.body, match.group(0))
    return match.group(0) if result is None else str(result)


def _evaluate(node: ast.expr, shown: str) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _evaluate(node.operand, shown)
        return None if operand is None else -operand if isinstance(node.op, ast.USub) else operand
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.Mod):
        return None
    left, right = _evaluate(node.left, shown), _evaluate(node.right, shown)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Div | ast.Mod) and right == 0:
        raise ScriptError(f"{shown}: division by 0")
    if isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
        result = (
            left + right
            if isinstance(node.op, ast.Add)
            else left - right
            if isinstance(node.op, ast.Sub)
            else left * right
        )
    else:
        quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)  # C's truncation
        result = quotient if isinstance(node.op, ast.Div) else left - quotient * right
    if abs(result) >= _INT64:
        raise ScriptError(f"{shown}: over bash's 64-bit integers")
    return result


# `;` ends a command as a newline does (`TP=8; PP=4` is two assignments), `;;` a `case` arm: the shell's, not a word
_SEPARATORS = frozenset({";", ";;"})


def _shell_words(text: str) -> list[str]:
    """The words of *text* as shlex.split(comments=True) gives them, an unquoted `;` or `;;` a word of
    its own (bash(1), Lists: `;` separates commands, so `TP=8; PP=4` assigns TP 8, not "8;")."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    return list(lexer)


def script_words(text: str) -> list[str]:
    """The words of *text* (flags, or a whole launch script) with the script's variables expanded."""
    return script_words_and_variables(text)[0]


def script_words_and_variables(text: str) -> tuple[list[str], dict[str, str]]:
    """The words of *text* with its variables expanded, and the variables it assigns (expanded):
    `export CUBLAS_WORKSPACE_CONFIG=:4096:8` is a variable the run's environment holds."""
    # a backslash before a newline is removed with it, as the shell joins lines (shlex would keep
    # the newline in the next word)
    text = re.sub(r"\\\r?\n", "", text)
    # `$(( 3 * PP ))` is one word to bash; shlex would split it at its spaces
    text = _ARITHMETIC.sub(lambda match: "".join(match.group(0).split()), text)
    try:
        words = _shell_words(text)
    except ValueError as err:
        raise ScriptError(f"cannot read the flags: {err}") from None
    variables: dict[str, str] = {}
    found: list[str] = []
    in_array = profiler = False
    branches = _Branches()
    for word in words:
        role = None if in_array else branches.structure(word, variables)
        if role is not None:
            if role == "keyword":  # a test's words are the shell's, never pretrain_gpt.py's
                found.append(word)
            continue
        if branches.skipping or word in _SEPARATORS:
            continue
        assignment = None if in_array else _ASSIGNMENT.fullmatch(word)
        if assignment is not None:
            name, raw = assignment.groups()
            if not raw.startswith("("):
                variables[name] = _expand(raw, variables)
                continue
            # ARGS=( opens an array, its elements words of their own (`ARGS=(--a 1 --b)` too)
            in_array, word = True, raw[1:]
        closed = in_array and word.endswith(")") and word.count(")") > word.count("(")  # "([0]+[1]*3)" stays
        if closed:
            in_array, word = False, word[:-1]
        if not word:
            profiler = profiler and not closed
            continue
        if not in_array and word.endswith(")") and "(" not in word:
            continue  # a `case` arm's pattern (`--checkpoint-path)`: the script's own option, 02_train.sh)
        expanded = _expand(word, variables)
        if expanded in _PROFILERS:
            profiler = True
        if profiler:
            profiler = not closed and expanded not in _LAUNCHERS and not expanded.endswith(".py")
            if profiler or closed:
                continue
        if expanded.startswith("--") and len(expanded.split()) > 1:
            found.extend(expanded.split())
        else:
            found.append(expanded)
    return found, variables


_INTEGER_TESTS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
                  "-ge": int.__ge__}  # fmt: skip
_PATTERN = re.compile(r"[*?\[]")  # `[[ $X == a* ]]` matches a pattern: not decided here


def _test(words: list[str]) -> bool | None:
    """What one `[ ... ]` / `[[ ... ]]` test (its words inside the brackets, expanded) gives, as bash's
    `test` and `[[` give it (bash(1), CONDITIONAL EXPRESSIONS); None where the script's values do not say
    (a file test, an operand still holding `$NAME`, a pattern)."""
    negate = bool(words) and words[0] == "!"
    words = words[1:] if negate else words
    if any("$" in word for word in words):
        return None
    result: bool | None = None
    if len(words) == 2 and words[0] in ("-z", "-n"):
        result = (words[1] == "") == (words[0] == "-z")
    elif len(words) == 3 and words[1] in ("=", "==", "!="):
        if _PATTERN.search(words[2]):
            return None
        result = (words[0] == words[2]) == (words[1] != "!=")
    elif len(words) == 3 and words[1] in _INTEGER_TESTS:
        try:
            result = _INTEGER_TESTS[words[1]](int(words[0]), int(words[2]))
        except ValueError:
            return None
    elif len(words) == 1:
        result = words[0] != ""
    if result is None:
        return None
    return not result if negate else result


def _condition(words: list[str]) -> bool | None:
    """An `if`'s list of tests joined by `&&` and `||` (equal precedence, left to right, as bash runs a
    list); None where a test is not decided and the others do not settle it, or the list runs a command."""
    value: bool | None = True
    joiner = "&&"
    closing = {"[": "]", "[[": "]]"}
    opened: str | None = None
    negate = False
    test: list[str] = []
    for word in words:
        if opened is None:
            if word in closing:
                opened, test = word, []
            elif word in ("&&", "||"):
                joiner = word
            elif word == "!":
                negate = not negate
            else:
                return None  # a command, not a test
            continue
        if word != closing[opened]:
            test.append(word)
            continue
        result = _test(test)
        if negate and result is not None:
            result = not result
        if joiner == "&&":
            value = False if value is False or result is False else None if None in (value, result) else True
        else:
            value = True if value is True or result is True else None if None in (value, result) else False
        opened, negate = None, False
    return value if opened is None else None


@dataclass
class _If:
    """One open `if`: reading its test or a branch; whether that branch runs (True), does not (False: its
    test failed, an earlier branch ran, or an enclosing branch does not run) or may (None: not decided);
    whether a branch surely ran (True), maybe did (None) or none did yet (False)."""

    testing: bool = True
    runs: bool | None = None
    ran: bool | None = False
    test: list[str] = field(default_factory=list)


class _Branches:
    """Which `if` branches the words are in, and whether the script's own values decide them."""

    def __init__(self) -> None:
        self._open: list[_If] = []

    @property
    def skipping(self) -> bool:
        return any(frame.runs is False for frame in self._open)

    def _outer_skipping(self) -> bool:
        return any(frame.runs is False for frame in self._open[:-1])

    def structure(self, word: str, variables: dict[str, str]) -> str | None:
        """Whether *word* is the `if`'s own: "keyword" (if, then, elif, else, fi), "test" (a word of its
        test) or None (the script's), noting what each test decides."""
        bare = word[:-1] if word.endswith(";") else word
        if bare == "if":
            self._open.append(_If())
            return "keyword"
        if not self._open:
            return None
        frame = self._open[-1]
        if frame.testing:
            if bare != "then":
                if word != ";":
                    frame.test.append(_expand(bare, variables))
                return "test"
            decided = False if self._outer_skipping() or frame.ran is True else _condition(frame.test)
            frame.testing, frame.runs, frame.test = False, decided, []
            if decided is not False:
                frame.ran = decided if frame.ran is False else None if decided is None else True
            return "keyword"
        if bare == "elif":
            frame.testing = True
            return "keyword"
        if bare == "else":
            frame.runs = False if self._outer_skipping() or frame.ran is True else None if frame.ran is None else True
            return "keyword"
        if bare == "fi":
            self._open.pop()
            return "keyword"
        return None
