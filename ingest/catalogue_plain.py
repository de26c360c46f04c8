"""Lines that are no line kind but plainly a program's output, and Ray's repeat suffix.

Owns the shapes of tracebacks, Python warnings and tqdm bars (`other` rows with a null level)
and of Ray's `[repeated Nx across cluster]`; never code that applies them.
"""

from __future__ import annotations

# A traceback frame's `  File "…", line N, in f` line (its code line follows it).
TRACEBACK_FRAME = r'^ +File "[^"]+", line [0-9]+(?:, in [^ ]+)?$'
# Lines with no envelope that are still plainly a program's output (they become `other` rows
# with a null level): Python tracebacks (raw since v0.31.0, where the process prefix is gone),
# Python warnings and tqdm progress bars. Each is recognised by its own shape, anchored at the
# start.
PLAIN_LINES: tuple[tuple[str, str], ...] = (
    ("traceback", r"^Traceback \(most recent call last\):$"),
    (
        "traceback",
        r"^(?:During handling of the above exception, another exception occurred|"
        r"The above exception was the direct cause of the following exception):$",
    ),
    ("traceback", TRACEBACK_FRAME),
    ("traceback", r"^ +[\^~]+$"),
    (
        "traceback",
        r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*"
        r"(?:Error|Exception|Exit|Interrupt|Warning)(?:: [^\n]*)?$",
    ),
    # Python's warnings module: `/path/file.py:2356: UserWarning: message`
    ("warning", r"^[^\s:][^:\n]{0,300}\.py:[0-9]+: [A-Za-z_][A-Za-z0-9_.]*Warning: "),
    (
        "progress",
        r"^[^|\n]{0,200}: *[0-9]{1,3}%(?:\|[^|\n]{0,200}\|| Completed \|)"
        r" *[0-9]+/[0-9]+ \[",
    ),
)

# Ray's log deduplication (`RAY_DEDUP_LOGS`, on by default): after printing a line, Ray holds
# back its repeats for a few seconds and then prints the last one once with this suffix; N is
# the number of held-back lines, so the suffixed line stands for N lines (the first one was
# printed on its own before). The note in parentheses follows the first such suffix only.
RAY_REPEAT = (
    r" \[repeated (?P<repeat>[0-9]{1,12})x across cluster\]"
    r"(?: \(Ray deduplicates logs by default\.[^\n]*\))?"
)
RAY_REPEAT_LITERAL = "x across cluster]"
# Ray buffers repeats for ~5 s; a larger count than this is not a real log (and each repeat is
# a row): the line is unrecognised with that reason.
RAY_REPEAT_MAX = 10_000
