"""vLLM `/metrics` text (a snapshot, a directory of snapshots, a live scrape) into METRIC_SAMPLES.

Parsing is prometheus-client's, once per exposition layout (consecutive scrapes of a server
share it; later snapshots only have their values read); this module names things. Every
sample is kept (vLLM's and the process/python ones alike), under a canonical,
version-tolerant name (see `canonical_name` and docs/sources.md):

* prefixes `vllm:`, `ray_vllm_` and `ray_vllm:` are stripped;
* counters lose `_total` (0.8.x code names carried it, 0.9+ do not; the exposition has it);
* renames are folded: `gpu_cache_usage_perc` -> `kv_cache_usage_perc`,
  `gpu_prefix_cache_{queries,hits}` -> `prefix_cache_{queries,hits}`;
* the per-token latency histograms stay distinct: V0's `time_per_output_token_seconds`
  (per decode step, i.e. inter-token latency), V1's `inter_token_latency_seconds` (per step)
  and `request_time_per_output_token_seconds` (per request mean). `preemptscope.analysis.latency`
  maps the first two to "itl" and the last to "tpot".
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import math
import re
import socket
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from preemptscope.ingest.schema import METRIC_SAMPLES, has_number
from prometheus_client.parser import text_string_to_metric_families

from preemptscope.errors import InputError, ScrapeError

if TYPE_CHECKING:  # imported where a scrape is made: every parse would pay ~0.1 s
    import httpx

__all__ = [
    "MAX_SCRAPE_BYTES",
    "PREFIXES",
    "RENAMES",
    "SNAPSHOT_SUFFIXES",
    "canonical_name",
    "fetch_metrics_text",
    "parse_metrics_text",
    "read_metrics_path",
    "scrape_once",
    "snapshot_notes",
    "timestamp_from_name",
]

PREFIXES = ("vllm:", "ray_vllm_", "ray_vllm:")
# Old name -> current name, after prefix and `_total` stripping.
RENAMES = {
    "gpu_cache_usage_perc": "kv_cache_usage_perc",
    "gpu_prefix_cache_queries": "prefix_cache_queries",
    "gpu_prefix_cache_hits": "prefix_cache_hits",
}
# Files read from a snapshot directory; anything else there is ignored (and said so in docs).
SNAPSHOT_SUFFIXES = (".prom", ".txt", ".metrics", ".prom.gz", ".txt.gz", ".metrics.gz")

_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "gaugehistogram": "histogram",
    "summary": "summary",
    "info": "info",
    "stateset": "gauge",
    "unknown": "unknown",
    "untyped": "unknown",
}
_HISTOGRAM_SUFFIXES = {"_bucket": "bucket", "_sum": "sum", "_count": "count", "_created": "created"}


def canonical_name(name: str) -> str:
    """The version-tolerant metric name: no prefix, no `_total`, renames folded."""
    for prefix in PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    name = name.removesuffix("_total")
    return RENAMES.get(name, name)


def _strip_suffix(name: str, suffixes: Iterable[str]) -> tuple[str, str] | None:
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return None


def _classify(
    family_name: str, family_type: str, name: str, bases: dict[str, str]
) -> tuple[str, str, str]:
    """(base name, type, sample kind) of one sample; `bases` from `_owner_types`."""
    kind = _TYPES.get(family_type, "unknown")
    if name.endswith("_created"):
        # prometheus-client writes `_created` as its own gauge family: tie it to its owner,
        # also when the owner's own samples are not in this text (a window of a paste, a
        # filtered scrape); only counters, histograms and summaries have one.
        owner = name.removesuffix("_created")
        return owner, bases.get(owner, "unknown"), "created"
    if kind in ("histogram", "summary"):
        split = _strip_suffix(name, _HISTOGRAM_SUFFIXES)
        if split is not None:
            return split[0], kind, _HISTOGRAM_SUFFIXES[split[1]]
        return family_name, kind, "value"  # a summary quantile; `quantile` stays a label
    if kind == "counter":
        return family_name, kind, "value"
    if kind == "unknown":
        # No TYPE line: infer from the suffix.
        split = _strip_suffix(name, _HISTOGRAM_SUFFIXES)
        if split is not None and bases.get(split[0]) == "histogram":
            return split[0], "histogram", _HISTOGRAM_SUFFIXES[split[1]]
        if name.endswith("_total"):
            return name, "counter", "value"
    if name.endswith("_info"):
        return name, "info", "value"
    return name, kind, "value"


# One parsed sample: (family name, family type, sample name, labels, value).
_Sample = tuple[str, str, str, tuple[tuple[str, str], ...], float]


def _owner_types(samples: list[_Sample]) -> dict[str, str]:
    """Names of counters and histograms (as exposed, without sample suffixes) -> their type."""
    bases: dict[str, str] = {}
    for family, family_type, name, labels, _ in samples:
        kind = _TYPES.get(family_type, "unknown")
        if kind in ("counter", "histogram", "summary"):
            bases.setdefault(family, kind)
        if name.endswith("_bucket") and any(key == "le" for key, _ in labels):
            bases.setdefault(name.removesuffix("_bucket"), "histogram")
        elif name.endswith("_total"):
            bases.setdefault(name.removesuffix("_total"), "counter")
    return bases


def _slow_samples(text: str, source: str) -> list[_Sample]:
    """prometheus-client's parser on the whole text; InputError with the line when it fails."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:
        line, reason = _locate_error(text)
        if line is None:
            reason = f"{reason} ({exc})"
        raise InputError(source, reason, line) from exc
    return [
        (family.name, family.type, sample.name, tuple(sample.labels.items()), float(sample.value))
        for family in families
        for sample in family.samples
    ]


@functools.lru_cache(maxsize=1 << 18)
def _series_key(key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """`name{labels}` parsed by prometheus-client, once per distinct series (they repeat in
    every snapshot, and label parsing is most of the parser's time)."""
    (family,) = text_string_to_metric_families(key + " 0\n")
    (sample,) = family.samples
    return sample.name, tuple(sample.labels.items())


_FAMILY_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count", "_info", "_gsum", "_gcount")


def _family_of(name: str, types: Mapping[str, str]) -> tuple[str, str]:
    """(family name, family type) of a sample name, resolved like prometheus-client does."""
    if name in types:
        kind = types[name]
        return (name.removesuffix("_total") if kind == "counter" else name), kind
    for suffix in _FAMILY_SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in types:
                return base, types[base]
            if types.get(base + "_total") == "counter":
                return base, "counter"
    return name, "unknown"


# The layout of one exposition: its TYPE lines and series keys, in order.
_Layout = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


def _split_lines(text: str) -> tuple[_Layout, list[float]] | None:
    """TYPE lines, `name{labels}` keys and values; None on anything unusual (the slow path,
    prometheus-client on the whole text, then decides and names the bad line)."""
    types: list[tuple[str, str]] = []
    keys: list[str] = []
    values: list[float] = []
    try:
        for line in text.splitlines():
            if not line or line.isspace():
                continue
            if line[0] == "#":
                parts = line.split(None, 3)
                if len(parts) >= 2 and parts[1] == "TYPE":
                    if len(parts) < 4 or parts[3].strip() not in _TYPES:
                        return None  # prometheus-client rejects it, naming the line
                    types.append((parts[2], parts[3].strip()))
                continue
            if "{" in line:
                close = line.rindex("}")
                key, rest = line[: close + 1], line[close + 1 :].split()
            else:
                key, *rest = line.split()
            if not 1 <= len(rest) <= 2 or "_" in rest[0]:
                return None
            values.append(float(rest[0]))
            keys.append(key.strip())
    except (ValueError, IndexError):
        return None
    return (tuple(types), tuple(keys)), values


def _layout_samples(layout: _Layout) -> list[_Sample] | None:
    """Samples (value 0) of a layout, keys parsed by prometheus-client once per series."""
    types = dict(layout[0])
    samples: list[_Sample] = []
    for key in layout[1]:
        try:
            name, labels = _series_key(key)
        except Exception:
            return None
        family, kind = _family_of(name, types)
        samples.append((family, kind, name, labels, 0.0))
    return samples


_TEMPLATE_COLUMNS = ["metric", "raw_name", "type", "sample", "le", "model_name", "engine", "labels"]


def _template(
    samples: list[_Sample], metrics: Collection[str] | None, source: str
) -> tuple[pl.DataFrame, list[int]]:
    """Every column but the values and stamps, and the positions of the samples kept."""
    bases = _owner_types(samples)
    columns: dict[str, list[Any]] = {name: [] for name in _TEMPLATE_COLUMNS}
    keep: list[int] = []
    for position, (family, family_type, name, label_items, _) in enumerate(samples):
        base, kind, sample_kind = _classify(family, family_type, name, bases)
        metric = canonical_name(base)
        if metrics is not None and metric not in metrics:
            continue
        labels = dict(label_items)
        if sample_kind == "bucket" and "le" not in labels:
            raise _BucketWithoutLe(source, name)
        le = _parse_le(labels.pop("le"), source) if sample_kind == "bucket" else None
        keep.append(position)
        columns["metric"].append(metric)
        columns["raw_name"].append(name)
        columns["type"].append(kind)
        columns["sample"].append(sample_kind)
        columns["le"].append(le)
        columns["model_name"].append(labels.pop("model_name", None))
        columns["engine"].append(labels.pop("engine", None))
        columns["labels"].append(_labels_json(tuple(sorted(labels.items()))))
    schema = {name: METRIC_SAMPLES[name] for name in _TEMPLATE_COLUMNS}
    return pl.DataFrame(columns, schema=schema), keep


# Consecutive scrapes of one server share their layout: classify it once, then only the
# values change. Keyed on the whole layout, so any difference builds a new template.
_TEMPLATES: OrderedDict[tuple[_Layout, frozenset[str] | None], tuple[pl.DataFrame, list[int]]]
_TEMPLATES = OrderedDict()
_TEMPLATES_LOCK = threading.Lock()
_TEMPLATES_MAX = 32


def _cached_template(
    layout: _Layout, metrics: Collection[str] | None, source: str
) -> tuple[pl.DataFrame, list[int]] | None:
    key = (layout, frozenset(metrics) if metrics is not None else None)
    with _TEMPLATES_LOCK:
        found = _TEMPLATES.get(key)
        if found is not None:
            _TEMPLATES.move_to_end(key)
            return found
    samples = _layout_samples(layout)
    if samples is None:
        return None
    built = _template(samples, metrics, source)
    with _TEMPLATES_LOCK:
        _TEMPLATES[key] = built
        while len(_TEMPLATES) > _TEMPLATES_MAX:
            _TEMPLATES.popitem(last=False)
    return built


@functools.lru_cache(maxsize=1 << 16)
def _labels_json(items: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(items), sort_keys=True)


class _BucketWithoutLe(InputError):
    """A histogram's `_bucket` sample with no `le` label (its line is found by the caller)."""

    def __init__(self, source: str, name: str) -> None:
        super().__init__(source, f"histogram bucket {name} has no le label")
        self.sample = name


def _bucket_line(text: str, name: str) -> int | None:
    """The first line of sample `name` without an `le` label."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith((name + "{", name + " ")) and "le=" not in line:
            return number
    return None


def _parse_le(raw: str, source: str) -> float:
    try:
        return math.inf if raw in ("+Inf", "Inf", "inf") else float(raw)
    except ValueError:
        raise InputError(source, f"histogram bucket bound le={raw!r} is not a number") from None


def _locate_error(text: str) -> tuple[int | None, str]:
    """Find the first line that prometheus-client cannot parse on its own."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("# HELP") or stripped == "# EOF":
            continue
        try:
            list(text_string_to_metric_families(stripped + "\n"))
        except Exception as exc:
            return number, f"not Prometheus text exposition ({exc}): {stripped[:120]!r}"
    return None, "not Prometheus text exposition"


def parse_metrics_text(
    text: str,
    *,
    timestamp: datetime,
    source: str,
    deployment: str,
    metrics: Collection[str] | None = None,
) -> pl.DataFrame:
    """One /metrics exposition into METRIC_SAMPLES rows, all stamped with `timestamp`.

    `metrics` optionally keeps only the given canonical names (for long histories).
    Raises InputError(source, reason, line) when the text is not an exposition.
    """
    if timestamp.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    if text.lstrip().startswith(("<", "{", "[")):
        raise InputError(source, "not Prometheus text exposition (looks like HTML or JSON)", 1)
    split = _split_lines(text)
    try:
        built = _cached_template(split[0], metrics, source) if split is not None else None
        if split is not None and built is not None:
            values = split[1]
        else:
            samples = _slow_samples(text, source)
            built = _template(samples, metrics, source)
            values = [sample[4] for sample in samples]
    except _BucketWithoutLe as missing:
        raise InputError(source, missing.reason, _bucket_line(text, missing.sample)) from None
    template, keep = built
    kept = values if len(keep) == len(values) else [values[i] for i in keep]
    return template.with_columns(
        timestamp=pl.lit(timestamp.astimezone(UTC), dtype=METRIC_SAMPLES["timestamp"]),
        source=pl.lit(source, dtype=pl.String),
        deployment=pl.lit(deployment, dtype=pl.String),
        value=pl.Series(kept, dtype=pl.Float64),
    ).select(METRIC_SAMPLES.names())


def vllm_samples(frame: pl.DataFrame) -> pl.DataFrame:
    """The samples vLLM exported (vllm:*, and Ray Serve's ray_vllm* re-export)."""
    name = pl.col("raw_name")
    return frame.filter(name.str.starts_with("vllm:") | name.str.starts_with("ray_vllm"))


def no_vllm_sample(frame: pl.DataFrame) -> str | None:
    """Why a /metrics input holds nothing to analyse (None: it has vLLM samples)."""
    if vllm_samples(frame).height:
        return None
    what = (
        "HELP/TYPE lines only (vLLM's metrics were not enabled, or the scrape was cut)"
        if frame.height == 0
        else f"{frame.height} sample(s) of other exporters only (is this vLLM's /metrics?)"
    )
    return f"no vLLM sample in this file: {what}"


def snapshot_notes(frame: pl.DataFrame) -> list[str]:
    """What a reader must know about /metrics samples before trusting them (for the report)."""
    vllm = vllm_samples(frame)
    if vllm.height:
        unread = vllm.filter(~has_number()).height
        if unread:
            return [f"{unread} vLLM sample(s) NaN, infinite or past 64 bits: not used (no number)"]
        return []
    return [no_vllm_sample(frame) or ""]


# ISO 8601 extended (colons may be written as dashes in file names), ISO basic, or epoch.
_ISO_EXTENDED = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T_ ](?P<h>\d{2})[:\-](?P<m>\d{2})[:\-](?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<zone>Z|[+-]\d{2}:?\d{2})?"
)
_ISO_BASIC = re.compile(
    r"(?P<date>\d{8})T(?P<h>\d{2})(?P<m>\d{2})(?P<s>\d{2})(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d{4})?"
)
_EPOCH = re.compile(r"(?<!\d)(?P<epoch>\d{13}|\d{10}(?:\.\d{1,9})?)(?![\d])")


def timestamp_from_name(name: str) -> datetime | None:
    """The time written in a snapshot's file name (UTC when it names no zone), or None."""
    for pattern in (_ISO_EXTENDED, _ISO_BASIC):
        match = pattern.search(name)
        if match is None:
            continue
        date = match["date"].replace("-", "")
        frac = (match["frac"] or "0")[:6].ljust(6, "0")
        zone = match["zone"] or "Z"
        zone = "+00:00" if zone == "Z" else f"{zone[:3]}:{zone[-2:]}"
        text = (
            f"{date[:4]}-{date[4:6]}-{date[6:]}T{match['h']}:{match['m']}:{match['s']}.{frac}{zone}"
        )
        try:
            return datetime.fromisoformat(text).astimezone(UTC)
        except ValueError:
            continue
    match = _EPOCH.search(name)
    if match is not None:
        raw = match["epoch"]
        seconds = int(raw) / 1000 if len(raw) == 13 and "." not in raw else float(raw)
        return datetime.fromtimestamp(seconds, UTC)
    return None


def _read_text(path: Path) -> str:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, gzip.BadGzipFile) as exc:
        raise InputError(str(path), f"cannot read: {exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start})") from exc


def _snapshot_time(path: Path) -> datetime:
    stem = path.name
    for suffix in SNAPSHOT_SUFFIXES:
        stem = stem.removesuffix(suffix)
    found = timestamp_from_name(stem)
    if found is not None:
        return found
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def read_metrics_path(
    path: str | Path, *, deployment: str, metrics: Collection[str] | None = None
) -> pl.DataFrame:
    """One snapshot file, or every snapshot (`*.prom`, `*.txt`, `*.metrics`, gzipped too) in a dir.

    Scrape time: an ISO or epoch timestamp in the file name, else the file's mtime.
    Rows of a directory carry the directory as `source`, so each counter stays one series.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(str(root), "no such file or directory")
    if root.is_file():
        return parse_metrics_text(
            _read_text(root),
            timestamp=_snapshot_time(root),
            source=str(root),
            deployment=deployment,
            metrics=metrics,
        )
    files = sorted(
        entry
        for entry in root.iterdir()
        if entry.is_file()
        and not entry.name.startswith(".")
        and entry.name.endswith(SNAPSHOT_SUFFIXES)
    )
    if not files:
        raise InputError(
            str(root),
            f"no metrics snapshots here (expected files ending {', '.join(SNAPSHOT_SUFFIXES)})",
        )
    frames = []
    for file in files:
        frame = parse_metrics_text(
            _read_text(file),
            timestamp=_snapshot_time(file),
            source=str(file),  # errors name the file ...
            deployment=deployment,
            metrics=metrics,
        )
        frames.append(frame.with_columns(source=pl.lit(str(root))))  # ... rows the directory
    return pl.concat(frames, how="vertical").sort("timestamp", maintain_order=True)


# A vLLM /metrics body is well under 1 MiB; far beyond that is a broken or hostile target.
MAX_SCRAPE_BYTES = 16 * 1024 * 1024
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def fetch_metrics_text(
    url: str,
    *,
    timeout: float,
    client: httpx.Client | None = None,
    max_bytes: int = MAX_SCRAPE_BYTES,
) -> str:
    """GET a /metrics endpoint; ScrapeError on any failure (network, HTTP status, encoding).

    A target is not trusted: no redirect is followed (it could point at another local
    service), the body is capped at `max_bytes` AFTER decompression (a gzip bomb), and
    `timeout` is a deadline for the whole scrape, not per read (a body trickled a byte at a
    time): when it passes, the connection's socket is shut down, which ends a read blocked
    on it. (A connection reused from a caller's `client` pool is not seen connecting; there the
    deadline is checked between reads, each bounded by `timeout`.)
    """
    import httpx

    deadline = time.monotonic() + timeout
    watchdog = _Watchdog(timeout)
    own = client is None
    session = httpx.Client() if client is None else client
    try:
        with session.stream(
            "GET",
            url,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            headers={"Accept-Encoding": "gzip", "Accept": "text/plain"},
            extensions={"trace": watchdog.trace},
        ) as response:
            if response.is_redirect:
                where = response.headers.get("location", "?")
                raise ScrapeError(
                    url,
                    f"HTTP {response.status_code} redirect to {where} not followed"
                    " (scrape the final URL)",
                )
            if response.status_code != 200:
                raise ScrapeError(url, f"HTTP {response.status_code} {response.reason_phrase}")
            body = _read_capped(response, url, deadline=deadline, timeout=timeout, cap=max_bytes)
            if watchdog.fired:  # the shutdown can read as the end of a close-delimited body
                raise ScrapeError(url, f"timed out after {timeout:g} s (deadline)")
    except httpx.TimeoutException:
        raise ScrapeError(url, f"timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        if watchdog.fired:
            raise ScrapeError(url, f"timed out after {timeout:g} s (deadline)") from None
        raise ScrapeError(url, f"{type(exc).__name__}: {exc}") from None
    finally:
        watchdog.cancel()
        if own:
            session.close()
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(url, f"body is not UTF-8 text (byte {exc.start})") from None


class _Watchdog:
    """Shuts the scrape's socket down when the deadline passes: a read blocked on it returns
    at once (a per-read timeout alone lets a trickling target hold a scrape for ever)."""

    def __init__(self, timeout: float) -> None:
        self.fired = False
        self._socket: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        # httpcore reports each new TCP connection; its stream knows the socket.
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            with self._lock:
                self._socket = stream.get_extra_info("socket") if stream is not None else None
            if self.fired:
                self._fire()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: the scrape ended on its own
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _read_capped(
    response: httpx.Response, url: str, *, deadline: float, timeout: float, cap: int
) -> bytes:
    """The decoded body, refusing more than `cap` bytes and stopping at `deadline`."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "", *_DECODERS):
        raise ScrapeError(url, f"unsupported Content-Encoding {encoding!r}")
    decoder = zlib.decompressobj(_DECODERS[encoding]) if encoding in _DECODERS else None
    parts: list[bytes] = []
    size = 0

    def take(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > cap:
            raise ScrapeError(url, f"body larger than {cap} bytes (decompressed); not read")
        parts.append(data)

    for raw in response.iter_raw():  # as received (a chunk size would wait to fill it)
        if time.monotonic() > deadline:
            raise ScrapeError(url, f"timed out after {timeout:g} s (body still arriving)")
        if decoder is None:
            take(raw)
            continue
        try:
            # max_length bounds what one compressed chunk may expand to (a bomb expands
            # 1000-fold); the rest waits in unconsumed_tail.
            data = decoder.decompress(raw, cap + 1 - size)
            take(data)
            while decoder.unconsumed_tail:
                take(decoder.decompress(decoder.unconsumed_tail, cap + 1 - size))
        except zlib.error as exc:
            raise ScrapeError(url, f"broken {encoding} body: {exc}") from None
    if decoder is not None:
        take(decoder.flush())
    return b"".join(parts)


def scrape_once(
    url: str,
    *,
    timeout: float,
    deployment: str,
    now: datetime | None = None,
    max_bytes: int = MAX_SCRAPE_BYTES,
) -> pl.DataFrame:
    """Scrape one /metrics URL into METRIC_SAMPLES; ScrapeError when it cannot be read or parsed."""
    stamp = now if now is not None else datetime.now(UTC)
    text = fetch_metrics_text(url, timeout=timeout, max_bytes=max_bytes)
    try:
        return parse_metrics_text(text, timestamp=stamp, source=url, deployment=deployment)
    except InputError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        raise ScrapeError(url, f"{where}{exc.reason}") from exc
