"""The request lifecycle lines and uvicorn's access lines.

Owns the `requests` rows (received, added, finished, aborted, generated, failed), their
literals, and the access line's row; never code that joins a request's lines (lifecycle.py).
"""

from __future__ import annotations

from preemptscope.ingest.catalogue_row import LineFormat

REQUEST_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "received",
        "requests",
        "Received request ",
        # Every era writes `Received request %s: ...`: the id runs to the first `: ` (a client's
        # id may hold dots and colons: `req.1`, `tenant:7`).
        r"Received request (?P<request_id>\S+?):(?:\s|$)",
        "v0.1.0 – v0.33.0 (engine ≤ v0.5.2, OpenAI request logger v0.5.3+)",
        "INFO 11-13 01:39:03 logger.py:37] Received request chat-fa706dfef62c402bb8174c9c922e7888:"
        " prompt: '<|begin_of_text|>', params: SamplingParams(n=1), prompt_token_ids: [128000],"
        " lora_request: None, prompt_adapter_request: None.",
        constants={"event": "received"},
        bare_ok=False,
    ),
    LineFormat(
        "added",
        "requests",
        "Added request ",
        r"Added request (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.5.3 – v0.33.0",
        "INFO 05-01 09:46:36 [async_llm.py:252] Added request"
        " chatcmpl-339cba12293b42a7ba808aca93821d50.",
        constants={"event": "added"},
        bare_ok=False,
    ),
    LineFormat(
        "finished",
        "requests",
        "Finished request ",
        r"Finished request (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.1.0 – v0.10.2 (AsyncLLMEngine only); V1 v0.6.4 – v0.6.6",
        "INFO 04-11 19:21:43 async_llm_engine.py:120] Finished request"
        " cmpl-81abe7cfa0cc42a696c703368ba37734.",
        constants={"event": "finished"},
        bare_ok=False,
    ),
    LineFormat(
        "aborted",
        "requests",
        "Aborted request",
        r"Aborted request(?:\(s\))? (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.1.0 – v0.33.0 (`Aborted request(s) a,b.` from v0.10.1)",
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:445] Aborted request(s)"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0.",
        constants={"event": "aborted"},
        bare_ok=False,
    ),
    LineFormat(
        "generated",
        "requests",
        "Generated response ",
        # `Generated response %s%s: output: ...`: the id runs to the suffix or the first `: `.
        r"Generated response (?P<request_id>\S+?)(?: \(streaming complete\))?:(?:\s|$)",
        "v0.10.1 – v0.33.0 (needs --enable-log-outputs)",
        "(APIServer pid=1) INFO 11-07 08:50:31 [logger.py:71] Generated response"
        " chatcmpl-b87aa23d3945464d97fa892ff0d2d044: output: 'Once upon a time',"
        " finish_reason: stop",
        constants={"event": "generated"},
        bare_ok=False,
    ),
    # A streamed request logs a delta per chunk before its `(streaming complete)` line: the
    # request is still running, so it is its own event (the join settles at `generated`).
    LineFormat(
        "generated_delta",
        "requests",
        "Generated response ",
        r"Generated response (?P<request_id>\S+?) \(streaming delta\):",
        "v0.10.1 – v0.33.0 (needs --enable-log-outputs)",
        "(APIServer pid=1) INFO 11-07 08:50:30 [logger.py:71] Generated response"
        " chatcmpl-b87aa23d3945464d97fa892ff0d2d044 (streaming delta): output: 'Once',"
        " finish_reason: None",
        constants={"event": "delta"},
        bare_ok=False,
    ),
    LineFormat(
        "request_aborted",
        "requests",
        "Request ",
        r"Request (?P<request_id>\S+) aborted\.",
        "v0.8.5 – v0.33.0",
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:470] Request"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0 aborted.",
        constants={"event": "aborted"},
        bare_ok=False,
    ),
    LineFormat(
        "failed",
        "requests",
        "Request ",
        r"Request (?P<request_id>\S+) failed",
        "v0.8.5 – v0.33.0",
        "(APIServer pid=1) ERROR 11-07 08:51:02 [async_llm.py:480] Request"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0 failed (engine dead).",
        constants={"event": "failed"},
        bare_ok=False,
    ),
)
# What every request row starts with behind its header (the router's and the per-line path's
# request literals).
REQUEST_LITERALS: tuple[str, ...] = tuple(sorted({row.literal for row in REQUEST_ROWS}))

# The part of an access line after the client: the request line and the status.
ACCESS_REQUEST = (
    r' - "(?P<method>[A-Z]+) (?P<path>[^ ]+) HTTP/(?P<http_version>[0-9.]+)" (?P<status>[0-9]{3})'
)
ACCESS_ROW = LineFormat(
    "uvicorn_access",
    "access",
    " HTTP/",
    r"(?P<client>[^ ]+)(?: [0-9]+)?" + ACCESS_REQUEST,
    "all (uvicorn default access format; `(APIServer pid=N)` prefix v0.10.1 – v0.30.0)",
    '(APIServer pid=1) INFO:     172.18.0.1:59468 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
)
