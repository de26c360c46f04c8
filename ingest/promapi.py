"""A client for the Prometheus HTTP query API (Prometheus, Thanos, Mimir, VictoriaMetrics, Cortex).

Only what the fleet report needs: `/api/v1/series` to discover servers and raw samples read
with range selectors (`/api/v1/query` of `{...}[Nms]`), so every stored scrape comes back with
its own timestamp: the same samples a `/metrics` snapshot directory holds, resets included.
Queries are chunked in time so no series returns more than POINTS_PER_SERIES points per
response. Every request has a total deadline and a response size cap, follows no redirect,
and fails with one clear line (PrometheusError).
"""

from __future__ import annotations

import io
import json
import math
import re
import ssl
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from preemptscope.ingest.metrics import canonical_name
from preemptscope.ingest.schema import METRIC_SAMPLES

from preemptscope.errors import ScrapeError

if TYPE_CHECKING:  # httpx is imported where a client is made: every report would pay ~0.1 s
    import httpx

__all__ = [
    "MAX_RESPONSE_BYTES",
    "POINTS_PER_SERIES",
    "PromAuth",
    "PromClient",
    "PrometheusError",
    "RawSamples",
    "matchers",
    "quote",
    "series_frame",
]

# Prometheus refuses query_range answers above 11,000 points per series; range selectors have
# no such limit, but keeping to it bounds each response the same way.
POINTS_PER_SERIES = 11_000
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
FIRST_CHUNK_S = 3600.0
MIN_CHUNK_S = 60.0


class PrometheusError(ScrapeError):
    """The Prometheus API could not be read: unreachable, HTTP error, bad query, too large."""


@dataclass(frozen=True)
class PromAuth:
    token: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None


@dataclass(frozen=True)
class RawSamples:
    """Samples of several series: `labels[i]` (with __name__) names series i of `samples`
    (columns series: Int64, t: epoch seconds, v: value)."""

    labels: list[dict[str, str]]
    samples: pl.DataFrame


def quote(value: str) -> str:
    """A PromQL string literal."""
    return json.dumps(value)


def matchers(selector: str | None) -> str:
    """The matchers inside `{...}` of a user selector ('' when none); braces are optional."""
    if selector is None:
        return ""
    text = selector.strip()
    if text.startswith("{"):
        if not text.endswith("}"):
            raise PrometheusError("--selector", f'{selector!r}: expected {{label="value",...}}')
        text = text[1:-1].strip()
    return text.rstrip(",")


class PromClient:
    """GETs against one Prometheus base URL (a path prefix such as /prometheus is kept)."""

    def __init__(
        self,
        url: str,
        *,
        auth: PromAuth | None = None,
        timeout: float = 30.0,
        max_bytes: int = MAX_RESPONSE_BYTES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        if not url.startswith(("http://", "https://")):
            raise PrometheusError(url, "expected an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes
        a = auth or PromAuth()
        headers = {"Accept": "application/json", "User-Agent": "preemptscope"}
        if a.token:
            headers["Authorization"] = f"Bearer {a.token}"
        basic = (a.username, a.password or "") if a.username is not None else None
        verify: ssl.SSLContext | bool = True
        if a.ca_file is not None:
            if not Path(a.ca_file).is_file():
                raise PrometheusError(a.ca_file, "CA file not found")
            try:
                verify = ssl.create_default_context(cafile=a.ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise PrometheusError(a.ca_file, f"not a PEM CA bundle ({exc})") from None
        self._client = httpx.Client(
            headers=headers,
            auth=basic,
            verify=verify,
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PromClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- HTTP ---------------------------------------------------------------------------

    def get(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        """The `data` of one API answer; PrometheusError on anything else."""
        return json.loads(self.get_bytes(path, params))["data"]

    def get_bytes(self, path: str, params: Sequence[tuple[str, str]]) -> bytes:
        """The body of one successful API answer (status success checked)."""
        import httpx

        url = f"{self.url}{path}"
        deadline = time.monotonic() + self.timeout
        try:
            with self._client.stream(
                "GET", url, params=list(params), timeout=httpx.Timeout(self.timeout)
            ) as response:
                body = self._read(response, url, deadline)
                status, reason = response.status_code, response.reason_phrase
                location = response.headers.get("location")
        except httpx.TimeoutException:
            raise PrometheusError(self.url, f"timed out after {self.timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise PrometheusError(self.url, f"cannot connect ({exc})") from None
        except httpx.HTTPError as exc:
            raise PrometheusError(self.url, f"{type(exc).__name__}: {exc}") from None
        if 300 <= status < 400:
            raise PrometheusError(
                self.url, f"HTTP {status} redirect to {location} (not followed: give that URL)"
            )
        answer = _status(body)
        if isinstance(answer, dict) and answer.get("status") == "error":
            kind = answer.get("errorType", "error")
            raise PrometheusError(self.url, f"HTTP {status}: {kind}: {answer.get('error')}")
        if status in (401, 403):
            raise PrometheusError(
                self.url,
                f"HTTP {status} {reason} (check --prometheus-token or --prometheus-user)",
            )
        if status != 200:
            raise PrometheusError(self.url, f"HTTP {status} {reason} from {path}")
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise PrometheusError(self.url, f"{path} did not answer as the Prometheus API does")
        return body

    def _read(self, response: httpx.Response, url: str, deadline: float) -> bytes:
        import httpx

        parts: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge(size)
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("total deadline", request=response.request)
            parts.append(chunk)
        return b"".join(parts)

    # --- API ----------------------------------------------------------------------------

    def series(self, match: Sequence[str], start: datetime, end: datetime) -> list[dict[str, str]]:
        """Label sets of every series matching any of `match` with a sample in [start, end]."""
        params = [("match[]", m) for m in match]
        params += [("start", _stamp(start)), ("end", _stamp(end))]
        data = self._checked(lambda: self.get("/api/v1/series", params))
        if not isinstance(data, list):
            raise PrometheusError(self.url, "/api/v1/series did not return a list")
        return [{str(k): str(v) for k, v in item.items()} for item in data]

    def raw(self, selector: str, start: datetime, end: datetime) -> Iterator[RawSamples]:
        """The stored samples of `selector` with start < t <= end, one list per time chunk.

        Chunks grow or shrink so the densest series stays near POINTS_PER_SERIES per answer;
        an answer over the size cap is retried with half the chunk.
        """
        lo, hi = start.timestamp(), end.timestamp()
        chunk = min(FIRST_CHUNK_S, max(hi - lo, 0.001))
        while lo < hi:
            upper = min(hi, lo + chunk)
            try:
                found = self._raw_chunk(selector, lo, upper)
            except _TooLarge as exc:
                if chunk <= MIN_CHUNK_S:
                    raise PrometheusError(
                        self.url,
                        f"answer over {self.max_bytes // 2**20} MiB for {MIN_CHUNK_S:g} s of "
                        f"{selector} ({exc.size} bytes read): narrow --selector",
                    ) from None
                chunk = max(MIN_CHUNK_S, chunk / 2)
                continue
            yield found
            counts = found.samples["series"].value_counts()["count"]
            densest = int(counts.max()) if len(counts) else 0  # type: ignore[arg-type]
            span = upper - lo
            lo = upper
            # Grow at most 4x a step: a server that started late is sparse only at first.
            target = span * POINTS_PER_SERIES * 0.9 / densest if densest else span * 4
            chunk = min(max(MIN_CHUNK_S, target), span * 4, 7 * 86400.0)

    def range_query(self, query: str, first: float, last: float, step: float) -> RawSamples:
        """`query` evaluated at first, first + step, ..., last (epoch seconds): /api/v1/query_range.

        The caller keeps (last - first) / step under POINTS_PER_SERIES and the answer small.
        """
        params = [("query", query), ("start", f"{first:.3f}"), ("end", f"{last:.3f}"),
                  ("step", f"{step:.3f}")]  # fmt: skip
        body = self._checked(lambda: self.get_bytes("/api/v1/query_range", params))
        labels, samples = _matrix(body, self.url)
        return RawSamples(labels, samples)

    def _raw_chunk(self, selector: str, lo: float, hi: float) -> RawSamples:
        span_ms = max(1, math.ceil((hi - lo) * 1000))
        params = [("query", f"{selector}[{span_ms}ms]"), ("time", f"{hi:.3f}")]
        body = self.get_bytes("/api/v1/query", params)
        labels, samples = _matrix(body, self.url)
        # The selector includes its left end; chunks must not overlap.
        return RawSamples(labels, samples.filter((pl.col("t") > lo) & (pl.col("t") <= hi)))

    def _checked(self, call: Any) -> Any:
        try:
            return call()
        except _TooLarge as exc:
            raise PrometheusError(
                self.url, f"answer over {self.max_bytes // 2**20} MiB ({exc.size} bytes read)"
            ) from None


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _stamp(moment: datetime) -> str:
    return f"{moment.astimezone(UTC).timestamp():.3f}"


# --- Raw series -> METRIC_SAMPLES ------------------------------------------------------------

_SUFFIXES = {"_bucket": "bucket", "_sum": "sum", "_count": "count", "_created": "created"}


def _classify(name: str, labels: Mapping[str, str], histograms: set[str]) -> tuple[str, str, str]:
    """(base name, type, sample kind) from the name alone: the query API carries no TYPE."""
    for suffix, kind in _SUFFIXES.items():
        base = name.removesuffix(suffix)
        if base == name:
            continue
        if kind == "bucket" and "le" in labels:
            return base, "histogram", "bucket"
        if base in histograms:
            return base, "histogram", kind
        if kind == "created":
            owner = base if base.endswith("_total") else f"{base}_total"
            return owner, "counter", "created"
    if name.endswith("_total"):
        return name, "counter", "value"
    if name.endswith("_info"):
        return name, "info", "value"
    return name, "gauge", "value"


def series_frame(
    chunks: Sequence[RawSamples],
    *,
    source: str,
    deployment: str,
    drop: Collection[str] = (),
    series_ids: bool = False,
) -> pl.DataFrame:
    """Raw samples of one server as METRIC_SAMPLES rows, named as ingest/metrics.py names them.

    Rows are in chunk order (each series in time order); sort by timestamp before analysis.

    `drop`: labels that identify the server (namespace, pod, instance, job, ...), left out of
    the `labels` column so a series keeps one identity when, say, a pod's IP changes.
    `series_ids`: also a `series_id` column numbering the distinct label sets.
    """
    keys: dict[str, int] = {}
    all_labels: list[dict[str, str]] = []
    parts = []
    for chunk in chunks:
        mapping = []
        for labels in chunk.labels:
            key = json.dumps(labels, sort_keys=True)
            if key not in keys:
                keys[key] = len(all_labels)
                all_labels.append(labels)
            mapping.append(keys[key])
        if chunk.samples.height:
            ids = pl.Series(mapping, dtype=pl.Int64)
            parts.append(chunk.samples.with_columns(series=ids.gather(chunk.samples["series"])))
    if not parts:
        empty = pl.DataFrame(schema=METRIC_SAMPLES)
        return empty.with_columns(series_id=pl.lit(0, pl.Int64)).clear() if series_ids else empty
    histograms = {
        s.get("__name__", "").removesuffix("_bucket")
        for s in all_labels
        if "le" in s and s.get("__name__", "").endswith("_bucket")
    }
    template: dict[str, list[Any]] = {
        k: [] for k in ("metric", "raw_name", "type", "sample", "le", "model_name", "engine")
    }
    label_json: list[str] = []
    for item in all_labels:
        labels = dict(item)
        name = labels.pop("__name__", "")
        base, kind, sample = _classify(name, labels, histograms)
        le = labels.pop("le", None) if sample == "bucket" else None
        template["metric"].append(canonical_name(base))
        template["raw_name"].append(name)
        template["type"].append(kind)
        template["sample"].append(sample)
        template["le"].append(_bound(le) if le is not None else None)
        template["model_name"].append(labels.pop("model_name", None))
        template["engine"].append(labels.pop("engine", None))
        rest = {k: v for k, v in labels.items() if k not in drop}
        label_json.append(json.dumps(rest, sort_keys=True))
    schema = {k: METRIC_SAMPLES[k] for k in template}
    rows = pl.DataFrame(template, schema=schema).with_columns(
        labels=pl.Series(label_json, dtype=pl.String)
    )
    samples = pl.concat(parts, how="vertical")
    micros = (samples["t"] * 1e6).round().cast(pl.Int64)
    return (
        rows[samples["series"]]
        .with_columns(
            timestamp=micros.cast(METRIC_SAMPLES["timestamp"]),
            source=pl.lit(source, dtype=pl.String),
            deployment=pl.lit(deployment, dtype=pl.String),
            value=samples["v"],
            **({"series_id": samples["series"]} if series_ids else {}),
        )
        .select([*METRIC_SAMPLES.names(), *(["series_id"] if series_ids else [])])
    )


def _bound(raw: str) -> float:
    try:
        return math.inf if raw in ("+Inf", "Inf", "inf") else float(raw)
    except ValueError:
        return math.nan


# --- Matrix answers, fast ------------------------------------------------------------------
# json.loads costs about 2 us per sample; the `values` arrays ([[t,"v"],...]) are cut out of
# the body and read as CSV by Polars (about 0.1 us per sample), the small rest by json. Only
# bytes methods touch the samples (no regex substitution): the fleet parses its answers in
# background threads, and a long regex pass would hold the GIL the analysis needs.

_VALUES = re.compile(rb'"values"\s*:\s*\[')
_EMPTY = re.compile(rb"\s*\]")
_STATUS = re.compile(rb'^\s*\{\s*"status"\s*:\s*"(\w+)"')
_NOISE = b' \t\r\n"'  # whitespace and the quotes around values


def _status(body: bytes) -> dict[str, Any] | None:
    """The answer's status (and, for errors, the whole small answer) without reading samples."""
    match = _STATUS.match(body)
    if match is None:
        try:
            whole = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None
        return whole if isinstance(whole, dict) else None
    if match.group(1) != b"success":
        try:
            whole = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return {"status": "error", "errorType": "bad answer", "error": body[:200]}
        return whole if isinstance(whole, dict) else None
    return {"status": "success"}


def _matrix(body: bytes, url: str) -> tuple[list[dict[str, str]], pl.DataFrame]:
    pieces: list[bytes] = []
    blocks: list[bytes] = []  # per series cut out: its pairs as CSV lines "t,v"
    owners: list[int] = []  # the series of each non-empty block
    rows: list[int] = []  # and its number of lines
    pos = 0
    for match in _VALUES.finditer(body):
        begin = match.end()  # just after the outer "["
        # Matched in place: slicing the rest of the body per series made the parse quadratic
        # in the answer's size (50 MB copied per series of a fleet-wide answer).
        empty = _EMPTY.match(body, begin)
        index = len(blocks)
        if empty is not None:
            stop = empty.end() - 1  # the outer "]"
            blocks.append(b"")
        else:
            stop = body.find(b"]]", begin) + 1  # the outer "]"
            if stop <= 0:
                raise PrometheusError(url, "truncated matrix answer")
            pairs = body[begin:stop].translate(None, _NOISE)[1:-1]  # t,v],[t,v
            lines = pairs.replace(b"],[", b"\n")
            blocks.append(lines)
            owners.append(index)
            rows.append(lines.count(b"\n") + 1)
        pieces += [body[pos : match.start()], b'"values":%d' % index]
        pos = stop + 1
    pieces.append(body[pos:])
    try:
        skeleton = json.loads(b"".join(pieces))
        result = skeleton["data"]["result"]
        if skeleton["data"].get("resultType") != "matrix":
            raise KeyError("resultType")
        labels = [{str(k): str(v) for k, v in item["metric"].items()} for item in result]
        for position, item in enumerate(result):
            if isinstance(item.get("values"), list):  # not cut out above: read as JSON
                if item["values"]:
                    blocks.append(
                        b"\n".join(b"%s,%s" % (str(t).encode(), str(v).encode())
                                   for t, v in item["values"])
                    )  # fmt: skip
                    owners.append(position)
                    rows.append(len(item["values"]))
            elif item.get("values") is not None and item["values"] != position:
                raise KeyError("values")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise PrometheusError(url, "expected a matrix answer from the query API") from None
    schema = {"series": pl.Int64, "t": pl.Float64, "v": pl.Float64}
    if not owners:
        return labels, pl.DataFrame(schema=schema)
    text = b"\n".join(b for b in blocks if b)
    try:
        pairs_read = pl.read_csv(
            io.BytesIO(text), has_header=False, new_columns=["t", "v"],
            schema={"t": pl.Float64, "v": pl.Float64},
        )  # fmt: skip
    except pl.exceptions.PolarsError as exc:
        raise PrometheusError(url, f"unreadable samples in a matrix answer ({exc})") from None
    if pairs_read.height != sum(rows):
        raise PrometheusError(url, "unreadable samples in a matrix answer (a pair is not t,v)")
    series = np.repeat(np.asarray(owners, dtype=np.int64), np.asarray(rows, dtype=np.int64))
    samples = pairs_read.select(series=pl.Series(series, dtype=pl.Int64), t="t", v="v")
    return labels, samples
