"""vLLM `/metrics` text into METRIC_SAMPLES (reading files and scrapes: ingest/scrape.py).

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

import functools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl
from preemptscope.ingest.schema import METRIC_SAMPLES, has_number
from prometheus_client.parser import text_string_to_metric_families

from preemptscope.errors import InputError

if TYPE_CHECKING:  # imported where a scrape is made: every parse would pay ~0.1 s
    pass

__all__ = [
    "PREFIXES",
    "RENAMES",
    "SNAPSHOT_SUFFIXES",
    "canonical_name",
    "no_vllm_sample",
    "parse_metrics_text",
    "snapshot_notes",
    "vllm_samples",
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
