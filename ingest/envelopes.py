"""What surrounds a vLLM message in a log line: the envelope patterns both parsing paths share.

Owns the container timestamp, process, rank, compose and tag prefixes, vLLM's header, the
foreign logging formats (`FOREIGN_ENVELOPES`) and ANSI colour. A line's first envelope is its
envelope: what follows is that envelope's message. Never the message formats themselves
(those are the line kinds of `catalogue.py`) and never code that applies a pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Both engines read `\w`, `\d` and so `\b` by their own Unicode tables, which differ (the
# `regex` module's are newer; the difference is in tests/ingest/test_engine_classes.py).
# vLLM and the loggers around it print their numbers, names and levels in ASCII, so every
# pattern both paths read (and every per-line pattern the router's cues stand for) has ASCII
# classes: `[0-9]` for a digit, and no `\b` (the stats fields start at FIELD_START).
# What `\s` is to both engines (Unicode White_Space), for Python's str methods, whose
# whitespace also holds U+001C-U+001F (as `\s` does to stdlib `re`): where the router reads
# `\s` or strips with Polars' `strip_chars()`, the per-line path strips these.
SPACES = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

# docker --timestamps / kubectl --timestamps / CRI (`<RFC3339> stdout F <line>`), and local
# viewers that print the host's naive time in front (Docker Desktop: `2025-07-10 08:59:40 `,
# or `2025-07-10T08:59:40 `). A naive wrapper gives the year only: its zone is the viewer's.
# ASCII digits, as every runtime prints them and as LEADING_WRAPPER_TS reads them (`\d` is any
# script's to both engines).
WRAPPER_TS = (
    r"(?P<wts>[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?| [0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?))"
    r"\s+(?:(?:stdout|stderr) [FP] )?"
)
# `(APIServer pid=1) `, `(RayWorkerWrapper pid=263, ip=10.0.16.95) `, `(task, pid=17433) `
# (ASCII digits, as everywhere vLLM prints a number: `\d` is any script's to both engines),
# Ray actor names with one level of nested parentheses (`(Llumlet(iid=1) pid=9)`), and the
# leading `(` lost in a paste (`_AsyncLLMEngine pid=1974) `).
PROCESS = (
    r"(?:\(|^)(?P<proc>[A-Za-z_][^()\n]*?(?:\([^()\n]*\)[^()\n]*?)?),? pid=(?P<pid>[0-9]+)"
    r"(?:, ip=[^)\n]*)?\) ?"
)
RANK = r"\[(?P<rank>rank[0-9]+)\]: ?"
# docker compose's service column (`vllm-1  | `, `llm_server_1 | `) in front of any output.
COMPOSE = r"[A-Za-z0-9][\w.-]{0,80} +\| "
# A tag some launchers print between the process prefix and the level (vllm-omni `[Stage-0] `).
TAG = r"(?:\[[A-Za-z][A-Za-z0-9_.-]*\] )?"
# `INFO 05-09 00:49:33 scheduler.py:1057] ` (<= v0.7.3) and `INFO 05-09 00:49:33 [loggers.py:116] `
# (v0.8.0+). The level is optional because pastes lose leading characters; the space after
# `]` is not: every era's format has it (`%(lineno)d] %(message)s`), and vLLM prints ASCII
# digits (`[0-9]`, not `\d`: any script's digits to both engines). One text for both paths:
# the router counts HEADER_CORE, the per-line path reads HEADER (the same without groups).
_HEADER_TIME = r"(?P<mon>[01][0-9])-(?P<day>[0-3][0-9]) (?P<hms>[0-2][0-9]:[0-5][0-9]:[0-6][0-9]) "
_HEADER_AT = r"\[?(?P<file>[^\]\s:]+):(?P<lineno>[0-9]+)\] "
HEADER = r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) )?" + _HEADER_TIME + _HEADER_AT


def no_groups(pattern: str) -> str:
    """The pattern with its named groups as plain ones (the same matches)."""
    return re.sub(r"\(\?P<[a-z_]+>", "(?:", pattern)


# vLLM's year-less local time, `MM-DD HH:MM:SS ` (every text-format version).
TIMESTAMP = no_groups(_HEADER_TIME)
# The timestamp-and-location core, for counting records glued on one physical line.
HEADER_CORE = no_groups(_HEADER_TIME + _HEADER_AT)
# The location after the timestamp, `[file:line]` or `file:line]`.
LOCATION = r"^\[?(?P<file>[^\] :]+):(?P<lineno>[0-9]+)\]"
# The time of WRAPPER_TS alone (what a docker json-file `time` must be to stand as one).
WRAPPER_TIME = no_groups(WRAPPER_TS[: WRAPPER_TS.index(r"\s+")])
# A container timestamp at the start, its one group the time.
LEADING_WRAPPER_TS = "^(" + WRAPPER_TIME[3:] + r"\s"
# Uvicorn's level prefix (`INFO:     `).
UVICORN_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):"
# The whole envelope in front of a vLLM-formatted message: optional container timestamp,
# anything (compose prefix, VLLM_LOGGING_PREFIX, tqdm output), optional process prefix, header.
# The process is the last prefix before the header, with text but no parentheses between
# (a container timestamp, a tag), as the per-line path reads it (_envelope.process_of); a rank
# anywhere before it.
ENVELOPE = (
    rf"^(?:{WRAPPER_TS})?(?P<pre>[^\n]*?)(?:{PROCESS}[^()\n]*?|{RANK}[^\n]*?)?"
    rf"(?:\x1b\[[0-9;]*m)?{TAG}[^\s(]*?{HEADER}"
)
# A vLLM header whose timestamp was elided by the user (`INFO ... [gpu_worker.py:489] `,
# `INFO ... Application startup complete.`) or printed without the date (`INFO 18:45:57
# [loggers.py:116] `). Anchored: only a wrapper, a compose prefix and a process prefix may
# stand in front, so no text inside a message can start one.
# The whole timestamp removed (`INFO [gpu_worker.py:489] `) is read when the location is kept.
# Only the `regex` module reads this pattern (it repeats group names across alternatives).
ELIDED_ENVELOPE = (
    rf"^(?:{WRAPPER_TS})?(?:{COMPOSE})?(?:{PROCESS}|{RANK})?{TAG}"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?:(?:(?:[01][0-9]-[0-3][0-9] )?(?:\.\.\.|…|\[\.\.\.\])"
    r"|(?P<hms>[0-2][0-9]:[0-5][0-9]:[0-6][0-9])(?:[.,][0-9]+)?) "
    r"(?:\[?(?P<file>[^\]\s:]+):(?P<lineno>[0-9]+)\] ?)?"
    r"|\[(?P<file>[^\]\s:]+):(?P<lineno>[0-9]+)\] ?)"
)
# journald / syslog in front of a line (`авг 18 14:14:59 llm python3[28148]: `): the month in
# the host's locale, host, identifier and pid. A vLLM header behind it is read as usual; a line
# with none (a print) is that process's output.
SYSLOG = (
    r"^[^\W\d_]{3,9}\.? {1,2}[0-3]?[0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9] [^\s\[\]]+ "
    r"(?P<proc>[^\s\[\]:]+)\[(?P<pid>[0-9]+)\]: "
)
# ANSI colour codes, also with the ESC byte lost (`[1;36m`) or rendered by journald (`#033[`).
# Removed in two passes, escape sequences first, then the colour forms without ESC: each
# pattern starts with a literal, so an engine skips to its candidates, where one alternation
# (with an optional prefix) makes every `[` a candidate of both halves. The one difference
# with a single pass: a colour code split by an escape sequence (`[1` ESC`[0m` `m`), which no
# terminal writes, is removed too.
ANSI_ESC = r"\x1b\[[0-9;]*[A-Za-z]"
ANSI_SGR_CORE = r"\[[0-9]{1,3}(?:;[0-9]{1,3})*m"
ANSI_SGR = rf"(?:#033|\^\[)?{ANSI_SGR_CORE}"
ANSI = rf"{ANSI_SGR}|{ANSI_ESC}"  # what the two passes remove, as one pattern


@dataclass(frozen=True)
class Envelope:
    """A log-line format around the message, other than vLLM's own (custom logging setups)."""

    name: str
    pattern: str  # groups: level, ts (with year) or mon/day/hms, logger, msg
    example: str
    note: str = ""


# The foreign formats' times, in ASCII digits as Python's logging and Rust's tracing print them
# (`\d` is a few scripts' more to one engine, and the router's cues for these lines are ASCII).
_DATE = "[0-9]{4}-[0-9]{2}-[0-9]{2}"
_TIME = "[0-9]{2}:[0-9]{2}:[0-9]{2}"
FOREIGN_ENVELOPES: tuple[Envelope, ...] = (
    Envelope(
        "python_dash",
        rf"(?P<ts>{_DATE} {_TIME}(?:,[0-9]+)?) - (?:(?P<logger>[\w.]+) - )?"
        r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
        r"(?:(?P<file>[\w./-]+):(?P<lineno>[0-9]+) - )?"
        r"(?P<msg>.*)",
        "(Worker_TP0 pid=128) 2026-07-04 17:55:05,895 - INFO - autotuner.py:641 - flashinfer.jit: "
        "[Autotuner]: Autotuning process ends",
        "Python logging `%(asctime)s - %(levelname)s - ...` (host applications, FlashInfer)",
    ),
    Envelope(
        "bracket_asctime",
        rf"\[(?P<ts>{_DATE} {_TIME}(?:,[0-9]+)?)\] (?:(?P<logger>[\w.]+) )?"
        r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):? (?P<msg>.*)",
        "(EngineCore_0 pid=3945189) [2025-08-21 07:17:09,753] LMCache INFO: Reqid: cmpl-e59-0",
        "LMCache and similar `[%(asctime)s] name LEVEL:` formats",
    ),
    Envelope(
        "rust_tracing",
        rf"(?P<ts>{_DATE}T{_TIME}(?:\.[0-9]+)?Z)\s+"
        r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR) (?P<logger>[\w:]+): (?P<msg>.*)",
        "2025-11-04T12:26:52.371053Z  INFO _core::llm::block_manager::vllm::connector::leader::"
        "slot: request set to finish: cached_gpu_tokens: 0",
        "Rust `tracing` (Dynamo KVBM) interleaved with vLLM output",
    ),
    Envelope(
        "python_basic",
        r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]+):(?P<msg>.*)",
        "WARNING:vllm.core.scheduler:Sequence group 7 is preempted by PreemptionMode.RECOMPUTE"
        " mode "
        "because there is not enough KV cache space.",
        "Python's basicConfig format `%(levelname)s:%(name)s:%(message)s`"
        " (VLLM_CONFIGURE_LOGGING=0)",
    ),
)
